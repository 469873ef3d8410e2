"""Answers through the phone API against SDK agents on real sockets (spec T1, R1–R4, V1;
people-in-the-loop S4, S5).

Every row of T1 comes from a real condition: the agent decided, a deadline passed, another
phone won the claim, the agent's socket went away in the middle of a request, the agent never
answered within the gateway's request timeout. Each agent carries a ``Wire`` middleware: the
raw log of every request it was sent, and a switch that drops, holds or passes its replies.
"Acted" is counted where the agent keeps it: the ``ask.resolved`` events in its state file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from aiohttp import web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler, Middleware

from collie_gateway.core.mirror import LinkState
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from fixtures.agents.harness import AgentAddress
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, AskHandle, ConversationHandle, Option, ToolRef

Client = TestClient[Any, Any]

PERMISSION = [
    Option(id="allow", label="Yes, run it", role="allow"),
    Option(id="always", label="Always for ls", role="always"),
    Option(id="deny", label="No", role="deny"),
]
TOOL = ToolRef(call_id="t1", name="shell")
# A request timeout short enough to wait out in a test (the agent is held longer).
SHORT = LinkTiming(connect=1.0, request=1.0, stream_read=1.0, backoff_first=0.05, backoff_cap=0.2)

UNCERTAIN = "Not sure the answer arrived. Retry sends it once more."
MAYBE_APPLIED = "Your answer may already have been applied. Check the chat."
ANSWERED = "Already answered. This card goes away on the next refresh."


# --- the agent's side of the wire -------------------------------------------------------------


@dataclass
class Wire:
    """An agent middleware: logs every request (method, path, JSON body) and, for
    ``POST /asks/…/reply``, passes it (``pass``), drops the connection before the agent reads
    it (``drop``: the socket disappears mid-request), answers an outcome this Collie does not
    know (``postpone``), or lets the agent act and holds its answer until ``release`` is set
    (``hold_after``)."""

    mode: Literal["pass", "drop", "postpone", "hold_after"] = "pass"
    log: list[tuple[str, str, Any]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def middleware(self) -> Middleware:
        @web.middleware
        async def wire(request: web.Request, handler: Handler) -> web.StreamResponse:
            body = await request.read()
            self.log.append((request.method, request.path, json.loads(body) if body else None))
            if request.method != "POST" or not request.path.endswith("/reply"):
                return await handler(request)
            if self.mode == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            if self.mode == "postpone":  # an outcome this Collie does not know
                return web.json_response({"outcome": "postponed"})
            response = await handler(request)
            if self.mode == "hold_after":
                await self.release.wait()
            return response

        return wire

    def replies(self, ask_id: str | None = None) -> list[str]:
        """The request ids of every reply the agent was sent (for ``ask_id``), in order."""
        return [
            body["request_id"]
            for method, path, body in self.log
            if method == "POST"
            and path.endswith("/reply")
            and (ask_id is None or path == f"/asks/{ask_id}/reply")
        ]


def acted(rig: Rig, name: str, ask_id: str) -> list[tuple[str, str | None]]:
    """What the agent did with ``ask_id``, from its state file: each ``ask.resolved`` as
    ``(how, request_id)``. An ask acted on twice would show twice."""
    path = rig.tmp / f"{name}.agent.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT data FROM events WHERE type = 'ask.resolved'").fetchall()
    found = [json.loads(bytes(r[0])) for r in rows]
    return [(e["how"], e.get("request_id")) for e in found if e["ask_id"] == ask_id]


@dataclass
class Desk:
    """The agent ``desk`` (conversation ``c1``), its wire, and a gateway following it."""

    rig: Rig
    client: Client
    gw: Gateway
    agent: Agent
    conv: ConversationHandle
    wire: Wire

    async def ask(self, **ask: Any) -> AskHandle:
        """Raise an ask and wait until the gateway mirrors it."""
        handle = await self.conv.ask(**ask)
        await eventually(lambda: self.gw.agents.find_ask("desk", handle.id) is not None)
        return handle

    async def answer(
        self, ask: str, request_id: str, body: dict[str, Any], version: int = 1
    ) -> dict[str, Any]:
        """``POST …/asks/{ask}/answer`` as the phone sends it."""
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/desk/asks/{ask}/answer", payload
        )
        return result

    async def status(self, request_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await get_json(self.client, f"/api/v1/answers/{request_id}")
        return result

    async def chat(self, **query: str) -> dict[str, Any]:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        path = "/api/v1/agents/desk/conversations/c1" + (f"?{q}" if q else "")
        result: dict[str, Any] = await get_json(self.client, path)
        return result

    async def card_ids(self) -> list[str]:
        return [c["ask_id"] for c in (await self.chat(all_cards="true"))["cards"]["cards"]]

    def acted(self, ask_id: str) -> list[tuple[str, str | None]]:
        return acted(self.rig, "desk", ask_id)


async def desk(rig: Rig, *, timing: LinkTiming = FAST, **agent_args: Any) -> Desk:
    """An SDK agent ``desk`` with conversation ``c1`` behind a ``Wire``, and a gateway."""
    wire = Wire()
    agent = rig.agent(
        "desk",
        runtime="desk",
        features=["history", "stop"],
        middlewares=[wire.middleware()],
        **agent_args,
    )
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Tidy up")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return Desk(rig, client, gw, agent, conv, wire)


@dataclass
class Restarted:
    agent: Agent
    wire: Wire


async def restarted(rig: Rig) -> Restarted:
    """A new process of ``desk`` on the same state file (started, not yet serving)."""
    wire = Wire()
    agent = rig.agent(
        "desk", runtime="desk", features=["history", "stop"], middlewares=[wire.middleware()]
    )
    await agent.start()
    return Restarted(agent, wire)


# --- T1 row 1: the agent took the answer --------------------------------------------------------


async def test_T1_accepted_the_card_closes_and_the_agent_acts_once(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    first = await d.answer("p", "r1", {"option": "allow"})
    assert first["outcome"] == "accepted"
    assert first["settled"] is True
    assert first["card"]["closed"] is True
    assert first["card"]["line"] is None
    resolution = await ask.wait()
    assert (resolution.how, resolution.request_id) == ("answered", "r1")
    assert resolution.answer is not None
    assert resolution.answer.option == "allow"
    # The card closes: the ask leaves the chat.
    await eventually(lambda: d.gw.agents.find_ask("desk", "p") is None)
    assert await d.card_ids() == []
    assert d.acted("p") == [("answered", "r1")]
    assert (await d.status("r1"))["outcome"] == "accepted"


async def test_T1_S5_the_same_request_id_twice_gets_the_first_outcome_sent_once(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    first = await d.answer("p", "r1", {"text": "notes"})
    again = await d.answer("p", "r1", {"text": "notes"})
    assert first["outcome"] == again["outcome"] == "accepted"
    assert again["card"]["closed"] is True
    assert d.wire.replies("p") == ["r1"]  # the second came from the ledger
    assert d.acted("p") == [("answered", "r1")]


async def test_T1_S5_the_same_request_id_at_once_is_sent_once(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    results = await asyncio.gather(*(d.answer("p", "r1", {"text": "notes"}) for _ in range(10)))
    assert {r["outcome"] for r in results} == {"accepted"}
    assert d.wire.replies("p") == ["r1"]
    assert d.acted("p") == [("answered", "r1")]


# --- T1 rows 2 and 3: decided first, expired first (R2) -----------------------------------------


async def test_T1_R2_the_agent_decided_first(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    await ask.decide()
    result = await d.answer("p", "r1", {"text": "x"})
    assert result["outcome"] == "decided"
    assert result["card"]["line"] == "Decided in the durable agent."
    assert result["card"]["frozen"] is True
    assert result["card"]["retry_label"] is None
    assert d.acted("p") == [("decided", None)]  # the late answer changed nothing


async def test_T1_R2_the_ask_expired_first(rig: Rig) -> None:
    d = await desk(rig)
    soon = rig.clock() + timedelta(seconds=5)
    await d.ask(id="p", kind="text", title="Name?", deadline=soon)
    rig.clock.advance(seconds=6)
    assert await d.agent.expire_due() == 1
    result = await d.answer("p", "r1", {"text": "x"})
    assert result["outcome"] == "expired"
    assert result["card"]["line"] == "Timed out before an answer."
    assert result["card"]["frozen"] is True
    assert d.acted("p") == [("expired", None)]


async def test_T1_A3_a_late_tap_is_answered_by_the_agent_itself(rig: Rig) -> None:
    """Past the deadline the buttons stay; the agent, not Collie, answers the late tap."""
    d = await desk(rig, expiry_interval=3600.0)  # the agent's own sweep never runs here
    soon = rig.clock() + timedelta(seconds=5)
    await d.ask(id="p", kind="text", title="Name?", deadline=soon)
    rig.clock.advance(seconds=6)
    card = (await d.chat())["cards"]["cards"][0]
    assert card["deadline_label"] == "Expired"
    assert card["answerable"] is True
    result = await d.answer("p", "r1", {"text": "x"})
    assert result["outcome"] == "expired"
    assert result["card"]["line"] == "Timed out before an answer."
    assert d.wire.replies("p") == ["r1"]
    assert d.acted("p") == [("expired", None)]


# --- T1 row 4: another answer came first (S5's claim) -------------------------------------------


async def test_T1_S5_another_answer_came_first_two_request_ids(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    assert (await d.answer("p", "r1", {"text": "a"}))["outcome"] == "accepted"
    second = await d.answer("p", "r2", {"text": "b"})
    assert second["outcome"] == "answered"
    assert second["card"]["line"] == ANSWERED
    assert second["card"]["frozen"] is True
    assert d.wire.replies("p") == ["r1"]  # the claim stopped r2 before the agent
    assert d.acted("p") == [("answered", "r1")]
    assert (await d.status("r2"))["card"]["line"] == ANSWERED


async def test_T1_another_answer_came_first_elsewhere(rig: Rig) -> None:
    """The ask was answered on the agent's side by another client: the agent says so."""
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    address = AgentAddress("http://agent", rig.sockets["desk"])
    reply = {"request_id": "other", "version": 1, "answer": {"text": "from elsewhere"}}
    async with address.session() as http, http.post("/asks/p/reply", json=reply) as resp:
        assert (await resp.json())["outcome"] == "accepted"
    result = await d.answer("p", "r1", {"text": "mine"})
    assert result["outcome"] == "answered"
    assert result["card"]["line"] == ANSWERED
    assert d.acted("p") == [("answered", "other")]


