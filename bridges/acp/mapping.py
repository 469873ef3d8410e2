"""ACP → wire v1, pure: permission options to roles, tool calls to ``tool`` items, plans to
progress, elicitation schemas to asks (and answers back, checked against the schema)."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Final

from bridges.acp.schema import ContentBlock, ElicitationSchema, PermissionOption, ToolCallContent
from bridges.kit.fit import cut, label, tool_text
from bridges.kit.fit import safe_id as safe_id  # the kit's, named here too
from wire.messages import Answer, Ask, FormField, Option, Progress, Step

# ACP option kinds → wire roles (spec A4). The agent's own label stays as the muted line; its
# option ids are never read for meaning: agents name them freely.
ROLE_OF_KIND: Final = {
    "allow_once": "allow",
    "allow_always": "always",
    "reject_once": "deny",
    "reject_always": "deny",
}
TOOL_STATUS: Final = {
    "pending": "running",
    "in_progress": "running",
    "completed": "done",
    "failed": "failed",
}
STEP_STATE: Final = {"pending": "pending", "in_progress": "running", "completed": "done"}
STOP_NOTICES: Final = {
    "refusal": "The agent refused to continue this turn.",
    "max_tokens": "The agent reached its output limit and ended this turn.",
    "max_turn_requests": "The agent reached its limit of requests for one turn and ended it.",
}
OUTPUT_LIMIT: Final = 200_000  # characters of a tool's output kept in its item
TEXT_CAP: Final = 2000  # spec A4: the longest text answer


def permission_options(options: list[PermissionOption]) -> tuple[list[Option], dict[str, str]]:
    """The wire options (ids ``o1``, ``o2`` …, roles from kinds; an unknown kind has no role,
    which makes the ask unanswerable from the phone, A7) and the map back to ACP option ids."""
    wire: list[Option] = []
    back: dict[str, str] = {}
    for n, opt in enumerate(options, start=1):
        oid = f"o{n}"
        wire.append(Option(id=oid, label=label(opt.name), role=ROLE_OF_KIND.get(opt.kind)))
        back[oid] = opt.option_id
    return wire, back


def tool_status(status: str | None) -> str | None:
    """A tool call's status in wire words (an unknown one is kept: it shows as text)."""
    if status is None:
        return None
    return TOOL_STATUS.get(status, label(status))


def tool_output(content: list[ToolCallContent] | None, raw_output: Any = None) -> str | None:
    """A tool call's content as text: text blocks as they are, diffs as unified diffs, a
    terminal by its id; else its raw output."""
    parts: list[str] = []
    for entry in content or []:
        if entry.type == "diff" and entry.path is not None:
            old = (entry.old_text or "").splitlines(keepends=True)
            new = (entry.new_text or "").splitlines(keepends=True)
            diff = difflib.unified_diff(old, new, f"a/{entry.path}", f"b/{entry.path}")
            parts.append("".join(line if line.endswith("\n") else line + "\n" for line in diff))
        elif entry.type == "content" and entry.content is not None:
            parts.append(block_text(entry.content))
        elif entry.type == "terminal":
            parts.append(f"(terminal {entry.terminal_id or ''})")
    if not parts and raw_output is not None:
        parts.append(tool_text(raw_output))
    if not parts:
        return None
    return cut("\n".join(p.rstrip("\n") for p in parts), OUTPUT_LIMIT)


def block_text(block: ContentBlock) -> str:
    """A content block as text (a short notice for what the phone cannot show)."""
    if block.type == "text":
        return block.text or ""
    return block_notice(block)


def block_notice(block: ContentBlock) -> str:
    """The notice for a block that is not text."""
    if block.type == "image":
        return "The agent sent an image; images are not shown on the phone."
    if block.type == "audio":
        return "The agent sent audio; audio is not played on the phone."
    if block.type in ("resource_link", "resource"):
        uri = block.uri or (block.resource or {}).get("uri") or ""
        return label(f"The agent attached {block.name or uri or 'a resource'}.")
    return label(f"The agent sent content of a kind the phone does not show ({block.type}).")


