"""New conversation and starters through the phone API against SDK agents (spec N1–N3)."""

from __future__ import annotations

from typing import Any

from collie_gateway.mirror import LinkState
from collie_gateway.settings import LinkTiming
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, Starter

LIST = "/api/v1/agents/desk/conversations"


async def start(
    rig: Rig, *, timing: LinkTiming = FAST, **agent_args: Any
) -> tuple[Any, Any, Agent]:
    agent_args.setdefault("features", ["history", "reopen", "close", "starters"])
    agent = rig.agent("desk", runtime="desk", **agent_args)
    sock = await rig.serve("desk")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent


async def test_N1_N2_starters_open_a_conversation(rig: Rig) -> None:
    client, gw, agent = await start(
        rig, starters=[Starter(id="tidy", label="Tidy my notes", description="Sorts them")]
    )

    @agent.on_start
    async def begin(starter: str) -> Any:
        return await agent.open_conversation(title=f"Started: {starter}")

    page = await get_json(client, "/api/v1/agents/desk/new")
    assert page["title"] == "New conversation"
    assert page["starters"] == [
        {"id": "tidy", "label": "Tidy my notes", "description": "Sorts them"}
    ]
    assert page["empty"] is None
    result = await post_json(client, LIST, {"request_id": "n1", "starter": "tidy"})
    assert result["outcome"] == "accepted"
    new_id = result["conversation_id"]
    await eventually(lambda: new_id in gw.mirrors["desk"].conversations)
    view = await get_json(client, LIST + "?poll=true")
    assert view["rows"][0]["title"] == "Started: tidy"


async def test_N3_no_starters(rig: Rig) -> None:
    client, _, _ = await start(rig)
    page = await get_json(client, "/api/v1/agents/desk/new")
    assert page["starters"] == []
    assert page["empty"] == "This machine's durable agent offers no starters yet."
