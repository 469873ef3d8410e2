"""The MCP bridge's tools, pure: their input types (the one source of both the JSON Schema a
model reads and the check of its arguments), the ask each call raises, and the tool result
each resolution becomes.

==================  ==========================  ==============================================
tool                ask (spec A4)               result (JSON text, also ``structuredContent``)
==================  ==========================  ==============================================
ask_permission      permission: Allow, Always   ``{"outcome": "answered", "decision": "allow"
                    allow, Deny; the call's     | "always" | "deny"}``
                    arguments, reasons and
                    irreversible (S1)
ask_choice          choice (``multiple``)       ``{"outcome": "answered", "choice": …}`` or
                                                ``"choices": […]``
ask_text            text (``max_length``)       ``{"outcome": "answered", "text": …}``
ask_form            form (text, select, switch) ``{"outcome": "answered", "values": {…}}``
notify              a notice, returns at once   ``{"outcome": "shown"}``
permission_prompt   permission, as              Claude Code's ``{"behavior": "allow",
                    ask_permission              "updatedInput": …}`` / ``{"behavior": "deny",
                                                "message": …}``
==================  ==========================  ==============================================

An ask that ends without an answer returns ``{"outcome": "expired" | "decided" | "stopped"}``
with a sentence (``message``) the model can act on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta, Struct

from bridges.kit import asks
from bridges.kit.asks import AskDraft
from bridges.kit.fit import label
from wire.messages import Answer, Argument, FormField, Option

MAX_QUESTION: Final = 2000
MAX_DETAILS: Final = 20_000
MAX_ARGUMENTS: Final = 200_000  # bytes of a permission's arguments, as JSON

Deadline = Annotated[
    int,
    Meta(
        ge=1,
        le=7 * 86400,
        description="Seconds the person has to answer. Past it the call returns "
        '{"outcome": "expired"}. Omit to wait without a deadline.',
    ),
]
Question = Annotated[
    str, Meta(min_length=1, max_length=MAX_QUESTION, description="The question, one line.")
]
Details = Annotated[
    str,
    Meta(max_length=MAX_DETAILS, description="More words shown under the question (optional)."),
]
OptionLabel = Annotated[str, Meta(min_length=1, max_length=200)]
FieldId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Input(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of a tool's arguments: a name the schema does not list is refused."""


class AskPermission(Input, forbid_unknown_fields=True, kw_only=True):
    """Ask the person whether a step may run; wait for Allow, Always allow or Deny."""

    tool_name: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=200,
            description='The tool or action that waits for the person, e.g. "Bash" or "deploy".',
        ),
    ]
    arguments: Annotated[
        dict[str, Any],
        Meta(description="The arguments it will run with, exactly as it will get them."),
    ] = {}
    reasons: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=2000)]],
        Meta(max_length=10, description="Why it needs the person, one sentence each."),
    ] = []
    irreversible: Annotated[
        bool, Meta(description="True when nothing can undo the step once it has run.")
    ] = False
    deadline_seconds: Deadline | None = None


class AskChoice(Input, forbid_unknown_fields=True, kw_only=True):
    """Ask the person to pick one option (or several, with multiple)."""

    question: Question
    options: Annotated[
        list[OptionLabel],
        Meta(min_length=1, max_length=8, description="The options, 1 to 8, each a short label."),
    ]
    multiple: Annotated[
        bool, Meta(description="True lets the person pick any number of the options.")
    ] = False
    details: Details = ""
    deadline_seconds: Deadline | None = None


class AskText(Input, forbid_unknown_fields=True, kw_only=True):
    """Ask the person for a line of text."""

    question: Question
    max_length: Annotated[
        int, Meta(ge=1, le=2000, description="The longest answer in characters (500 if omitted).")
    ] = 500
    details: Details = ""
    deadline_seconds: Deadline | None = None


class FieldIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """One field of a form."""

    id: Annotated[FieldId, Meta(description="The key of this field's value in the result.")]
    label: Annotated[str, Meta(min_length=1, max_length=200, description="Its words.")]
    kind: Annotated[
        Literal["text", "select", "switch"],
        Meta(description="text: a line of text; select: one of options; switch: true/false."),
    ]
    required: Annotated[bool, Meta(description="True: the person must fill it in.")] = False
    options: Annotated[
        list[OptionLabel], Meta(max_length=8, description="A select field's options (2 to 8).")
    ] = []
    max_length: Annotated[
        int, Meta(ge=1, le=2000, description="A text field's longest value (500 if omitted).")
    ] = 500


