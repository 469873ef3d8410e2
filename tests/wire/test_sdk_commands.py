"""The SDK's commands over real sockets: idempotency, reply outcomes, turns, stop, steer,
buttons, close and reopen, starters."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from fixtures.agents.harness import Served, serve_agent
from tests.wire.conftest import AgentFactory, Client, FakeClock, decoded, eventually, message
from wire.agent import (
    Agent,
    Answer,
    Argument,
    AskHandle,
    Button,
    ConversationHandle,
    FormField,
    Option,
    SendMessage,
    Starter,
    ToolRef,
)
from wire.errors import LocalWireError
from wire.messages import AskRaised, AskResolved, Reply, ReplyResult, TurnStopped

PERMISSION = [
    Option(id="allow", label="Yes", role="allow"),
    Option(id="always", label="Always", role="always"),
    Option(id="deny", label="No", role="deny"),
]


def reply(request_id: str, version: int = 1, **answer: Any) -> dict[str, Any]:
    """A ``Reply`` body."""
    return {"request_id": request_id, "version": version, "answer": answer}


async def permission_ask(conv: ConversationHandle, ask_id: str = "a1", **kw: Any) -> AskHandle:
    kw.setdefault("title", "Run rm?")
    return await conv.ask(
        id=ask_id,
        kind="permission",
        tool=ToolRef(call_id="call-1", name="rm"),
        options=PERMISSION,
        **kw,
    )


class Counter:
    """An ``on_message`` handler that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, conv: ConversationHandle, msg: SendMessage) -> None:
        self.calls.append(msg.text)


# --- idempotency ---------------------------------------------------------------------------


async def test_same_request_twice_runs_once(served: Served, client: Client) -> None:
    counter = Counter()
    served.agent.on_message(counter)
    conv = await served.agent.open_conversation(id="c1")
    first = await client.post("/conversations/c1/messages", message("r1", "once"))
    again = await client.post("/conversations/c1/messages", message("r1", "once"))
    assert first.status == again.status == 200
    assert first.body == again.body == {"outcome": "accepted", "conversation_id": "c1"}
    await eventually(lambda: conv.state == "idle" and bool(counter.calls))
    assert counter.calls == ["once"]
    snap = (await client.get("/conversations/c1")).body
    assert snap["turn"] == 1
    assert [(i["kind"], i["request_id"]) for i in snap["items"]] == [("user", "r1")]


async def test_same_request_id_other_body_is_409(served: Served, client: Client) -> None:
    counter = Counter()
    served.agent.on_message(counter)
    await served.agent.open_conversation(id="c1")
    assert await client.outcome("/conversations/c1/messages", message("r1", "one")) == "accepted"
    for path, body in [
        ("/conversations/c1/messages", message("r1", "two")),
        ("/conversations/c1/close", {"request_id": "r1"}),
        ("/asks/a1/reply", reply("r1", option="x")),
    ]:
        answer = await client.post(path, body)
        assert answer.status == 409
        assert answer.body["error"] == "request_id_reused"
    await eventually(lambda: bool(counter.calls))
    assert counter.calls == ["one"]
    assert not served.agent.conversations[0].closed


async def test_same_request_after_a_restart_gets_the_first_result(
    make_agent: AgentFactory,
) -> None:
    first_run = Counter()
    agent = make_agent()
    agent.on_message(first_run)
    async with serve_agent(agent) as (_, address):
        conv = await agent.open_conversation(id="c1")
        ask = await permission_ask(conv)
        c = Client(address)
        try:
            sent = await c.post("/conversations/c1/messages", message("r1"))
            answered = await c.post("/asks/a1/reply", reply("r2", option="deny"))
            assert (await ask.wait()).how == "answered"
        finally:
            await c.close()
    second_run = Counter()
    agent = make_agent()
    agent.on_message(second_run)
    async with serve_agent(agent) as (_, address):
        c = Client(address)
        try:
            assert (await c.post("/conversations/c1/messages", message("r1"))).body == sent.body
            assert (await c.post("/asks/a1/reply", reply("r2", option="deny"))).body == (
                answered.body
            )
            reused = await c.post("/conversations/c1/messages", message("r1", "other"))
            assert reused.status == 409
            await asyncio.sleep(0.05)
            snap = (await c.get("/conversations/c1")).body
        finally:
            await c.close()
    assert first_run.calls == ["hi"]
    assert second_run.calls == []
    assert snap["turn"] == 1
    assert len(snap["items"]) == 1


