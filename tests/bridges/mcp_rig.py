"""The MCP bridge on a free loopback port and a real gateway following it (agent ``asks``),
driven by the ``mcp`` package's own client and the phone API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from mcp.client.client import Client
from mcp_types import Implementation

from bridges.mcp import McpBridge
from collie_gateway.gateway import Gateway
from collie_gateway.mirror import LinkState
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
        self, ask: str, body: dict[str, Any], request_id: str = "r1", version: int = 1
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/{AGENT}/asks/{ask}/answer", payload
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


@pytest.fixture
async def mcp(aiohttp_client: ClientFactory) -> AsyncIterator[Mcp]:
    with short_dir() as tmp:
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        found = await mcp_rig(base)
        try:
            yield found
        finally:
            await base.close()
            await found.bridge.close()


async def call_soon(client: Client, name: str, args: dict[str, Any]) -> asyncio.Task[Any]:
    """Start a tool call; the task ends with its result."""
    return asyncio.create_task(client.call_tool(name, args))