async def test_T1_fifty_concurrent_answers_one_accepted(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    results = await asyncio.gather(*(d.answer("p", f"r{i}", {"text": f"t{i}"}) for i in range(50)))
    outcomes = [r["outcome"] for r in results]
    assert outcomes.count("accepted") == 1
    assert outcomes.count("answered") == 49
    assert {r["card"]["line"] for r in results if r["outcome"] == "answered"} == {ANSWERED}
    winner = next(r["request_id"] for r in results if r["outcome"] == "accepted")
    assert (await ask.wait()).request_id == winner
    assert d.wire.replies("p") == [winner]
    assert d.acted("p") == [("answered", winner)]
    losers = [r["request_id"] for r in results if r["outcome"] == "answered"]
    assert {(await d.status(rid))["outcome"] for rid in losers} == {"answered"}


# --- T1 rows 5 and 6: not open, changed ---------------------------------------------------------


async def test_T1_not_open_a_restarted_agent_has_not_raised_it_again_yet(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    await rig.stop("desk")
    await eventually(lambda: d.gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    again = await restarted(rig)  # the same state file; the ask is not raised again yet
    await rig.serve("desk", again.agent)
    await eventually(lambda: d.gw.mirrors["desk"].state is LinkState.READY)
    result = await d.answer("p", "r1", {"text": "a"})
    assert result["outcome"] == "not_open"
    assert result["card"]["line"] == "Not accepted. This ask may come back shortly."
    assert again.wire.replies("p") == ["r1"]
    conv = await again.agent.conversation("c1")
    assert conv is not None
    await conv.ask(id="p", kind="text", title="Name?")  # it comes back
    await eventually(lambda: d.gw.agents.find_ask("desk", "p") is not None)
    card = (await d.chat())["cards"]["cards"][0]
    assert card["answerable"] is True  # the card is back, to be answered
    assert (await d.answer("p", "r2", {"text": "a"}))["outcome"] == "accepted"
    assert acted(rig, "desk", "p") == [("answered", "r2")]


async def test_T1_not_open_an_ask_the_agent_never_raised(rig: Rig) -> None:
    d = await desk(rig)
    result = await d.answer("gone", "r1", {"text": "a"})
    assert result["outcome"] == "not_open"
    assert result["card"]["line"] == "Not accepted. This ask may come back shortly."
    assert d.wire.replies("gone") == ["r1"]


async def test_T1_the_ask_changed_meanwhile(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    await ask.change(text="Name of the new note?")
    await eventually(
        lambda: (a := d.gw.agents.find_ask("desk", "p")) is not None and a.version == 2
    )
    result = await d.answer("p", "r1", {"text": "a"}, version=1)
    assert result["outcome"] == "changed"
    assert result["card"]["line"] == "This ask changed. Read it again, then tap an answer."
    assert result["card"]["frozen"] is False  # read the new text and tap again
    card = (await d.chat())["cards"]["cards"][0]
    assert (card["version"], card["text"]) == (2, "Name of the new note?")
    again = await d.answer("p", "r2", {"text": "a"}, version=2)
    assert again["outcome"] == "accepted"
    assert d.acted("p") == [("answered", "r2")]


# --- T1 rows 7 and 8: uncertain, Retry, and a retry that finds the ask closed or changed ---------


async def test_T1_uncertain_the_socket_disappears_mid_request_then_retry_acts_once(
    rig: Rig,
) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "drop"
    first = await d.answer("p", "r1", {"text": "a"})
    assert first["outcome"] == "uncertain"
    assert first["settled"] is False
    assert first["card"]["line"] == UNCERTAIN
    assert first["card"]["retry_label"] == "Retry"
    assert first["card"]["request_id"] == "r1"
    assert ask.open
    assert d.acted("p") == []  # it never arrived
    card = (await d.chat())["cards"]["cards"][0]  # the chat draws the same card
    assert card["outcome"]["line"] == UNCERTAIN
    assert card["outcome"]["retry_label"] == "Retry"
    d.wire.mode = "pass"  # the agent is back
    retry = await d.answer("p", "r1", {"text": "a"})
    assert retry["outcome"] == "accepted"
    assert retry["card"]["closed"] is True
    assert d.wire.replies("p") == ["r1", "r1"]  # the same request id, sent once more
    assert d.acted("p") == [("answered", "r1")]


async def test_T1_uncertain_no_answer_in_time_then_retry_acts_once(rig: Rig) -> None:
    """The agent took the answer but its response never came within the request timeout:
    Retry sends the same request id, and the agent's memory of it returns the first outcome."""
    d = await desk(rig, timing=SHORT)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "hold_after"
    first = await d.answer("p", "r1", {"text": "a"})
    assert first["outcome"] == "uncertain"
    assert first["card"]["line"] == UNCERTAIN
    assert first["card"]["retry_label"] == "Retry"
    assert (await ask.wait()).request_id == "r1"  # it did arrive, and the agent acted
    d.wire.mode = "pass"
    d.wire.release.set()
    retry = await d.answer("p", "r1", {"text": "a"})
    assert retry["outcome"] == "accepted"
    assert retry["card"]["closed"] is True
    assert d.acted("p") == [("answered", "r1")]
    assert set(d.wire.replies("p")) == {"r1"}


async def test_T1_uncertain_agent_down_resent_when_the_link_is_ready(rig: Rig) -> None:
    """The agent is gone when the tap comes; when its link is ready again, the gateway sends
    the unsettled answer itself, with the same request id, and the phone's Retry finds it
    settled."""
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?")
    await rig.stop("desk")
    await eventually(lambda: d.gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    first = await d.answer("p", "r1", {"text": "a"})
    assert first["outcome"] == "uncertain"
    assert first["card"]["retry_label"] == "Retry"
    again = await restarted(rig)
    conv = await again.agent.conversation("c1")
    assert conv is not None
    await conv.ask(id="p", kind="text", title="Name?")  # raised again, before it serves
    await rig.serve("desk", again.agent)  # the same socket: the link becomes ready

    async def settled() -> bool:
        return bool((await d.status("r1"))["settled"])

    await eventually(settled)
    assert (await d.status("r1"))["outcome"] == "accepted"
    assert again.wire.replies("p") == ["r1"]
    retry = await d.answer("p", "r1", {"text": "a"})
    assert retry["outcome"] == "accepted"
    assert again.wire.replies("p") == ["r1"]  # settled: the Retry is answered from the ledger
    assert acted(rig, "desk", "p") == [("answered", "r1")]


async def test_T1_a_retry_that_finds_the_ask_closed(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "drop"
    assert (await d.answer("p", "r1", {"text": "a"}))["outcome"] == "uncertain"
    d.wire.mode = "pass"
    await ask.decide()  # meanwhile the agent decided
    retry = await d.answer("p", "r1", {"text": "a"})
    assert retry["outcome"] == "decided"
    assert retry["card"]["line"] == MAYBE_APPLIED
    assert retry["card"]["frozen"] is True
    assert d.acted("p") == [("decided", None)]


async def test_T1_a_retry_that_finds_the_ask_changed(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "drop"
    assert (await d.answer("p", "r1", {"text": "a"}))["outcome"] == "uncertain"
    d.wire.mode = "pass"
    await ask.change(text="Which name, now?")
    retry = await d.answer("p", "r1", {"text": "a"}, version=1)
    assert retry["outcome"] == "changed"
    assert retry["card"]["line"] == MAYBE_APPLIED
    assert d.wire.replies("p") == ["r1", "r1"]
    assert ask.open
    assert d.acted("p") == []


async def test_T1_after_an_uncertain_tap_the_changed_ask_can_be_answered(rig: Rig) -> None:
    """An uncertain tap on version 1 holds the ask's claim; once the ask changed, that tap can
    never be applied (the agent answers an old version "changed"), so a tap on the new version
    must reach the agent, not be told "Already answered"."""
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "drop"
    assert (await d.answer("p", "r1", {"text": "a"}))["outcome"] == "uncertain"
    d.wire.mode = "pass"
    await ask.change(text="Which name, now?")
    await eventually(
        lambda: (a := d.gw.agents.find_ask("desk", "p")) is not None and a.version == 2
    )

    async def r1_settled() -> bool:
        return bool((await d.status("r1"))["settled"])

    await eventually(r1_settled)  # the gateway sent r1 again on the change: "changed"
    stale = await d.status("r1")
    assert (stale["outcome"], stale["card"]["line"]) == ("changed", MAYBE_APPLIED)
    # The chat draws the new version's card to be answered, not frozen by the old tap.
    card = (await d.chat())["cards"]["cards"][0]
    assert card["version"] == 2
    assert card["answerable"] is True
    assert card["outcome"]["line"] == "This ask changed. Read it again, then tap an answer."
    second = await d.answer("p", "r2", {"text": "b"}, version=2)
    assert second["outcome"] == "accepted"
    assert d.acted("p") == [("answered", "r2")]


# --- T1 row 9: Collie (or the agent) refused ----------------------------------------------------


async def test_T1_an_answer_over_the_limit_is_refused_by_collie_not_sent(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?", max_length=3)
    resp = await d.client.post(
        "/api/v1/agents/desk/asks/p/answer",
        json={"request_id": "r1", "version": 1, "answer": {"text": "too long"}},
    )
    assert resp.status == 400
    assert (await resp.json())["message"] == "The text is over 3 characters."  # wire §8
    assert d.wire.replies("p") == []  # nothing sent
    assert (await d.client.get("/api/v1/answers/r1")).status == 404  # nothing recorded
    assert ask.open
    # Nothing was claimed: a good answer from another tap goes through.
    assert (await d.answer("p", "r2", {"text": "ok"}))["outcome"] == "accepted"
    assert d.acted("p") == [("answered", "r2")]


async def test_T1_the_same_request_id_with_another_answer_is_refused_and_not_sent(
    rig: Rig,
) -> None:
    d = await desk(rig)
    await d.ask(id="p", kind="text", title="Name?", max_length=3)
    await d.answer("p", "r2", {"text": "ok"})
    refused = await d.answer("p", "r2", {"text": "no"})
    assert refused["outcome"] == "refused"
    assert refused["card"]["line"] == "This request id was already used for another answer."
    assert d.wire.replies("p") == ["r2"]  # nothing sent the second time
    assert d.acted("p") == [("answered", "r2")]
    assert (await d.status("r2"))["outcome"] == "accepted"  # the ledger keeps the first
    # Also where Collie itself would refuse the new answer: the reuse is what it says.
    await d.ask(id="q", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    reused = await d.answer("q", "r2", {"option": "always"})
    assert reused["outcome"] == "refused"
    assert reused["card"]["line"] == "This request id was already used for another answer."
    assert d.wire.replies() == ["r2"]


async def test_T1_refused_without_a_reason(rig: Rig) -> None:
    """An outcome this Collie does not know, with no reason: "The answer was refused."."""
    d = await desk(rig)
    ask = await d.ask(id="p", kind="text", title="Name?")
    d.wire.mode = "postpone"
    result = await d.answer("p", "r1", {"text": "a"})
    assert result["outcome"] == "refused"
    assert result["card"]["line"] == "The answer was refused."
    assert ask.open


async def test_T1_A5_always_without_confirmed_is_refused_and_not_sent(rig: Rig) -> None:
    d = await desk(rig)
    ask = await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    one = await d.answer("p", "r1", {"option": "always"})
    assert one["outcome"] == "refused"
    assert one["card"]["line"] == '"Always allow" needs a second tap.'
    many = await d.answer("p", "r2", {"options": ["always"]})
    assert many["outcome"] == "refused"
    assert many["card"]["line"] == '"Always allow" needs a second tap.'
    assert d.wire.replies() == []  # nothing reached the agent
    assert ask.open
    confirmed = await d.answer("p", "r3", {"option": "always", "confirmed": True})
    assert confirmed["outcome"] == "accepted"
    resolution = await ask.wait()
    assert resolution.answer is not None
    assert (resolution.answer.option, resolution.answer.confirmed) == ("always", True)
    assert d.acted("p") == [("answered", "r3")]


async def test_T1_A5_A6_always_refused_where_the_card_does_not_offer_it(rig: Rig) -> None:
    d = await desk(rig)
    await d.ask(id="n", kind="permission", title="Run it?", options=PERMISSION)  # no tool
    await d.ask(
        id="s", kind="permission", title="Run\u202e ls?", tool=TOOL, options=PERMISSION
    )  # cleaned: "Text shortened"
    hidden = '"Always allow" is not offered for this ask: the whole text was not shown.'
    for ask_id in ("n", "s"):
        result = await d.answer(ask_id, f"r-{ask_id}", {"option": "always", "confirmed": True})
        assert result["outcome"] == "refused"
        assert result["card"]["line"] == hidden
    assert d.wire.replies() == []


async def test_T1_A7_an_ask_the_phone_cannot_answer_is_refused_and_not_sent(rig: Rig) -> None:
    """wire §8: for an unknown kind the gateway sends no reply; nor for an ask over a card's
    limits, which the phone never showed whole."""
    d = await desk(rig)
    await d.ask(id="vote", kind="vote", title="Vote?", text="a or b")
    nine = [Option(id=f"o{i}", label=f"Option {i}") for i in range(9)]
    await d.ask(id="nine", kind="choice", title="Which?", options=nine)
    cases = {"vote": {"option": "a"}, "nine": {"option": "o8"}}
    for ask_id, body in cases.items():
        result = await d.answer(ask_id, f"r-{ask_id}", body)
        assert result["outcome"] == "refused"
        assert result["card"]["line"] == "This ask cannot be answered from the phone."
    assert d.wire.replies() == []
    assert d.acted("vote") == []
    assert d.acted("nine") == []


async def test_T1_an_answer_to_an_older_version_is_changed_not_refused(rig: Rig) -> None:
    """The person tapped "Always allow" on version 1; version 2's text is cleaned, so its card
    offers no "Always allow". The tap answered what was shown: the agent says "changed"."""
    d = await desk(rig)
    ask = await d.ask(id="p", kind="permission", title="Run ls?", tool=TOOL, options=PERMISSION)
    await ask.change(title="Run\u202e ls?")
    await eventually(
        lambda: (a := d.gw.agents.find_ask("desk", "p")) is not None and a.version == 2
    )
    result = await d.answer("p", "r1", {"option": "always", "confirmed": True}, version=1)
    assert result["outcome"] == "changed"
    assert result["card"]["line"] == "This ask changed. Read it again, then tap an answer."
    assert ask.open


async def test_V1_a_wire2_agent_is_never_sent_an_answer(rig: Rig) -> None:
    wire = Wire()
    agent = rig.agent("desk", wire_version=2, middlewares=[wire.middleware()])
    sock = await rig.serve("desk")
    conv = await agent.open_conversation("c1")
    ask = await conv.ask(id="p", kind="text", title="Name?")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.VERSION_MISMATCH)
    payload = {"request_id": "r1", "version": 1, "answer": {"text": "a"}}
    result = await post_json(client, "/api/v1/agents/desk/asks/p/answer", payload)
    sentence = (
        "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    )
    assert result["outcome"] == "refused"
    assert result["card"]["line"] == sentence
    again = await post_json(client, "/api/v1/agents/desk/asks/p/answer", payload)
    assert again["card"]["line"] == sentence
    home = await get_json(client, "/api/v1/agents/desk")
    assert home["warning"] == sentence  # R5's box
    # Its raw request log: the gateway read its hello, and sent it nothing.
    assert wire.log
    assert {(method, path) for method, path, _ in wire.log} == {("GET", "/hello")}
    assert ask.open


# --- receipts (R3, R4) ----------------------------------------------------------------------------


def receipts(view: dict[str, Any]) -> list[str]:
    return [line["text"] for line in view["lines"] if line["kind"] == "receipt"]


async def test_R3_expired_and_decided_without_a_tap_leave_a_line(rig: Rig) -> None:
    d = await desk(rig)
    await d.chat()  # the chat is open on the phone
    soon = rig.clock() + timedelta(seconds=1)
    await d.ask(id="e", kind="text", title="Name the note", deadline=soon)
    decided = await d.ask(id="d", kind="text", title="Pick a colour")
    rig.clock.advance(seconds=2)
    await d.agent.expire_due()
    await decided.decide()

    async def two() -> bool:
        return len(receipts(await d.chat())) == 2

    await eventually(two)
    assert receipts(await d.chat()) == [
        "Timed out before an answer: Name the note",
        "Decided in the durable agent: Pick a colour",
    ]
    assert await d.card_ids() == []


async def test_R4_answered_from_the_phone_or_stopped_leave_no_line(rig: Rig) -> None:
    d = await desk(rig)

    @d.agent.on_message
    async def turn(handle: ConversationHandle, _: Any) -> None:
        ask = await handle.ask(id="s", kind="text", title="Which file?")
        await ask.wait()

    await d.ask(id="a", kind="text", title="Name?")
    assert (await d.answer("a", "r1", {"text": "x"}))["outcome"] == "accepted"
    sent = {"request_id": "m1", "text": "tidy the notes"}
    await post_json(d.client, "/api/v1/agents/desk/conversations/c1/messages", sent)
    await eventually(lambda: d.gw.agents.find_ask("desk", "s") is not None)
    stop = {"request_id": "stop-1", "turn": (await d.chat())["turn"]}
    stopped = await post_json(d.client, "/api/v1/agents/desk/conversations/c1/stop", stop)
    assert stopped["outcome"] == "accepted"
    assert d.acted("s") == [("stopped", None)]

    async def noted() -> bool:
        lines = (await d.chat())["lines"]
        return any(line["kind"] == "stopped" for line in lines)

    await eventually(noted)  # the stop's own note is in: the receipts would be too
    # A decided ask in the same chat shows its line; the two above show none.
    decided = await d.ask(id="z", kind="text", title="Last one")
    await decided.decide()

    async def one() -> bool:
        return len(receipts(await d.chat())) == 1

    await eventually(one)
    view = await d.chat()
    assert receipts(view) == ["Decided in the durable agent: Last one"]
    assert [line["text"] for line in view["lines"] if line["kind"] == "stopped"] == ["stopped"]


async def test_R3_receipts_survive_a_gateway_restart(rig: Rig) -> None:
    d = await desk(rig)
    decided = await d.ask(id="d", kind="text", title="Pick a colour")
    await decided.decide()

    async def one() -> bool:
        return len(receipts(await d.chat())) == 1

    await eventually(one)
    await d.client.close()  # the gateway stops; a new one opens the same SQLite file
    client, gw = await rig.gateway([Source(name="desk", socket=rig.sockets["desk"])])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    view = await get_json(client, "/api/v1/agents/desk/conversations/c1")
    assert receipts(view) == ["Decided in the durable agent: Pick a colour"]
