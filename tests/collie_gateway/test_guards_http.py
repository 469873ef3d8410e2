"""Issue 9's small guarantees through the phone API, against SDK agents on real sockets:
C4 (a re-sent message shows once), G1 enforced by the gateway, H2's last fallback, open sets
(wire §14), the agent's ``ask.resolved`` settling an uncertain tap (T1), and no exception
name on the phone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from collie_gateway.core.mirror import LinkState
from collie_gateway.sources import Source
from tests.collie_gateway.chat_phone import PhoneChat, shown
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json, raw_agent
from tests.collie_gateway.test_answers_http import SHORT, desk
from tests.collie_gateway.test_chat_http import CHAT, Turns, chat, pending, seen_by_gateway, start

AGENT = "/api/v1/agents/desk"
UNSUPPORTED = "This durable agent doesn't offer that."
NO_ANSWER = "The durable agent didn't answer. Try again in a moment."
REFUSED = "The durable agent refused this."
NOT_UNDERSTOOD = "The durable agent's answer could not be read."
EXCEPTION_WORDS = ("Error", "Exception", "ssl:", "Connector", "errno", ".sock", "Traceback")


# --- C4 ------------------------------------------------------------------------------------------


async def test_C4_a_message_sent_again_after_its_echo_shows_once(rig: Rig) -> None:
    client, _gw, agent, conv = await start(rig)
    turns = Turns(agent, reply=None)
    await chat(client)
    body = {"request_id": "m1", "text": "Tidy up"}
    assert (await post_json(client, CHAT + "/messages", body))["outcome"] == "accepted"

    async def echoed() -> bool:
        view = await chat(client)
        return not pending(view) and any(line.get("request_id") == "m1" for line in view["lines"])

    await eventually(echoed)
    again = await post_json(client, CHAT + "/messages", body)  # a phone unsure it arrived
    assert again["outcome"] == "accepted"
    view = await chat(client)
    assert pending(view) == []  # no second line with a clock
    assert [(line["text"], line["request_id"]) for line in view["lines"]] == [("Tidy up", "m1")]
    assert view["dots"] is True  # the agent has not answered yet (C6), from the one line
    assert turns.calls == ["m1"]
    assert [i.request_id for i in conv.items if i.kind == "user"] == ["m1"]


# --- G1 ------------------------------------------------------------------------------------------


async def test_G1_undeclared_features_offer_nothing_and_reach_nothing(rig: Rig) -> None:
    posts: list[str] = []

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            posts.append(request.path)
        return await handler(request)

    client, _gw, agent, _conv = await start(rig, features=[], middlewares=[count])
    turns = Turns(agent, reply=None)
    listing = await get_json(client, AGENT + "/conversations")
    assert listing["new"] is None  # no New page without "starters"
    view = await chat(client)
    assert view["bar"] == {"controls": []}
    assert view["menu"] == {"items": [], "reopen": None}
    refused = {"outcome": "refused", "message": UNSUPPORTED, "conversation_id": None}
    for path, body in [
        (CHAT + "/stop", {"request_id": "s1", "turn": 0}),
        (CHAT + "/buttons/b1", {"request_id": "b1", "turn": 0}),
        (CHAT + "/close", {"request_id": "x1"}),
        (CHAT + "/reopen", {"request_id": "x2"}),
        (AGENT + "/conversations", {"request_id": "n1", "starter": "tidy"}),
    ]:
        assert await post_json(client, path, body) == refused, path
    steer = {"request_id": "m1", "text": "faster", "steer": True}
    assert await post_json(client, CHAT + "/messages", steer) == refused
    assert pending(await chat(client)) == []  # no line for a message Collie refused itself
    assert posts == []  # nothing reached the agent
    plain = {"request_id": "m2", "text": "Hello"}  # a message needs no feature
    assert (await post_json(client, CHAT + "/messages", plain))["outcome"] == "accepted"
    assert posts == ["/conversations/c1/messages"]
    await eventually(lambda: turns.calls == ["m2"])


# --- H2 ------------------------------------------------------------------------------------------


async def test_H2_line_two_falls_back_to_the_hellos_subtitle(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig, subtitle="Keeps your notes tidy")
    await conv.update(subtitle=None, workspace=None)
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].workspace is None)
    header = (await chat(client))["header"]
    assert (header["line2"], header["line2_kind"]) == ("Keeps your notes tidy", "subtitle")
    row = (await get_json(client, AGENT + "/conversations"))["rows"][0]
    assert row["line"] == "Keeps your notes tidy"  # the same as the list row
    await conv.update(workspace="~/notes")
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].workspace == "~/notes")
    assert (await chat(client))["header"]["line2"] == "~/notes"  # the workspace comes first


# --- wire §14: an unknown state reads as idle ------------------------------------------------


async def test_wire_14_an_unknown_state_reads_as_idle(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    await conv.update(state="paused")
    await eventually(lambda: gw.mirrors["desk"].conversations["c1"].state == "paused")
    row = (await get_json(client, AGENT + "/conversations"))["rows"][0]
    assert (row["status"], row["waiting"]) == ("idle", False)
    view = await chat(client)
    steer, stop = view["bar"]["controls"][:2]
    assert (steer["dimmed"], stop["dimmed"]) == (True, True)  # as idle: no turn runs
    assert view["header"]["line2_kind"] == "subtitle"
    dash = await get_json(client, "/api/v1/dashboard")
    assert dash["durable_agents_position"] == "below"  # nothing waits for the person


# --- T1: the agent's word settles an uncertain tap ------------------------------------------------


async def test_T1_the_agents_answered_event_settles_an_uncertain_tap(rig: Rig) -> None:
    """The agent took the answer; its response never came in time, but its ``ask.resolved``
    (``answered``, with the tap's request id) did: the ledger settles as accepted at once,
    with no resend."""
    d = await desk(rig, timing=SHORT)  # the resend loop waits 30 s: it plays no part
    await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "hold_after"
    first = await d.answer("p", "r1", {"text": "a"})
    assert first["outcome"] == "uncertain"

    async def settled() -> bool:
        status = await d.status("r1")
        return bool(status["outcome"] == "accepted" and status["settled"])

    await eventually(settled, within=2.0)
    assert (await d.status("r1"))["card"]["closed"] is True
    assert d.wire.replies("p") == ["r1"]  # settled by the agent's word: nothing sent again
    assert d.acted("p") == [("answered", "r1")]
    d.wire.release.set()


# --- no exception names on the phone ---------------------------------------------------------


def _plain(text: str | None) -> None:
    assert text is not None
    for word in EXCEPTION_WORDS:
        assert word not in text, text


async def test_no_exception_names_on_the_phone_when_the_agent_is_gone(rig: Rig) -> None:
    client, gw, _agent, _conv = await start(rig)
    await chat(client)
    await rig.stop("desk")
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    home = await get_json(client, AGENT)
    assert home["reason"] == NO_ANSWER
    for path, body in [
        (CHAT + "/stop", {"request_id": "s1", "turn": 0}),
        (CHAT + "/close", {"request_id": "x1"}),
    ]:
        result = await post_json(client, path, body)
        assert result["outcome"] == "uncertain"
        assert result["message"] == NO_ANSWER
    sent = await post_json(client, CHAT + "/messages", {"request_id": "m1", "text": "Hi"})
    assert (sent["outcome"], sent["message"]) == ("uncertain", None)
    gw.chats.chats.clear()  # read the chat again: the agent is gone
    failed = await client.get(CHAT)
    assert failed.status == 504
    _plain((await failed.json())["message"])


async def test_no_exception_names_on_the_phone_from_a_foreign_agent(rig: Rig) -> None:
    """An agent of the tests' own answers commands with garbage and chat reads with 500."""
    done = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            return web.json_response({"wire": 1, "features": ["stop", "close"]})
        if request.path == "/conversations":
            ask = {"id": "q", "conversation": "c1", "kind": "text", "title": "Name?"}
            conv = {
                "id": "c1",
                "title": "Notes",
                "updated_at": "2026-12-02T12:00:00Z",
                "asks": [ask],
            }
            return web.json_response({"conversations": [conv]}, headers={"Wire-Event-Id": "0"})
        if request.path == "/events":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            while not done.is_set():
                await resp.write(b": ping\n\n")
                await asyncio.sleep(0.05)
            return resp
        if request.path.endswith("/stop"):
            return web.Response(body=b"<html>oops</html>", content_type="text/html")
        if request.path.endswith("/close") or request.path.endswith("/reply"):
            return web.Response(status=418, body=b"teapot")
        return web.Response(status=500, body=b"Traceback (most recent call last): KeyError")

    sock = rig.tmp / "raw.sock"
    async with raw_agent(handler, sock):
        try:
            client, gw = await rig.gateway([Source(name="desk", socket=sock)])
            await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
            stopped = await post_json(client, CHAT + "/stop", {"request_id": "s1", "turn": 0})
            assert (stopped["outcome"], stopped["message"]) == ("uncertain", NOT_UNDERSTOOD)
            closed = await post_json(client, CHAT + "/close", {"request_id": "x1"})
            assert (closed["outcome"], closed["message"]) == ("refused", REFUSED)
            failed = await client.get(CHAT)
            assert failed.status == 502
            _plain((await failed.json())["message"])
            answer = {"request_id": "r1", "version": 1, "answer": {"text": "Ada"}}
            refused = await post_json(client, AGENT + "/asks/q/answer", answer)
            assert (refused["outcome"], refused["card"]["line"]) == (
                "refused",
                "The answer was refused.",  # not "the agent answered 418"
            )
        finally:
            done.set()  # the stream ends, so the agent stops at once


# --- X1: issue 9.10's secret families on the phone ------------------------------------------


NEW_FAMILIES = [
    case
    for case in json.loads(
        (Path(__file__).parents[2] / "fixtures" / "redaction" / "secrets.json").read_text("utf-8")
    )
    if any(
        word in case["description"]
        for word in ("PEM key in", "PyPI", "Azure", "Discord", "Vault", "DigitalOcean")
    )
]


def _leaks(secret: str, kept: str, text: str) -> bool:
    body = secret[len(kept) :]
    return any(body[i : i + 6] in text for i in range(len(body) - 5))


async def test_X1_new_secret_families_masked_on_list_header_and_cards(rig: Rig) -> None:
    assert len(NEW_FAMILIES) >= 12  # the first families, and Discord webhooks since
    client, gw, _agent, conv = await start(rig)
    agent = rig.agents["desk"]
    for n, case in enumerate(NEW_FAMILIES):
        await agent.open_conversation(f"s{n}", title=case["input"], subtitle=case["input"])
    await conv.ask(kind="text", id="q", title=NEW_FAMILIES[0]["input"][:1000])
    await eventually(lambda: len(gw.mirrors["desk"].conversations) == 1 + len(NEW_FAMILIES))
    await eventually(lambda: gw.agents.find_ask("desk", "q") is not None)
    rows = {
        r["conversation_id"]: r for r in (await get_json(client, AGENT + "/conversations"))["rows"]
    }
    for n, case in enumerate(NEW_FAMILIES):
        header = (await get_json(client, AGENT + f"/conversations/s{n}"))["header"]
        for text in (
            rows[f"s{n}"]["title"],
            rows[f"s{n}"]["line"],
            header["title"],
            header["line2"],
        ):
            assert not _leaks(case["secret"], case["kept"], text), (case["description"], text)
    card = (await chat(client))["cards"]["cards"][0]
    assert not _leaks(NEW_FAMILIES[0]["secret"], "", json.dumps(card, ensure_ascii=False))


async def test_X1_chat_items_and_tool_output_masked_on_the_phone(rig: Rig) -> None:
    key = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    client, gw, _agent, conv = await start(rig)
    phone = PhoneChat(client, CHAT)
    await phone.start()
    await conv.append(kind="reply", text=f"Your key is {key}")
    await conv.append(kind="tool", name="shell", status="done", call_id="t1", output=f"{key}\n")
    await conv.append(kind="markdown", text=f"Set `{key}` in **.env**")
    item = await conv.append(kind="reply", final=False)
    await item.delta("and again: sk_live_")
    await item.delta(key[8:])
    await item.finish()
    await seen_by_gateway(gw, conv, "done")
    view = await chat(client)
    reply, tool, md, streamed = view["lines"]
    assert reply["text"] == "Your key is sk_live_••••"
    assert tool["output"] == "sk_live_••••\n"
    assert md["html"] == "<p>Set <code>sk_live_••••</code> in <strong>.env</strong></p>\n"
    assert streamed["text"] == "and again: sk_live_••••"  # masked once final
    assert key[8:] not in json.dumps(view)
    await eventually(lambda: phone.shown() == shown(view))  # the live path masks alike
    await phone.stop()


async def test_X1_redaction_off_shows_chat_items_as_sent(rig: Rig) -> None:
    key = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Notes")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], redact=False)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await conv.append(kind="reply", text=f"Your key is {key}")
    await seen_by_gateway(gw, conv, "done")
    assert (await chat(client))["lines"][0]["text"] == f"Your key is {key}"
