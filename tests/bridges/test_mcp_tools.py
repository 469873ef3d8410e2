"""The MCP bridge's tools, pure: schemas, argument checks, results (spec A4, S1; issue 24)."""

from __future__ import annotations

import pytest

from bridges.mcp import tools
from wire.messages import Answer, Option


def test_schemas_are_whole_and_list_only_known_keys() -> None:
    for spec in tools.TOOLS.values():
        assert "$ref" not in str(spec.schema)
        assert "$defs" not in spec.schema
        assert "anyOf" not in str(spec.schema)  # an omittable argument is just not required
    assert "deadline_seconds" not in tools.TOOLS["ask_text"].schema["required"]


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("ask_choice", {"question": "Q", "options": []}, "Expected `array` of length >= 1"),
        ("ask_choice", {"question": "Q", "options": ["x"] * 9}, "of length <= 8"),
        ("ask_text", {"question": "Q", "max_length": 2001}, "Expected `int` <= 2000"),
        ("ask_text", {"question": "Q", "deadline_seconds": 0}, "Expected `int` >= 1"),
        ("ask_form", {"title": "T", "fields": []}, "Expected `array` of length >= 1"),
        (
            "ask_form",
            {
                "title": "T",
                "fields": [
                    {"id": "a", "label": "A", "kind": "text"},
                    {"id": "a", "label": "B", "kind": "switch"},
                ],
            },
            "two fields share an id",
        ),
        (
            "ask_form",
            {"title": "T", "fields": [{"id": "a b", "label": "A", "kind": "text"}]},
            "matching regex '^[A-Za-z0-9_.-]{1,64}$' - at `$.fields[0].id`",
        ),
        ("permission_prompt", {"input": {}}, "missing required field `tool_name`"),
        ("notify", {}, "missing required field `text`"),
    ],
)
def test_bad_arguments_say_where(name: str, arguments: dict[str, object], message: str) -> None:
    with pytest.raises(tools.BadArguments) as caught:
        tools.parse(tools.TOOLS[name], arguments)
    assert str(caught.value).startswith(f"Invalid arguments for {name}: ")
    assert message in str(caught.value)


def test_permission_prompt_keeps_claude_codes_other_keys_out() -> None:
    call = tools.parse(
        tools.TOOLS["permission_prompt"],
        {"tool_name": "Edit", "input": {"file_path": "a.py"}, "tool_use_id": "t1", "extra": 1},
    )
    assert isinstance(call, tools.PermissionPrompt)
    assert tools.prompt_result("allow", "answered", call) == {
        "behavior": "allow",
        "updatedInput": {"file_path": "a.py"},
    }
    assert tools.prompt_result("always", "answered", call)["behavior"] == "allow"
    assert tools.prompt_result(None, "expired", call) == {
        "behavior": "deny",
        "message": "The person did not answer before the deadline.",
    }


def test_rule_is_the_tool_with_exactly_its_arguments() -> None:
    assert tools.rule_key("Bash", {"a": 1, "b": 2}) == tools.rule_key("Bash", {"b": 2, "a": 1})
    assert tools.rule_key("Bash", {"a": 1}) != tools.rule_key("Bash", {"a": 2})
    assert tools.rule_key("Bash", {"a": 1}) != tools.rule_key("Edit", {"a": 1})


def test_form_answer_reads_select_labels_and_leaves_out_what_was_not_given() -> None:
    call = tools.parse(
        tools.TOOLS["ask_form"],
        {
            "title": "T",
            "fields": [
                {"id": "c", "label": "C", "kind": "select", "options": ["x", "y"]},
                {"id": "n", "label": "N", "kind": "text"},
            ],
        },
    )
    assert isinstance(call, tools.AskForm)
    fields = tools.form_ask(call)["fields"]
    value = tools.answered(call, Answer(fields={"c": "o2"}), [], fields)
    assert value == {"outcome": "answered", "values": {"c": "y"}}
    choice = tools.parse(tools.TOOLS["ask_choice"], {"question": "Q", "options": ["a", "b"]})
    options = [Option(id="o1", label="a"), Option(id="o2", label="b")]
    assert tools.answered(choice, Answer(option="o1"), options, []) == {
        "outcome": "answered",
        "choice": "a",
    }
