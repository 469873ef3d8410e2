"""The bottom bar, the pane menu and the live stream through the phone API against SDK
agents (spec B1–B3, G1, G2)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from collie_gateway.mirror import LinkState
from collie_gateway.settings import LinkTiming
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, Button, ConversationHandle

CHAT = "/api/v1/agents/desk/conversations/c1"


ALL = ["history", "steer", "stop", "buttons", "progress", "close", "reopen"]


async def start(
    rig: Rig, *, features: list[str] | None = None, timing: LinkTiming = FAST, **agent_args: Any
) -> tuple[Any, Any, Agent, ConversationHandle]:
    agent = rig.agent("desk", runtime="desk", features=ALL if features is None else features,
                      **agent_args)  # fmt: skip
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes", subtitle="Keeps notes",
                                         workspace="~/notes")  # fmt: skip
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent, conv


async def test_B1_B2_bar_controls(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    buttons = [
        Button(id="a", label="Archive", icon="archive"),
        Button(id="b", label="Sparkle", icon="sparkle"),
        Button(id="c", label="Busy one", busy=True),
        Button(id="d", label="Off", disabled=True),
        Button(id="e", label="Fifth"),
    ]
    await conv.update(buttons=buttons)
    await eventually(lambda: len(gw.mirrors["desk"].conversations["c1"].buttons) == 5)
    controls = (await get_json(client, CHAT))["bar"]["controls"]
    assert [c["label"] for c in controls] == [
        "Steer",
        "Stop",
        "Archive",
        "Sparkle",
        "Busy one",
        "Off",
    ]
    steer, stop = controls[0], controls[1]
    assert steer["dimmed"]
    assert stop["dimmed"]
    assert controls[2]["icon"] == "archive"
    assert controls[3].get("icon") is None  # not one of the 12
    assert controls[4]["busy"]
    assert not controls[4]["tappable"]
    assert controls[5]["dimmed"]
    assert not controls[5]["tappable"]


async def test_G1_no_controls_without_features(rig: Rig) -> None:
    client, _gw, _agent, _conv = await start(rig, features=[])
    view = await get_json(client, CHAT)
    assert view["bar"]["controls"] == []
    assert view["menu"]["items"] == []


async def test_B3_stale_turn_moved_on_and_nothing_runs(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    pressed: list[str] = []

    @agent.on_button
    async def press(handle: ConversationHandle, button: str) -> None:
        pressed.append(button)

    await conv.update(buttons=[Button(id="a", label="Archive")], turn=3)
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].turn == 3)
    stale = await post_json(client, CHAT + "/buttons/a", {"request_id": "b1", "turn": 2})
    assert stale["outcome"] == "moved_on"
    assert stale["message"] == "The conversation moved on, so the action did not run."
    stop = await post_json(client, CHAT + "/stop", {"request_id": "s1", "turn": 1})
    assert stop["message"] == "The conversation moved on, so the action did not run."
    fresh = await post_json(client, CHAT + "/buttons/a", {"request_id": "b2", "turn": 3})
    assert fresh["outcome"] == "accepted"
    await eventually(lambda: pressed == ["a"])


async def test_G2_menu_close_and_reopen(rig: Rig) -> None:
    client, gw, _agent, _conv = await start(rig)
    menu = (await get_json(client, CHAT))["menu"]
    assert [i["label"] for i in menu["items"]] == ["Close conversation"]
    closed = await post_json(client, CHAT + "/close", {"request_id": "x1"})
    assert closed["outcome"] == "accepted"
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    view = await get_json(client, CHAT)
    assert view["read_only"] is True
    assert view["menu"]["reopen"]["label"] == "Reopen"
    reopened = await post_json(client, CHAT + "/reopen", {"request_id": "x2"})
    assert reopened["outcome"] == "accepted"
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)


async def read_events(resp: Any, count: int) -> list[tuple[str, str, Any]]:
    """Read ``count`` id-bearing events: (id, type, data)."""
    events: list[tuple[str, str, Any]] = []
    buffer = b""
    while len(events) < count:
        buffer += await asyncio.wait_for(resp.content.readany(), 5)
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            fields = dict(
                line.split(": ", 1) for line in frame.decode().splitlines() if ": " in line
            )
            if "id" in fields:
                events.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return events


async def test_phone_stream_resumes_with_last_event_id_missing_nothing(rig: Rig) -> None:
    client, _gw, _agent, conv = await start(rig)
    resp = await client.get("/api/v1/events")
    item = await conv.append(kind="reply", text="", final=False)
    first = await read_events(resp, 1)
    resp.close()
    await item.delta("a")
    await item.delta("b")
    await item.finish()
    await asyncio.sleep(0.3)
    again = await client.get("/api/v1/events", headers={"Last-Event-ID": first[-1][0]})
    replay = await read_events(again, 2)
    types = [t for _, t, _ in replay]
    assert "chat.delta" in types or "chat.item" in types
    ids = [i for i, _, _ in replay]
    assert len(set(ids)) == len(ids)
    seqs = [int(i.rsplit("-", 1)[1]) for i in ids]
    assert seqs == sorted(seqs)
    assert seqs[0] == int(first[-1][0].rsplit("-", 1)[1]) + 1  # nothing missed
    again.close()
    other = await client.get("/api/v1/events", headers={"Last-Event-ID": "other-boot-5"})
    head = (await asyncio.wait_for(other.content.read(200), 5)).decode()
    assert "event: reset" in head
    other.close()
