"""Replay the conformance vectors of ``fixtures/wire`` against ``wire.messages``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wire import messages as m
from wire.errors import BodyTooLarge, MalformedMessage, RemoteWireError, UnknownEvent

VECTORS_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "wire"

Decoder = Callable[[bytes], Any]


def _body(kind: type[Any]) -> Decoder:
    return lambda data: m.decode(data, kind)


DECODERS: dict[str, Decoder] = {
    "AgentEvent": m.decode_event,
    **{
        kind.__name__: _body(kind)
        for kind in (
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
    },
}

ERRORS: dict[str, type[RemoteWireError]] = {
    "MalformedMessage": MalformedMessage,
    "BodyTooLarge": BodyTooLarge,
    "UnknownEvent": UnknownEvent,
}


def build_input(spec: str | list[Any]) -> bytes:
    """The raw bytes a vector's ``input`` describes (a string, or a list of parts)."""
    if isinstance(spec, str):
        return spec.encode()
    out = bytearray()
    for part in spec:
        if isinstance(part, str):
            out += part.encode()
        elif "repeat" in part:
            out += part["repeat"].encode() * part["times"]
        else:
            out += bytes.fromhex(part["hex"])
    return bytes(out)


def load_vectors() -> list[dict[str, Any]]:
    """Every vector of every file, in file order."""
    vectors: list[dict[str, Any]] = []
    for path in sorted(VECTORS_DIR.glob("*.json")):
        loaded: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        vectors.extend(loaded)
    return vectors


VECTORS = load_vectors()


def test_vectors_are_well_formed() -> None:
    descriptions = [v["description"] for v in VECTORS]
    assert len(descriptions) == len(set(descriptions)), "descriptions must be unique"
    for vector in VECTORS:
        assert set(vector) == {"description", "type", "input", "expect"}, vector["description"]
        assert vector["type"] in DECODERS, vector["description"]
        expect = vector["expect"]
        assert len(expect) == 1, vector["description"]
        assert "ok" in expect or expect.get("error") in ERRORS, vector["description"]


def test_vectors_cover_the_open_sets() -> None:
    """Every event type, ask kind and item kind has a vector that decodes, plus unknown ones."""
    decoded = [
        v["expect"]["ok"] for v in VECTORS if v["type"] == "AgentEvent" and "ok" in v["expect"]
    ]
    assert {e["type"] for e in decoded} == m.EVENT_TYPES
    ask_kinds = {e["ask"]["kind"] for e in decoded if "ask" in e}
    assert set(m.ASK_KINDS) < ask_kinds
    item_kinds = {e["item"]["kind"] for e in decoded if "item" in e}
    assert set(m.ITEM_KINDS) < item_kinds
    errors = {v["expect"].get("error") for v in VECTORS}
    assert set(ERRORS) <= errors


@pytest.mark.parametrize("vector", VECTORS, ids=[v["description"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    decode = DECODERS[vector["type"]]
    data = build_input(vector["input"])
    expect = vector["expect"]
    if "ok" in expect:
        value = decode(data)
        canonical = m.encode(value)
        assert json.loads(canonical) == expect["ok"]
        # The portable check: the expected JSON decodes to the same value.
        assert decode(json.dumps(expect["ok"]).encode()) == value
    else:
        with pytest.raises(RemoteWireError) as info:
            decode(data)
        assert type(info.value) is ERRORS[expect["error"]]
