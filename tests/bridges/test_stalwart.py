"""The stalwart bridge's pure parts: S8's words, the pause → ask mapping, S6's verification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridges.stalwart import (
    BadDelivery,
    Bridge,
    Ledger,
    StalwartConfig,
    Words,
    ask_of,
    decision_of,
    sign,
)
from wire.messages import Answer, Reply

SECRET = b"hook-secret"
NOW = 1_800_000_000


def test_S8_words_are_overridable_by_key_with_the_same_placeholders() -> None:
    words = Words({"approve": "Aprovar", "confirmTitle": "Confirmar {tool}?"})
    assert words["approve"] == "Aprovar"
    assert words.fmt("confirmTitle", tool="charge_card") == "Confirmar charge_card?"
    assert words["skip"] == "Skip this step"
    with pytest.raises(KeyError):
        Words({"aprove": "x"})
    with pytest.raises(ValueError, match="may use only"):
        Words({"approve": "Approve {tool}"})


@pytest.mark.parametrize(
    ("kind", "wire_kind", "title", "options"),
    [
        ("confirm", "permission", "Confirm charge_card?", ["approve", "skip", "cancel_all"]),
        (
            "outcome_unknown",
            "choice",
            "Did charge_card take effect?",
            ["happened", "did_not_happen"],
        ),
        (
            "saga_stuck",
            "choice",
            "Undoing charge_card failed. What should happen?",
            ["retry", "done_by_hand", "abandon"],
        ),
        ("ask", "text", "Which order?", []),
        (
            "delegate",
            "permission",
            "I couldn't work that out. Shall I pass it to the assistant?",
            ["approve", "decline"],
        ),
        ("escalate", "stalwart:escalate", "Which order?", []),
    ],
)
def test_S2_each_kind_maps_to_an_ask(
    kind: str, wire_kind: str, title: str, options: list[str]
) -> None:
    interrupt = {
        "id": "int-1",
        "kind": kind,
        "tool": "charge_card",
        "question": "Which order?",
        "token": "tok",
        "arguments": [{"name": "amount", "value": 40, "origin": "typed"}, "junk"],
        "reasons": "not a list",
    }
    ask = ask_of(interrupt, Words())
    assert ask["kind"] == wire_kind
    assert ask["title"] == title
    assert [o.id for o in ask.get("options", [])] == options
    roles = [o.role for o in ask.get("options", [])]
    assert "always" not in roles  # stalwart has no "always" reply
    if kind != "escalate":
        assert [(a.name, a.value, a.origin) for a in ask["arguments"]] == [("amount", 40, "typed")]
        assert ask["reasons"] == []


def test_S2_decisions() -> None:
    text = Reply(request_id="r", version=1, answer=Answer(text="4411"))
    assert decision_of("ask", text) == {"decision": "answer", "answer": "4411"}
    option = Reply(request_id="r", version=1, answer=Answer(option="skip"))
    assert decision_of("confirm", option) == {"decision": "skip"}


def test_S6_verify_window_tamper_replay_and_malformed(tmp_path: Path) -> None:
    bridge = Bridge(
        StalwartConfig(url="http://127.0.0.1:9", webhook_secret=SECRET),
        state_path=tmp_path / "b.db",
        clock=lambda: float(NOW),
    )
    bridge._ledger = Ledger(tmp_path / "ledger.db")
    try:
        body = json.dumps({"thread": "t1"}).encode()
        for skew in (-300, 300):
            bridge.verify(sign(SECRET, NOW + skew, body), body)
        for skew in (-301, 301):
            with pytest.raises(BadDelivery, match="five minutes"):
                bridge.verify(sign(SECRET, NOW + skew, body), body)
        header = sign(SECRET, NOW, body)
        with pytest.raises(BadDelivery, match="does not match"):
            bridge.verify(header, body + b" ")
        bridge.verify(header, body)
        with pytest.raises(BadDelivery, match="replayed"):
            bridge.verify(header, body)
        for bad in (None, "", "t=,v1=", "v1=00", "t=١٢٣,v1=00", "t=1e3,v1=00"):
            with pytest.raises(BadDelivery):
                bridge.verify(bad, body)
    finally:
        bridge.ledger.close()


def test_S6_no_webhook_secret_refuses_every_delivery(tmp_path: Path) -> None:
    bridge = Bridge(StalwartConfig(url="http://127.0.0.1:9"), state_path=tmp_path / "b.db")
    with pytest.raises(BadDelivery, match="no webhook secret"):
        bridge.verify(sign(SECRET, NOW, b"{}"), b"{}")