async def test_concurrent_commands_each_run_once(served: Served, client: Client) -> None:
    counter = Counter()
    served.agent.on_message(counter)
    await served.agent.open_conversation(id="c1")
    bodies = [message(f"r{n % 10}", f"t{n % 10}") for n in range(20)]
    answers = await asyncio.gather(*(client.post("/conversations/c1/messages", b) for b in bodies))
    assert {a.status for a in answers} == {200}
    await eventually(lambda: len(counter.calls) >= 10 and not served.agent.conversations[0].running)
    assert sorted(counter.calls) == sorted(f"t{n}" for n in range(10))
    assert served.agent.conversations[0].turn == 10


# --- reply outcomes (wire/SPEC.md, one test per row) -------------------------------------------


async def test_reply_accepted(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    async with client.events(str(served.agent._store.last_event_id)) as stream:
        assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"
        resolved = [e for e in decoded(await stream.take(2)) if isinstance(e, AskResolved)]
    resolution = await asyncio.wait_for(ask.wait(), 1)
    assert resolution.how == "answered"
    assert resolution.request_id == "r1"
    assert resolution.answer == Answer(option="allow")
    assert [(r.ask_id, r.how, r.request_id) for r in resolved] == [("a1", "answered", "r1")]
    assert conv.state == "idle"
    assert not ask.open


async def test_reply_decided(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    decided = await ask.decide(Answer(option="deny"))
    assert decided.how == "decided"
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "decided"
    assert await ask.decide() == decided


async def test_reply_expired(served: Served, client: Client, clock: FakeClock) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv, deadline=clock.at + timedelta(minutes=5))
    clock.advance(minutes=4, seconds=59)
    assert await client.outcome("/asks/a1/reply", reply("r0", version=9, option="x")) == "changed"
    clock.advance(seconds=1)
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "expired"
    assert (await ask.wait()).how == "expired"
    assert await client.outcome("/asks/a1/reply", reply("r2", option="allow")) == "expired"


async def test_reply_answered(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    await permission_ask(conv)
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"
    assert await client.outcome("/asks/a1/reply", reply("r2", option="deny")) == "answered"
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"


async def test_reply_not_open(served: Served, client: Client) -> None:
    assert await client.outcome("/asks/nope/reply", reply("r1", option="allow")) == "not_open"


async def test_reply_changed(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    await ask.change(text="Run rm -rf?")
    assert ask.version == 2
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "changed"
    assert ask.open
    assert (
        await client.outcome("/asks/a1/reply", reply("r2", version=2, option="allow")) == "accepted"
    )


async def test_S1_arguments_reasons_irreversible_and_a_changed_argument(
    served: Served, client: Client
) -> None:
    conv = await served.agent.open_conversation(id="c1")
    amount = Argument(name="amount", value=40, origin="typed")
    ask = await permission_ask(conv, arguments=[amount], reasons=["write"], irreversible=True)
    snapshot = (await client.get("/conversations/c1")).body
    assert snapshot["asks"][0]["arguments"] == [{"name": "amount", "value": 40, "origin": "typed"}]
    assert snapshot["asks"][0]["reasons"] == ["write"]
    assert snapshot["asks"][0]["irreversible"] is True
    # S2: a changed argument asks again: the version grows and the old answer is "changed".
    await ask.change(arguments=[Argument(name="amount", value=4000, origin="model")])
    assert ask.version == 2
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "changed"
    assert ask.ask.arguments[0].value == 4000
    assert ask.ask.reasons == ["write"]


async def test_reply_to_a_stopped_ask_is_not_open(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    await conv.close()
    assert (await ask.wait()).how == "stopped"
    answer = await client.post("/asks/a1/reply", reply("r1", option="allow"))
    assert answer.body == {"outcome": "not_open", "reason": "stopped"}


async def test_deadline_expires_without_a_reply(served: Served, clock: FakeClock) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv, deadline=clock.at + timedelta(seconds=30))
    assert await served.agent.expire_due() == 0
    clock.advance(seconds=30)
    assert await served.agent.expire_due() == 1
    assert (await ask.wait()).how == "expired"
    assert conv.state == "idle"


async def test_the_expiry_loop_uses_the_agent_clock(
    make_agent: AgentFactory, clock: FakeClock
) -> None:
    async with serve_agent(make_agent(expiry_interval=0.01)) as (agent, _):
        conv = await agent.open_conversation(id="c1")
        ask = await permission_ask(conv, deadline=clock.at + timedelta(hours=1))
        await asyncio.sleep(0.05)
        assert ask.open
        clock.advance(hours=1)
        assert (await asyncio.wait_for(ask.wait(), 1)).how == "expired"


# --- answers that do not fit: 400, nothing recorded ------------------------------------------


async def ask_of_every_kind(conv: ConversationHandle) -> None:
    await permission_ask(conv, "perm")
    await conv.ask(id="one", kind="choice", options=[Option(id="a", label="A")])
    await conv.ask(
        id="many",
        kind="choice",
        multiple=True,
        options=[Option(id="a", label="A"), Option(id="b", label="B")],
    )
    await conv.ask(id="text", kind="text")
    await conv.ask(id="short", kind="text", max_length=5)
    await conv.ask(id="long", kind="text", max_length=5000)
    await conv.ask(
        id="form",
        kind="form",
        fields=[
            FormField(id="name", kind="text", label="Name", required=True, max_length=10),
            FormField(
                id="when", kind="select", label="When", options=[Option(id="now", label="Now")]
            ),
            FormField(id="loud", kind="switch", label="Loud", required=True),
        ],
    )


BAD_ANSWERS: list[tuple[str, dict[str, Any]]] = [
    ("perm", {"option": "maybe"}),
    ("perm", {}),
    ("perm", {"option": "always"}),
    ("perm", {"options": ["allow"]}),
    ("one", {"option": "z"}),
    ("one", {"options": ["a"]}),
    ("many", {"options": ["a", "z"]}),
    ("many", {"options": ["a", "a"]}),
    ("text", {}),
    ("text", {"text": "x" * 501}),
    ("short", {"text": "123456"}),
    ("long", {"text": "x" * 2001}),
    ("form", {}),
    ("form", {"fields": {"loud": True}}),
    ("form", {"fields": {"name": "", "loud": True}}),
    ("form", {"fields": {"name": "Al"}}),
    ("form", {"fields": {"name": "Al", "loud": "yes"}}),
    ("form", {"fields": {"name": True, "loud": True}}),
    ("form", {"fields": {"name": "x" * 11, "loud": True}}),
    ("form", {"fields": {"name": "Al", "loud": True, "when": "later"}}),
    ("form", {"fields": {"name": "Al", "loud": True, "extra": "x"}}),
]

GOOD_ANSWERS: list[tuple[str, dict[str, Any]]] = [
    ("perm", {"option": "allow"}),
    ("perm", {"option": "always", "confirmed": True}),
    ("one", {"option": "a"}),
    ("many", {"options": ["a", "b"]}),
    ("many", {"options": []}),
    ("text", {"text": "x" * 500}),
    ("short", {"text": "12345"}),
    ("long", {"text": "x" * 2000}),
    ("form", {"fields": {"name": "Al", "loud": False}}),
    ("form", {"fields": {"name": "Al", "loud": True, "when": "now"}}),
]


@pytest.mark.parametrize(("ask_id", "answer"), BAD_ANSWERS)
async def test_an_answer_that_does_not_fit_is_400(
    served: Served, client: Client, ask_id: str, answer: dict[str, Any]
) -> None:
    await ask_of_every_kind(await served.agent.open_conversation(id="c1"))
    bad = await client.post(f"/asks/{ask_id}/reply", reply("r1", **answer))
    assert bad.status == 400, answer
    assert bad.body["error"] == "bad_request"
    assert bad.body["message"]
    # nothing was recorded: the ask is open, and the request id is free
    assert ask_id in {a.id for a in served.agent.conversations[0].asks}
    good = dict(GOOD_ANSWERS)[ask_id]
    assert await client.outcome(f"/asks/{ask_id}/reply", reply("r1", **good)) == "accepted"


@pytest.mark.parametrize(("ask_id", "answer"), GOOD_ANSWERS)
async def test_an_answer_that_fits_is_accepted(
    served: Served, client: Client, ask_id: str, answer: dict[str, Any]
) -> None:
    await ask_of_every_kind(await served.agent.open_conversation(id="c1"))
    assert await client.outcome(f"/asks/{ask_id}/reply", reply("r1", **answer)) == "accepted"


# --- asks across a restart ----------------------------------------------------------------------


async def test_an_answered_ask_is_not_raised_again_after_a_restart(
    make_agent: AgentFactory,
) -> None:
    async with serve_agent(make_agent()) as (agent, address):
        conv = await agent.open_conversation(id="c1")
        await permission_ask(conv)
        c = Client(address)
        try:
            assert await c.outcome("/asks/a1/reply", reply("r1", option="deny")) == "accepted"
        finally:
            await c.close()
    async with serve_agent(make_agent()) as (agent, address):
        c = Client(address)
        try:
            mark = str(agent._store.last_event_id)
            conv = await agent.open_conversation(id="c1")
            ask = await permission_ask(conv)
            assert not ask.open
            resolution = await asyncio.wait_for(ask.wait(), 0.5)
            assert (resolution.how, resolution.request_id) == ("answered", "r1")
            assert resolution.answer == Answer(option="deny")
            async with c.events(mark) as stream:
                assert await stream.quiet(0.05) == []
            assert conv.asks == []
            assert await c.outcome("/asks/a1/reply", reply("r2", option="allow")) == "answered"
        finally:
            await c.close()


async def test_an_open_ask_is_raised_again_under_the_same_id(make_agent: AgentFactory) -> None:
    async with serve_agent(make_agent()) as (agent, _):
        conv = await agent.open_conversation(id="c1")
        await permission_ask(conv, "same")
        await permission_ask(conv, "other")
    async with serve_agent(make_agent()) as (agent, address):
        c = Client(address)
        try:
            assert (await c.get("/conversations/c1")).body.get("asks", []) == []
            assert await c.outcome("/asks/same/reply", reply("r1", option="deny")) == "not_open"
            async with c.events(str(agent._store.last_event_id)) as stream:
                conv = await agent.open_conversation(id="c1")
                same = await permission_ask(conv, "same")
                changed = await permission_ask(conv, "other", text="now with more words")
                raised = [e for e in await stream.take(4) if e.event == "ask.raised"]
            assert [e.ask.id for e in decoded(raised) if isinstance(e, AskRaised)] == [
                "same",
                "other",
            ]
            assert (same.version, changed.version) == (1, 2)
            assert await c.outcome("/asks/same/reply", reply("r2", option="deny")) == "accepted"
        finally:
            await c.close()


async def test_an_ask_id_belongs_to_one_conversation(served: Served) -> None:
    one = await served.agent.open_conversation(id="c1")
    two = await served.agent.open_conversation(id="c2")
    await permission_ask(one)
    with pytest.raises(LocalWireError):
        await permission_ask(two)


async def test_asking_again_in_the_same_process_returns_the_handle(served: Served) -> None:
    conv = await served.agent.open_conversation(id="c1")
    first = await permission_ask(conv)
    assert await permission_ask(conv) is first
    assert first.version == 1
    assert (await permission_ask(conv, title="Other")) is first
    assert first.version == 2


# --- turns, stop, steer ------------------------------------------------------------------------


class Blocking:
    """A turn that raises an ask and blocks until stopped."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False
        self.ask: AskHandle | None = None
        self.steers: list[str] = []

    async def __call__(self, conv: ConversationHandle, msg: SendMessage) -> None:
        self.ask = await permission_ask(conv, f"ask-{conv.turn}")
        self.started.set()
        try:
            while True:
                steer = await conv.steered.get()
                self.steers.append(steer.text)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_stop_the_current_turn(served: Served, client: Client) -> None:
    turn = Blocking()
    served.agent.on_message(turn)
    conv = await served.agent.open_conversation(id="c1")
    await client.outcome("/conversations/c1/messages", message("m1"))
    await asyncio.wait_for(turn.started.wait(), 1)
    assert conv.state == "waiting"
    stale = {"request_id": "s0", "turn": 0}
    assert await client.outcome("/conversations/c1/stop", stale) == "moved_on"
    assert turn.ask is not None
    assert turn.ask.open
    async with client.events(str(served.agent._store.last_event_id)) as stream:
        assert await client.outcome("/conversations/c1/stop", {"request_id": "s1", "turn": 1}) == (
            "accepted"
        )
        events = decoded(await stream.until("turn.stopped"))
    assert [(e.ask_id, e.how) for e in events if isinstance(e, AskResolved)] == [
        ("ask-1", "stopped")
    ]
    assert [(e.conversation_id, e.turn) for e in events if isinstance(e, TurnStopped)] == [
        ("c1", 1)
    ]
    assert (await turn.ask.wait()).how == "stopped"
    await eventually(lambda: turn.cancelled and conv.state == "idle")
    assert not conv.running
    again = await client.outcome("/conversations/c1/stop", {"request_id": "s1", "turn": 1})
    assert again == "accepted"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("stop", {"request_id": "x", "turn": 0}),
        ("buttons/b", {"request_id": "x", "turn": 0}),
        ("close", {"request_id": "x"}),
        ("reopen", {"request_id": "x"}),
        ("messages", message("x", steer=True, turn=0)),
    ],
)
async def test_a_command_of_an_undeclared_feature_is_refused(
    make_agent: AgentFactory, path: str, body: dict[str, Any]
) -> None:
    async with serve_agent(make_agent(features=["history"])) as (agent, address):
        await agent.open_conversation(id="c1", buttons=[Button(id="b", label="B")])
        c = Client(address)
        try:
            answer = await c.post(f"/conversations/c1/{path}", body)
            assert answer.body == {"outcome": "refused", "reason": "unsupported"}
        finally:
            await c.close()


async def test_stop_finishes_unfinished_items(served: Served, client: Client) -> None:
    started = asyncio.Event()

    @served.agent.on_message
    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        item = await conv.append(kind="reply", final=False)
        await item.delta("half")
        started.set()
        await asyncio.Event().wait()

    conv = await served.agent.open_conversation(id="c1")
    await client.outcome("/conversations/c1/messages", message("m1"))
    await asyncio.wait_for(started.wait(), 1)
    assert not conv.items[-1].final
    assert await client.outcome("/conversations/c1/stop", {"request_id": "s1", "turn": 1}) == (
        "accepted"
    )
    reply_item = conv.items[-1]
    assert (reply_item.text, reply_item.final) == ("half", True)
    assert reply_item.at is not None


async def test_the_turn_never_decreases(served: Served) -> None:
    conv = await served.agent.open_conversation(id="c1")
    await conv.update(turn=3)
    assert conv.turn == 3
    with pytest.raises(LocalWireError):
        await conv.update(turn=2)
    assert conv.turn == 3


async def test_steer_goes_into_the_running_turn(served: Served, client: Client) -> None:
    turn = Blocking()
    served.agent.on_message(turn)
    conv = await served.agent.open_conversation(id="c1")
    steer = message("st0", "too early", steer=True)
    assert await client.outcome("/conversations/c1/messages", steer) == "moved_on"
    await client.outcome("/conversations/c1/messages", message("m1"))
    await asyncio.wait_for(turn.started.wait(), 1)
    stale = message("st1", "stale", steer=True, turn=0)
    assert await client.outcome("/conversations/c1/messages", stale) == "moved_on"
    current = message("st2", "left, please", steer=True, turn=1)
    assert await client.outcome("/conversations/c1/messages", current) == "accepted"
    await eventually(lambda: bool(turn.steers))
    assert turn.steers == ["left, please"]
    assert conv.turn == 1
    assert [i.text for i in conv.items if i.kind == "user"] == ["hi", "left, please"]


async def test_messages_queue_as_new_turns(served: Served, client: Client) -> None:
    order: list[str] = []
    gate = asyncio.Event()

    @served.agent.on_message
    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        order.append(f"start {msg.text}")
        await gate.wait()
        order.append(f"end {msg.text}")

    conv = await served.agent.open_conversation(id="c1")
    await client.outcome("/conversations/c1/messages", message("m1", "one"))
    await client.outcome("/conversations/c1/messages", message("m2", "two"))
    await eventually(lambda: order == ["start one"])
    assert conv.turn == 2
    assert conv.state == "working"
    gate.set()
    await eventually(lambda: conv.state == "idle")
    assert order == ["start one", "end one", "start two", "end two"]
    assert conv.state == "idle"


async def test_a_failing_turn_leaves_a_notice(served: Served, client: Client) -> None:
    @served.agent.on_message
    async def turn(conv: ConversationHandle, msg: SendMessage) -> None:
        raise RuntimeError("boom")

    conv = await served.agent.open_conversation(id="c1")
    await client.outcome("/conversations/c1/messages", message("m1"))
    await eventually(lambda: conv.state == "idle")
    assert [i.kind for i in conv.items] == ["user", "notice"]
    assert conv.state == "idle"


async def test_without_echo_the_user_item_has_no_request_id(make_agent: AgentFactory) -> None:
    async with serve_agent(make_agent(echo_request_id=False)) as (agent, address):
        conv = await agent.open_conversation(id="c1")
        c = Client(address)
        try:
            await c.outcome("/conversations/c1/messages", message("m1", "hello"))
        finally:
            await c.close()
        [user] = conv.items
        assert (user.kind, user.text, user.request_id) == ("user", "hello", None)


# --- buttons ---------------------------------------------------------------------------------


async def test_buttons(served: Served, client: Client) -> None:
    taps: list[str] = []

    @served.agent.on_button
    async def tapped(conv: ConversationHandle, button_id: str) -> None:
        taps.append(button_id)

    await served.agent.open_conversation(
        id="c1",
        buttons=[
            Button(id="go", label="Go", icon="play"),
            Button(id="wait", label="Wait", busy=True),
            Button(id="off", label="Off", disabled=True),
        ],
    )

    async def tap(button: str, request_id: str, turn: int = 0) -> dict[str, Any]:
        body = {"request_id": request_id, "turn": turn}
        answer = await client.post(f"/conversations/c1/buttons/{button}", body)
        assert answer.status == 200
        result: dict[str, Any] = answer.body
        return result

    assert (await tap("go", "b1"))["outcome"] == "accepted"
    assert (await tap("go", "b1"))["outcome"] == "accepted"
    assert (await tap("go", "b2", turn=3))["outcome"] == "moved_on"
    assert await tap("nope", "b3") == {"outcome": "not_found", "reason": "button"}
    assert await tap("wait", "b4") == {"outcome": "refused", "reason": "busy"}
    assert await tap("off", "b5") == {"outcome": "refused", "reason": "disabled"}
    await eventually(lambda: bool(taps))
    assert taps == ["go"]


# --- close, reopen, unknown conversations ------------------------------------------------------


async def test_close_and_reopen(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1", title="T")
    await conv.append(kind="notice", text="kept")
    async with client.events(str(served.agent._store.last_event_id)) as stream:
        assert await client.outcome("/conversations/c1/close", {"request_id": "x1"}) == "accepted"
        assert [e.event for e in await stream.take(1)] == ["conversation.closed"]
        assert conv.closed
        refused = await client.post("/conversations/c1/messages", message("m1"))
        assert refused.body == {"outcome": "refused", "reason": "closed"}
        with pytest.raises(LocalWireError):
            await conv.append(text="into a closed conversation")
        assert await client.outcome("/conversations/c1/close", {"request_id": "x2"}) == "accepted"
        assert await client.outcome("/conversations/c1/reopen", {"request_id": "x3"}) == "accepted"
        [opened] = await stream.take(1)
        assert opened.event == "conversation.opened"
    assert conv.state == "idle"
    assert [i.text for i in conv.items] == ["kept"]
    assert (await client.get("/conversations?state=open")).body["conversations"][0]["id"] == "c1"


async def test_unknown_conversation_is_not_found(client: Client) -> None:
    for path, body in [
        ("/conversations/nope/messages", message("u1")),
        ("/conversations/nope/stop", {"request_id": "u2", "turn": 0}),
        ("/conversations/nope/buttons/b", {"request_id": "u3", "turn": 0}),
        ("/conversations/nope/close", {"request_id": "u4"}),
        ("/conversations/nope/reopen", {"request_id": "u5"}),
    ]:
        answer = await client.post(path, body)
        assert answer.body == {"outcome": "not_found", "reason": "conversation"}, path


# --- starters --------------------------------------------------------------------------------


STARTERS = [Starter(id="note", label="Take a note")]


async def test_start_opens_one_conversation_per_request(make_agent: AgentFactory) -> None:
    agent: Agent = make_agent(starters=STARTERS)
    calls: list[str] = []

    @agent.on_start
    async def start(starter_id: str) -> ConversationHandle:
        calls.append(starter_id)
        await asyncio.sleep(0.02)
        return await agent.open_conversation(title="A note")

    async with serve_agent(agent) as (_, address):
        c = Client(address)
        try:
            body = {"request_id": "n1", "starter": "note"}
            answers = await asyncio.gather(*(c.post("/conversations", body) for _ in range(3)))
            assert {a.status for a in answers} == {200}
            [result] = {(a.body["outcome"], a.body["conversation_id"]) for a in answers}
            assert result[0] == "accepted"
            assert calls == ["note"]
            assert [conv.id for conv in agent.conversations] == [result[1]]
            again = await c.post("/conversations", body)
            assert again.body["conversation_id"] == result[1]
            unknown = await c.post("/conversations", {"request_id": "n2", "starter": "nope"})
            assert unknown.body == {"outcome": "not_found", "reason": "starter"}
            reused = await c.post("/conversations", {"request_id": "n1", "starter": "other"})
            assert reused.status == 409
        finally:
            await c.close()


async def test_start_without_a_handler_titles_the_conversation(make_agent: AgentFactory) -> None:
    async with serve_agent(make_agent(starters=STARTERS)) as (agent, address):
        c = Client(address)
        try:
            answer = await c.post("/conversations", {"request_id": "n1", "starter": "note"})
            conv = await agent.conversation(answer.body["conversation_id"])
            assert conv is not None
            assert conv.snapshot().title == "Take a note"
        finally:
            await c.close()


async def test_start_needs_the_feature(make_agent: AgentFactory) -> None:
    async with serve_agent(make_agent(features=[], starters=STARTERS)) as (_, address):
        c = Client(address)
        try:
            answer = await c.post("/conversations", {"request_id": "n1", "starter": "note"})
            assert answer.body == {"outcome": "refused", "reason": "unsupported"}
        finally:
            await c.close()


async def test_a_failing_starter_records_nothing(make_agent: AgentFactory) -> None:
    agent: Agent = make_agent(starters=STARTERS)
    calls: list[str] = []

    @agent.on_start
    async def start(starter_id: str) -> ConversationHandle:
        calls.append(starter_id)
        if len(calls) == 1:
            raise RuntimeError("no disk")
        return await agent.open_conversation(title="A note")

    async with serve_agent(agent) as (_, address):
        c = Client(address)
        try:
            body = {"request_id": "n1", "starter": "note"}
            failed = await c.post("/conversations", body)
            assert (failed.status, failed.body["error"]) == (500, "internal")
            retried = await c.post("/conversations", body)
            assert retried.body["outcome"] == "accepted"
            assert calls == ["note", "note"]
        finally:
            await c.close()


# --- on_reply: a bridge forwards the answer and reports the far end's outcome (S5) -----------


async def test_S5_on_reply_accepted_resolves_with_the_request_id(
    served: Served, client: Client
) -> None:
    seen: list[tuple[str, str | None]] = []

    @served.agent.on_reply
    async def forward(ask: AskHandle, r: Reply) -> ReplyResult:
        seen.append((ask.id, r.answer.option))
        return ReplyResult(outcome="accepted")

    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"
    resolution = await ask.wait()
    assert (resolution.how, resolution.request_id) == ("answered", "r1")
    # The same request id again gets the first result; the handler is not called again.
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"
    assert seen == [("a1", "allow")]


async def test_S5_on_reply_answered_elsewhere_and_changed(served: Served, client: Client) -> None:
    outcomes = ["changed", "answered"]

    @served.agent.on_reply
    async def forward(ask: AskHandle, r: Reply) -> ReplyResult:
        if outcomes[0] == "changed":
            await ask.change(text="Run rm -rf?")
        return ReplyResult(outcome=outcomes.pop(0))

    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "changed"
    assert ask.open
    assert ask.version == 2
    assert (
        await client.outcome("/asks/a1/reply", reply("r2", version=2, option="allow")) == "answered"
    )
    resolution = await ask.wait()
    assert (resolution.how, resolution.request_id) == ("answered", None)
    # A later reply never reaches the handler: the ask was answered.
    assert await client.outcome("/asks/a1/reply", reply("r3", version=2, option="deny")) == (
        "answered"
    )
    assert outcomes == []


async def test_S5_on_reply_that_fails_records_nothing_and_a_retry_calls_again(
    served: Served, client: Client
) -> None:
    calls: list[str] = []

    @served.agent.on_reply
    async def forward(ask: AskHandle, r: Reply) -> ReplyResult:
        calls.append(r.request_id)
        if len(calls) == 1:
            raise OSError("connection reset")
        return ReplyResult(outcome="accepted")

    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    first = await client.post("/asks/a1/reply", reply("r1", option="allow"))
    assert first.status == 502
    assert ask.open
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "accepted"
    assert calls == ["r1", "r1"]


async def test_S5_on_reply_one_at_a_time_per_ask(served: Served, client: Client) -> None:
    gate = asyncio.Event()
    calls: list[str] = []

    @served.agent.on_reply
    async def forward(ask: AskHandle, r: Reply) -> ReplyResult:
        calls.append(r.request_id)
        await gate.wait()
        return ReplyResult(outcome="accepted")

    conv = await served.agent.open_conversation(id="c1")
    await permission_ask(conv)
    one = asyncio.ensure_future(client.outcome("/asks/a1/reply", reply("r1", option="allow")))
    two = asyncio.ensure_future(client.outcome("/asks/a1/reply", reply("r2", option="deny")))
    await eventually(lambda: calls == ["r1"])
    gate.set()
    assert sorted([await one, await two]) == ["accepted", "answered"]
    assert calls == ["r1"]


async def test_answered_elsewhere(served: Served, client: Client) -> None:
    conv = await served.agent.open_conversation(id="c1")
    ask = await permission_ask(conv)
    resolution = await ask.answered_elsewhere()
    assert (resolution.how, resolution.request_id) == ("answered", None)
    assert await client.outcome("/asks/a1/reply", reply("r1", option="allow")) == "answered"