class AskForm(Input, forbid_unknown_fields=True, kw_only=True):
    """Ask the person to fill in a short form (up to 6 fields)."""

    title: Question
    fields: Annotated[list[FieldIn], Meta(min_length=1, max_length=6, description="The fields.")]
    details: Details = ""
    deadline_seconds: Deadline | None = None


class Notify(Input, forbid_unknown_fields=True, kw_only=True):
    """Show the person a notice in the chat; returns at once."""

    text: Annotated[
        str, Meta(min_length=1, max_length=MAX_DETAILS, description="What to tell the person.")
    ]


class PermissionPrompt(Struct, kw_only=True):
    """Claude Code's --permission-prompt-tool input (other keys it may send are ignored)."""

    tool_name: Annotated[
        str, Meta(min_length=1, max_length=200, description="The tool Claude Code wants to run.")
    ]
    input: Annotated[dict[str, Any], Meta(description="The tool's input.")] = {}
    tool_use_id: Annotated[str, Meta(max_length=200, description="The tool use's id.")] | None = (
        None
    )


@dataclass(frozen=True)
class ToolSpec:
    """A tool as ``tools/list`` shows it."""

    name: str
    title: str
    description: str
    input_type: type[Struct]
    read_only: bool = False
    schema: dict[str, Any] = field(default_factory=dict)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``$ref`` replaced by its definition, ``title`` dropped, and
    ``anyOf [X, null]`` (an omittable argument) read as ``X``."""
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and len(any_of) == 2 and {"type": "null"} in any_of:
        kept = next(a for a in any_of if a != {"type": "null"})
        return _inline(kept, defs)
    return {k: _inline(v, defs) for k, v in node.items() if k not in ("title", "default")}


def input_schema(kind: type[Struct]) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, whole (no ``$ref``), from its Struct."""
    whole = msgspec.json.schema(kind)
    schema: dict[str, Any] = _inline(whole, whole.get("$defs", {}))
    schema.pop("$defs", None)
    return schema


_DESCRIPTIONS: Final = {
    "ask_permission": "Ask the person (on their phone) whether a step may run, showing its "
    "arguments and why; blocks until they answer. Returns the decision: allow, always (allow "
    "this tool with these arguments for the rest of the session) or deny.",
    "ask_choice": "Ask the person (on their phone) to pick from 1 to 8 options; blocks until "
    "they answer. Returns the label picked (or labels, with multiple).",
    "ask_text": "Ask the person (on their phone) for a line of text; blocks until they answer. "
    "Returns the text.",
    "ask_form": "Ask the person (on their phone) to fill in a form of up to 6 fields (text, "
    "select, switch); blocks until they answer. Returns the values by field id.",
    "notify": "Tell the person something (a notice in the chat on their phone); does not wait.",
    "permission_prompt": "Claude Code's permission prompt tool (--permission-prompt-tool): asks "
    "the person whether the tool may run; returns Claude Code's allow/deny JSON.",
}

TOOLS: Final = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "ask_permission", "Ask permission", _DESCRIPTIONS["ask_permission"], AskPermission
        ),
        ToolSpec("ask_choice", "Ask to choose", _DESCRIPTIONS["ask_choice"], AskChoice),
        ToolSpec("ask_text", "Ask for text", _DESCRIPTIONS["ask_text"], AskText),
        ToolSpec("ask_form", "Ask to fill a form", _DESCRIPTIONS["ask_form"], AskForm),
        ToolSpec("notify", "Notify", _DESCRIPTIONS["notify"], Notify, read_only=True),
        ToolSpec(
            "permission_prompt",
            "Permission prompt",
            _DESCRIPTIONS["permission_prompt"],
            PermissionPrompt,
        ),
    )
}
for _spec in TOOLS.values():
    _spec.schema.update(input_schema(_spec.input_type))


class BadArguments(ValueError):
    """The arguments do not fit the tool's schema (the message says where)."""


def parse(spec: ToolSpec, arguments: dict[str, Any] | None) -> Struct:
    """The call's arguments as the tool's input type.

    Raises:
        BadArguments: they do not fit its schema, or a form's fields do not make a form.
    """
    try:
        value = msgspec.convert(arguments or {}, spec.input_type)
    except msgspec.ValidationError as exc:
        raise BadArguments(f"Invalid arguments for {spec.name}: {exc}") from None
    if isinstance(value, AskForm):
        _check_form(value)
    if isinstance(value, AskPermission | PermissionPrompt):
        given = value.arguments if isinstance(value, AskPermission) else value.input
        if len(json.dumps(given, default=str)) > MAX_ARGUMENTS:
            raise BadArguments(
                f"Invalid arguments for {spec.name}: the arguments are over "
                f"{MAX_ARGUMENTS} bytes as JSON"
            )
    return value


