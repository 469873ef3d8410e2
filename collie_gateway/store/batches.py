"""Group commit: calls of one statement that arrive while an earlier batch of them is in
flight go together, as one statement (one round trip, one transaction), each call keeping
its own result.

A batch forms only from calls already waiting: a lone call goes at once, and no call waits
for a timer, only for the batch in flight before it (one at a time). The calls of a batch
were all in flight at once (none of them waited for another's result), so any order they
are written in is one they could have had alone. A batch the server refused as a whole
(``alone`` says so of its error: nothing of it was written) runs again one call at a time,
so each call gets its own result or error, as it would have alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

MOST: Final = 64  # ours: calls in one batch at most
log = logging.getLogger(__name__)


class Batches(Generic[Item, Out]):
    """One statement's calls, run in batches by ``run`` (its items in, a result for each
    out, in order)."""

    def __init__(
        self,
        run: Callable[[Sequence[Item]], Awaitable[Sequence[Out]]],
        *,
        alone: Callable[[Exception], bool],
    ) -> None:
        self._run = run
        self._alone = alone
        self._waiting: list[tuple[Item, asyncio.Future[Out]]] = []
        self._flying: set[asyncio.Task[None]] = set()

    async def __call__(self, item: Item) -> Out:
        """``item``'s result, once the batch it went in is done."""
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._launch()
        return await future

    async def drain(self) -> None:
        """Wait for the batches in flight (their callers may have gone)."""
        while self._flying:
            await asyncio.gather(*self._flying, return_exceptions=True)

    def _launch(self) -> None:
        if self._flying or not self._waiting:
            return
        batch = self._next()
        if batch:
            task = asyncio.create_task(self._answer(batch))
            self._flying.add(task)
            task.add_done_callback(self._landed)

    def _next(self) -> list[tuple[Item, asyncio.Future[Out]]]:
        """The waiting calls of the next batch, in the order they came; the rest wait."""
        batch: list[tuple[Item, asyncio.Future[Out]]] = []
        rest: list[tuple[Item, asyncio.Future[Out]]] = []
        for item, future in self._waiting:
            if future.done():
                continue  # its caller went before it was sent
            (rest if len(batch) >= MOST else batch).append((item, future))
        self._waiting = rest
        return batch

    def _landed(self, task: asyncio.Task[None]) -> None:
        self._flying.discard(task)
        self._launch()

    async def _answer(self, batch: list[tuple[Item, asyncio.Future[Out]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for a batch of {len(batch)}")
        except Exception as exc:
            if len(batch) > 1 and self._alone(exc):
                log.warning("a batch of %d refused (%s): each again alone", len(batch), exc)
                for one in batch:
                    await self._answer([one])
                return
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.cancel(str(exc) or None)
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