def plan_progress(entries: list[Any]) -> Progress | None:
    """A plan as the header's steps (none: no progress)."""
    steps = [
        Step(label=label(e.content) or "…", state=STEP_STATE.get(e.status, "pending"))
        for e in entries[:100]
    ]
    return Progress(steps=steps) if steps else None


# --- elicitation (form mode) -----------------------------------------------------------------


@dataclass(frozen=True)
class FormAsk:
    """How an elicitation shows on the phone, and how to read its answer back.

    ``names`` maps each wire field id (or ``""`` for a single-property ask) to the schema's
    property name; ``values`` maps a wire option id to the value it stands for."""

    kind: str
    options: list[Option] = field(default_factory=list)
    multiple: bool = False
    max_length: int | None = None
    fields: list[FormField] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)


def _enum(prop: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(value, label) pairs of a string enum (``enum`` or ``oneOf``), else None."""
    one_of = prop.get("oneOf")
    if isinstance(one_of, list) and one_of:
        pairs = [
            (str(o.get("const")), str(o.get("title") or o.get("const")))
            for o in one_of
            if isinstance(o, dict) and isinstance(o.get("const"), str)
        ]
        return pairs or None
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return [(v, v) for v in enum]
    return None


def _items_enum(prop: dict[str, Any]) -> list[tuple[str, str]] | None:
    items = prop.get("items")
    if not isinstance(items, dict):
        return None
    any_of = items.get("anyOf")
    if isinstance(any_of, list):
        return _enum({"oneOf": any_of})
    return _enum(items)


def _options(pairs: list[tuple[str, str]], prefix: str) -> tuple[list[Option], dict[str, str]]:
    opts = [Option(id=f"{prefix}{n}", label=label(lab)) for n, (_, lab) in enumerate(pairs, 1)]
    return opts, {f"{prefix}{n}": value for n, (value, _) in enumerate(pairs, 1)}


def _max_length(prop: dict[str, Any]) -> int | None:
    value = prop.get("maxLength")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return min(value, TEXT_CAP)
    return None


def form_ask(schema: ElicitationSchema) -> FormAsk:
    """The ask for a requested schema: one enum property is a choice (an array of enum values
    a choice with ``multiple``), one text or number property a text ask; anything else a form
    (a property the phone cannot show gets a field kind it does not know, so the whole ask is
    unanswerable, A7)."""
    props = list(schema.properties.items())
    if len(props) == 1:
        name, prop = props[0]
        kind = prop.get("type")
        pairs = _enum(prop) if kind == "string" else None
        if pairs is not None:
            opts, picks = _options(pairs, "v")
            return FormAsk(kind="choice", options=opts, names={"": name}, values=picks)
        multi = _items_enum(prop) if kind == "array" else None
        if multi is not None:
            opts, picks = _options(multi, "v")
            return FormAsk(
                kind="choice", options=opts, multiple=True, names={"": name}, values=picks
            )
        if kind in ("string", "number", "integer"):
            return FormAsk(kind="text", max_length=_max_length(prop), names={"": name})
    fields: list[FormField] = []
    names: dict[str, str] = {}
    values: dict[str, str] = {}
    for n, (name, prop) in enumerate(props, start=1):
        fid = f"f{n}"
        names[fid] = name
        title = label(str(prop.get("title") or name))
        required = name in schema.required
        kind = prop.get("type")
        pairs = _enum(prop) if kind == "string" else None
        if pairs is not None:
            opts, vals = _options(pairs, f"{fid}v")
            values.update(vals)
            fields.append(
                FormField(id=fid, kind="select", label=title, required=required, options=opts)
            )
        elif kind in ("string", "number", "integer"):
            fields.append(
                FormField(
                    id=fid,
                    kind="text",
                    label=title,
                    required=required,
                    max_length=_max_length(prop),
                )
            )
        elif kind == "boolean":
            fields.append(FormField(id=fid, kind="switch", label=title, required=required))
        else:  # a multi-select or an unknown type: no field of ours shows it
            fields.append(
                FormField(id=fid, kind=f"acp-{label(str(kind))}", label=title, required=required)
            )
    return FormAsk(kind="form", fields=fields, names=names, values=values)


def _check_value(name: str, prop: dict[str, Any], value: object) -> str | None:
    """Why ``value`` (already converted) does not fit ``prop``, or None."""
    kind = prop.get("type")
    title = str(prop.get("title") or name)
    if kind == "string" and isinstance(value, str):
        if _enum(prop) is None:
            min_len = prop.get("minLength")
            if isinstance(min_len, int) and len(value) < min_len:
                return f"{title}: at least {min_len} characters."
            max_len = prop.get("maxLength")
            if isinstance(max_len, int) and len(value) > max_len:
                return f"{title}: at most {max_len} characters."
            pattern = prop.get("pattern")
            if isinstance(pattern, str):
                try:
                    if re.search(pattern, value) is None:
                        return f"{title}: does not match the expected pattern."
                except re.error:
                    pass  # a pattern Python cannot read: the agent checks it
            problem = _check_format(prop.get("format"), value)
            if problem:
                return f"{title}: {problem}"
    elif kind in ("number", "integer") and isinstance(value, int | float):
        low, high = prop.get("minimum"), prop.get("maximum")
        if isinstance(low, int | float) and value < low:
            return f"{title}: at least {low}."
        if isinstance(high, int | float) and value > high:
            return f"{title}: at most {high}."
    elif kind == "array" and isinstance(value, list):
        low, high = prop.get("minItems"), prop.get("maxItems")
        if isinstance(low, int) and len(value) < low:
            return f"{title}: pick at least {low}."
        if isinstance(high, int) and len(value) > high:
            return f"{title}: pick at most {high}."
    return None


def _check_format(fmt: object, value: str) -> str | None:
    if fmt == "email" and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", value):
        return "not an email address."
    if fmt == "uri" and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
        return "not an address (URI)."
    try:
        if fmt == "date":
            date.fromisoformat(value)
        elif fmt == "date-time":
            datetime.fromisoformat(value)
    except ValueError:
        return f"not a {fmt}."
    return None


def _convert(prop: dict[str, Any], text: str) -> tuple[object, str | None]:
    """A typed value from a text answer: numbers parsed."""
    kind = prop.get("type")
    if kind == "integer":
        try:
            return int(text.strip()), None
        except ValueError:
            return None, "a whole number is needed."
    if kind == "number":
        try:
            number = float(text.strip())
        except ValueError:
            return None, "a number is needed."
        if not math.isfinite(number):
            return None, "a number is needed."
        return number, None
    return text, None


def form_content(
    schema: ElicitationSchema, form: FormAsk, ask: Ask, answer: Answer
) -> tuple[dict[str, object], str | None]:
    """The ``content`` of an ``accept`` for ``answer``, or a sentence saying why the answer
    does not fit the schema (nothing is sent then)."""
    props = schema.properties
    content: dict[str, object] = {}
    if form.kind in ("choice", "text"):
        name = form.names[""]
        prop = props[name]
        value: object
        if form.kind == "choice" and form.multiple:
            picked = answer.options if answer.options is not None else [answer.option or ""]
            value = [form.values[p] for p in picked if p in form.values]
        elif form.kind == "choice":
            value = form.values.get(answer.option or "", "")
        else:
            text = answer.text or ""
            if text == "" and name not in schema.required:
                return {}, None
            value, problem = _convert(prop, text)
            if problem:
                return {}, f"{prop.get('title') or name}: {problem}"
        problem = _check_value(name, prop, value)
        if problem:
            return {}, problem
        return {name: value}, None
    given = answer.fields or {}
    for fdef in ask.fields:
        prop_name = form.names.get(fdef.id)
        if prop_name is None or fdef.id not in given:
            continue
        name = prop_name
        raw = given[fdef.id]
        prop = props[name]
        if fdef.kind == "select" and isinstance(raw, str):
            value = form.values.get(raw, raw)
        elif fdef.kind == "switch":
            value = raw
        elif isinstance(raw, str):
            if raw == "" and not fdef.required:
                continue
            value, problem = _convert(prop, raw)
            if problem:
                return {}, f"{fdef.label}: {problem}"
        else:
            value = raw
        problem = _check_value(name, prop, value)
        if problem:
            return {}, problem
        content[name] = value
    return content, None
