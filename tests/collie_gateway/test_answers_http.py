"""Asks and answers through the phone API against SDK agents (spec A, T1, R1–R5, V1)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from collie_gateway.mirror import LinkState
from collie_gateway.settings import LinkTiming
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, AskHandle, ConversationHandle, FormField, Option, ToolRef

PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
    Option(id="cancel", label="Stop all", role="cancel"),
]
TOOL = ToolRef(call_id="t1", name="shell")


async def desk(
    rig: Rig, *, timing: LinkTiming = FAST, **agent_args: Any
) -> tuple[Any, Any, Agent, ConversationHandle]:
    """An SDK agent ``desk`` with conversation ``c1``, and a gateway following it."""
    agent = rig.agent("desk", runtime="desk", features=["history", "stop"], **agent_args)
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent, conv


async def raised(gw: Any, conv: ConversationHandle, **ask: Any) -> AskHandle:
    handle = await conv.ask(**ask)
    await eventually(lambda: gw.find_ask("desk", handle.id) is not None)
    return handle


async def answer(
    client: Any, ask: str, request_id: str, body: dict[str, Any], version: int = 1
) -> dict[str, Any]:
    payload = {"request_id": request_id, "version": version, "answer": body}
    result: dict[str, Any] = await post_json(
        client, f"/api/v1/agents/desk/asks/{ask}/answer", payload
    )
    return result


async def chat(client: Any, **query: str) -> dict[str, Any]:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    result: dict[str, Any] = await get_json(
        client, "/api/v1/agents/desk/conversations/c1" + (f"?{q}" if q else "")
    )
    return result


# --- cards (A) -------------------------------------------------------------------------------


async def test_A2_A4_A5_permission_card_in_the_chat(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(
        gw, conv, id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
    )
    card = (await chat(client))["cards"]["cards"][0]
    assert card["caption"] == "Needs your answer · desk"
    assert card["tool_call_id"] == "t1"
    buttons = card["body"]["buttons"]
    assert [b["label"] for b in buttons] == ["Allow", "Always allow", "Deny", "Cancel"]
    assert [b["secondary"] for b in buttons] == ["Yes, run it", "Always for ls", "No", "Stop all"]
    always = buttons[1]
    assert always["confirm_label"] == "Tap again to always allow"
    assert always["tool_name"] == "shell"


async def test_A5_always_refused_without_the_second_tap(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(
        gw, conv, id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
    )
    result = await answer(client, "p", "r1", {"option": "always"})
    assert result["outcome"] == "refused"
    assert result["card"]["line"] == '"Always allow" needs a second tap.'
    assert ask.open  # nothing reached the agent
    confirmed = await answer(client, "p", "r2", {"option": "always", "confirmed": True})
    assert confirmed["outcome"] == "accepted"


async def test_A5_no_always_without_a_tool(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(gw, conv, id="p", kind="permission", title="Run it?", options=PERMISSION)
    card = (await chat(client))["cards"]["cards"][0]
    assert "Always allow" not in [b["label"] for b in card["body"]["buttons"]]


async def test_A6_text_shortened_no_always(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(
        gw, conv, id="p", kind="permission", title="Run\u202e ls?", tool=TOOL, options=PERMISSION
    )
    card = (await chat(client))["cards"]["cards"][0]
    assert "Text shortened" in card["notices"]
    assert "Always allow" not in [b["label"] for b in card["body"]["buttons"]]


async def test_A3_R1_deadline_counts_down(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    deadline = rig.clock() + timedelta(minutes=4, seconds=30)
    await raised(gw, conv, id="d", kind="text", title="Name?", deadline=deadline)
    assert (await chat(client))["cards"]["cards"][0]["deadline_label"] == "Expires in 4 min"
    rig.clock.advance(minutes=3, seconds=50)
    assert (await chat(client))["cards"]["cards"][0]["deadline_label"] == "Expires in 40 s"


async def test_A4_text_choice_form_cards(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(gw, conv, id="t", kind="text", title="Name?", max_length=1200)
    await raised(
        gw,
        conv,
        id="m",
        kind="choice",
        title="Which?",
        multiple=True,
        options=[Option(id=f"o{i}", label=f"Option {i}") for i in range(8)],
    )
    fields = [
        FormField(id="name", kind="text", label="Name", required=True),
        FormField(
            id="color",
            kind="select",
            label="Colour",
            options=[Option(id="r", label="Red"), Option(id="g", label="Green")],
        ),
        FormField(id="loud", kind="switch", label="Loud"),
    ]
    await raised(gw, conv, id="f", kind="form", title="Details", fields=fields)
    cards = {c["ask_id"]: c for c in (await chat(client))["cards"]["cards"]}
    assert cards["t"]["body"]["input"]["counter"] == "0 of 1200"
    assert cards["m"]["body"]["hint"] == "Pick any number"
    assert cards["m"]["body"]["send"] == "Send"
    assert len(cards["m"]["body"]["rows"]) == 8
    assert cards["f"]["body"]["fields"][0]["required_label"] == "Required"


async def test_A4_A7_ninth_option_is_never_dropped(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(
        gw,
        conv,
        id="n",
        kind="choice",
        title="Which?",
        options=[Option(id=f"o{i}", label=f"Option {i}") for i in range(9)],
    )
    await raised(gw, conv, id="u", kind="vote", title="Vote?", text="Pick one")
    cards = {c["ask_id"]: c for c in (await chat(client))["cards"]["cards"]}
    for ask_id in ("n", "u"):
        assert cards[ask_id]["body"] is None
        assert "This ask cannot be answered from the phone." in cards[ask_id]["notices"]
    assert cards["u"]["text"] == "Pick one"


async def test_A8_show_more_after_five(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    for i in range(7):
        await raised(gw, conv, id=f"q{i}", kind="text", title=f"Q{i}")
    cards = (await chat(client))["cards"]
    assert len(cards["cards"]) == 5
    assert cards["more"] == {"label": "Show 2 more", "count": 2}
    assert len((await chat(client, all_cards="true"))["cards"]["cards"]) == 7


# --- after a tap (T1) ------------------------------------------------------------------------


async def test_T1_accepted_card_closes_and_agent_acts_once(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(
        gw, conv, id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION
    )
    first = await answer(client, "p", "r1", {"option": "allow"})
    assert first["outcome"] == "accepted"
    assert first["card"]["closed"] is True
    again = await answer(client, "p", "r1", {"option": "allow"})  # the phone retries
    assert again["outcome"] == "accepted"
    resolution = await ask.wait()
    assert (resolution.how, resolution.request_id) == ("answered", "r1")
    await eventually(lambda: gw.find_ask("desk", "p") is None)
    assert (await chat(client))["cards"]["cards"] == []


async def test_T1_decided_first(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(gw, conv, id="p", kind="text", title="Name?")
    await ask.decide()
    result = await answer(client, "p", "r1", {"text": "x"})
    assert result["outcome"] == "decided"
    assert result["card"]["line"] == "Decided in the durable agent."


async def test_T1_expired_first(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(
        gw, conv, id="p", kind="text", title="Name?", deadline=rig.clock() + timedelta(seconds=5)
    )
    rig.clock.advance(seconds=6)
    result = await answer(client, "p", "r1", {"text": "x"})
    assert result["outcome"] == "expired"
    assert result["card"]["line"] == "Timed out before an answer."


async def test_T1_already_answered(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(gw, conv, id="p", kind="text", title="Name?")
    assert (await answer(client, "p", "r1", {"text": "a"}))["outcome"] == "accepted"
    second = await answer(client, "p", "r2", {"text": "b"})
    assert second["outcome"] == "answered"
    assert second["card"]["line"] == "Already answered. This card goes away on the next refresh."


async def test_T1_not_open(rig: Rig) -> None:
    client, _, _, _ = await desk(rig)
    result = await answer(client, "nope", "r1", {"text": "a"})
    assert result["outcome"] == "not_open"
    assert result["card"]["line"] == "Not accepted. This ask may come back shortly."


async def test_T1_changed(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(gw, conv, id="p", kind="text", title="Name?")
    await ask.change(text="Name of the new note?")
    result = await answer(client, "p", "r1", {"text": "a"}, version=1)
    assert result["outcome"] == "changed"
    assert result["card"]["line"] == "This ask changed. Read it again, then tap an answer."
    again = await answer(client, "p", "r2", {"text": "a"}, version=ask.version)
    assert again["outcome"] == "accepted"


async def test_T1_refused_by_the_agent_with_its_reason(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    await raised(gw, conv, id="p", kind="text", title="Name?", max_length=3)
    result = await answer(client, "p", "r1", {"text": "too long"})
    assert result["outcome"] == "refused"
    assert result["card"]["line"]  # the agent's sentence


async def test_T1_same_request_id_other_answer_refused_and_unsent(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(gw, conv, id="p", kind="text", title="Name?", max_length=3)
    await answer(client, "p", "r1", {"text": "too long"})
    result = await answer(client, "p", "r1", {"text": "ok"})
    assert result["outcome"] == "refused"
    assert result["card"]["line"] == "This request id was already used for another answer."
    assert ask.open


async def test_T1_uncertain_then_retry_reaches_the_agent_once(rig: Rig) -> None:
    gate = asyncio.Event()
    replies = {"n": 0}

    @web.middleware
    async def slow(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.endswith("/reply"):
            replies["n"] += 1
            response = await handler(request)
            if not gate.is_set():
                await asyncio.sleep(1.5)  # longer than the gateway waits
            return response
        return await handler(request)

    timing = LinkTiming(connect=1, request=0.5, stream_read=1, backoff_first=0.05, backoff_cap=0.2)
    client, gw, _, conv = await desk(rig, timing=timing, middlewares=[slow])
    ask = await raised(gw, conv, id="p", kind="text", title="Name?")
    first = await answer(client, "p", "r1", {"text": "a"})
    assert first["outcome"] == "uncertain"
    assert first["card"]["line"] == "Not sure the answer arrived. Retry sends it once more."
    assert first["card"]["retry_label"] == "Retry"
    gate.set()
    retry = await answer(client, "p", "r1", {"text": "a"})
    assert retry["outcome"] == "accepted"  # the agent remembers r1: its first outcome again
    resolution = await ask.wait()
    assert resolution.request_id == "r1"
    assert replies["n"] >= 2


async def test_T1_retry_found_the_ask_closed(rig: Rig) -> None:
    calls = {"n": 0}

    @web.middleware
    async def lose_first(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.endswith("/reply"):
            calls["n"] += 1
            if calls["n"] == 1:
                await asyncio.sleep(1.5)  # lost: the agent never handles it
        return await handler(request)

    timing = LinkTiming(connect=1, request=0.5, stream_read=1, backoff_first=0.05, backoff_cap=0.2)
    client, gw, _, conv = await desk(rig, timing=timing, middlewares=[lose_first])
    ask = await raised(gw, conv, id="p", kind="text", title="Name?")
    assert (await answer(client, "p", "r1", {"text": "a"}))["outcome"] == "uncertain"
    await ask.decide()  # meanwhile the agent decided
    await asyncio.sleep(1.2)  # let the lost request finish on the agent's side
    retry = await answer(client, "p", "r1", {"text": "a"})
    assert retry["card"]["line"] == "Your answer may already have been applied. Check the chat."


async def test_T1_fifty_concurrent_answers_one_accepted(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    ask = await raised(gw, conv, id="p", kind="text", title="Name?")
    results = await asyncio.gather(
        *(answer(client, "p", f"r{i}", {"text": f"t{i}"}) for i in range(50))
    )
    outcomes = [r["outcome"] for r in results]
    assert outcomes.count("accepted") == 1
    assert outcomes.count("answered") == 49
    winner = next(r["request_id"] for r in results if r["outcome"] == "accepted")
    assert (await ask.wait()).request_id == winner


async def test_V1_wire2_agent_is_never_sent_an_answer(rig: Rig) -> None:
    posts: list[str] = []

    @web.middleware
    async def log_posts(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            posts.append(request.path)
        return await handler(request)

    agent = rig.agent("desk", wire_version=2, middlewares=[log_posts])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1")
    await conv.ask(id="p", kind="text", title="Name?")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.VERSION_MISMATCH)
    result = await answer(client, "p", "r1", {"text": "a"})
    assert result["outcome"] == "refused"
    assert result["card"]["line"] == (
        "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    )
    assert posts == []


# --- receipts (R) ----------------------------------------------------------------------------


def receipts(view: dict[str, Any]) -> list[str]:
    return [line["text"] for line in view["lines"] if line["kind"] == "receipt"]


async def test_R3_expired_and_decided_without_a_tap_leave_a_line(rig: Rig) -> None:
    client, gw, agent, conv = await desk(rig)
    await chat(client)  # the chat is open on the phone
    soon = rig.clock() + timedelta(seconds=1)
    await raised(gw, conv, id="e", kind="text", title="Name the note", deadline=soon)
    d = await raised(gw, conv, id="d", kind="text", title="Pick a colour")
    rig.clock.advance(seconds=2)
    await agent.expire_due()
    await d.decide()
    await eventually(lambda: gw.find_ask("desk", "d") is None and gw.find_ask("desk", "e") is None)

    async def two() -> bool:
        return len(receipts(await chat(client))) == 2

    await eventually(two)
    assert receipts(await chat(client)) == [
        "Timed out before an answer: Name the note",
        "Decided in the durable agent: Pick a colour",
    ]


async def test_R4_answered_or_stopped_leave_no_line(rig: Rig) -> None:
    client, gw, agent, conv = await desk(rig)

    @agent.on_message
    async def turn(handle: ConversationHandle, _: Any) -> None:
        ask = await handle.ask(id="s", kind="text", title="Which file?")
        await ask.wait()

    await raised(gw, conv, id="a", kind="text", title="Name?")
    await answer(client, "a", "r1", {"text": "x"})
    await eventually(lambda: gw.find_ask("desk", "a") is None)
    sent = {"request_id": "m1", "text": "tidy the notes"}
    await post_json(client, "/api/v1/agents/desk/conversations/c1/messages", sent)
    await eventually(lambda: gw.find_ask("desk", "s") is not None)
    now_turn = (await chat(client))["turn"]
    stopped = await post_json(
        client,
        "/api/v1/agents/desk/conversations/c1/stop",
        {"request_id": "stop-1", "turn": now_turn},
    )
    assert stopped["outcome"] == "accepted"
    await eventually(lambda: gw.find_ask("desk", "s") is None)
    await asyncio.sleep(0.1)
    view = await chat(client)
    assert receipts(view) == []
    assert any(line["kind"] == "stopped" and line["text"] == "stopped" for line in view["lines"])


async def test_R3_receipts_survive_a_gateway_restart(rig: Rig) -> None:
    client, gw, _, conv = await desk(rig)
    d = await raised(gw, conv, id="d", kind="text", title="Pick a colour")
    await d.decide()

    async def one() -> bool:
        return len(receipts(await chat(client))) == 1

    await eventually(one)
    await client.close()
    client2, gw2 = await rig.gateway([Source(name="desk", socket=rig.sockets["desk"])])
    await eventually(lambda: gw2.mirrors["desk"].state is LinkState.READY)
    assert receipts(await get_json(client2, "/api/v1/agents/desk/conversations/c1")) == [
        "Decided in the durable agent: Pick a colour"
    ]
