"""SDK traps removed (issue 11.2): a setup that waits for an answer still listens; acting on an
answer after a restart happens once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fixtures.agents.harness import AgentAddress, short_dir
from tests.timing import WAIT
from tests.wire.conftest import AgentFactory, Client
from wire.agent import Agent, AgentRunner, Resolution

TEXT_REPLY = {"request_id": "r1", "version": 1, "answer": {"text": "Rex"}}


async def _until(check: object, within: float = WAIT) -> None:
    assert callable(check)
    for _ in range(int(within / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not in time")


async def test_setup_waiting_for_an_answer_still_listens(make_agent: AgentFactory) -> None:
    agent = make_agent()
    answered: list[Resolution] = []
    ready: list[AgentRunner] = []
    raised = asyncio.Event()

    async def setup(agent: Agent) -> None:
        conv = await agent.open_conversation(id="c1", title="Name")
        ask = await conv.ask(id="a1", kind="text", title="What name?")
        raised.set()
        answered.append(await ask.wait())  # answered over the socket while setup runs

    with short_dir() as tmp:
        sock = tmp / "agent.sock"
        serving = asyncio.create_task(
            agent.serve_forever(socket=sock, setup=setup, ready=ready.append)
        )
        await asyncio.wait_for(raised.wait(), 5)
        c = Client(AgentAddress("http://agent", sock))
        try:
            assert (await c.get("/hello")).status == 200
            assert ready == [], "ready before setup returned"
            assert (await c.post("/asks/a1/reply", TEXT_REPLY)).body == {"outcome": "accepted"}
            await _until(lambda: bool(ready))
            assert answered[0].answer is not None
            assert answered[0].answer.text == "Rex"
        finally:
            await c.close()
            os.kill(os.getpid(), signal.SIGTERM)  # serve_forever's own handler stops it
            await asyncio.wait_for(serving, 10)


async def test_a_stop_during_a_waiting_setup_ends_the_agent(make_agent: AgentFactory) -> None:
    agent = make_agent()
    waiting = asyncio.Event()

    async def setup(agent: Agent) -> None:
        conv = await agent.open_conversation(id="c1", title="Name")
        ask = await conv.ask(id="a1", kind="text", title="What name?")
        waiting.set()
        await ask.wait()

    with short_dir() as tmp:
        serving = asyncio.create_task(agent.serve_forever(socket=tmp / "a.sock", setup=setup))
        await asyncio.wait_for(waiting.wait(), 5)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(serving, 10)  # ended, setup cancelled, agent closed


async def _answered_agent(make_agent: AgentFactory, runs: list[str]) -> list[str]:
    """One run of an agent that raises a1, is answered, follows up and acts; the texts of c1."""
    agent = make_agent()

    async def act(resolution: Resolution) -> None:
        runs.append(resolution.how)

    async with agent:
        conv = await agent.open_conversation(id="c1", title="Name")
        ask = await conv.ask(id="a1", kind="text", title="What name?")
        if ask.open:
            with short_dir() as tmp:
                runner = await agent.serve_unix(tmp / "a.sock")
                c = Client(AgentAddress("http://agent", tmp / "a.sock"))
                try:
                    assert (await c.post("/asks/a1/reply", TEXT_REPLY)).body == {
                        "outcome": "accepted"
                    }
                finally:
                    await c.close()
                    await runner.close()
        resolution = await ask.wait()
        assert resolution.answer is not None
        await ask.follow_up(f"Named {resolution.answer.text}.")
        await ask.once(act)
        return [i.text for i in conv.items]


async def test_a_follow_up_and_an_action_happen_once_across_restarts(
    make_agent: AgentFactory, state: Path
) -> None:
    runs: list[str] = []
    first = await _answered_agent(make_agent, runs)
    assert first == ["Named Rex."]
    again = await _answered_agent(make_agent, runs)  # the same state file: a restart
    assert again == ["Named Rex."], "the follow-up was added twice"
    assert runs == ["answered"], "the action ran twice"


async def test_waiting_before_the_agent_serves_says_why_it_may_wait_forever(
    make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent()
    async with agent:
        conv = await agent.open_conversation(id="c1", title="Name")
        ask = await conv.ask(id="a1", kind="text", title="What name?")
        waiting = asyncio.create_task(ask.wait())
        await asyncio.sleep(0)
        assert "a1: waiting for an answer while the agent does not listen yet" in caplog.text
        await ask.decide()
        assert (await waiting).how == "decided"
        caplog.clear()
        agent.app()  # served (as by serve_unix, serve_tcp or a test client): no warning
        other = await conv.ask(id="a2", kind="text", title="And now?")
        waiting = asyncio.create_task(other.wait())
        await asyncio.sleep(0)
        await other.decide()
        await waiting
        assert "does not listen" not in caplog.text
