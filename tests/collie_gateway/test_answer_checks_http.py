"""Answers checked before they leave (wire §8, spec T1 "Collie refused the answer"): through
the phone API against an SDK agent, each answer that does not fit its ask is answered ``400``
with the reason; nothing reaches the agent and the ledger records nothing. The gateway and
the SDK use one checker (``wire.answers``)."""

from __future__ import annotations

from typing import Any

import pytest

import wire.answers
from tests.collie_gateway.conftest import Rig, get_json
from tests.collie_gateway.test_answers_http import PERMISSION, TOOL, desk
from wire.agent import FormField, Option

CHOICES = [Option(id="a", label="Apples"), Option(id="b", label="Pears")]
FORM = [
    FormField(id="name", kind="text", label="Recipient", required=True, max_length=5),
    FormField(
        id="speed",
        kind="select",
        label="Delivery",
        options=[Option(id="std", label="Standard"), Option(id="exp", label="Express")],
    ),
    FormField(id="gift", kind="switch", label="Gift wrap"),
]
ASKS: dict[str, dict[str, Any]] = {
    "perm": {"kind": "permission", "title": "Run ls?", "options": PERMISSION, "tool": TOOL},
    "one": {"kind": "choice", "title": "Which?", "options": CHOICES},
    "many": {"kind": "choice", "title": "Which ones?", "options": CHOICES, "multiple": True},
    "name": {"kind": "text", "title": "Name?", "max_length": 5},
    "ship": {"kind": "form", "title": "Ship it", "fields": FORM},
}
MISFITS: list[tuple[str, dict[str, Any], str]] = [
    ("perm", {"option": "maybe"}, "Unknown option 'maybe'."),
    ("perm", {"text": "yes"}, "The answer names no option."),  # a text answer to a permission
    ("perm", {"options": ["allow"]}, "Only a choice with multiple takes several options."),
    (
        "one",
        {"option": "a", "options": ["a"]},
        "Only a choice with multiple takes several options.",
    ),
    ("many", {"option": "a", "options": ["b"]}, "Give option or options, not both."),
    ("many", {"options": ["a", "a"]}, "An option is given twice."),
    ("many", {"options": ["a", "z"]}, "Unknown option 'z'."),
    ("many", {}, "The answer names no option."),
    ("name", {"text": "Ada L."}, "The text is over 5 characters."),  # the card: "0 of 5"
    ("name", {"option": "a"}, "A text ask needs a text answer."),
    ("ship", {}, "A form needs fields."),
    ("ship", {"fields": {"gift": True}}, "The field 'Recipient' is required."),
    ("ship", {"fields": {"name": ""}}, "The field 'Recipient' is required."),
    (
        "ship",
        {"fields": {"name": "Ada", "gift": "yes"}},
        "The field 'gift' is a switch: true or false.",
    ),
    ("ship", {"fields": {"name": "Ada", "color": "red"}}, "Unknown field 'color'."),
    ("ship", {"fields": {"name": True}}, "The field 'name' takes text, not true or false."),
    (
        "ship",
        {"fields": {"name": "Ada", "speed": "air"}},
        "Unknown option 'air' for the field 'speed'.",
    ),
    ("ship", {"fields": {"name": "Ada Lovelace"}}, "The field 'name' is over 5 characters."),
]
FITS: list[tuple[str, dict[str, Any]]] = [
    ("perm", {"option": "allow"}),
    ("one", {"option": "b"}),
    ("many", {"options": []}),  # an empty set is a valid answer (§8)
    ("name", {"text": "Ada L"}),
    ("ship", {"fields": {"name": "Ada", "speed": "exp", "gift": False}}),
]


async def test_T1_answers_that_do_not_fit_are_refused_400_sent_nowhere_recorded_nowhere(
    rig: Rig,
) -> None:
    d = await desk(rig)
    for ask_id, ask in ASKS.items():
        await d.ask(id=ask_id, **ask)
    for n, (ask_id, answer, reason) in enumerate(MISFITS):
        rid = f"bad-{n}"
        resp = await d.client.post(
            f"/api/v1/agents/desk/asks/{ask_id}/answer",
            json={"request_id": rid, "version": 1, "answer": answer},
        )
        assert resp.status == 400, (ask_id, answer)
        assert await resp.json() == {"error": "bad_request", "message": reason}
        assert (await d.client.get(f"/api/v1/answers/{rid}")).status == 404
    assert d.wire.replies() == []  # nothing reached the agent
    for n, (ask_id, answer) in enumerate(FITS):
        result = await d.answer(ask_id, f"good-{n}", answer)
        assert result["outcome"] == "accepted", (ask_id, answer)
    assert d.wire.replies() == [f"good-{n}" for n in range(len(FITS))]


async def test_T1_an_unconfirmed_always_keeps_its_card_words(rig: Rig) -> None:
    """A5's first tap on "Always allow" stays Collie's card refusal, not a 400."""
    d = await desk(rig)
    await d.ask(id="perm", **ASKS["perm"])
    result = await d.answer("perm", "r1", {"option": "always"})
    assert (result["outcome"], result["card"]["line"]) == (
        "refused",
        '"Always allow" needs a second tap.',
    )
    assert d.wire.replies() == []


@pytest.mark.parametrize("version", [-1, 2**53, 1.5, "1"])
async def test_wire_3_version_is_bounded_on_the_phone_api(rig: Rig, version: Any) -> None:
    d = await desk(rig)
    await d.ask(id="name", **ASKS["name"])
    resp = await d.client.post(
        "/api/v1/agents/desk/asks/name/answer",
        json={"request_id": "r1", "version": version, "answer": {"text": "Ada"}},
    )
    assert resp.status == 400
    assert d.wire.replies() == []
    doc = await get_json(d.client, "/openapi.json")
    schema = doc["components"]["schemas"]["PhoneAnswer"]["properties"]["version"]
    assert (schema["minimum"], schema["maximum"]) == (0, 2**53 - 1)


def test_wire_8_one_checker_for_the_gateway_and_the_sdk() -> None:
    from wire.agent import _rules

    assert _rules.__dict__["check_answer"] is wire.answers.check_answer  # the SDK's decisions
    for code, sentence in wire.answers.SENTENCES.items():
        assert wire.answers.Misfit(code, {"option": "x", "field": "f", "limit": 3}).sentence
        assert sentence
