"""A bridge stops on SIGTERM (the kit's one clean stop) though a task of its lost a cancel
(Python 3.11's ``asyncio.wait_for`` returns what it waited for when that comes with the
cancel): the task is cancelled again, and the bridge exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridges.acp import AcpBridge
from bridges.acp.process import AcpProcess
from bridges.hooks.bridge import HooksBridge
from bridges.kit import AgentBridge, serve_until_stopped
from fixtures.agents.harness import short_dir
from tests.bridges.conftest import SCRIPTED, agent_env
from tests.lost_cancel import Pool
from tests.timing import WAIT
from wire.agent import Agent


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    with short_dir() as path:
        yield path


async def stopped(bridge: AgentBridge, pool: Pool, socket: Path) -> int:
    """Serve ``bridge`` until its pool's task waits, then SIGTERM it with the pool armed (the
    stop's cancel comes with a connection); the exit code."""
    serving = asyncio.create_task(serve_until_stopped(bridge, socket))
    try:
        await asyncio.wait_for(pool.waiting.wait(), WAIT)
        pool.arm()
        os.kill(os.getpid(), signal.SIGTERM)  # serve_until_stopped's own handler stops it
        # not wait_for: a stop that hands the bound's cancel to the task would swallow it
        await asyncio.wait({serving}, timeout=WAIT)
        assert serving.done(), "the stop still waits for the task that lost its cancel"
        return serving.result()
    finally:
        serving.cancel()


async def test_a_bridge_whose_agent_task_lost_the_cancel_still_stops(folder: Path) -> None:
    pool = Pool()

    class Polling(AgentBridge):
        protocol = "polling"

        async def start(self) -> None:
            await super().start()
            self.agent.spawn(pool.serve())  # the peer, polled over a connection pool

    bridge = Polling(Agent(state_path=folder / "p.db", runtime="polling"))
    assert await stopped(bridge, pool, folder / "p.sock") == 0
    assert (pool.lost, pool.ended.is_set()) == (1, True)


async def test_the_hooks_bridge_stops_though_its_transcript_tail_lost_the_cancel(
    folder: Path,
) -> None:
    pool = Pool()

    class Tailing(HooksBridge):
        async def _tail_all(self) -> None:  # the transcripts read over a connection pool
            await pool.serve()

    bridge = Tailing(state_path=folder / "h.db", keys_path=folder / "keys.json", port=0)
    assert await stopped(bridge, pool, folder / "h.sock") == 0
    assert (pool.lost, pool.ended.is_set()) == (1, True)


async def test_the_acp_bridge_stops_though_its_supervisor_lost_the_cancel(folder: Path) -> None:
    pool = Pool()

    class Supervised(AcpBridge):
        async def _supervise(self, proc: AcpProcess) -> None:  # the process watched over a pool
            await pool.serve()

    bridge = Supervised(
        command=SCRIPTED, state_path=folder / "a.db", cwds=[str(folder)], env=agent_env(folder)
    )
    assert await stopped(bridge, pool, folder / "a.sock") == 0
    assert (pool.lost, pool.ended.is_set()) == (1, True)
    assert bridge.process is not None
    assert bridge.process.exited.done()  # the close went on to stop the process
