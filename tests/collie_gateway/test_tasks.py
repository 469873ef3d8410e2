"""The gateway's background work: what was spawned for an agent is waited for (what it
spawned in turn too) before its lease goes, within a bound; nothing is cancelled by the wait."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine

import pytest

from collie_gateway.services.tasks import Tasks, cancelled

OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("owner", default=None)


def spawned_for(tasks: Tasks, owner: str, coro: Coroutine[object, object, object]) -> None:
    token = OWNER.set(owner)
    try:
        tasks.spawn(coro, f"work-{owner}")
    finally:
        OWNER.reset(token)


async def test_the_work_of_an_agent_and_what_it_spawned_is_waited_for_alone() -> None:
    tasks = Tasks(owner=OWNER.get)
    gates = {name: asyncio.Event() for name in ("d0", "d0-child", "d1")}
    done: list[str] = []

    async def work(name: str, then: str | None = None) -> None:
        if then is not None:
            tasks.spawn(work(then), then)  # spawned in its context: the same owner's
        await gates[name].wait()
        done.append(name)

    spawned_for(tasks, "d0", work("d0", then="d0-child"))
    spawned_for(tasks, "d1", work("d1"))
    tasks.spawn(work("d1"), "nobody's")  # no owner: never waited for
    await asyncio.sleep(0)
    gates["d0"].set()
    assert not await tasks.settled(["d0"], 0.05)  # its child still runs
    gates["d0-child"].set()
    assert await tasks.settled(["d0"], 5)
    assert done == ["d0", "d0-child"]
    assert not await tasks.settled(None, 0.05)  # d1's work is left running, not cancelled
    gates["d1"].set()
    assert await tasks.settled(None, 5)
    await tasks.close()


async def test_a_close_waiting_on_a_task_that_will_not_end_still_ends_at_its_bound() -> None:
    let_go = asyncio.Event()

    async def stuck() -> None:
        while True:  # a task that takes no cancel: it ends when let go
            try:
                await let_go.wait()
                return
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stuck())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):  # the bound's cancel is the closer's own: not swallowed
        await asyncio.wait_for(cancelled(task), 0.1)
    assert not task.done()
    let_go.set()
    await cancelled(task)
    assert task.done()


async def test_a_task_that_lost_its_cancel_to_wait_for_is_cancelled_again_and_ends() -> None:
    """Python 3.11's ``asyncio.wait_for`` returns what it waited for when that comes with
    the cancel (psycopg_pool waits for a connection so): the task goes on, never told. A
    lease loop that lost its cancel so kept a stop waiting for good."""
    loop = asyncio.get_running_loop()
    waits: list[asyncio.Future[None]] = []
    waiting = asyncio.Event()
    rounds = 0

    async def lease_loop() -> None:
        nonlocal rounds
        while True:
            waits.append(loop.create_future())
            waiting.set()
            await asyncio.wait_for(waits[-1], 10)  # a connection from the pool
            rounds += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(lease_loop())
    await waiting.wait()
    waits[-1].set_result(None)  # the connection comes as the stop's first cancel
    await asyncio.wait_for(cancelled(task), 5)
    assert task.cancelled()
    assert rounds >= 1  # it went on after the first cancel
