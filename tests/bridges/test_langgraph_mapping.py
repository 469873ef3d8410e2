"""The LangGraph bridge's pure mapping (``bridges.langgraph.mapping``): interrupt values as
asks, answers as resume values, a response schema's checks and conversions."""

from __future__ import annotations

from typing import Any

import pytest

from bridges.langgraph.mapping import Pending, Unfit, ask_id, convert, plan, resume_value, value_of
from wire.messages import Answer

ORDER = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "size": {"enum": ["s", "m"]},
        "gift": {"type": "boolean"},
        "ratio": {"type": "number"},
    },
    "required": ["count"],
}


def test_ids_are_stable_and_say_the_attempt_and_the_action() -> None:
    assert ask_id("t", "abc") == "t:abc"
    assert ask_id("t", "abc", 2) == "t:abc:attempt2"
    assert ask_id("t", "abc", 1, 3) == "t:abc:3"


def test_a_batched_approval_is_one_card_per_action_resumed_with_every_decision() -> None:
    value = {"action_requests": [{"name": "a", "args": {}}, {"name": "b", "args": {"x": 1}}]}
    first, second = plan("t", Pending("i", value))
    assert (first.slot, second.slot, second.of) == (1, 2, 2)
    assert second.draft.arguments[0].value == 1
    decisions = [value_of(p, Answer(option=o)) for p, o in ((first, "allow"), (second, "deny"))]
    assert resume_value(first, decisions) == {
        "decisions": [{"type": "approve"}, {"type": "reject"}]
    }


def test_a_per_call_schema_without_reject_offers_allow_only() -> None:
    schema = {"properties": {"type": {"const": "approve"}}}
    [p] = plan("t", Pending("i", {"type": "tool_approval", "name": "x", "args": {}}, schema))
    assert [o.id for o in p.draft.options] == ["allow"]


def test_the_same_interrupt_with_other_content_has_another_digest() -> None:
    [a] = plan("t", Pending("i", "Right?"))
    [b] = plan("t", Pending("i", "Right now?"))
    assert a.ask_id == b.ask_id
    assert a.digest != b.digest


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        ({"count": "3"}, {"count": 3}),
        (
            {"count": "2", "size": "m", "gift": True, "ratio": "0.5"},
            {"count": 2, "size": "m", "gift": True, "ratio": 0.5},
        ),
        ({"count": "1", "gift": "false"}, {"count": 1, "gift": False}),
    ],
)
def test_a_forms_strings_become_the_schemas_types(raw: dict[str, Any], expect: object) -> None:
    assert convert(ORDER, raw) == expect


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({}, "count is required"),
        ({"count": "x"}, "count must be an integer"),
        ({"count": "0"}, "count must be at least 1"),
        ({"count": "10"}, "count must be at most 9"),
        ({"count": "1", "size": "xl"}, "size must be one of s, m"),
        ({"count": "1", "gift": "maybe"}, "gift must be true or false"),
        ({"count": "1", "ratio": "half"}, "ratio must be a number"),
        ("3", "the answer must be an object"),
    ],
)
def test_an_answer_that_does_not_fit_says_why(raw: object, reason: str) -> None:
    with pytest.raises(Unfit, match=reason):
        convert(ORDER, raw)


def test_schema_forms_choices_and_texts() -> None:
    [form] = plan("t", Pending("i", "Order?", ORDER))
    kinds = {f.id: f.kind for f in form.draft.fields}
    assert kinds == {"count": "text", "size": "select", "gift": "switch", "ratio": "text"}
    [choice] = plan("t", Pending("i", {"question": "Size?"}, {"enum": ["s", "m"]}))
    assert (choice.draft.kind, choice.draft.title) == ("choice", "Size?")
    assert value_of(choice, Answer(option="m")) == "m"
    [text] = plan("t", Pending("i", "Name?", {"type": "string"}))
    assert value_of(text, Answer(text="Ada")) == "Ada"
    with pytest.raises(Unfit, match="must be text"):
        convert({"type": "string"}, 3)


def test_a_kind_value_keeps_its_fields_and_resumes_with_the_answer_body() -> None:
    value = {
        "kind": "form",
        "title": "Where?",
        "fields": [{"id": "city", "label": "City", "required": True}],
    }
    [p] = plan("t", Pending("i", value))
    assert (p.draft.kind, p.draft.fields[0].required) == ("form", True)
    assert value_of(p, Answer(fields={"city": "Rome"})) == {"fields": {"city": "Rome"}}
    [perm] = plan("t", Pending("i", {"kind": "permission", "title": "Go?"}))
    assert [o.role for o in perm.draft.options] == ["allow", "deny"]
    [text] = plan("t", Pending("i", {"kind": "text", "title": "Say", "max_length": 5}))
    assert text.draft.max_length == 5
