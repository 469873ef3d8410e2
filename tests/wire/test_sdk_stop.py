"""An agent stops though a task of its lost a cancel (Python 3.11's ``asyncio.wait_for``
returns what it waited for when that comes with the cancel): the task is cancelled again."""

from __future__ import annotations

import asyncio
import os
import signal

from fixtures.agents.harness import Served, short_dir
from tests.lost_cancel import Pool
from tests.timing import WAIT
from tests.wire.conftest import AgentFactory, Client, eventually, message
from wire.agent import Agent, ConversationHandle, SendMessage


async def test_an_agent_closes_though_its_task_lost_the_first_cancel(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent()
    pool = Pool()
    await agent.start()
    agent.spawn(pool.serve())  # the agent's own work, waiting on a connection pool
    await asyncio.wait_for(pool.waiting.wait(), WAIT)
    pool.arm()  # the connection comes with the close's cancel
    await asyncio.wait_for(agent.close(), WAIT)
    assert pool.lost == 1
    assert pool.ended.is_set()


async def test_a_stop_during_a_setup_that_lost_the_cancel_still_ends_the_agent(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent()
    pool = Pool()

    async def setup(agent: Agent) -> None:
        await pool.serve()

    with short_dir() as tmp:
        serving = asyncio.create_task(agent.serve_forever(socket=tmp / "a.sock", setup=setup))
        await asyncio.wait_for(pool.waiting.wait(), WAIT)
        pool.arm()
        os.kill(os.getpid(), signal.SIGTERM)  # serve_forever's own handler stops it
        try:  # not wait_for: a stop that hands the bound's cancel to setup would swallow it
            await asyncio.wait({serving}, timeout=WAIT)
            assert serving.done()  # setup cancelled (twice), agent closed
        finally:
            serving.cancel()
    assert pool.lost == 1
    assert pool.ended.is_set()


async def test_a_stop_ends_a_turn_that_lost_the_cancel(served: Served, client: Client) -> None:
    pool = Pool()

    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        await pool.serve()  # the turn's work, waiting on a connection pool

    served.agent.on_message(turn)
    conv = await served.agent.open_conversation(id="c1")
    await client.outcome("/conversations/c1/messages", message("m1"))
    await asyncio.wait_for(pool.waiting.wait(), WAIT)
    pool.arm()  # the connection comes with the Stop's cancel
    stop = {"request_id": "s1", "turn": 1}
    assert await client.outcome("/conversations/c1/stop", stop) == "accepted"
    await asyncio.wait_for(pool.ended.wait(), WAIT)  # the turn ran on no longer
    assert pool.lost == 1
    await eventually(lambda: conv.state == "idle" and not conv.running)
