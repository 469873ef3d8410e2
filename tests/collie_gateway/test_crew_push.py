"""Push on a crew's lead (W4 with P1–P3): a member's asks push to the lead's own devices, under
the lead's own limits, each naming the member's machine; the member's devices are its own.

In one process: an SDK agent ``desk`` on a Unix socket, a member gateway ``workshop`` for it
(real HTTP on 127.0.0.1), and a lead reading the member, pushing to the fake APNs server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from collie_gateway.serving import gateway_app
from collie_gateway.settings import Settings
from collie_gateway.sources import Member, Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_push_http import (
    APNS_TOKEN,
    Client,
    asks_of,
    logged,
    raise_ask,
    register,
)
from wire.agent import ConversationHandle


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as s:
        yield s


@contextlib.asynccontextmanager
async def crew(rig: Rig, svc: Services) -> AsyncIterator[tuple[Client, ConversationHandle]]:
    """Agent ``desk`` with ``c1``, its member gateway ``workshop``, and a lead for it with a
    registered APNs device."""
    agent = rig.agent("desk", runtime="desk")
    await rig.serve("desk")
    conv = await agent.open_conversation("c1", title="Deploy notes")
    member_app = gateway_app(
        Settings(
            sources=[Source(name="desk", socket=rig.sockets["desk"])],
            db_path=rig.tmp / "member.db",
            machine="workshop",
            timing=FAST,
            clock=rig.clock,
        )
    )
    runner = web.AppRunner(member_app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        client, gw = await rig.gateway(
            [], crew=[Member(name="workshop", url=site.name)], push_targets=svc.targets
        )
        await eventually(lambda: gw.crew.links["workshop"].ready.is_set())
        await register(client, "apns", APNS_TOKEN)
        yield client, conv
    finally:
        await runner.cleanup()


async def test_W4_P1_P3_a_members_asks_push_from_the_lead_named_by_machine(
    rig: Rig, svc: Services
) -> None:
    async with crew(rig, svc) as (client, conv):
        for ask_id in ("a1", "a2", "a3"):
            await raise_ask(conv, ask_id)
            await logged(client, ask_id, "sent")
        ids: Any = svc.apns.requests[0].json["collie"]
        assert (ids["machine"], ids["agent"], ids["ask"]) == ("workshop", "desk", "a1")
        # P1, the lead's own limit: a pane pushes 3 times a minute; the 4th ask shows unpushed.
        await raise_ask(conv, "a4")
        entries = await logged(client, "a4", "rate_limited")
        assert [e["outcome"] for e in entries] == ["rate_limited"]
        assert asks_of(svc.apns.requests) == ["a1", "a2", "a3"]
        chat = await get_json(client, "/api/v1/machines/workshop/agents/desk/conversations/c1")
        assert [c["ask_id"] for c in chat["cards"]["cards"]] == ["a1", "a2", "a3", "a4"]


async def test_W4_P3_a_member_ask_answered_on_the_lead_settles_the_push_it_still_owes(
    rig: Rig, svc: Services
) -> None:
    svc.apns.script = lambda seen: "hang"
    async with crew(rig, svc) as (client, conv):
        await raise_ask(conv, "a1")
        await logged(client, "a1", "dispatched")
        tap = {"request_id": "tap-1", "version": 1, "answer": {"option": "yes"}}
        path = "/api/v1/machines/workshop/agents/desk/asks/a1/answer"
        answer = await post_json(client, path, tap)
        assert answer["outcome"] == "accepted"
        entries = await logged(client, "a1", "suppressed")
        assert entries[-1]["reason"] == "the ask was resolved before its push was delivered"
