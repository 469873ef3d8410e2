"""The chat, its header and bottom bar, and the live stream, through the phone API against
SDK agents (spec C1–C6, H1–H3, B1–B3, G1, G2)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from collie_gateway.mirror import LinkState
from collie_gateway.settings import LinkTiming
from collie_gateway.sources import Source
from collie_gateway.views.chat import LineState, MyLine
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, Button, ConversationHandle, Progress, SendMessage, Step

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


async def lines(client: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = (await get_json(client, CHAT))["lines"]
    return result


async def test_C2_every_item_kind(rig: Rig) -> None:
    client, _gw, _, conv = await start(rig)
    await conv.append(kind="user", text="Tidy up")
    await conv.append(kind="thinking", text="Looking at the notes")
    await conv.append(kind="reply", text="Done.")
    await conv.append(kind="notice", text="3 notes moved")
    await conv.append(
        kind="markdown",
        text="# Plan\n\n<script>alert(1)</script> [x](javascript:alert(1)) [ok](https://example.org)",
    )
    await conv.append(kind="code", text="ls -la", language="sh")
    await conv.append(kind="link", url="http://example.org/insecure", label="Insecure")
    await conv.append(kind="link", url="https://example.org/docs")
    await conv.append(kind="tool", name="shell", status="done", output="ok", call_id="t1")
    await conv.append(kind="tool", name="rm", status="denied", call_id="t2")
    await get_json(client, CHAT)  # open the chat, then follow it live

    async def ten() -> bool:
        return len(await lines(client)) == 10

    await eventually(ten)
    by_kind = [(line["kind"], line) for line in await lines(client)]
    kinds = [k for k, _ in by_kind]
    assert kinds == [
        "user",
        "thinking",
        "reply",
        "notice",
        "markdown",
        "code",
        "link",
        "link",
        "tool",
        "tool",
    ]
    md = by_kind[4][1]["html"]
    assert "<script" not in md
    assert "&lt;script&gt;" in md  # raw HTML shown as text
    assert 'href="https://example.org"' in md
    assert "javascript:" not in md.split("href=")[-1] or 'href="javascript' not in md
    assert by_kind[5][1]["language"] == "sh"
    insecure, docs = by_kind[6][1], by_kind[7][1]
    assert insecure.get("url") is None  # only https links
    assert insecure["label"] == "Insecure"
    assert docs["url"] == "https://example.org/docs"
    assert docs["label"] == "https://example.org/docs"  # no label: the address
    assert (by_kind[8][1]["status"], by_kind[8][1]["output"]) == ("done", "ok")
    assert by_kind[9][1]["status"] == "denied"


async def test_C3_item_being_written_has_a_cursor_and_no_time(rig: Rig) -> None:
    client, _gw, _, conv = await start(rig)
    await get_json(client, CHAT)
    item = await conv.append(kind="reply", text="", final=False)
    await item.delta("Hel")
    await item.delta("lo")

    async def written() -> bool:
        got = await lines(client)
        return bool(got) and got[-1].get("text") == "Hello"

    await eventually(written)
    line = (await lines(client))[-1]
    assert line["cursor"] is True
    assert "at" not in line
    await item.finish()

    async def final() -> bool:
        got = (await lines(client))[-1]
        return bool(got.get("final", True)) and not got.get("cursor", False)

    await eventually(final)
    assert "at" in (await lines(client))[-1]


async def test_C4_C6_my_line_sent_and_dots(rig: Rig) -> None:
    client, _gw, agent, _conv = await start(rig, echo_request_id=True)
    release = asyncio.Event()
    calls: list[str] = []

    @agent.on_message
    async def turn(handle: ConversationHandle, msg: SendMessage) -> None:
        calls.append(msg.request_id)
        await release.wait()
        await handle.append(kind="reply", text="On it")

    await get_json(client, CHAT)
    sent = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Tidy up"})
    assert (sent["outcome"], sent["label"]) == ("accepted", "Sent")
    view = await get_json(client, CHAT)
    assert view["lines"][-1]["mine"] is True
    assert view["dots"] is True  # my line is newest and the agent has not answered
    release.set()

    async def answered() -> bool:
        last: dict[str, Any] = (await get_json(client, CHAT))["lines"][-1]
        return last.get("text") == "On it"

    await eventually(answered)
    view = await get_json(client, CHAT)
    assert view["dots"] is False
    assert [line["kind"] for line in view["lines"]] == ["user", "reply"]  # the echo took its place
    assert calls == ["m1"]


async def test_C4_not_confirmed_then_send_again_reaches_the_agent_once(rig: Rig) -> None:
    hold = {"on": True}

    @web.middleware
    async def slow(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path.endswith("/messages") and hold["on"]:
            await asyncio.sleep(1.5)
        return response

    timing = LinkTiming(connect=1, request=0.5, stream_read=1, backoff_first=0.05, backoff_cap=0.2)
    client, _gw, agent, _conv = await start(rig, timing=timing, middlewares=[slow])
    calls: list[str] = []

    @agent.on_message
    async def turn(handle: ConversationHandle, msg: SendMessage) -> None:
        calls.append(msg.request_id)

    first = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "hi"})
    assert (first["outcome"], first["label"]) == ("uncertain", "Sending, not confirmed")
    hold["on"] = False
    again = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "hi"})
    assert again["label"] == "Sent"
    await asyncio.sleep(0.2)
    assert calls == ["m1"]


async def test_C4_refused_not_sent_text_back(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await conv.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    result = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "hello?"})
    assert result["label"] == "Not sent"
    assert result["composer_text"] == "hello?"


async def test_C5_echo_matched_by_text_and_lines_gone_after_10_minutes(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig, echo_request_id=False)

    @agent.on_message
    async def turn(handle: ConversationHandle, msg: SendMessage) -> None:
        return None

    await get_json(client, CHAT)
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "first"})

    async def echoed() -> bool:
        got = await lines(client)
        return [line["kind"] for line in got] == ["user"] and "pending" not in got[0]["id"]

    await eventually(echoed)
    # A line the agent never echoes (the SDK always echoes: put one in as if it did not)
    # stops showing after 10 minutes.
    never = MyLine(request_id="m9", text="never echoed", sent_at=rig.clock(), state=LineState.SENT)
    gw.chats.line_sent("desk", "c1", never)
    assert any("pending" in line["id"] for line in await lines(client))
    rig.clock.advance(minutes=9, seconds=59)
    assert any("pending" in line["id"] for line in await lines(client))
    rig.clock.advance(seconds=2)
    assert not any("pending" in line["id"] for line in await lines(client))


async def test_H1_H2_H3_header_lines(rig: Rig) -> None:
    client, _gw, _agent, conv = await start(rig)
    header = (await get_json(client, CHAT))["header"]
    assert (header["title"], header["badge"]) == ("Notes", "Experimental")
    assert header["line2"] == "Keeps notes"  # no progress: the subtitle
    steps = [Step(label="Read", state="done"), Step(label="Save a note", state="running"),
             Step(label="Sync")]  # fmt: skip
    await conv.update(progress=Progress(steps=steps), state="working")

    async def line2(text: str) -> bool:
        header: dict[str, Any] = (await get_json(client, CHAT))["header"]
        shown: str | None = header["line2"]
        return shown == text

    await eventually(lambda: line2("Step 2 of 3: Save a note"))
    await conv.update(progress=Progress(percent=42, label="loading"))
    await eventually(lambda: line2("42%: loading"))
    await conv.update(state="idle")  # H3: progress only while working or waiting
    await eventually(lambda: line2("Keeps notes"))
    await conv.update(subtitle=None, progress=None)
    await eventually(lambda: line2("~/notes"))  # nothing else: the workspace


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
