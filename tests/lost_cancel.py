"""A wait that loses a cancel, as Python 3.11's ``asyncio.wait_for`` makes one lose it: what
it waited for came with the cancel, so it returns that and the task never sees the cancel
(psycopg_pool waits for a connection so; fixed in 3.12). A stop that cancels a looping task
once and awaits it then waits for good."""

from __future__ import annotations

import asyncio


def _come(came: asyncio.Future[None]) -> None:
    if not came.done():
        came.set_result(None)


class Pool:
    """Connections waited for with ``asyncio.wait_for``. Once :meth:`arm` ed, a connection is
    there at once for each wait, so whenever a cancel comes it comes with the connection and
    is lost; the first cancel lost disarms the pool: from then on a wait waits until it is
    cancelled."""

    def __init__(self) -> None:
        self.armed = False
        self.lost = 0  # cancels lost
        self.waiting = asyncio.Event()  # a task waits for a connection
        self.ended = asyncio.Event()  # the task serving ended
        self._came: asyncio.Future[None] | None = None  # the connection waited for

    def arm(self) -> None:
        """From now on a connection comes at once (the one waited for too), until a cancel
        is lost with one."""
        self.armed = True
        if self._came is not None:
            _come(self._came)

    async def connection(self) -> None:
        """Wait for a connection, as psycopg_pool does."""
        loop = asyncio.get_running_loop()
        came: asyncio.Future[None] = loop.create_future()
        self._came = came
        if self.armed:
            loop.call_soon(_come, came)
        self.waiting.set()
        await asyncio.wait_for(came, 3600)
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # cancelled, and wait_for returned
            self.lost += 1
            self.armed = False

    async def serve(self) -> None:
        """A task's loop on the pool, stopped by a cancel: a connection, then the next (waits
        in nothing else, so each cancel comes while a connection is waited for)."""
        try:
            while True:
                await self.connection()
        finally:
            self.ended.set()
