"""A notice an agent asks to push (wire ``Item.push``, §7.11): sent by a raw wire agent of the
tests' own (hand-written HTTP and event stream, no SDK), pushed by the gateway through the real
APNs and FCM clients to the fakes on 127.0.0.1: within P1's limits shared with asks, once per
item id also across a gateway restart (P3), masked (X1), its ``words`` worded in each phone's
language."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from collie_gateway.core.mirror import LinkState
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from tests.collie_gateway.conftest import Rig, eventually, get_json, raw_agent
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_push_http import (
    APNS_TOKEN,
    FCM_TOKEN,
    SECRET,
    alert,
    log_of,
    register,
)

OPENED = {"id": "c1", "title": "Shop", "updated_at": "2026-12-06T05:00:00Z"}


class RawAgent:
    """A wire-v1 agent written by hand: one open conversation; each ``/events`` stream sends
    every event given so far (a replay from the start), then those given later."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.more = asyncio.Condition()

    async def give(self, event: dict[str, Any]) -> None:
        async with self.more:
            self.events.append(event)
            self.more.notify_all()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            return web.json_response({"wire": 1, "runtime": "raw"})
        if request.path == "/conversations":
            return web.json_response({"conversations": [OPENED]}, headers={"Wire-Event-Id": "0"})
        if request.path == "/conversations/c1":
            items = {e["item"]["id"]: e["item"] for e in self.events}
            conv = {**OPENED, "items": list(items.values())}
            return web.json_response(conv, headers={"Wire-Event-Id": str(len(self.events))})
        if request.path != "/events":
            return web.json_response({"error": "not_found"}, status=404)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent = 0
        while True:
            async with self.more:
                given = len(self.events)
                if given == sent:
                    try:
                        await asyncio.wait_for(self.more.wait(), 0.1)
                    except TimeoutError:
                        await resp.write(b": ping\n\n")
                    continue
                todo = self.events[sent:]
            for event in todo:
                sent += 1
                data = json.dumps(event)
                await resp.write(f"id: {sent}\nevent: {event['type']}\ndata: {data}\n\n".encode())


def notice(item_id: str, **fields: Any) -> dict[str, Any]:
    item = {"id": item_id, "kind": "notice", "text": f"Notice {item_id}", **fields}
    return {"type": "item.appended", "conversation_id": "c1", "item": item}


def fcm_title(svc: Services, n: int) -> str:
    found: Any = svc.fcm.requests[n].message["notification"]
    return str(found["title"])


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as s:
        yield s


