"""The bridge's pure parts: JSON-RPC framing with its cap, and the ACP → wire mapping."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges.acp import mapping
from bridges.acp.jsonrpc import (
    Invalid,
    LineSplitter,
    Notification,
    Oversized,
    Request,
    Response,
    encode_error,
    encode_result,
    parse,
)
from bridges.acp.schema import (
    ContentBlock,
    ElicitationSchema,
    PermissionOption,
    PlanEntry,
    ToolCallContent,
)
from wire.answers import check_answer
from wire.messages import Answer, Ask


def test_lines_split_across_chunks_and_an_oversized_one_is_dropped_whole() -> None:
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b'{"a"') == []
    assert splitter.feed(b":1}\r\nabcdefghijk") == [b'{"a":1}']
    assert splitter.feed(b"lmnop") == []
    assert splitter.feed(b"q\nok\n\n") == [Oversized(17), b"ok"]
    assert splitter.feed(b"tail") == []
    assert splitter.end() == [b"tail"]


@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20), st.data()
)
def test_splitting_does_not_depend_on_chunking(lines: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    splitter = LineSplitter(limit=20)
    out: list[bytes | Oversized] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        out += splitter.feed(stream[start:cut])
        start = cut
    out += splitter.end()
    expected: list[bytes | Oversized] = [
        Oversized(len(line)) if len(line) > 20 else line.rstrip(b"\r")
        for line in lines
        if len(line) > 20 or line.rstrip(b"\r").strip()
    ]
    assert out == expected


def test_messages_told_apart() -> None:
    assert parse(b'{"jsonrpc":"2.0","id":3,"method":"m","params":{"x":1}}') == Request(
        3, "m", msgspec.Raw(b'{"x":1}')
    )
    assert parse(b'{"jsonrpc":"2.0","method":"n"}') == Notification("n", None)
    assert parse(b'{"jsonrpc":"2.0","id":"a","result":null}') == Response(
        "a", msgspec.Raw(b"null"), None
    )
    found = parse(b'{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}')
    assert isinstance(found, Response)
    assert found.error is not None
    assert (found.error.code, found.error.message) == (-1, "no")
    assert parse(b"[1]") == Invalid(parse(b"[1]").reason)  # type: ignore[union-attr]
    assert parse(b'{"jsonrpc":"1.0","id":7,"method":"m"}') == Invalid("jsonrpc is not 2.0", 7)
    assert parse(b'{"jsonrpc":"2.0","id":7,"result":1,"error":{"code":1,"message":""}}') == (
        Invalid("a response needs exactly one of result and error", 7)
    )
    assert encode_result(1, {"a": 1}) == b'{"jsonrpc":"2.0","id":1,"result":{"a":1}}\n'
    assert encode_error(None, -32600, "bad") == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad"}}\n'
    )


def test_A4_option_kinds_map_to_roles_never_ids() -> None:
    options = [
        PermissionOption(option_id="allow", name="Nope", kind="reject_once"),
        PermissionOption(option_id="x/y z", name="Sure", kind="allow_once"),
        PermissionOption(option_id="k", name="Forever", kind="allow_always"),
        PermissionOption(option_id="n", name="Never", kind="reject_always"),
        PermissionOption(option_id="w", name="Weird", kind="maybe"),
    ]
    wire, back = mapping.permission_options(options)
    assert [(o.id, o.role, o.label) for o in wire] == [
        ("o1", "deny", "Nope"),
        ("o2", "allow", "Sure"),
        ("o3", "always", "Forever"),
        ("o4", "deny", "Never"),
        ("o5", None, "Weird"),  # unknown kind: no role, the ask is unanswerable (A7)
    ]
    assert back == {"o1": "allow", "o2": "x/y z", "o3": "k", "o4": "n", "o5": "w"}


def test_ids_are_safe_and_carry_the_prefix() -> None:
    assert mapping.safe_id("e3", 12) == "e3-12"
    assert mapping.safe_id("e3", "call_1") == "e3-call_1"
    odd = mapping.safe_id("e3", "a/b c")
    assert odd.startswith("e3-h")
    assert odd == mapping.safe_id("e3", "a/b c")
    assert mapping.safe_id("e4", "a/b c") != odd


def test_tool_output_text_diff_and_terminal() -> None:
    content = [
        ToolCallContent(
            type="content",
            content=msgspec.convert({"type": "text", "text": "ok"}, ContentBlock),
        ),
        ToolCallContent(type="diff", path="a.py", old_text="x = 1\n", new_text="x = 2\n"),
        ToolCallContent(type="terminal", terminal_id="t1"),
    ]
    assert mapping.tool_output(content) == (
        "ok\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n(terminal t1)"
    )
    assert mapping.tool_output(None, {"exit": 0}) == '{\n "exit": 0\n}'
    assert mapping.tool_status("in_progress") == "running"
    assert mapping.tool_status("completed") == "done"


def test_H2_plan_entries_become_steps() -> None:
    progress = mapping.plan_progress(
        [
            PlanEntry(content="Read", status="completed"),
            PlanEntry(content="Write", status="in_progress"),
            PlanEntry(content="Ship"),
        ]
    )
    assert progress is not None
    assert [(s.label, s.state) for s in progress.steps or []] == [
        ("Read", "done"),
        ("Write", "running"),
        ("Ship", "pending"),
    ]
    assert mapping.plan_progress([]) is None


def _schema(properties: dict[str, object], required: list[str] | None = None) -> ElicitationSchema:
    return msgspec.convert(
        {"properties": properties, "required": required or []}, ElicitationSchema
    )


def _ask(form: mapping.FormAsk) -> Ask:
    return Ask(
        id="a",
        conversation="c",
        kind=form.kind,
        options=form.options,
        multiple=form.multiple,
        max_length=form.max_length,
        fields=form.fields,
    )


def test_one_enum_property_is_a_choice_and_its_answer_the_value() -> None:
    schema = _schema(
        {
            "env": {
                "type": "string",
                "oneOf": [
                    {"const": "prod", "title": "Production"},
                    {"const": "dev", "title": "Dev"},
                ],
            }
        },
        ["env"],
    )
    form = mapping.form_ask(schema)
    assert (form.kind, [(o.id, o.label) for o in form.options]) == (
        "choice",
        [("v1", "Production"), ("v2", "Dev")],
    )
    assert mapping.form_content(schema, form, _ask(form), Answer(option="v2")) == (
        {"env": "dev"},
        None,
    )


def test_multi_select_and_text_and_number() -> None:
    multi = _schema(
        {
            "tags": {
                "type": "array",
                "items": {"type": "string", "enum": ["a", "b", "c"]},
                "maxItems": 2,
            }
        }
    )
    form = mapping.form_ask(multi)
    assert (form.kind, form.multiple) == ("choice", True)
    assert mapping.form_content(multi, form, _ask(form), Answer(options=["v1", "v3"])) == (
        {"tags": ["a", "c"]},
        None,
    )
    assert (
        mapping.form_content(multi, form, _ask(form), Answer(options=["v1", "v2", "v3"]))[1]
        == "tags: pick at most 2."
    )
    number = _schema({"n": {"type": "number", "title": "How many", "maximum": 10}}, ["n"])
    form = mapping.form_ask(number)
    assert form.kind == "text"
    assert mapping.form_content(number, form, _ask(form), Answer(text="2.5")) == ({"n": 2.5}, None)
    assert (
        mapping.form_content(number, form, _ask(form), Answer(text="lots"))[1]
        == "How many: a number is needed."
    )
    assert (
        mapping.form_content(number, form, _ask(form), Answer(text="11"))[1]
        == "How many: at most 10."
    )
    text = _schema({"email": {"type": "string", "format": "email", "maxLength": 5000}})
    form = mapping.form_ask(text)
    assert form.max_length == 2000  # A4's cap
    assert (
        mapping.form_content(text, form, _ask(form), Answer(text="nope"))[1]
        == "email: not an email address."
    )


@pytest.mark.parametrize("kind", ["object", "array"])
def test_A7_a_property_the_phone_cannot_show_makes_the_form_unanswerable(kind: str) -> None:
    schema = _schema({"name": {"type": "string"}, "odd": {"type": kind}})
    form = mapping.form_ask(schema)
    assert form.kind == "form"
    assert [f.kind for f in form.fields] == ["text", f"acp-{kind}"]


def test_form_fields_typed_back() -> None:
    schema = _schema(
        {
            "name": {"type": "string"},
            "size": {"type": "string", "enum": ["S", "M"]},
            "n": {"type": "integer"},
            "gift": {"type": "boolean"},
        },
        ["name"],
    )
    form = mapping.form_ask(schema)
    ask = _ask(form)
    answer = Answer(fields={"f1": "Ada", "f2": "f2v2", "f3": "", "f4": False})
    assert check_answer(ask, answer) is None
    assert mapping.form_content(schema, form, ask, answer) == (
        {"name": "Ada", "size": "M", "gift": False},
        None,
    )
    bad = Answer(fields={"f1": "Ada", "f3": "1.5"})
    assert mapping.form_content(schema, form, ask, bad)[1] == "n: a whole number is needed."
