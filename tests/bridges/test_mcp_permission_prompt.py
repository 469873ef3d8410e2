"""Claude Code's permission prompt tool through the bridge: its exact input and output shapes,
and "Always allow" kept as a rule for the rest of the session (spec A4, A5, S1; issue 24)."""

from __future__ import annotations

import asyncio

from bridges.mcp.bridge import ALLOWED_BY_RULE, ALWAYS_KEPT
from bridges.mcp.tools import ALWAYS_DENIED, NOT_ANSWERED
from tests.bridges.mcp_rig import Mcp, call_soon, tool_json

# What Claude Code sends (``claude -p --permission-prompt-tool mcp__collie__permission_prompt``).
BASH = {
    "tool_name": "Bash",
    "input": {"command": "git push origin main", "description": "Push to main"},
    "tool_use_id": "toolu_01ABC",
}


async def test_A4_permission_prompt_allow_returns_claude_codes_allow_json(mcp: Mcp) -> None:
    async with mcp.session("claude-code") as client:
        task = await call_soon(client, "permission_prompt", BASH)
        [(conv, ask)] = await mcp.wait_asks(1)
        card = await mcp.card(conv)
        assert card["title"] == "Allow Bash?"
        args = mcp.bridge.agent._open_asks[ask].ask.arguments
        assert [(a.name, a.value) for a in args] == [
            ("command", "git push origin main"),
            ("description", "Push to main"),
        ]
        await mcp.answer(ask, {"option": "allow"})
        result = await asyncio.wait_for(task, 10)
    # The exact text Claude Code parses: behavior and the input to run with.
    assert result.content[0].text == (
        '{"behavior": "allow", "updatedInput": {"command": "git push origin main", '
        '"description": "Push to main"}}'
    )
    assert [i["name"] for i in await mcp.items(conv) if i["kind"] == "tool"] == ["Bash"]


async def test_A4_permission_prompt_deny_returns_a_message(mcp: Mcp) -> None:
    async with mcp.session("claude-code") as client:
        task = await call_soon(client, "permission_prompt", BASH)
        [(_, ask)] = await mcp.wait_asks(1)
        await mcp.answer(ask, {"option": "deny"})
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {"behavior": "deny", "message": ALWAYS_DENIED}


async def test_R3_permission_prompt_unanswered_is_a_deny_saying_why(mcp: Mcp) -> None:
    async with mcp.session("claude-code") as client:
        task = await call_soon(client, "permission_prompt", BASH)
        [(_, ask)] = await mcp.wait_asks(1)
        await mcp.bridge.agent._open_asks[ask].decide()
        result = await asyncio.wait_for(task, 10)
    assert tool_json(result) == {"behavior": "deny", "message": NOT_ANSWERED["decided"]}


async def test_A5_always_allow_then_the_same_call_is_allowed_without_a_card(mcp: Mcp) -> None:
    async with mcp.session("claude-code") as client:
        task = await call_soon(client, "permission_prompt", BASH)
        [(conv, ask)] = await mcp.wait_asks(1)
        not_confirmed = await mcp.answer(ask, {"option": "always"}, request_id="r0")
        assert not_confirmed["outcome"] == "refused"  # A5: the second tap confirms
        assert not_confirmed["card"]["line"] == '"Always allow" needs a second tap.'
        await mcp.answer(ask, {"option": "always", "confirmed": True})
        first = tool_json(await asyncio.wait_for(task, 10))
        assert first == {"behavior": "allow", "updatedInput": BASH["input"]}
        await mcp.wait_text(conv, "notice", ALWAYS_KEPT.format(tool="Bash"))
        # The same tool with the same arguments: allowed at once, no card.
        again = await asyncio.wait_for(client.call_tool("permission_prompt", BASH), 10)
        assert tool_json(again) == first
        assert mcp.open_asks() == []
        tools = [i for i in await mcp.items(conv) if i["kind"] == "tool"]
        assert [(t["name"], t["status"], t.get("output")) for t in tools] == [
            ("Bash", "done", None),
            ("Bash", "done", ALLOWED_BY_RULE),
        ]
        # Other arguments are another question: a card again.
        other = {**BASH, "input": {"command": "git push --force"}}
        task = await call_soon(client, "permission_prompt", other)
        [(_, ask2)] = await mcp.wait_asks(1)
        await mcp.answer(ask2, {"option": "deny"}, request_id="r3")
        assert tool_json(await asyncio.wait_for(task, 10))["behavior"] == "deny"
    # A new session starts with no rules.
    async with mcp.session("claude-code") as client:
        task = await call_soon(client, "permission_prompt", BASH)
        [(conv2, ask3)] = await mcp.wait_asks(1)
        assert conv2 != conv
        await mcp.answer(ask3, {"option": "allow"}, request_id="r4")
        assert tool_json(await asyncio.wait_for(task, 10))["behavior"] == "allow"


async def test_A5_ask_permission_always_is_kept_too(mcp: Mcp) -> None:
    args = {"tool_name": "deploy", "arguments": {"env": "staging"}}
    async with mcp.session() as client:
        task = await call_soon(client, "ask_permission", args)
        [(conv, ask)] = await mcp.wait_asks(1)
        await mcp.answer(ask, {"option": "always", "confirmed": True})
        assert tool_json(await asyncio.wait_for(task, 10)) == {
            "outcome": "answered",
            "decision": "always",
        }
        again = await asyncio.wait_for(client.call_tool("ask_permission", args), 10)
        assert tool_json(again) == {"outcome": "answered", "decision": "always"}
        assert mcp.open_asks() == []
        assert ALWAYS_KEPT.format(tool="deploy") in await mcp.texts(conv, "notice")
