"""The benchmarks' raw wire agents (``bench/_wirefleet.py``) speak wire v1 as an SDK agent at
rest does: a gateway's link reads them Ready, mirrors their conversations, follows their asks
and answers one; their event stream replays after ``Last-Event-ID`` or says ``reset``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from bench._wirefleet import FleetAgent, serve, stop
from collie_gateway.core.mirror import LinkState
from collie_gateway.services.agenthttp import UnixGets
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from wire.messages import ConversationPage, Hello, ReplyResult, decode


@contextlib.asynccontextmanager
async def fleet(tmp: Path, names: list[str]) -> AsyncIterator[dict[str, FleetAgent]]:
    agents = {n: FleetAgent(n, 2, datetime.now(UTC)) for n in names}
    servers = [await serve(agent, tmp / f"{name}.sock") for name, agent in agents.items()]
    try:
        yield agents
    finally:
        stop(servers, agents.values())


async def test_a_gateway_follows_raw_agents_as_sdk_agents(rig: Rig) -> None:
    async with fleet(rig.tmp, ["a0", "a1"]) as agents:
        sources = [Source(name=n, socket=rig.tmp / f"{n}.sock") for n in agents]
        client, gw = await rig.gateway(sources)
        await eventually(lambda: all(m.state is LinkState.READY for m in gw.mirrors.values()))
        assert gw.mirrors["a0"].open_count == 2
        assert gw.mirrors["a0"].hello == Hello(
            wire=1, runtime="bench", subtitle="a benchmark agent", features=["history"]
        )
        await eventually(lambda: bool(agents["a0"].streams))
        ask_id = agents["a0"].raise_ask(asyncio.get_running_loop(), after=60.0)
        await eventually(lambda: gw.mirrors["a0"].waiting_count == 1)
        answer = {"request_id": "r-1", "version": 1, "answer": {"option": "main"}}
        outcome = await post_json(client, f"/api/v1/agents/a0/asks/{ask_id}/answer", answer)
        assert outcome["outcome"] == "accepted"
        await eventually(lambda: gw.mirrors["a0"].waiting_count == 0)
        dash = await get_json(client, "/api/v1/dashboard")
        assert dash["sections"]
        await client.close()


async def test_raw_agents_replay_after_an_id_and_reset_otherwise(tmp_path: Path) -> None:
    async with fleet(tmp_path, ["a0"]) as agents:
        agent = agents["a0"]
        agent.raise_ask(asyncio.get_running_loop(), after=60.0)  # events 1 and 2
        gets = UnixGets(str(tmp_path / "a0.sock"), {}, connect=1.0)
        page = await gets.get("/conversations?state=open", 1 << 20, within=2.0)
        assert page.headers["wire-event-id"] == "2"
        assert len(decode(page.body, ConversationPage).conversations) == 2
        replay = agent.replay("1")
        assert replay.startswith(b"id: 2\nevent: conversation.updated\n")
        assert agent.replay("2") == b""
        assert b"event: reset" in agent.replay("99")
        reply = b'{"request_id": "r", "version": 1, "answer": {"option": "main"}}'
        first = agent.reply("ask-a0-1", reply)
        assert agent.reply("ask-a0-1", reply) == first  # the first result again (wire §11)
        assert decode(first.partition(b"\r\n\r\n")[2], ReplyResult).outcome == "accepted"
        gets.close()
