"""Fuzz the codec: garbage decodes or raises RemoteWireError; valid structs round-trip."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import messages as m
from wire.errors import RemoteWireError

FUZZ = settings(max_examples=300, deadline=None, database=None)

BODY_TYPES: tuple[type[Any], ...] = (
    m.Hello,
    m.VersionProbe,
    m.Conversation,
    m.ConversationPage,
    m.StarterList,
    m.Reply,
    m.SendMessage,
    m.TurnCommand,
    m.PlainCommand,
    m.StartConversation,
    m.ReplyResult,
    m.CommandResult,
    m.ErrorBody,
)

# Every decoder under test, with the type a successful decode must produce.
DECODERS: list[tuple[Callable[[bytes], Any], type[Any]]] = [
    (m.decode_event, m.Event),
    *((lambda data, kind=kind: m.decode(data, kind), kind) for kind in BODY_TYPES),
]


def decodes_or_raises_remote(data: bytes) -> None:
    """The invariant: each decoder returns a value of its type or raises RemoteWireError."""
    for decode, kind in DECODERS:
        try:
            value = decode(data)
        except RemoteWireError:
            continue
        assert isinstance(value, kind)


# --- strategies of valid structs, built from msgspec's view of the types -----------------

_CAP = 12  # longest generated string; limits are tested by the vectors, not here
_OFFSETS = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-7))])


_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(0, 2**53 - 1) | st.text(max_size=_CAP),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=_CAP), inner),
    max_leaves=6,
)


def strategy(t: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy of values that satisfy ``t`` and its constraints."""
    if isinstance(t, mi.Metadata):  # VERBATIM strings: their constraints are the type's
        return strategy(t.type)
    if isinstance(t, mi.StrType):
        return st.text(min_size=t.min_length or 0, max_size=min(t.max_length or _CAP, _CAP))
    if isinstance(t, mi.IntType):
        return st.integers(min_value=t.ge, max_value=t.le if t.le is not None else 2**53 - 1)
    if isinstance(t, mi.FloatType):
        return st.floats(min_value=t.ge, max_value=t.le, allow_nan=False, allow_infinity=False)
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.DateTimeType):
        return st.datetimes(
            min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=_OFFSETS
        )
    if isinstance(t, mi.ListType):
        return st.lists(strategy(t.item_type), max_size=min(t.max_length or 3, 3))
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy(t.key_type), strategy(t.value_type), max_size=3)
    if isinstance(t, mi.UnionType):
        return st.one_of(*(strategy(member) for member in t.types))
    if isinstance(t, mi.AnyType):  # Argument.value: any JSON
        return _JSON
    if isinstance(t, mi.StructType):
        required = {f.name: strategy(f.type) for f in t.fields if f.required}
        optional = {f.name: strategy(f.type) for f in t.fields if not f.required}
        cls = t.cls
        return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))
    raise AssertionError(f"no strategy for {t!r}")


EVENTS = strategy(mi.type_info(m.AgentEvent))
BODIES = st.one_of(*(strategy(mi.type_info(kind)) for kind in BODY_TYPES))

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=_CAP),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=_CAP), children, max_size=4)
    ),
    max_leaves=20,
)
FIELD_NAMES = sorted(
    {
        field
        for schema in msgspec.json.schema_components([m.AgentEvent, *BODY_TYPES])[1].values()
        for field in schema.get("properties", {})
    }
)
# Objects whose keys are the wire's own field names, so decoding gets past the first check.
WIRE_LIKE = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=_CAP), JSON, max_size=6)
EVENT_LIKE = st.builds(
    lambda tag, rest: {**rest, "type": tag},
    st.sampled_from(sorted(m.EVENT_TYPES)) | st.text(max_size=_CAP),
    WIRE_LIKE,
)


# --- the invariant -------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    decodes_or_raises_remote(data)


@FUZZ
@given(st.one_of(JSON, WIRE_LIKE, EVENT_LIKE))
def test_arbitrary_json(value: Any) -> None:
    decodes_or_raises_remote(json.dumps(value).encode())


@FUZZ
@given(st.one_of(EVENTS, BODIES), st.data())
def test_corrupted_valid_messages(message: Any, data: st.DataObject) -> None:
    raw = bytearray(m.encode(message))
    at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    decodes_or_raises_remote(bytes(raw[: data.draw(st.integers(min_value=0, max_value=len(raw)))]))


# --- round trips ---------------------------------------------------------------------------


@FUZZ
@given(EVENTS)
def test_event_round_trip(event: Any) -> None:
    assert m.decode_event(m.encode(event)) == event


@FUZZ
@given(BODIES)
def test_body_round_trip(body: Any) -> None:
    assert m.decode(m.encode(body), type(body)) == body
