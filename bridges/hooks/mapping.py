"""Hooks ⇄ wire, pure: a hook's JSON (Claude Code's ``http`` hooks, Codex's command hooks)
read and checked; the cards it raises; the person's answer as the hook's exact JSON reply; a
session's title; a transcript's JSONL lines as items.

The shapes are Claude Code's (hooks reference, 2.1.x) and Codex's (0.17x), kept as fixtures
in ``fixtures/hooks/``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Final

from bridges.kit import asks
from bridges.kit.asks import AskDraft
from bridges.kit.fit import cut, label, tool_text
from wire.messages import Argument, NoticePush, Option, Words

CLIENTS: Final = {"claude-code": "Claude Code", "codex": "Codex"}
QUESTION_TOOL: Final = "AskUserQuestion"
OUTPUT_LIMIT: Final = 20_000  # characters of a tool's output kept on its item
ARGUMENT_LIMIT: Final = 20_000  # characters of one argument shown on a card (a file's content)

# What the chat shows (docs/claude-code-and-codex.md), in English; the phone shows the
# gateway's catalogue's wording of each in its own language (``Item.words``, wire §7.11).
DESK_FIRST: Final = "Answered at the desk: {client} went on without this card."
GONE: Final = "{client} stopped waiting for this card (the session ended or the hook timed out)."
RESTARTED: Final = (
    "The hooks bridge restarted: {client} stopped waiting for this card and asks at the desk."
)
QUEUED: Final = "Queued: {client} gets this message when it stops."
SENT: Final = "Sent to {client} as its next instruction."
ENDED: Final = "{client}'s session ended ({reason})."
WAITING: Final = "{client} is waiting in {folder}"
FINISHED: Final = "{client} finished in {folder}"
SAY_KEYS: Final = {
    DESK_FIRST: "say_hooks_desk_first",
    GONE: "say_hooks_gone",
    RESTARTED: "say_hooks_restarted",
    QUEUED: "say_hooks_queued",
    SENT: "say_hooks_sent",
    ENDED: "say_hooks_ended",
    WAITING: "say_hooks_waiting",
    FINISHED: "say_hooks_finished",
}
LINE_MAX: Final = 120  # a push's line (P2)
DENIED: Final = "Denied on the phone."


class BadHook(ValueError):
    """A hook body the bridge refuses (answered 400 with this text)."""


@dataclass(frozen=True)
class Hook:
    """One hook call: who sent it, the event, the session, and the whole JSON."""

    client: str
    event: str
    session: str
    body: Mapping[str, Any]

    @property
    def cwd(self) -> str:
        return string(self.body.get("cwd"))

    @property
    def transcript(self) -> str:
        return string(self.body.get("transcript_path"))

    @property
    def tool(self) -> str:
        return string(self.body.get("tool_name"))

    @property
    def tool_input(self) -> Mapping[str, Any]:
        found = self.body.get("tool_input")
        return found if isinstance(found, Mapping) else {}

    @property
    def who(self) -> str:
        """The client's name, as the chat says it."""
        return CLIENTS.get(self.client, self.client)


_NEEDS: Final = {
    "PermissionRequest": ("tool_name", "tool_input"),
    "PreToolUse": ("tool_name", "tool_input"),
    "PostToolUse": ("tool_name", "tool_input"),
    "UserPromptSubmit": ("prompt",),
}


