"""The gateway's background work: what was spawned for an agent is waited for (what it
spawned in turn too) before its lease goes, within a bound; nothing is cancelled by the wait."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine

from collie_gateway.services.tasks import Tasks

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