def _check_form(form: AskForm) -> None:
    ids = [f.id for f in form.fields]
    if len(set(ids)) != len(ids):
        raise BadArguments("Invalid arguments for ask_form: two fields share an id")
    for f in form.fields:
        if f.kind == "select" and len(f.options) < 2:
            raise BadArguments(
                f"Invalid arguments for ask_form: select field {f.id!r} needs 2 to 8 options"
            )


# --- the ask each call raises -------------------------------------------------------------

PERMISSION_OPTIONS: Final = [
    Option(id="allow", label="Allow", role="allow"),
    Option(id="always", label="Always allow in this session", role="always"),
    Option(id="deny", label="Deny", role="deny"),
]


def permission_ask(
    tool_name: str, arguments: dict[str, Any], reasons: list[str], irreversible: bool
) -> AskDraft:
    """The permission ask for a call of ``tool_name`` (S1: arguments with their origin)."""
    return asks.permission(
        label(f"Allow {tool_name}?"),
        PERMISSION_OPTIONS,
        arguments=[Argument(name=label(k), value=v, origin="model") for k, v in arguments.items()],
        reasons=[label(r) for r in reasons],
        irreversible=irreversible,
    )


def _numbered(labels: list[str]) -> list[Option]:
    """Options ``o1`` …, in order."""
    return [Option(id=f"o{n}", label=o) for n, o in enumerate(labels, start=1)]


def choice_ask(call: AskChoice) -> AskDraft:
    """The choice ask (options ``o1`` …, in order)."""
    return asks.choice(
        label(call.question), _numbered(call.options), multiple=call.multiple, text=call.details
    )


def text_ask(call: AskText) -> AskDraft:
    """The text ask, with the call's limit."""
    return asks.text(label(call.question), max_length=call.max_length, text=call.details)


def form_ask(call: AskForm) -> AskDraft:
    """The form ask: the call's fields, a select's options ``o1`` …"""
    fields = [
        FormField(
            id=f.id,
            kind=f.kind,
            label=f.label,
            required=f.required,
            options=_numbered(f.options),
            max_length=f.max_length if f.kind == "text" else None,
        )
        for f in call.fields
    ]
    return asks.form(label(call.title), fields, text=call.details)


# --- the result each resolution becomes ----------------------------------------------------

NOT_ANSWERED: Final = {
    "expired": "The person did not answer before the deadline.",
    "decided": "The question ended without an answer (the session ended or it was withdrawn).",
    "stopped": "The person stopped this question without answering.",
}


def unanswered(how: str) -> dict[str, Any]:
    """The result of an ask that ended without the person's answer."""
    return {"outcome": how, "message": NOT_ANSWERED.get(how, "The question ended unanswered.")}


def _labels(options: list[Option], picked: list[str]) -> list[str]:
    by_id = {o.id: o.label for o in options}
    return [by_id[p] for p in picked if p in by_id]


def answered(
    call: Struct, answer: Answer, options: list[Option], fields: list[FormField]
) -> dict[str, Any]:
    """The result of an ask the person answered (the answer fits it: the SDK checked)."""
    if isinstance(call, AskPermission):
        return {"outcome": "answered", "decision": answer.option or "deny"}
    if isinstance(call, AskChoice):
        if call.multiple:
            picked = answer.options if answer.options is not None else [answer.option or ""]
            return {"outcome": "answered", "choices": _labels(options, picked)}
        return {"outcome": "answered", "choice": _labels(options, [answer.option or ""])[0]}
    if isinstance(call, AskText):
        return {"outcome": "answered", "text": answer.text or ""}
    values: dict[str, str | bool] = {}
    for f in fields:
        given = (answer.fields or {}).get(f.id)
        if given is None:
            continue
        if f.kind == "select" and isinstance(given, str):
            found = _labels(f.options, [given])
            values[f.id] = found[0] if found else given
        else:
            values[f.id] = given
    return {"outcome": "answered", "values": values}


ALWAYS_DENIED: Final = "The person denied this on their phone."


def prompt_result(decision: str | None, how: str, call: PermissionPrompt) -> dict[str, Any]:
    """Claude Code's expected permission-prompt JSON for a decision (or its absence)."""
    if decision in ("allow", "always"):
        return {"behavior": "allow", "updatedInput": call.input}
    if decision == "deny":
        return {"behavior": "deny", "message": ALWAYS_DENIED}
    return {"behavior": "deny", "message": NOT_ANSWERED.get(how, "No answer.")}


def rule_key(tool_name: str, arguments: dict[str, Any]) -> str:
    """An "Always allow" rule: this tool with exactly these arguments."""
    return tool_name + "\0" + json.dumps(arguments, sort_keys=True, default=str)