async def test_P1_P3_X1_a_raw_agents_notice_pushes_once_within_the_limits(
    rig: Rig, svc: Services
) -> None:
    agent, sock = RawAgent(), rig.tmp / "raw.sock"
    async with raw_agent(agent.handle, sock):
        source = [Source(name="raw", socket=sock)]
        client, gw = await rig.gateway(source, push_targets=svc.targets, machine="desk-mac")
        await eventually(lambda: gw.mirrors["raw"].state is LinkState.READY)
        await register(client, "apns", APNS_TOKEN)
        await register(client, "fcm", FCM_TOKEN)
        push = {"title": "Build finished", "line": f"All 42 passed, token {SECRET}"}
        await agent.give(notice("n1", push=push))
        await eventually(lambda: len(svc.apns.requests) == 1 and len(svc.fcm.requests) == 1)
        seen = svc.apns.requests[0]
        assert alert(seen)["title"] == "Build finished"
        assert alert(seen)["body"].startswith("All 42 passed, token ")
        assert seen.json["collie"] == {
            "type": "notice", "machine": "desk-mac", "agent": "raw", "conversation": "c1",
            "item": "n1",
        }  # fmt: skip
        assert fcm_title(svc, 0) == "Build finished"
        for body in [seen.body, json.dumps(svc.fcm.requests[0].message).encode()]:
            assert SECRET.encode() not in body
        # The same item again (replaced whole), and one without a push: no push.
        await agent.give({**notice("n1", push=push), "type": "item.updated"})
        await agent.give(notice("n0"))
        # An ask's pane allows 3 a minute (P1): n1, n2, n3 push, n4 is held.
        for n in ("n2", "n3", "n4"):
            await agent.give(notice(n, push={"line": n}))

        async def held() -> bool:
            return any(e["outcome"] == "rate_limited" for e in await log_of(client))

        await eventually(held)
        # The notices filled the pane's minute: an ask raised in it now is held too.
        allow = {"id": "y", "label": "", "role": "allow"}
        ask = {"id": "a1", "conversation": "c1", "kind": "permission", "options": [allow]}
        await agent.give({"type": "ask.raised", "ask": ask})

        async def ask_held() -> bool:
            return any(e["ask"] == "a1" for e in await log_of(client))

        await eventually(ask_held)
        entries = [
            (e["ask"], e["outcome"], e["reason"]) for e in await log_of(client) if not e["device"]
        ]
        assert entries == [
            (None, "dispatched", "notice n1"),
            (None, "dispatched", "notice n2"),
            (None, "dispatched", "notice n3"),
            (None, "rate_limited", "notice n4: pane_minute"),
            ("a1", "rate_limited", "pane_minute"),
        ]
        assert [alert(r)["title"] for r in svc.apns.requests] == [
            "Build finished", "Notice n2", "Notice n3",
        ]  # fmt: skip
        await client.close()
        # A new gateway on the same store reads the stream again from its start: once (P3).
        client, gw = await rig.gateway(source, push_targets=svc.targets, machine="desk-mac")
        await eventually(lambda: gw.mirrors["raw"].state is LinkState.READY)
        rig.clock.advance(minutes=1)  # P1's minute has passed for the pane
        await agent.give(notice("n5", push={"line": "after the restart"}))
        await eventually(lambda: len(svc.apns.requests) == 4, 10)
        await asyncio.sleep(0.3)
        assert [alert(r)["title"] for r in svc.apns.requests][3:] == ["Notice n5"]
        await client.close()


async def test_notice_words_in_each_phones_language(rig: Rig, svc: Services) -> None:
    agent, sock = RawAgent(), rig.tmp / "raw.sock"
    async with raw_agent(agent.handle, sock):
        client, gw = await rig.gateway([Source(name="raw", socket=sock)], push_targets=svc.targets)
        await eventually(lambda: gw.mirrors["raw"].state is LinkState.READY)
        await register(client, "apns", APNS_TOKEN, lang="it")
        await register(client, "fcm", FCM_TOKEN)
        words = {"key": "say_hooks_finished", "args": {"client": "Codex", "folder": SECRET}}
        await agent.give(notice("n1", words=words, push={"line": "Done."}))
        await agent.give(notice("n2", words={"key": "no_such_key"}))
        await eventually(lambda: len(svc.apns.requests) == 1 and len(svc.fcm.requests) == 1)
        it, en = Catalogue(lang="it"), Catalogue()
        title = alert(svc.apns.requests[0])["title"]
        assert title.startswith("Codex ha finito in ")
        assert SECRET not in title
        assert fcm_title(svc, 0).startswith("Codex finished in ")

        async def lines(lang: str) -> list[str]:
            view = await get_json(client, f"/api/v1/agents/raw/conversations/c1?lang={lang}")
            return [line["text"] for line in view["lines"]]

        await eventually(lambda: len(gw.mirrors["raw"].conversations) == 1)
        shown_it, shown_en = await lines("it"), await lines("en")
        assert shown_it[0].startswith(it.fmt("say_hooks_finished", client="Codex", folder=""))
        assert shown_en[0].startswith(en.fmt("say_hooks_finished", client="Codex", folder=""))
        assert SECRET not in shown_it[0]
        assert shown_it[1] == shown_en[1] == "Notice n2"  # a key it does not have: the text
        await client.close()
