"""The bridge's entries in a client's hook settings, pure: merged into what is there (every
other hook and setting kept, idempotent), taken out exactly, and found.

Claude Code (``settings.json``): ``http`` hooks POSTing to the bridge with the credential in
a header. Codex (``hooks.json``): command hooks running ``collie-gateway hook codex``.
"""

from __future__ import annotations

import copy
from typing import Any, Final

HOLD: Final = 3600  # seconds Claude Code waits on a held question (the card's deadline)
QUICK: Final = 30  # seconds for the other events
TOOL_EVENTS: Final = ("PermissionRequest", "PostToolUse")
EVENTS: Final = {
    "claude-code": (
        "PermissionRequest",
        "PostToolUse",
        "UserPromptSubmit",
        "Notification",
        "Stop",
        "SessionEnd",
    ),
    "codex": ("PermissionRequest", "PostToolUse", "UserPromptSubmit", "Stop"),
}
CODEX_MARK: Final = " hook codex"


def claude_hook(url: str, secret: str, event: str) -> dict[str, Any]:
    """One of Claude Code's ``http`` hooks."""
    return {
        "type": "http",
        "url": url,
        "timeout": HOLD if event == "PermissionRequest" else QUICK,
        "headers": {"Authorization": f"Bearer {secret}"},
    }


def codex_hook(command: str, event: str) -> dict[str, Any]:
    """One of Codex's command hooks."""
    return {
        "type": "command",
        "command": command,
        "timeout": HOLD if event == "PermissionRequest" else QUICK,
    }


def ours(hook: object, client: str) -> bool:
    """Whether ``hook`` is one the bridge's install wrote."""
    if not isinstance(hook, dict):
        return False
    if client == "codex":
        return hook.get("type") == "command" and CODEX_MARK in str(hook.get("command", ""))
    url = str(hook.get("url", ""))
    return hook.get("type") == "http" and url.endswith("/hooks/claude-code")


def secret_in(settings: dict[str, Any]) -> str | None:
    """The credential a Claude Code install wrote, if one is there."""
    for hook in _hooks(settings, "claude-code"):
        auth = str((hook.get("headers") or {}).get("Authorization", ""))
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ")
    return None


def _hooks(settings: dict[str, Any], client: str) -> list[dict[str, Any]]:
    found = []
    table = settings.get("hooks")
    for groups in (table or {}).values() if isinstance(table, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            hooks = group.get("hooks") if isinstance(group, dict) else None
            found += [h for h in hooks or [] if ours(h, client)]
    return found


def installed(settings: dict[str, Any], client: str) -> list[str]:
    """The events the bridge's entries are installed for."""
    table = settings.get("hooks")
    if not isinstance(table, dict):
        return []
    return [
        event
        for event, groups in table.items()
        if isinstance(groups, list)
        and any(
            isinstance(g, dict) and any(ours(h, client) for h in g.get("hooks") or [])
            for g in groups
        )
    ]


def uninstall(settings: dict[str, Any], client: str) -> dict[str, Any]:
    """``settings`` without the bridge's entries; a group or an event left empty by their
    going goes too, and nothing else changes."""
    out = copy.deepcopy(settings)
    table = out.get("hooks")
    if not isinstance(table, dict):
        return out
    for event in list(table):
        groups = table[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            hooks = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(hooks, list) or not any(ours(h, client) for h in hooks):
                kept.append(group)
                continue
            rest = [h for h in hooks if not ours(h, client)]
            if rest:
                kept.append({**group, "hooks": rest})
        if kept:
            table[event] = kept
        else:
            del table[event]
    if not table:
        del out["hooks"]
    return out


def install(settings: dict[str, Any], client: str, hook_for: dict[str, dict[str, Any]]) -> Any:
    """``settings`` with the bridge's entries (``hook_for``: the hook of each event) in place
    of any it had, after every other hook of each event.

    Raises:
        ValueError: ``hooks`` (or an event's list) is there but not what the client reads.
    """
    out = uninstall(settings, client)
    table = out.setdefault("hooks", {})
    if not isinstance(table, dict):
        raise ValueError('"hooks" is not an object')
    for event, hook in hook_for.items():
        groups = table.setdefault(event, [])
        if not isinstance(groups, list):
            raise ValueError(f'"hooks.{event}" is not a list')
        group: dict[str, Any] = {"hooks": [hook]}
        if event in TOOL_EVENTS:
            group = {"matcher": "*", **group}
        groups.append(group)
    return out
