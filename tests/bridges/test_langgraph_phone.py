"""The LangGraph bridge behind a real gateway: a thread started and answered through the
phone API (a per-call tool approval; a response schema's wrong answer refused)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.bridges.langgraph_rig import GRAPHS, InProcess, texts
from tests.collie_gateway.conftest import ClientFactory, Rig, eventually, post_json

AGENT = "/api/v1/agents/graphs"


@contextlib.asynccontextmanager
async def phone(
    aiohttp_client: ClientFactory, graph: str, given: str = "messages"
) -> AsyncIterator[tuple[InProcess, TestClient[Any, Any], Any]]:
    with short_dir() as tmp:
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        bridge = InProcess(tmp, graph, given)
        wire = await bridge.open()
        client, gw = await base.gateway([Source(name="graphs", socket=wire.sock)])
        try:
            await eventually(lambda: gw.mirrors["graphs"].state is LinkState.READY)
            yield bridge, client, gw
        finally:
            await base.close()
            await bridge.close()


async def thread(client: TestClient[Any, Any], gw: Any, text: str) -> str:
    """A thread from the New page's starter, then the first message typed."""
    started = await post_json(
        client, f"{AGENT}/conversations", {"request_id": "s-1", "starter": "thread"}
    )
    conv: str = started["conversation_id"]
    await eventually(lambda: conv in gw.mirrors["graphs"].conversations)
    body = {"request_id": "m-1", "text": text}
    await post_json(client, f"{AGENT}/conversations/{conv}/messages", body)
    return conv


async def card(gw: Any, conv: str) -> Any:
    await eventually(lambda: bool(gw.mirrors["graphs"].conversations[conv].asks), 10.0)
    return gw.mirrors["graphs"].conversations[conv].asks[0]


async def answer(client: TestClient[Any, Any], ask: Any, rid: str, body: object) -> Any:
    payload = {"request_id": rid, "version": ask.version, "answer": body}
    return await client.post(f"{AGENT}/asks/{quote(ask.id, safe='')}/answer", json=payload)


async def test_a_tool_approval_answered_from_the_phone(aiohttp_client: ClientFactory) -> None:
    async with phone(aiohttp_client, "per_call") as (bridge, client, gw):
        await approve(bridge, client, gw)


async def approve(bridge: InProcess, client: TestClient[Any, Any], gw: Any) -> None:
    conv = await thread(client, gw, "mail ada")
    ask = await card(gw, conv)
    assert (ask.kind, ask.title) == ("permission", "Run send_email?")
    resp = await answer(client, ask, "tap-1", {"option": "allow"})
    assert resp.status == 200
    assert (await resp.json())["outcome"] == "accepted"
    await bridge.wire.items(conv, lambda i: "Done." in texts(i))
    await eventually(lambda: not gw.mirrors["graphs"].conversations[conv].asks, 10.0)


async def test_a_wrong_answer_to_a_schema_is_refused_from_the_phone(
    aiohttp_client: ClientFactory,
) -> None:
    async with phone(aiohttp_client, "order", f"{GRAPHS}:said") as (bridge, client, gw):
        await refuse_then_take(bridge, client, gw)


async def refuse_then_take(bridge: InProcess, client: TestClient[Any, Any], gw: Any) -> None:
    conv = await thread(client, gw, "order")
    ask = await card(gw, conv)
    assert ask.kind == "form"
    wrong = await answer(client, ask, "tap-1", {"fields": {"count": "many", "size": "s"}})
    refused = await wrong.json()  # the agent's 400, as the phone sees it: the reason on the card
    assert (refused["outcome"], refused["card"]["line"]) == ("refused", "count must be an integer")
    right = await answer(client, ask, "tap-2", {"fields": {"count": "2", "size": "s"}})
    assert (await right.json())["outcome"] == "accepted"
    await bridge.wire.items(conv, lambda i: "4 s" in texts(i))
