"""A LangGraph interrupt as asks, and an answer as its resume value: the bridge's mapping,
pure (no LangGraph import, no I/O). An interrupt is given as ``Pending`` (its id, value and
JSON ``response_schema``); each ask it makes is an ``AskPlan``.

Ids: ``{thread}:{interrupt}`` (stable across restarts of either side); ``…:attempt{n}`` when
the interrupt came back after a resume whose effect is unknown; ``…:{k}`` for the k-th action
of a batched tool approval.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from bridges.kit import asks
from bridges.kit.asks import AskDraft
from bridges.kit.fit import cut, label, safe_id
from wire.messages import Answer, Argument, FormField, Option, ToolRef

LEFT_OUT: Final = "Edit and respond are not offered on the phone: approve or reject."
SHOWN_LIMIT: Final = 4_000  # characters of an interrupt's value shown as JSON


class Unfit(ValueError):
    """An answer that does not fit the interrupt: its message is the reason (a 400)."""


@dataclass(frozen=True)
class Pending:
    """One interrupt still waiting: its id, value and JSON ``response_schema``."""

    id: str
    value: Any
    schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class AskPlan:
    """One ask an interrupt makes: ``how`` it maps (``call``: a per-call tool approval;
    ``batch``: action ``slot`` of ``of``; ``schema``; ``kind``; ``text``), its draft, and the
    digest of the interrupt's content it was made from."""

    ask_id: str
    interrupt_id: str
    attempt: int
    how: str
    draft: AskDraft
    digest: str
    schema: dict[str, Any] | None = None
    slot: int = 0
    of: int = 1


def digest(pending: Pending) -> str:
    """The interrupt's content, hashed: another value or schema is another content."""
    raw = json.dumps([pending.value, pending.schema], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def ask_id(thread: str, interrupt_id: str, attempt: int = 1, slot: int | None = None) -> str:
    """The wire id of an interrupt's ask (``slot``: a batched action, from 1)."""
    base = f"{thread}:{interrupt_id}"
    if attempt > 1:
        base += f":attempt{attempt}"
    return base if slot is None else f"{base}:{slot}"


def plan(thread: str, pending: Pending, attempt: int = 1) -> list[AskPlan]:
    """The asks ``pending`` makes in ``thread``'s conversation, in order."""
    value, schema = pending.value, pending.schema
    made = digest(pending)

    def one(how: str, draft: AskDraft) -> list[AskPlan]:
        aid = ask_id(thread, pending.id, attempt)
        return [AskPlan(aid, pending.id, attempt, how, draft, made, schema)]

    if isinstance(value, dict) and value.get("type") == "tool_approval":
        return one("call", _approval(value, value.get("description", ""), schema))
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        actions = [a for a in value["action_requests"] if isinstance(a, dict)]
        return [
            AskPlan(
                ask_id(thread, pending.id, attempt, k),
                pending.id,
                attempt,
                "batch",
                _approval(action, action.get("description", ""), None, k, len(actions)),
                made,
                None,
                k,
                len(actions),
            )
            for k, action in enumerate(actions, start=1)
        ]
    if schema is not None:
        return one("schema", _from_schema(_title(value), schema))
    if isinstance(value, dict) and value.get("kind") in ("permission", "choice", "text", "form"):
        return one("kind", _from_kind(value))
    if isinstance(value, str):
        return one("text", asks.text(label(value) or "The graph asks"))
    shown = cut(json.dumps(value, ensure_ascii=False, indent=1, default=str), SHOWN_LIMIT)
    return one("text", asks.text("The graph asks", text=shown))


def _title(value: Any) -> str:
    if isinstance(value, str):
        return label(value)
    if isinstance(value, dict):
        for key in ("title", "question", "text"):
            if isinstance(value.get(key), str):
                return label(value[key])
    return label(json.dumps(value, ensure_ascii=False, default=str))


def _approval(
    action: dict[str, Any],
    description: object,
    schema: dict[str, Any] | None,
    slot: int = 0,
    of: int = 1,
) -> AskDraft:
    name = str(action.get("name", "tool"))
    args = action.get("args") if isinstance(action.get("args"), dict) else {}
    assert isinstance(args, dict)
    call = str(action.get("tool_call_id") or f"{name}-{slot}")
    text = str(description or "")
    text = f"{text}\n\n{LEFT_OUT}".strip()
    if of > 1:
        text = f"Action {slot} of {of}. {text}"
    options = [o for o in asks.ALLOW_DENY if _allowed(schema, o.id)]
    return asks.permission(
        label(f"Run {name}?"),
        options or asks.ALLOW_DENY,
        text=text,
        tool=ToolRef(call_id=safe_id("call", call), name=label(name) or "tool"),
        arguments=[
            Argument(name=label(k) or "_", value=v, origin="model") for k, v in args.items()
        ],
    )


_DECISION_OF: Final = {"allow": "approve", "deny": "reject"}


def _allowed(schema: dict[str, Any] | None, option: str) -> bool:
    """Whether a per-call schema lets the decision of ``option`` through (no schema: yes)."""
    if schema is None:
        return True
    consts = set(_consts(schema))
    return not consts or _DECISION_OF[option] in consts


def _consts(node: object) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("const"), str):
            found.append(node["const"])
        for child in node.values():
            found += _consts(child)
    elif isinstance(node, list):
        for child in node:
            found += _consts(child)
    return found


