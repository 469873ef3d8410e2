"""A misbehaving MCP client of the tests' own (raw HTTP): bad JSON-RPC, an unknown tool, wrong
argument types, a huge argument; each is answered with an MCP error, and the bridge and the
phone stay fine (issue 24)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcp.client.client import Client

from collie_gateway.core.mirror import LinkState
from tests.bridges.mcp_rig import AGENT, Mcp, RawMcp, tool_json


def call(request_id: int, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


BAD: list[tuple[bytes | dict[str, Any], int, dict[str, Any]]] = [
    # (what the client sends, HTTP status, what the JSON-RPC answer holds)
    (b"{not json", 400, {"error": -32700}),
    ({"jsonrpc": "2.0", "id": 1}, 400, {"error": -32602}),
    ({"jsonrpc": "2.0", "id": 2, "method": "tools/explode"}, 200, {"error": -32601}),
    ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": "oops"}, 400, {"error": -32602}),
    (call(4, "explode", {}), 200, {"error": -32602, "message": "Unknown tool: explode"}),
    (call(5, "ask_text", "not an object"), 200, {"error": -32602}),
    (
        call(6, "ask_choice", {"question": 5, "options": "a"}),
        200,
        {
            "tool_error": "Invalid arguments for ask_choice: Expected `str`, got `int` - at "
            "`$.question`"
        },
    ),
    (
        call(7, "ask_text", {"question": "Hi", "colour": "red"}),
        200,
        {"tool_error": "Invalid arguments for ask_text: Object contains unknown field `colour`"},
    ),
    (
        call(
            8, "ask_form", {"title": "T", "fields": [{"id": "a", "label": "A", "kind": "select"}]}
        ),
        200,
        {"tool_error": "Invalid arguments for ask_form: select field 'a' needs 2 to 8 options"},
    ),
    (
        call(9, "ask_permission", {"tool_name": "x", "arguments": {"blob": "y" * 300_000}}),
        200,
        {
            "tool_error": "Invalid arguments for ask_permission: the arguments are over 200000 "
            "bytes as JSON"
        },
    ),
    (call(10, "ask_text", {"question": "z" * 2_000_000}), 413, {}),
]


def summary(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON-RPC answer's error code (and message when it is ours), or the tool's error."""
    if not messages:
        return {}
    [message] = messages
    if "error" in message:
        found = {"error": message["error"]["code"]}
        if message["error"]["message"].startswith("Unknown tool"):
            found["message"] = message["error"]["message"]
        return found
    result = message["result"]
    assert result["isError"] is True
    return {"tool_error": result["content"][0]["text"]}


async def test_bad_json_rpc_unknown_tool_wrong_types_huge_argument(mcp: Mcp) -> None:
    raw = RawMcp(mcp.bridge.url)
    try:
        await raw.initialize()
        for body, status, expected in BAD:
            got_status, messages = await raw.post(body)
            assert (got_status, summary(messages)) == (status, expected), body
        # The same session still works, and so does the phone.
        task = asyncio.create_task(raw.call(11, "ask_text", {"question": "Still fine?"}))
        [(conv, ask)] = await mcp.wait_asks(1)
        await mcp.answer(ask, {"text": "yes"})
        response = await asyncio.wait_for(task, 10)
        assert json.loads(response["result"]["content"][0]["text"])["text"] == "yes"
    finally:
        await raw.close()
    assert mcp.gw.mirrors[AGENT].state is LinkState.READY
    assert [i["kind"] for i in await mcp.items(conv)] == ["tool"]  # nothing from the bad calls


async def test_no_session_and_a_stateless_protocol_version_are_refused(mcp: Mcp) -> None:
    raw = RawMcp(mcp.bridge.url)
    try:
        status, messages = await raw.post(call(1, "notify", {"text": "who am I?"}))
        assert status == 400
        assert messages[0]["error"]["code"] == -32600
        raw.session_id = "not-a-session"
        status, _ = await raw.post(call(2, "notify", {"text": "who am I?"}))
        assert status == 404
        raw.session_id = None
        headers = {**raw.headers(), "mcp-protocol-version": "2026-07-28"}
        async with raw.http.post(
            mcp.bridge.url, json=call(3, "notify", {}), headers=headers
        ) as resp:
            assert resp.status == 400
            body = await resp.json()
        assert body["error"]["code"] == -32022
        assert body["error"]["data"]["supported"][-1] == "2025-11-25"
    finally:
        await raw.close()
    # The package's client in its default mode probes the stateless era, then falls back.
    async with Client(mcp.bridge.url) as client:
        result = await client.call_tool("notify", {"text": "fell back"})
        assert tool_json(result) == {"outcome": "shown"}
    assert mcp.open_asks() == []
