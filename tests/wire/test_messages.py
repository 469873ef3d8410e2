"""wire.messages: round-trips, ``Hello.has``, the decode limits and the error tree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest

import wire
from wire import messages as m
from wire.errors import (
    BodyTooLarge,
    LocalWireError,
    MalformedMessage,
    RemoteWireError,
    UnknownEvent,
    VersionMismatch,
    WireError,
)

AT = datetime(2025, 5, 1, 9, 30, tzinfo=UTC)
TOOL = m.ToolRef(call_id="call-88", name="charge_card")

ASKS = [
    m.Ask(
        id="ask-7f3a",
        version=2,
        conversation="c-1",
        kind="permission",
        title="Run charge_card?",
        text="Charge 40.00",
        tool=TOOL,
        deadline=AT + timedelta(minutes=5),
        options=[
            m.Option(id="approve", label="Approve", role="allow"),
            m.Option(id="always", label="Always", role="always"),
            m.Option(id="skip", label="Skip", role="deny"),
            m.Option(id="cancel_all", label="Cancel", role="cancel"),
        ],
        push_title="Charge?",
        push_line="40.00",
        raised_at=AT,
    ),
    m.Ask(
        id="ask-92",
        conversation="c-1",
        kind="choice",
        multiple=True,
        options=[m.Option(id="n1", label="A"), m.Option(id="n2", label="B")],
    ),
    m.Ask(id="ask-93", conversation="c-1", kind="text", max_length=40),
    m.Ask(
        id="ask-94",
        conversation="c-1",
        kind="form",
        fields=[
            m.FormField(id="name", kind="text", label="Name", required=True, max_length=80),
            m.FormField(
                id="speed", kind="select", label="Speed", options=[m.Option(id="s", label="S")]
            ),
            m.FormField(id="gift", kind="switch", label="Gift"),
        ],
    ),
    m.Ask(id="ask-95", conversation="c-1", kind="signature", title="Sign"),
]

ITEMS = [
    m.Item(id="i-1", kind="user", text="hi", at=AT, request_id="r-1"),
    m.Item(id="i-2", kind="reply", text="Writ", final=False),
    m.Item(id="i-3", kind="code", text="x = 1", language="python", at=AT),
    m.Item(id="i-4", kind="link", url="https://example.com", label="Example"),
    m.Item(
        id="i-5", kind="tool", call_id="call-88", name="charge_card", status="done", output="ok"
    ),
]

CONVERSATION = m.Conversation(
    id="c-1",
    title="Order 4411",
    subtitle="Shop",
    state="waiting",
    updated_at=AT,
    turn=3,
    workspace="~/shop",
    progress=m.Progress(
        steps=[m.Step(label="Read", state="done"), m.Step(label="Charge", state="running")]
    ),
    buttons=[m.Button(id="b", label="Go", icon="play", busy=True, disabled=True)],
    asks=ASKS,
)

EVENTS: list[Any] = [
    m.ConversationOpened(conversation=CONVERSATION),
    m.ConversationUpdated(
        conversation=m.Conversation(
            id="c-1", updated_at=AT, progress=m.Progress(percent=42.5, label="loading")
        )
    ),
    m.ConversationClosed(conversation_id="c-1", at=AT),
    m.ItemAppended(conversation_id="c-1", item=ITEMS[1]),
    m.ItemDelta(conversation_id="c-1", item_id="i-2", text="ing"),
    m.ItemUpdated(conversation_id="c-1", item=ITEMS[4]),
    *(m.AskRaised(ask=ask) for ask in ASKS),
    m.AskChanged(ask=ASKS[0]),
    m.AskResolved(ask_id="ask-7f3a", conversation_id="c-1", how="answered", request_id="r", at=AT),
    m.TurnStopped(conversation_id="c-1", turn=3),
    m.Reset(),
]

BODIES: list[Any] = [
    m.Hello(wire=1, runtime="desk", subtitle="Notes", features=list(m.FEATURES)),
    m.VersionProbe(wire=2),
    m.ConversationPage(conversations=[CONVERSATION], next_cursor="c2", keeps_list=True),
    m.ConversationPage(keeps_list=False),
    m.Conversation(id="c-1", updated_at=AT, items=ITEMS),
    m.StarterList(starters=[m.Starter(id="s", label="Start", description="Opens a page")]),
    m.Reply(request_id="r", version=1, answer=m.Answer(option="always", confirmed=True)),
    m.Reply(request_id="r", version=1, answer=m.Answer(options=["n1", "n2"])),
    m.Reply(request_id="r", version=1, answer=m.Answer(text="4411")),
    m.Reply(request_id="r", version=1, answer=m.Answer(fields={"name": "Ada", "gift": True})),
    m.SendMessage(request_id="r", text="hi", steer=True, turn=3),
    m.TurnCommand(request_id="r", turn=0),
    m.PlainCommand(request_id="r"),
    m.StartConversation(request_id="r", starter="s"),
    m.ReplyResult(outcome="not_open", reason="restarted"),
    m.CommandResult(outcome="accepted", conversation_id="c-2"),
    m.ErrorBody(error="request_id_reused", message="Used for another command."),
]


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_event_round_trip(event: Any) -> None:
    assert m.decode_event(m.encode(event)) == event


@pytest.mark.parametrize("body", BODIES, ids=lambda b: type(b).__name__)
def test_body_round_trip(body: Any) -> None:
    assert m.decode(m.encode(body), type(body)) == body


def test_encode_omits_defaults_and_tags_events() -> None:
    assert m.encode(m.Hello(wire=1)) == b'{"wire":1}'
    assert m.encode(m.ConversationPage()) == b"{}"
    assert m.encode(m.ConversationPage(keeps_list=False)) == b'{"keeps_list":false}'
    assert m.encode(m.Reset()) == b'{"type":"reset"}'
    assert m.encode(m.TurnStopped(conversation_id="c", turn=0)) == (
        b'{"type":"turn.stopped","conversation_id":"c","turn":0}'
    )


def test_timestamps_keep_their_instant() -> None:
    plus2 = timezone(timedelta(hours=2))
    event = m.ConversationClosed(conversation_id="c", at=datetime(2025, 5, 1, 11, 30, tzinfo=plus2))
    decoded = m.decode_event(m.encode(event))
    assert isinstance(decoded, m.ConversationClosed)
    assert decoded.at == AT
    assert m.encode(m.ConversationClosed(conversation_id="c", at=AT)).endswith(
        b'"at":"2025-05-01T09:30:00Z"}'
    )


def test_structs_are_frozen() -> None:
    hello = m.Hello(wire=1)
    with pytest.raises(AttributeError):
        hello.wire = 2  # type: ignore[misc]


def test_unknown_open_set_values_decode() -> None:
    ask = m.decode(b'{"id":"a","conversation":"c","kind":"signature"}', m.Ask)
    assert ask.kind == "signature"
    assert ask.kind not in m.ASK_KINDS
    item = m.decode(b'{"id":"i","kind":"image"}', m.Item)
    assert item.kind == "image"


def test_event_tags_match_the_union() -> None:
    tags = {str(t.__struct_config__.tag) for t in m.AgentEvent.__args__}
    assert tags == m.EVENT_TYPES
    assert all(tag == "reset" or "." in tag for tag in tags)


# --- Hello.has -----------------------------------------------------------------------------


def test_hello_has() -> None:
    hello = m.Hello(wire=1, features=["history", "steer", "teleport"])
    assert hello.has("history")
    assert hello.has("teleport")  # an unknown feature is still "declared"
    assert not hello.has("stop")
    assert not m.Hello(wire=1).has("history")


def test_a_future_hello_still_gives_its_version() -> None:
    data = b'{"wire":2,"features":{"history":true}}'
    assert m.decode(data, m.VersionProbe).wire == 2
    with pytest.raises(MalformedMessage):
        m.decode(data, m.Hello)


# --- limits --------------------------------------------------------------------------------


def test_limit_constants_match_the_spec() -> None:
    assert m.MAX_BODY == 8 * 1024 * 1024
    assert m.MAX_EVENT == 1024 * 1024
    assert (m.MAX_ID, m.MAX_LABEL, m.MAX_TEXT) == (200, 2000, 1024 * 1024)
    assert m.WIRE_VERSION == 1


def test_body_limit_is_inclusive() -> None:
    body = b'{"wire":1}'
    assert m.decode(body.ljust(m.MAX_BODY), m.Hello) == m.Hello(wire=1)
    with pytest.raises(BodyTooLarge):
        m.decode(body.ljust(m.MAX_BODY + 1), m.Hello)


def test_custom_limit() -> None:
    assert m.decode(b'{"wire":1}', m.Hello, limit=10) == m.Hello(wire=1)
    with pytest.raises(BodyTooLarge):
        m.decode(b'{"wire":1} ', m.Hello, limit=10)


def test_event_limit_is_one_mebibyte() -> None:
    data = b'{"type":"reset"}'
    assert m.decode_event(data.ljust(m.MAX_EVENT)) == m.Reset()
    with pytest.raises(BodyTooLarge):
        m.decode_event(data.ljust(m.MAX_EVENT + 1))


def test_str_input_decodes() -> None:
    assert m.decode('{"wire":1}', m.Hello) == m.Hello(wire=1)
    assert m.decode_event('{"type":"reset"}') == m.Reset()


@pytest.mark.parametrize(
    ("template", "limit"),
    [
        ('{{"id":"{}","label":"x"}}', m.MAX_ID),
        ('{{"id":"s","label":"{}"}}', m.MAX_LABEL),
    ],
    ids=["id", "label"],
)
def test_string_limits_count_code_points(template: str, limit: int) -> None:
    assert m.decode(template.format("é" * limit).encode(), m.Starter)
    with pytest.raises(MalformedMessage):
        m.decode(template.format("é" * (limit + 1)).encode(), m.Starter)


def test_text_limit() -> None:
    def item(n: int) -> bytes:
        return b'{"id":"i","kind":"reply","text":"' + b"a" * n + b'"}'

    assert len(m.decode(item(m.MAX_TEXT), m.Item).text) == m.MAX_TEXT
    with pytest.raises(MalformedMessage):
        m.decode(item(m.MAX_TEXT + 1), m.Item)


def test_empty_id_is_malformed() -> None:
    with pytest.raises(MalformedMessage):
        m.decode(b'{"request_id":""}', m.PlainCommand)


def test_negative_counts_are_malformed() -> None:
    with pytest.raises(MalformedMessage):
        m.decode(b'{"request_id":"r","turn":-1}', m.TurnCommand)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"nope", b"[]", b'{"wire":"1"}', b'{"wire":1} {}'], ids=repr)
def test_malformed_bodies(data: bytes) -> None:
    with pytest.raises(MalformedMessage):
        m.decode(data, m.Hello)


def test_decode_event_unknown_type() -> None:
    with pytest.raises(UnknownEvent) as info:
        m.decode_event(b'{"type":"conversation.archived","conversation_id":"c"}')
    assert info.value.type == "conversation.archived"
    assert str(info.value) == "unknown event type 'conversation.archived'"


def test_decode_event_known_type_with_a_bad_payload_is_malformed() -> None:
    with pytest.raises(MalformedMessage) as info:
        m.decode_event(b'{"type":"turn.stopped","conversation_id":"c","turn":-1}')
    assert not isinstance(info.value, UnknownEvent)


@pytest.mark.parametrize("data", [b"[]", b'{"type":1}', b"{}", b"not json"], ids=repr)
def test_decode_event_without_a_string_type_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedMessage):
        m.decode_event(data)


def test_decode_errors_do_not_chain_msgspec() -> None:
    with pytest.raises(MalformedMessage) as info:
        m.decode(b"nope", m.Hello)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    assert not isinstance(info.value, msgspec.DecodeError)


def test_error_tree() -> None:
    for remote in (MalformedMessage, BodyTooLarge, UnknownEvent, VersionMismatch):
        assert issubclass(remote, RemoteWireError)
        assert not issubclass(remote, LocalWireError)
    assert issubclass(RemoteWireError, WireError)
    assert issubclass(LocalWireError, WireError)
    assert not issubclass(LocalWireError, RemoteWireError)
    assert issubclass(WireError, Exception)


def test_version_mismatch_names_both_versions() -> None:
    error = VersionMismatch(2, 1)
    assert (error.theirs, error.ours) == (2, 1)
    assert str(error) == "peer speaks wire v2, we speak v1"


def test_package_exports() -> None:
    for name in wire.__all__:
        assert hasattr(wire, name), name
    assert wire.decode is m.decode
    assert wire.decode_event is m.decode_event
    assert wire.WIRE_VERSION == 1
