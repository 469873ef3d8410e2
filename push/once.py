"""Once per ask (spec P3): the key an ask pushes once under (the gateway keeps the keys in
its store: ``collie_gateway/store/pushes.py``)."""

from __future__ import annotations

import json


def once_key(machine: str, agent: str, *, tool_call: str | None, ask: str) -> str:
    """The key an ask pushes once under: machine, durable agent and tool call id, or the
    ask's id when it names no tool (ask ids are stable across an agent's restarts).

    The key is a JSON array, so no choice of ids can make two keys collide.
    """
    tail = ["tool", tool_call] if tool_call else ["ask", ask]
    return json.dumps([machine, agent, *tail], separators=(",", ":"), ensure_ascii=False)


def notice_key(machine: str, agent: str, conversation: str, item: str) -> str:
    """The key a notice's push (wire ``Item.push``) goes once under: machine, durable agent,
    conversation and item id; never an ask's (a longer array)."""
    return json.dumps([machine, agent, "notice", conversation, item], separators=(",", ":"))
