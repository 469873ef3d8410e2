"""The MCP bridge on a free loopback port and a real gateway following it (agent ``asks``),
driven by the ``mcp`` package's own client and the phone API."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from mcp.client.client import Client
from mcp_types import Implementation

from bridges.mcp import McpBridge
from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.collie_gateway.conftest import ClientFactory, Rig, eventually, get_json, post_json

AGENT = "asks"


@dataclass
class Mcp:
    """The bridge and a gateway following it."""

    rig: Rig
    bridge: McpBridge
    client: TestClient[Any, Any]
    gw: Gateway

    @asynccontextmanager
    async def session(self, name: str = "test-host") -> AsyncIterator[Client]:
        """An MCP session of the package's own client over Streamable HTTP."""
        info = Implementation(name=name, version="1")
        async with Client(self.bridge.url, mode="legacy", client_info=info) as client:
            yield client

    def open_asks(self) -> list[tuple[str, str]]:
        """(conversation, ask id) of every open ask the gateway mirrors."""
        mirror = self.gw.mirrors[AGENT]
        return [(c.id, a.id) for c in mirror.conversations.values() for a in c.asks]

    async def wait_asks(self, n: int, within: float = 10.0) -> list[tuple[str, str]]:
        await eventually(lambda: len(self.open_asks()) == n, within)
        return self.open_asks()

    async def card(self, conv: str) -> dict[str, Any]:
        chat = await get_json(
            self.client, f"/api/v1/agents/{AGENT}/conversations/{conv}?all_cards=true"
        )
        cards: list[dict[str, Any]] = chat["cards"]["cards"]
        return cards[0]

    async def chat(self, conv: str) -> dict[str, Any]:
        result: dict[str, Any] = await get_json(
            self.client, f"/api/v1/agents/{AGENT}/conversations/{conv}?all_cards=true"
        )
        return result

    async def answer(
        self,
        ask: str,
        body: dict[str, Any],
        request_id: str = "r1",
        version: int = 1,
        status: int = 200,
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/{AGENT}/asks/{ask}/answer", payload, status
        )
        return result

    async def items(self, conv: str) -> list[dict[str, Any]]:
        """The conversation's items as the bridge keeps them."""
        import msgspec

        found, _ = await self.bridge.agent.read_conversation(conv)
        assert found is not None
        return [msgspec.to_builtins(i) for i in found.items or []]

    async def texts(self, conv: str, kind: str) -> list[str]:
        return [i["text"] for i in await self.items(conv) if i["kind"] == kind]

    async def wait_text(self, conv: str, kind: str, text: str, within: float = 10.0) -> None:
        async def seen() -> bool:
            return text in await self.texts(conv, kind)

        await eventually(seen, within)


async def mcp_rig(base: Rig, **bridge_args: Any) -> Mcp:
    """Start the bridge on a free port, and a gateway for it."""
    bridge_args.setdefault("ping_interval", 0.2)
    bridge_args.setdefault("expiry_interval", 0.05)
    bridge = McpBridge(state_path=base.tmp / "asks.db", port=0, now=base.clock, **bridge_args)
    await bridge.start()
    sock = base.tmp / "asks.sock"
    base.runners[AGENT] = await bridge.serve_unix(sock)
    client, gw = await base.gateway([Source(name=AGENT, socket=sock)])
    await eventually(lambda: gw.mirrors[AGENT].state is LinkState.READY)
    return Mcp(base, bridge, client, gw)


@asynccontextmanager
async def running(aiohttp_client: ClientFactory, **bridge_args: Any) -> AsyncIterator[Mcp]:
    """The rig in a fresh short folder, torn down after."""
    with short_dir() as tmp:
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        found = await mcp_rig(base, **bridge_args)
        try:
            yield found
        finally:
            await base.close()
            await found.bridge.close()


@pytest.fixture
async def mcp(aiohttp_client: ClientFactory) -> AsyncIterator[Mcp]:
    async with running(aiohttp_client) as found:
        yield found


@pytest.fixture
async def quick(aiohttp_client: ClientFactory) -> AsyncIterator[Mcp]:
    """The rig with a session ending after 0.3 s without a request in flight."""
    async with running(aiohttp_client, idle=0.3) as found:
        yield found


async def call_soon(client: Client, name: str, args: dict[str, Any]) -> asyncio.Task[Any]:
    """Start a tool call; the task ends with its result."""
    return asyncio.create_task(client.call_tool(name, args))


HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
VERSION = "2025-11-25"


class RawMcp:
    """A client of the tests' own: JSON-RPC by hand over HTTP (aiohttp), to misbehave."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = aiohttp.ClientSession()
        self.session_id: str | None = None

    async def close(self) -> None:
        await self.http.close()

    def headers(self) -> dict[str, str]:
        found = dict(HEADERS)
        if self.session_id is not None:
            found["mcp-session-id"] = self.session_id
            found["mcp-protocol-version"] = VERSION
        return found

    async def initialize(self, name: str = "raw-client") -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": name, "version": "1"},
            },
        }
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            assert resp.status == 200, await resp.text()
            self.session_id = resp.headers["mcp-session-id"]
            await resp.read()
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.url, json=note, headers=self.headers()) as resp:
            assert resp.status == 202, await resp.text()

    async def post(self, body: bytes | Any) -> tuple[int, list[dict[str, Any]]]:
        """POST a body (bytes as they are, else JSON); the status and the JSON-RPC messages
        answered (a JSON body or every SSE ``data:`` line)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self.http.post(self.url, data=io.BytesIO(data), headers=self.headers()) as resp:
            text = await resp.text()
            return resp.status, parse_messages(resp.headers.get("content-type", ""), text)

    async def call(self, request_id: int | str, name: str, args: Any) -> dict[str, Any]:
        """A tools/call; its JSON-RPC response."""
        status, messages = await self.post(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": args},
            }
        )
        assert status == 200, (status, messages)
        return next(m for m in messages if m.get("id") == request_id)


def parse_messages(content_type: str, text: str) -> list[dict[str, Any]]:
    if content_type.startswith("application/json"):
        found = json.loads(text)
        return found if isinstance(found, list) else [found]
    return [
        json.loads(line[5:])
        for line in text.splitlines()
        if line.startswith("data:") and line[5:].strip()
    ]


def tool_json(result: Any) -> Any:
    """The JSON text of a tool result (the package's CallToolResult)."""
    return json.loads(result.content[0].text)
