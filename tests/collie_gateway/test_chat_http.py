"""The chat and its header through the phone API, against SDK agents on real sockets
(spec C1–C6, H1–H3). Time moves on ``rig.clock``; nothing sleeps for it."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler, Middleware

from collie_gateway.core.cleaning import clean
from collie_gateway.core.mirror import LinkState
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from tests.collie_gateway.test_markdown import violations
from wire.agent import Agent, ConversationHandle, Progress, SendMessage, Step

Client = TestClient[Any, Any]
CHAT = "/api/v1/agents/desk/conversations/c1"
ALL = ["history", "steer", "stop", "buttons", "progress", "close", "reopen"]
IMPATIENT = LinkTiming(
    connect=1.0, request=0.4, stream_read=1.0, backoff_first=0.05, backoff_cap=0.2
)
LATE = 0.8  # longer than IMPATIENT.request
MOVED_ON = "The conversation moved on, so the action did not run."
HOSTILE: list[dict[str, str]] = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "markdown" / "hostile.json").read_text("utf-8")
)


class Messages:
    """An agent middleware on ``POST /conversations/{id}/messages``, by ``mode``: ``ok``;
    ``hold`` (wait for ``release`` before the agent takes it); ``late`` (the first one reaches
    the agent only after the gateway gave up on it); ``no_echo`` (accepted, but the agent
    never writes the person's line back). ``done`` counts the requests answered, ``failed``
    those the agent could not take."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.release = asyncio.Event()
        self.arrived = 0
        self.done = 0
        self.failed = 0

    @property
    def middleware(self) -> Middleware:
        @web.middleware
        async def messages(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method != "POST" or not request.path.endswith("/messages"):
                return await handler(request)
            self.arrived += 1
            try:
                if self.mode == "hold":
                    await self.release.wait()
                elif self.mode == "late" and self.arrived == 1:
                    await request.read()  # it arrived whole; the agent takes it late
                    await asyncio.sleep(LATE)
                elif self.mode == "no_echo":
                    return web.json_response({"outcome": "accepted", "conversation_id": "c1"})
                return await handler(request)
            except Exception:
                self.failed += 1
                raise
            finally:
                self.done += 1

        return messages


class Turns:
    """The agent's turns: each message is recorded, and a turn waits for ``go`` (when set to
    wait) before it answers ``reply``."""

    def __init__(self, agent: Agent, *, wait: bool = False, reply: str | None = "On it") -> None:
        self.calls: list[str] = []
        self.go = asyncio.Event()
        if not wait:
            self.go.set()
        self.reply = reply

        @agent.on_message
        async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
            self.calls.append(msg.request_id)
            await self.go.wait()
            if self.reply is not None:
                await conv.append(kind="reply", text=self.reply)


async def start(
    rig: Rig,
    *,
    features: list[str] | None = None,
    timing: LinkTiming = FAST,
    middlewares: list[Middleware] | None = None,
    **agent_args: Any,
) -> tuple[Client, Gateway, Agent, ConversationHandle]:
    """The agent "desk" with conversation c1, and a gateway that has it Ready."""
    agent = rig.agent(
        "desk",
        runtime="desk",
        features=ALL if features is None else features,
        middlewares=middlewares or [],
        **agent_args,
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation(
        "c1", title="Notes", subtitle="Keeps notes", workspace="~/notes"
    )
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent, conv


async def chat(client: Client) -> dict[str, Any]:
    view: dict[str, Any] = await get_json(client, CHAT)
    return view


async def lines(client: Client) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = (await chat(client))["lines"]
    return result


def pending(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The person's lines the agent has not written back yet."""
    return [line for line in view["lines"] if line["id"].startswith("pending:")]


async def seen_by_gateway(gw: Gateway, conv: ConversationHandle, mark: str) -> None:
    """Wait until the gateway applied every event the agent sent so far: events come in
    order, so once the mark (a subtitle) shows, so has everything before it."""
    await conv.update(subtitle=mark)
    await eventually(lambda: gw.mirrors["desk"].conversations[conv.id].subtitle == mark)


# --- C1, C2: items ---------------------------------------------------------------------------


async def test_C1_C2_every_item_kind(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await conv.append(kind="user", text="Tidy up my notes")
    await conv.append(kind="thinking", text="Three folders hold notes.")
    await conv.append(kind="reply", text="Moving them to one.")
    await conv.append(kind="notice", text="3 notes moved")
    await conv.append(kind="markdown", text="# Plan\n\n- *one*\n- `two`\n\n<b>bold?</b>")
    view = await chat(client)  # opens the chat: read from the agent; then it follows live
    assert view["read_only"] is False
    await conv.append(kind="code", text="ls -la ~/notes", language="sh")
    await conv.append(kind="code", text="plain")
    await conv.append(kind="link", url="https://example.org/notes", label="Your notes")
    await conv.append(kind="link", url="https://example.org/raw")
    await conv.append(kind="link", url="http://example.org/insecure", label="Insecure")
    await conv.append(kind="link", url="javascript:alert(1)")
    await conv.append(kind="tool", name="shell", status="running", call_id="t1")
    await conv.append(kind="tool", name="shell", status="done", call_id="t2", output="3 files")
    await conv.append(kind="tool", name="mv", status="failed", call_id="t3", output="denied fs")
    await conv.append(kind="tool", name="rm", status="denied", call_id="t4")
    await seen_by_gateway(gw, conv, "done")
    got = await lines(client)
    assert [(line["kind"], line["id"]) for line in got] == [
        (k, f"i{n}")
        for n, k in enumerate(
            ["user", "thinking", "reply", "notice", "markdown", "code", "code"]
            + ["link"] * 4
            + ["tool"] * 4
        )
    ]
    user, thinking, reply, notice, md, code, plain = got[:7]
    assert (user["text"], user["mine"]) == ("Tidy up my notes", True)
    assert thinking["text"] == "Three folders hold notes."
    assert reply["text"] == "Moving them to one."
    assert notice["text"] == "3 notes moved"
    assert md["html"] == (
        "<h1>Plan</h1>\n<ul>\n<li><em>one</em></li>\n<li><code>two</code></li>\n</ul>\n"
        "<p>&lt;b&gt;bold?&lt;/b&gt;</p>\n"
    )
    assert (code["text"], code["language"]) == ("ls -la ~/notes", "sh")
    assert (plain["text"], plain.get("language")) == ("plain", None)
    labelled, bare, insecure, script = got[7:11]
    assert (labelled["url"], labelled["label"]) == ("https://example.org/notes", "Your notes")
    assert (bare["url"], bare["label"]) == ("https://example.org/raw", "https://example.org/raw")
    assert (insecure.get("url"), insecure["label"]) == (None, "Insecure")  # only https links
    assert (script.get("url"), script["label"]) == (None, "javascript:alert(1)")  # as text
    running, done, failed, denied = got[11:]
    assert (running["tool"], running["status"], running.get("output")) == ("shell", "running", None)
    assert (done["status"], done["output"]) == ("done", "3 files")
    assert (failed["status"], failed["output"]) == ("failed", "denied fs")
    assert (denied["tool"], denied["status"]) == ("rm", "denied")
    assert all("at" in line and not line.get("cursor") for line in got)


async def test_C2_markdown_hostile_corpus_through_the_chat(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await chat(client)
    for case in HOSTILE:
        await conv.append(kind="markdown", text=case["input"])
    await seen_by_gateway(gw, conv, "done")
    got = await lines(client)
    assert len(got) == len(HOSTILE)
    for case, line in zip(HOSTILE, got, strict=True):
        html = line["html"]
        assert violations(html) == [], case["description"]
        # The chat cleans invisible characters before rendering; a clean input renders as the
        # corpus expects, exactly.
        if "expect" in case and clean(case["input"], 10**6, multiline=True).text == case["input"]:
            assert html == case["expect"], case["description"]


# --- C3: an item being written, "stopped" -----------------------------------------------------


@pytest.mark.parametrize("kind", ["reply", "thinking", "notice", "markdown"])
async def test_C3_item_being_written_has_a_cursor_and_no_time(rig: Rig, kind: str) -> None:
    client, gw, _agent, conv = await start(rig)
    await chat(client)
    item = await conv.append(kind=kind, final=False)
    await item.delta("Hel")
    await item.delta("lo ")  # a word shows once it ends (X1: it may be a secret's start)
    await seen_by_gateway(gw, conv, "writing")
    line = (await lines(client))[-1]
    assert (line["final"], line["cursor"]) == (False, True)
    assert "at" not in line  # no time while it is written
    assert "Hello" in (line.get("text") or line["html"])
    await item.finish()
    await seen_by_gateway(gw, conv, "written")
    line = (await lines(client))[-1]
    assert line.get("final", True) is True
    assert line.get("cursor", False) is False  # the cursor goes with the final text
    assert line["at"] == rig.clock().isoformat().replace("+00:00", "Z")


async def test_C3_code_being_written_has_no_cursor(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await chat(client)
    item = await conv.append(kind="code", text="ls", final=False)
    await seen_by_gateway(gw, conv, "writing")
    line = (await lines(client))[-1]
    assert line["final"] is False
    assert "cursor" not in line
    assert "at" not in line
    await item.finish()


async def test_C3_chat_opened_while_an_item_is_written_misses_nothing(rig: Rig) -> None:
    """Deltas that come while the gateway reads the chat from the agent are not lost."""
    gate = asyncio.Event()
    read = asyncio.Event()

    @web.middleware
    async def slow_read(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer = await handler(request)
        if request.method == "GET" and request.path == "/conversations/c1":
            read.set()  # the agent read the conversation; its answer waits
            await gate.wait()
        return answer

    client, gw, _agent, conv = await start(rig, middlewares=[slow_read])
    item = await conv.append(kind="reply", final=False)
    await item.delta("Hel")
    await seen_by_gateway(gw, conv, "before")
    opening = asyncio.create_task(chat(client))
    await read.wait()
    await item.delta("lo ")  # after the agent's read, before the gateway has the chat
    await seen_by_gateway(gw, conv, "during")
    gate.set()
    await opening
    await item.delta("there ")  # (a word shows once it ends: X1, it may be a secret's start)
    await seen_by_gateway(gw, conv, "after")
    assert (await lines(client))[-1]["text"] == "Hello there "


async def test_C3_chat_read_ahead_of_the_event_stream_repeats_nothing(rig: Rig) -> None:
    """Events already in the chat the gateway read are skipped when the stream brings them
    (wire/SPEC.md §10, step 5)."""
    hold = {"events": 0.0}

    @web.middleware
    async def late_stream(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/events":
            await asyncio.sleep(hold["events"])
        return await handler(request)

    client, gw, agent, conv = await start(rig, middlewares=[late_stream])
    item = await conv.append(kind="reply", final=False)
    await item.delta("Hel")
    await seen_by_gateway(gw, conv, "before")
    # The gateway loses the agent's socket; when it comes back, the stream starts late.
    hold["events"] = 0.6
    await rig.runners["desk"].close()
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    rig.runners["desk"] = await agent.serve_unix(rig.sockets["desk"])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await item.delta("lo ")  # in the agent's log; the gateway's stream is not there yet
    assert (await lines(client))[-1]["text"] == "Hello "  # read from the agent
    hold["events"] = 0.0
    await seen_by_gateway(gw, conv, "after")  # the stream replayed "lo " meanwhile
    assert (await lines(client))[-1]["text"] == "Hello "


async def test_C3_stop_leaves_the_note_stopped(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig)

    @agent.on_message
    async def turn(handle: ConversationHandle, msg: SendMessage) -> None:
        item = await handle.append(kind="reply", final=False)
        await item.delta("Working on ")
        await asyncio.Event().wait()  # until stopped

    await chat(client)
    sent = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Go"})
    assert sent["outcome"] == "accepted"

    async def writing() -> bool:
        got = await lines(client)
        return got[-1].get("text") == "Working on " and got[-1].get("cursor") is True

    await eventually(writing)
    view = await chat(client)
    stopped = await post_json(client, CHAT + "/stop", {"request_id": "s1", "turn": view["turn"]})
    assert stopped["outcome"] == "accepted"

    async def noted() -> bool:
        return bool((await lines(client))[-1]["kind"] == "stopped")

    await eventually(noted)
    got = await lines(client)
    assert [line["kind"] for line in got] == ["user", "reply", "stopped"]
    assert got[-1]["text"] == "stopped"
    assert got[1].get("cursor", False) is False  # the stopped item is final
    assert "at" in got[1]
    # The note is the gateway's own: it is kept across a restart of the gateway.

    async def stored() -> bool:
        return bool(await gw.chats.notes.load("desk", "c1"))

    await eventually(stored)
    assert rig.client is not None
    await rig.client.close()
    client2, gw2 = await rig.gateway([Source(name="desk", socket=rig.sockets["desk"])])
    await eventually(lambda: gw2.mirrors["desk"].state is LinkState.READY)
    again = await lines(client2)
    assert [line["kind"] for line in again] == ["user", "reply", "stopped"]


# --- C4, C5, C6: the person's own line --------------------------------------------------------


async def test_C4_sending_then_sent_then_the_agents_copy_takes_its_place(rig: Rig) -> None:
    messages = Messages()
    messages.mode = "hold"
    client, _gw, agent, _conv = await start(rig, middlewares=[messages.middleware])
    turns = Turns(agent, wait=True)
    await chat(client)
    posting = asyncio.create_task(
        post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Tidy up"})
    )
    await eventually(lambda: messages.arrived == 1)
    view = await chat(client)
    [mine] = pending(view)  # at once, with its clock
    assert (mine["text"], mine["mine"], mine["clock"], mine["state"]) == (
        "Tidy up",
        True,
        True,
        "sending",
    )
    assert "state_label" not in mine
    assert view["dots"] is True
    messages.release.set()
    sent = await posting
    assert sent == {
        "outcome": "accepted",
        "line_state": "sent",
        "label": "Sent",
        "message": None,
        "composer_text": None,
    }

    async def replaced() -> bool:
        return not pending(await chat(client))

    await eventually(replaced)
    got = await lines(client)
    assert [(line["kind"], line["text"], line["request_id"]) for line in got] == [
        ("user", "Tidy up", "m1")
    ]
    assert got[0]["id"] == "i0"  # the agent's copy, in the line's place
    turns.go.set()
    await eventually(lambda: turns.calls == ["m1"])


async def test_C4_C5_unechoed_line_shows_sent_then_goes_after_10_minutes(rig: Rig) -> None:
    messages = Messages()
    messages.mode = "no_echo"
    client, _gw, _agent, _conv = await start(rig, middlewares=[messages.middleware])
    sent = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Hello?"})
    assert (sent["outcome"], sent["label"]) == ("accepted", "Sent")
    view = await chat(client)
    assert view["composer"] == {"status": "Sent", "text": None}
    [mine] = pending(view)
    assert (mine["state"], mine["clock"]) == ("sent", True)
    assert view["dots"] is True
    rig.clock.advance(minutes=9, seconds=59)
    assert len(pending(await chat(client))) == 1
    rig.clock.advance(seconds=2)
    view = await chat(client)
    assert pending(view) == []  # stops showing after 10 minutes
    assert view["composer"] == {"status": None, "text": None}
    assert view["dots"] is False


async def test_C4_no_response_not_confirmed_and_send_again_goes_through_once(rig: Rig) -> None:
    messages = Messages()
    messages.mode = "late"
    client, _gw, agent, conv = await start(rig, timing=IMPATIENT, middlewares=[messages.middleware])
    turns = Turns(agent)
    body = {"request_id": "m1", "text": "Archive the old ones"}
    first = await post_json(client, CHAT + "/messages", body)
    assert first["outcome"] == "uncertain"
    assert (first["line_state"], first["label"]) == ("not_confirmed", "Sending, not confirmed")
    assert first["composer_text"] is None
    [mine] = pending(await chat(client))
    assert (mine["state_label"], mine.get("clock", False)) == ("Sending, not confirmed", False)
    again = await post_json(client, CHAT + "/messages", body)  # Send again: same request id
    assert (again["outcome"], again["label"]) == ("accepted", "Sent")
    await eventually(lambda: messages.done == 2)  # the first one reached the agent too, late
    assert messages.failed == 0
    await eventually(lambda: turns.calls == ["m1"])

    async def answered() -> bool:
        return (await lines(client))[-1].get("text") == "On it"

    await eventually(answered)
    users = [item for item in conv.items if item.kind == "user"]
    assert [(u.text, u.request_id) for u in users] == [("Archive the old ones", "m1")]
    assert pending(await chat(client)) == []
    assert turns.calls == ["m1"]


async def test_C4_moved_on_not_sent_and_the_text_comes_back(rig: Rig) -> None:
    client, gw, agent, _conv = await start(rig)
    turns = Turns(agent, wait=True)
    await chat(client)
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Start"})
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].state == "working")
    # A steer aimed at turn 0, seen before turn 1 began: the conversation moved on.
    steer = {"request_id": "m2", "text": "Only the pdfs", "steer": True, "turn": 0}
    result = await post_json(client, CHAT + "/messages", steer)
    assert result == {
        "outcome": "moved_on",
        "line_state": "not_sent",
        "label": "Not sent",
        "message": MOVED_ON,
        "composer_text": "Only the pdfs",
    }
    view = await chat(client)
    [mine] = pending(view)
    assert (mine["state_label"], mine.get("clock", False)) == ("Not sent", False)
    assert view["composer"]["text"] == "Only the pdfs"  # back in the composer
    assert view["dots"] is False
    turns.go.set()
    await eventually(lambda: turns.calls == ["m1"])


async def test_C4_refused_not_sent_and_the_text_comes_back(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await conv.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 0)
    result = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "hello?"})
    assert (result["outcome"], result["label"]) == ("refused", "Not sent")
    assert result["composer_text"] == "hello?"
    assert (await chat(client))["composer"]["text"] == "hello?"


async def test_C5_echo_without_request_id_matched_by_text_within_30_seconds(rig: Rig) -> None:
    messages = Messages()
    messages.mode = "hold"
    client, _gw, agent, _conv = await start(
        rig, echo_request_id=False, middlewares=[messages.middleware]
    )
    Turns(agent, reply=None)
    await chat(client)

    async def send(request_id: str, late: timedelta) -> None:
        messages.release.clear()
        body = {"request_id": request_id, "text": "Tidy up"}
        posting = asyncio.create_task(post_json(client, CHAT + "/messages", body))
        await eventually(lambda: messages.arrived == messages.done + 1)
        rig.clock.advance(seconds=late.total_seconds())  # the agent takes it this much later
        messages.release.set()
        await posting

    await send("m1", timedelta(seconds=29))

    async def echoes(n: int) -> bool:
        """``n`` user lines: the agent's copies and the lines still waiting for one."""
        got = await lines(client)
        return sum(1 for line in got if line["kind"] == "user") == n

    await eventually(lambda: echoes(1))
    view = await chat(client)
    assert pending(view) == []  # the same text within 30 s: the echo took its place
    await send("m2", timedelta(seconds=31))
    await eventually(lambda: echoes(3))  # two echoes and the line still waiting
    view = await chat(client)
    [waiting] = pending(view)
    assert (waiting["request_id"], waiting["state"]) == ("m2", "sent")
    rig.clock.advance(minutes=10)
    assert pending(await chat(client)) == []  # never echoed: gone after 10 minutes


async def test_C6_three_dots_while_my_line_is_newest(rig: Rig) -> None:
    client, _gw, agent, _conv = await start(rig)
    turns = Turns(agent, wait=True)
    view = await chat(client)
    assert view["dots"] is False
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Sort them"})

    async def echoed() -> bool:
        view = await chat(client)
        return not pending(view) and bool(view["lines"])

    await eventually(echoed)
    view = await chat(client)
    assert view["lines"][-1]["mine"] is True
    assert view["dots"] is True  # the agent has not answered
    turns.go.set()

    async def answered() -> bool:
        return not (await chat(client))["dots"]

    await eventually(answered)
    assert (await lines(client))[-1]["text"] == "On it"


# --- H1–H3: the header --------------------------------------------------------------------------


async def header(client: Client) -> dict[str, Any]:
    shown: dict[str, Any] = (await chat(client))["header"]
    return shown


async def test_H1_title_and_experimental_badge(rig: Rig) -> None:
    client, _gw, _agent, _conv = await start(rig)
    shown = await header(client)
    assert (shown["title"], shown["badge"]) == ("Notes", "Experimental")


async def test_H2_H3_line_two(rig: Rig) -> None:
    client, gw, agent, conv = await start(rig)
    turns = Turns(agent, wait=True)

    async def line2(text: str | None, kind: str | None) -> None:
        async def shows() -> bool:
            shown = await header(client)
            return (shown.get("line2"), shown.get("line2_kind")) == (text, kind)

        await eventually(shows)

    await line2("Keeps notes", "subtitle")  # no progress: the subtitle
    steps = [
        Step(label="Read the notes", state="done"),
        Step(label="Save a note", state="running"),
        Step(label="Sync", state="pending"),
    ]
    await conv.update(progress=Progress(steps=steps))
    await line2("Keeps notes", "subtitle")  # H3: idle, so no progress
    await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Save"})
    await line2("Step 2 of 3: Save a note", "step")  # working
    await conv.update(progress=Progress(percent=42, label="loading"))
    await line2("42%: loading", "percent")
    assert (await header(client))["percent"] == 42
    await conv.update(progress=Progress(percent=42))  # a percent without its label
    await line2("Keeps notes", "subtitle")
    done = [Step(label="Read the notes", state="done"), Step(label="Save a note", state="done")]
    await conv.update(progress=Progress(steps=done))
    await line2("Keeps notes", "subtitle")  # all steps done
    await conv.update(progress=Progress(steps=steps))
    await line2("Step 2 of 3: Save a note", "step")
    ask = await conv.ask(kind="text", id="q1", title="Which name?")
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].state == "waiting")
    await line2("Step 2 of 3: Save a note", "step")  # waiting for the person: still shown
    await ask.decide()
    turns.go.set()
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].state == "idle")
    await line2("Keeps notes", "subtitle")  # the turn ended: progress goes
    await conv.update(subtitle=None)
    await line2("~/notes", "workspace")  # the agent sets none of the others
    await conv.update(workspace=None)
    await line2(None, None)


async def test_H3_labels_as_sent_cleaned_never_translated(rig: Rig) -> None:
    client, _gw, _agent, conv = await start(rig)
    await conv.update(
        state="working",
        progress=Progress(steps=[Step(label="Salva\u202e una\u200b nota\x07", state="running")]),
    )

    async def shows() -> bool:
        return (await header(client)).get("line2") == "Step 1 of 1: Salva una nota"

    await eventually(shows)


async def test_G1_H2_no_progress_line_without_the_feature(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig, features=["history"])
    await conv.update(state="working", progress=Progress(percent=50, label="halfway"))
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].progress is not None)
    assert (await header(client))["line2"] == "Keeps notes"
