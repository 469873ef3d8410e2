"""Stopping a task for sure (for the SDK, the bridges, push and the gateway): cancel it, and
cancel it again while it goes on, until it has ended.

A task may lose a cancel and go on: on Python 3.11, ``asyncio.wait_for`` (which
psycopg_pool's wait for a connection uses, and aiosqlite's and anyio's paths) returns the
result of what it waited for when that comes with the cancel, and the task never sees it.
``task.cancel()`` then ``await task`` waits for good on a task that loops; and a cancel of
the waiter's own is handed to that task, so a bound around the stop does not end it either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

#: ours: seconds between two cancels of a task that did not end at the first.
RECANCEL = 1.0


async def cancelled(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended (raising what it raised, but its cancel).

    A task not ended is cancelled again every :data:`RECANCEL` s. A cancel of the caller's
    own ends the wait (``asyncio.wait`` does not hand it to the task): a close run under a
    bound ends at the bound, whatever it waits for."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL)
    if not task.cancelled():
        task.result()


async def all_cancelled(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel each of ``tasks`` and wait until every one has ended (what they raised is
    dropped), as :func:`cancelled` does."""
    await asyncio.gather(*map(cancelled, list(tasks)), return_exceptions=True)


async def cancel_late(tasks: Iterable[asyncio.Future[Any]], grace: float) -> None:
    """Let ``tasks`` end by themselves for up to ``grace`` s, then cancel the rest as
    :func:`all_cancelled` does."""
    tasks = list(tasks)
    if tasks:
        _, late = await asyncio.wait(tasks, timeout=grace)
        await all_cancelled(late)


__all__ = ["RECANCEL", "all_cancelled", "cancel_late", "cancelled"]