def parse(client: str, raw: bytes) -> Hook:
    """A hook's body read and checked.

    Raises:
        BadHook: not JSON, not an object, or a field the event needs is missing.
    """
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadHook(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadHook("the body is not a JSON object")
    for name in ("hook_event_name", "session_id"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise BadHook(f"the body has no {name}")
    event = body["hook_event_name"]
    for name in _NEEDS.get(event, ()):
        if name not in body:
            raise BadHook(f"{event} without {name}")
    if "tool_input" in body and not isinstance(body["tool_input"], dict):
        raise BadHook("tool_input is not an object")
    return Hook(client=client, event=event, session=body["session_id"], body=body)


def string(value: object) -> str:
    return value if isinstance(value, str) else ""


def call_key(tool: str, tool_input: Mapping[str, Any]) -> str:
    """One key for a tool and its input, whatever the order of its fields."""
    text = json.dumps([tool, tool_input], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def folder(cwd: str) -> str:
    """The folder's last part (``shop`` for ``/home/ana/src/shop``)."""
    return PurePath(cwd).name or cwd or "?"


def title(who: str, cwd: str, prompt: str = "") -> str:
    """A session's title: the client, its folder, its first prompt's first line."""
    first = prompt.strip().splitlines()[0] if prompt.strip() else ""
    return label(" · ".join(p for p in (who, folder(cwd) if cwd else "", first) if p))


# --- permission ---------------------------------------------------------------------------


def suggestions(hook: Hook) -> list[dict[str, Any]]:
    """The ``permission_suggestions`` the client sent (objects only)."""
    found = hook.body.get("permission_suggestions")
    if not isinstance(found, list):
        return []
    return [s for s in found if isinstance(s, dict)]


def _rules(found: Sequence[Mapping[str, Any]]) -> str:
    said = []
    for s in found:
        for rule in s.get("rules") or []:
            if isinstance(rule, dict):
                content = rule.get("ruleContent")
                tool = rule.get("toolName", "")
                said.append(f"{tool}({content})" if content else str(tool))
        if s.get("type") == "setMode":
            said.append(f"mode {s.get('mode')}")
        if s.get("type") == "addDirectories":
            said.extend(str(d) for d in s.get("directories") or [])
    return ", ".join(said) or "as suggested"


def permission_draft(hook: Hook) -> AskDraft:
    """The permission card: the tool, its input as arguments (S1), the reason given, and
    "Always allow" where the client suggests rules."""
    # The phone words each option by its role in its own language (A4); the agent's label,
    # shown muted below, is only the rules "Always allow" keeps.
    options = [Option(id="allow", label="", role="allow")]
    found = suggestions(hook)
    if found:
        options.append(Option(id="always", label=label(_rules(found)), role="always"))
    options.append(Option(id="deny", label="", role="deny"))
    tool_input = hook.tool_input
    arguments = [
        Argument(
            name=label(str(k)) or "?",
            value=cut(v, ARGUMENT_LIMIT) if isinstance(v, str) else v,
            origin="model",
        )
        for k, v in tool_input.items()
    ]
    reason = string(hook.body.get("reason")) or string(tool_input.get("description"))
    shown = string(tool_input.get("command")) or tool_text(dict(tool_input))
    return asks.permission(
        label(f"{hook.who} · {hook.tool}: {shown}"),
        options,
        arguments=arguments,
        reasons=[label(reason)] if reason else [],
    )


def permission_reply(hook: Hook, option: str | None) -> dict[str, Any]:
    """The hook's answer for the option picked (``None``: no decision, the desk decides)."""
    if option is None:
        return {}
    if option == "deny":
        decision: dict[str, Any] = {"behavior": "deny", "message": DENIED}
    else:
        decision = {"behavior": "allow"}
        if option == "always":
            decision["updatedPermissions"] = [
                {**s, "destination": "session"} for s in suggestions(hook)
            ]
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


# --- AskUserQuestion ----------------------------------------------------------------------


def questions(hook: Hook) -> list[Mapping[str, Any]]:
    """The questions of an ``AskUserQuestion`` call."""
    found = hook.tool_input.get("questions")
    if not isinstance(found, list):
        return []
    return [q for q in found if isinstance(q, dict) and isinstance(q.get("question"), str)]


def question_drafts(hook: Hook) -> list[AskDraft]:
    """One choice card a question (``multiSelect`` kept)."""
    drafts = []
    for q in questions(hook):
        options = [
            Option(id=f"o{n}", label=label(string(o.get("label"))) or f"#{n + 1}")
            for n, o in enumerate(q.get("options") or [])
            if isinstance(o, dict)
        ]
        text = "\n".join(
            f"{string(o.get('label'))}: {string(o.get('description'))}"
            for o in q.get("options") or []
            if isinstance(o, dict) and o.get("description")
        )
        drafts.append(
            asks.choice(
                label(q["question"]),
                options,
                text=cut(text, 2000),
                multiple=bool(q.get("multiSelect")),
            )
        )
    return drafts


def question_reply(hook: Hook, picked: Sequence[Sequence[str] | None]) -> dict[str, Any]:
    """The hook's answer: allowed, with the answers in ``updatedInput`` (labels, a multiple
    choice's joined by ", "); any question unanswered: no decision."""
    if any(p is None for p in picked):
        return {}
    answers: dict[str, str] = {}
    for q, ids in zip(questions(hook), picked, strict=True):
        assert ids is not None
        opts = [o for o in q.get("options") or [] if isinstance(o, dict)]
        labels = [string(opts[int(i[1:])].get("label")) for i in ids if i[1:].isdigit()]
        answers[q["question"]] = ", ".join(labels)
    updated = {**hook.tool_input, "answers": answers}
    return {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow", "updatedInput": updated},
        }
    }


def say(template: str, **args: str) -> tuple[str, Words]:
    """A notice's English text and its catalogue words (``template`` one of ``SAY_KEYS``)."""
    return template.format(**args), Words(key=SAY_KEYS[template], args=args)


def push_line(text: str) -> NoticePush:
    """A notice's push whose line is ``text``'s first line (P2: ≤ 120 shown); its title is
    the notice's own words."""
    first = next((n for n in text.strip().splitlines() if n.strip()), "")
    return NoticePush(line=label(first, LINE_MAX) or None)


def stop_reply(message: str) -> dict[str, Any]:
    """A ``Stop`` hook's answer giving the client ``message`` as its next instruction."""
    return {"decision": "block", "reason": message}


# --- transcript ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    """A text of the person (``user``) or of the model (``reply``)."""

    id: str
    kind: str
    text: str


@dataclass(frozen=True)
class ToolUse:
    """The model called a tool."""

    id: str
    name: str
    input: Any


@dataclass(frozen=True)
class ToolResult:
    """A tool's result."""

    id: str
    output: str
    error: bool


Entry = Said | ToolUse | ToolResult


def entries(line: Mapping[str, Any]) -> list[Entry]:
    """What one transcript line holds: texts, tool calls, tool results (Claude Code's JSONL:
    ``{"type": "user"|"assistant", "uuid", "message": {"content": …}}``; Codex's rollout:
    ``{"type": "response_item", "payload": …}``; other lines: none)."""
    kind = line.get("type")
    if kind == "response_item":
        return _codex_entries(line)
    message = line.get("message")
    uuid = string(line.get("uuid"))
    if kind not in ("user", "assistant") or not isinstance(message, dict) or not uuid:
        return []
    if line.get("isMeta") or line.get("isSidechain"):
        return []
    content = message.get("content")
    said = "user" if kind == "user" else "reply"
    if isinstance(content, str):
        return [Said(uuid, said, content)] if content.strip() else []
    found: list[Entry] = []
    for n, block in enumerate(content if isinstance(content, list) else []):
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text" and string(block.get("text")).strip():
            found.append(Said(f"{uuid}.{n}", said, block["text"]))
        elif btype == "tool_use" and block.get("id"):
            found.append(ToolUse(str(block["id"]), string(block.get("name")), block.get("input")))
        elif btype == "tool_result" and block.get("tool_use_id"):
            found.append(
                ToolResult(
                    str(block["tool_use_id"]),
                    cut(_output(block.get("content")), OUTPUT_LIMIT),
                    bool(block.get("is_error")),
                )
            )
    return found


def _codex_entries(line: Mapping[str, Any]) -> list[Entry]:
    """A line of Codex's rollout (0.171): the person's and the model's messages (not the
    harness's own context), function calls and their outputs."""
    item = line.get("payload")
    if not isinstance(item, dict):
        return []
    ptype = item.get("type")
    if ptype == "function_call" and item.get("call_id"):
        raw = string(item.get("arguments"))
        try:
            arguments: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            arguments = raw
        return [ToolUse(str(item["call_id"]), string(item.get("name")), arguments)]
    if ptype == "function_call_output" and item.get("call_id"):
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return [ToolResult(str(item["call_id"]), cut(text, OUTPUT_LIMIT), False)]
    role = item.get("role")
    if ptype != "message" or role not in ("user", "assistant") or _from_harness(item):
        return []
    uuid = string(item.get("id")) or f"o{line.get('ordinal', '')}"
    said = "user" if role == "user" else "reply"
    found: list[Entry] = []
    for n, block in enumerate(item.get("content") or []):
        if isinstance(block, dict) and string(block.get("text")).strip():
            found.append(Said(f"{uuid}.{n}", said, block["text"]))
    return found


def _from_harness(item: Mapping[str, Any]) -> bool:
    """A message Codex wrote itself (its environment context), not the person."""
    meta = item.get("internal_chat_message_metadata_passthrough")
    notes = meta.get("content_item_metadata") if isinstance(meta, dict) else None
    for note in notes if isinstance(notes, list) else []:
        source = note.get("provenance") if isinstance(note, dict) else None
        if isinstance(source, dict) and source.get("type") == "harness":
            return True
    content = item.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = string(first.get("text")) if isinstance(first, dict) else ""
    return text.startswith("<environment_context>")


def _output(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(string(c.get("text")) for c in content if isinstance(c, dict))
    return ""


class Lines:
    """A growing JSONL file read in pieces: whole lines out, a partial last line kept until
    it ends."""

    def __init__(self) -> None:
        self.offset = 0
        self._partial = b""

    def restart(self) -> None:
        """The file was rewritten: read it again from the start."""
        self.offset = 0
        self._partial = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The objects of the lines ``data`` completes (a line not JSON is passed over)."""
        self.offset += len(data)
        *whole, self._partial = (self._partial + data).split(b"\n")
        found = []
        for raw in whole:
            try:
                value = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(value, dict):
                found.append(value)
        return found
