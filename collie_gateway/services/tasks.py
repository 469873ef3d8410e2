"""One registry for the gateway's background work: every task is kept until it ends, and
cancelled (or let finish) when the gateway closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine

#: Runs a coroutine in the background under a name (what services are given to do so).
Spawn = Callable[[Coroutine[object, object, object], str], None]


class Tasks:
    """The background tasks of one gateway."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> None:
        """Run ``coro`` in the background, kept until it ends."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, finish: Collection[str] = ()) -> None:
        """Let the tasks named in ``finish`` end by themselves; cancel the rest."""
        finishing = [t for t in self._tasks if t.get_name() in finish]
        await asyncio.gather(*finishing, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