def _from_kind(value: dict[str, Any]) -> AskDraft:
    """``{"kind": …, "title", "text", "options", "fields", "multiple", "max_length"}``."""
    title = label(str(value.get("title", ""))) or "The graph asks"
    text = str(value.get("text", ""))
    options = [
        Option(id=str(o["id"]), label=label(str(o.get("label", o["id"]))), role=o.get("role"))
        for o in value.get("options", [])
        if isinstance(o, dict) and "id" in o
    ]
    kind = value["kind"]
    if kind == "permission":
        return asks.permission(title, options or asks.ALLOW_DENY, text=text)
    if kind == "choice":
        return asks.choice(title, options, text=text, multiple=bool(value.get("multiple")))
    if kind == "form":
        fields = [_field(f) for f in value.get("fields", []) if isinstance(f, dict) and "id" in f]
        return asks.form(title, fields, text=text)
    limit = value.get("max_length")
    return asks.text(title, text=text, max_length=limit if isinstance(limit, int) else None)


def _field(raw: dict[str, Any]) -> FormField:
    options = [
        Option(id=str(o["id"]), label=label(str(o.get("label", o["id"]))))
        for o in raw.get("options", [])
        if isinstance(o, dict) and "id" in o
    ]
    return FormField(
        id=str(raw["id"]),
        kind=str(raw.get("kind", "text")),
        label=label(str(raw.get("label", raw["id"]))),
        required=bool(raw.get("required")),
        options=options,
    )


def _from_schema(title: str, schema: dict[str, Any]) -> AskDraft:
    """A form for an object, a choice for an enum, else a text card."""
    title = title or label(str(schema.get("title", ""))) or "The graph asks"
    text = str(schema.get("description", ""))
    props = schema.get("properties")
    if schema.get("type") == "object" and isinstance(props, dict):
        required = set(schema.get("required", []))
        fields = [_schema_field(k, p, k in required) for k, p in props.items()]
        return asks.form(title, fields, text=text)
    if isinstance(schema.get("enum"), list):
        options = [Option(id=str(v), label=label(str(v))) for v in schema["enum"]]
        return asks.choice(title, options, text=text)
    return asks.text(title, text=text)


def _schema_field(name: str, prop: object, required: bool) -> FormField:
    prop = prop if isinstance(prop, dict) else {}
    shown = label(str(prop.get("title", name))) or name
    if isinstance(prop.get("enum"), list):
        options = [Option(id=str(v), label=label(str(v))) for v in prop["enum"]]
        return FormField(id=name, kind="select", label=shown, required=required, options=options)
    kind = "switch" if prop.get("type") == "boolean" else "text"
    return FormField(id=name, kind=kind, label=shown, required=required)


def value_of(p: AskPlan, answer: Answer) -> Any:
    """What the answer to ``p`` resumes the interrupt with (a batched action: its decision).

    Raises:
        Unfit: the answer does not fit the interrupt's schema.
    """
    if p.how in ("call", "batch"):
        return {"type": _DECISION_OF.get(answer.option or "", "reject")}
    if p.how == "kind":
        body = {
            "option": answer.option,
            "options": answer.options,
            "text": answer.text,
            "fields": answer.fields,
        }
        return {k: v for k, v in body.items() if v is not None}
    if p.how == "schema":
        assert p.schema is not None
        return convert(p.schema, _raw(p, answer))
    return answer.text or ""


def _raw(p: AskPlan, answer: Answer) -> object:
    if p.draft.kind == "form":
        return dict(answer.fields or {})
    if p.draft.kind == "choice":
        return answer.option
    return answer.text


def resume_value(p: AskPlan, decisions: list[Any]) -> Any:
    """The interrupt's resume value once every ask it made is answered (in slot order)."""
    return {"decisions": decisions} if p.how == "batch" else decisions[0]


_NUMBERS: Final = {"integer": int, "number": float}


def convert(schema: dict[str, Any], raw: object, where: str = "the answer") -> Any:
    """``raw`` checked against ``schema`` (types, enums, required, bounds) and converted to its
    types (a form's ``"3"`` → ``3``).

    Raises:
        Unfit: it does not fit, saying why.
    """
    kind = schema.get("type")
    if kind == "object" and isinstance(schema.get("properties"), dict):
        if not isinstance(raw, dict):
            raise Unfit(f"{where} must be an object")
        out: dict[str, Any] = {}
        for name in schema.get("required", []):
            if raw.get(name) in (None, ""):
                raise Unfit(f"{name} is required")
        for name, prop in schema["properties"].items():
            if name in raw and raw[name] not in (None, ""):
                out[name] = convert(prop if isinstance(prop, dict) else {}, raw[name], name)
        return out
    value = _scalar(kind, raw, where)
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        raise Unfit(f"{where} must be one of {', '.join(map(str, enum))}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(low, int | float) and value < low:
            raise Unfit(f"{where} must be at least {low}")
        if isinstance(high, int | float) and value > high:
            raise Unfit(f"{where} must be at most {high}")
    return value


def _scalar(kind: object, raw: object, where: str) -> Any:
    if kind in _NUMBERS:
        try:
            number = _NUMBERS[str(kind)](str(raw).strip())
        except ValueError:
            article = "an integer" if kind == "integer" else "a number"
            raise Unfit(f"{where} must be {article}") from None
        return number
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        if str(raw).lower() in ("true", "false"):
            return str(raw).lower() == "true"
        raise Unfit(f"{where} must be true or false")
    if kind == "string" and not isinstance(raw, str):
        raise Unfit(f"{where} must be text")
    return raw


UNANSWERED: Final = {
    "expired": "Timed out before an answer.",
    "stopped": "Stopped from the phone before an answer.",
}


def unanswered_value(p: AskPlan, how: str) -> Any:
    """What an ask ended without an answer (``expired``, ``stopped``) resumes its interrupt
    with: a tool approval is rejected, with a message; any other interrupt gets ``None``."""
    if p.how in ("call", "batch"):
        return {"type": "reject", "message": UNANSWERED[how]}
    return None
