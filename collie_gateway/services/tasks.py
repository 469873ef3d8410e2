"""One registry for the gateway's background work: every task is kept until it ends, and
cancelled (or let finish) when the gateway closes.

Work spawned on behalf of one agent (``owner`` names it when the task is spawned: with
several workers, while the holder applies what its link read) can be waited for before the
agent's lease is handed over (:meth:`Tasks.settled`): a push decision in flight is made by
the worker that started it, not lost with its lease. A task is stopped with
:func:`wire.tasks.cancelled` (named here too), which a lost cancel does not hang."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine

from wire.tasks import all_cancelled, cancelled

#: Runs a coroutine in the background under a name (what services are given to do so).
Spawn = Callable[[Coroutine[object, object, object], str], None]


def _nobody() -> str | None:
    return None


class Tasks:
    """The background tasks of one gateway."""

    def __init__(self, owner: Callable[[], str | None] = _nobody) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._owner = owner  # the agent the work spawned now is done for, if any
        self._owned: dict[str, set[asyncio.Task[object]]] = {}

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> None:
        """Run ``coro`` in the background, kept until it ends."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        owner = self._owner()
        if owner is not None:
            self._owned.setdefault(owner, set()).add(task)
            task.add_done_callback(lambda done: self._disown(owner, done))

    def _disown(self, owner: str, task: asyncio.Task[object]) -> None:
        owned = self._owned.get(owner)
        if owned is not None:
            owned.discard(task)
            if not owned:
                del self._owned[owner]

    async def settled(self, owners: Collection[str] | None, within: float) -> bool:
        """Wait until the work spawned for ``owners`` (None: for any agent) has ended, what
        it spawned in turn too, at most ``within`` s; whether it all did (nothing is
        cancelled)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            pending = {
                task
                for owner, owned in self._owned.items()
                if owners is None or owner in owners
                for task in owned
            }
            left = deadline - loop.time()
            if not pending:
                return True
            if left <= 0:
                return False
            await asyncio.wait(pending, timeout=left)

    async def close(self, finish: Collection[str] = ()) -> None:
        """Let the tasks named in ``finish`` end by themselves; cancel the rest."""
        finishing = [t for t in self._tasks if t.get_name() in finish]
        await asyncio.gather(*finishing, return_exceptions=True)
        await all_cancelled(self._tasks)


__all__ = ["Spawn", "Tasks", "cancelled"]
