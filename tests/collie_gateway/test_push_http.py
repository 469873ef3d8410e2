"""Pushes end to end (spec P1–P3, X1, S6): SDK agents raise asks on real sockets, the gateway
decides behind its real HTTP API, and the real APNs and FCM clients send to the fake services
on 127.0.0.1 (APNs: HTTP/2 over TLS with ALPN). The limiter's clock is ``rig.clock``."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import re
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from push import Duplicate, RetryPolicy, SeenSet, SignatureError, open_envelope, verify
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from tests.collie_gateway.push_fixtures import (
    TOPIC,
    Receiver,
    Services,
    receiver,
    services,
)
from tests.push.fakes import ApnsSeen, Reply, fcm_error
from wire.agent import Agent, ConversationHandle, FormField, Option, ToolRef

Client = TestClient[Any, Any]

MACHINE = "desk-mac"
CAT = Catalogue()
SECRET = "ghp_" + "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zC1eF3"  # a fake GitHub token
APNS_TOKEN = "a1" * 32
FCM_TOKEN = "fcm-token-" + "x" * 140
PERMISSION = [
    Option(id="yes", label="Yes, run it", role="allow"),
    Option(id="no", label="No", role="deny"),
]


@pytest.fixture
async def svc(rig: Rig) -> AsyncIterator[Services]:
    async with services(rig.tmp, lambda: rig.clock().timestamp()) as s:
        yield s


# --- helpers ---------------------------------------------------------------------------------


async def start(
    rig: Rig, svc: Services, titles: dict[str, str | None], **settings: Any
) -> tuple[Client, Gateway, dict[str, ConversationHandle]]:
    """Agent ``desk`` with these conversations (id: title), and a gateway pushing to the fakes."""
    agent = rig.agent("desk", runtime="desk")
    await rig.serve("desk")
    convs = {cid: await agent.open_conversation(cid, title=t) for cid, t in titles.items()}
    client, gw = await open_gateway(rig, svc, **settings)
    return client, gw, convs


async def open_gateway(rig: Rig, svc: Services, **settings: Any) -> tuple[Client, Gateway]:
    settings.setdefault("machine", MACHINE)
    client, gw = await rig.gateway(
        [Source(name="desk", socket=rig.sockets["desk"])], push_targets=svc.targets, **settings
    )
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw


async def restart_gateway(
    rig: Rig, svc: Services, client: Client, **settings: Any
) -> tuple[Client, Gateway]:
    """Stop the gateway and start a new one on the same SQLite file."""
    await client.close()
    return await open_gateway(rig, svc, **settings)


async def restart_agent(rig: Rig, gw: Gateway) -> Agent:
    """Stop agent ``desk`` and serve a new one on its state file; wait for the gateway."""
    mirror = gw.mirrors["desk"]
    await rig.stop("desk")
    await eventually(lambda: mirror.state is LinkState.UNREACHABLE)
    agent = rig.agent("desk", runtime="desk")
    await rig.serve("desk", agent)
    await eventually(lambda: mirror.state is LinkState.READY)
    return agent


async def register(
    client: Client, provider: str, token: str, key: bytes | None = None, **extra: Any
) -> str:
    body: dict[str, Any] = {"provider": provider, "token": token, **extra}
    if key is not None:
        body["key"] = base64.b64encode(key).decode()
    answer = await post_json(client, "/api/v1/devices", body)
    device = answer["device_id"]
    assert isinstance(device, str)
    return device


async def log_of(client: Client) -> list[dict[str, Any]]:
    """The delivery log, oldest first."""
    entries = (await get_json(client, "/api/v1/pushes?limit=1000"))["pushes"]
    return list(reversed(entries))


async def logged(client: Client, ask: str, *outcomes: str) -> list[dict[str, Any]]:
    """Wait until the log holds at least these outcomes for ``ask``; its entries."""
    found: list[dict[str, Any]] = []
    want = Counter(outcomes)

    async def check() -> bool:
        nonlocal found
        found = [e for e in await log_of(client) if e["ask"] == ask]
        have = Counter(e["outcome"] for e in found)
        return all(have[k] >= n for k, n in want.items())

    await eventually(check)
    return found


async def raise_ask(
    conv: ConversationHandle, ask_id: str, call: str | None = None, **kwargs: Any
) -> None:
    kwargs.setdefault("title", f"Run step {ask_id}?")
    await conv.ask(
        kind="permission",
        id=ask_id,
        tool=ToolRef(call_id=call or f"t-{ask_id}", name="shell"),
        options=PERMISSION,
        **kwargs,
    )


async def push_one(client: Client, conv: ConversationHandle, ask_id: str) -> None:
    """Raise an ask and wait until it is sent to the one registered device."""
    await raise_ask(conv, ask_id)
    entries = await logged(client, ask_id, "sent")
    assert [e["outcome"] for e in entries] == ["dispatched", "sent"], entries


async def held(client: Client, conv: ConversationHandle, ask_id: str, why: str) -> None:
    """Raise an ask and check it is rate-limited for ``why`` (and sent nowhere)."""
    await raise_ask(conv, ask_id)
    entries = await logged(client, ask_id, "rate_limited")
    assert [(e["outcome"], e["reason"]) for e in entries] == [("rate_limited", why)]


async def cards(client: Client, conversation: str) -> list[str]:
    """The ask ids of the chat's cards, as the phone sees them."""
    view = await get_json(client, f"/api/v1/agents/desk/conversations/{conversation}")
    return [card["ask_id"] for card in view["cards"]["cards"]]


def alert(seen: ApnsSeen) -> dict[str, Any]:
    aps = seen.json["aps"]
    assert isinstance(aps, dict)
    result = aps["alert"]
    assert isinstance(result, dict)
    return result


def asks_of(requests: list[ApnsSeen]) -> list[str]:
    """The ask id each APNs request carries, in order."""
    ids = [r.json["collie"] for r in requests]
    return [str(i["ask"]) for i in ids if isinstance(i, dict)]


def fcm_asks(svc: Services) -> set[str]:
    data = [r.message["data"] for r in svc.fcm.requests]
    return {str(d["ask"]) for d in data if isinstance(d, dict)}


def expected_text(prefix: str, filler: str, limit: int) -> str:
    """``prefix`` then ``filler`` characters, cut to ``limit`` ending in "…"."""
    return prefix + filler * (limit - 1 - len(prefix)) + "…"


# --- P2: wording, cutting, masking, ids, collapse and expiry ---------------------------------


async def test_P2_X1_push_wording_ids_collapse_and_expiry(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy notes", "c2": f"Fix {SECRET} leak"})
    await register(client, "apns", APNS_TOKEN)
    await register(client, "fcm", FCM_TOKEN)
    deadline = rig.clock() + timedelta(minutes=10, milliseconds=250)
    await raise_ask(
        convs["c1"],
        "a1",
        push_title="Ru\x07n the dep\u202eloy\twith  " + SECRET + " " + "x" * 80,
        push_line="Token " + SECRET + " then\n" + "y" * 200,
        deadline=deadline,
    )
    entries = await logged(client, "a1", "sent", "sent")
    assert Counter(e["outcome"] for e in entries) == {"dispatched": 1, "sent": 2}

    assert len(svc.apns.requests) == 1
    assert len(svc.fcm.requests) == 1
    seen = svc.apns.requests[0]
    assert seen.headers[":path"] == f"/3/device/{APNS_TOKEN}"
    assert seen.jwt_error is None
    title = expected_text("Run the deploy with ghp_•••• ", "x", 60)
    line = expected_text("Token ghp_•••• then ", "y", 120)
    assert len(title) == 60
    assert len(line) == 120
    assert alert(seen) == {
        "title": "Permission needed in Deploy notes",
        "subtitle": title,
        "body": line,
    }
    ids = {"type": "ask", "machine": MACHINE, "agent": "desk", "conversation": "c1", "ask": "a1"}
    assert seen.json["collie"] == ids
    assert seen.headers["apns-topic"] == TOPIC
    assert seen.headers["apns-push-type"] == "alert"
    assert seen.headers["apns-expiration"] == str(math.ceil(deadline.timestamp()))
    # The ids open the card.
    assert await cards(client, str(ids["conversation"])) == [ids["ask"]]

    message = svc.fcm.requests[0].message
    assert message["token"] == FCM_TOKEN
    assert message["notification"] == {
        "title": "Permission needed in Deploy notes",
        "body": f"{title}\n{line}",
    }
    assert message["data"] == ids
    android = message["android"]
    assert isinstance(android, dict)
    assert android["ttl"] == "601s"  # to the deadline, rounded up

    # One collapse id per pane: the same pane again, then another pane.
    await raise_ask(convs["c1"], "a2")
    await raise_ask(convs["c2"], "a3")
    await logged(client, "a2", "sent", "sent")
    await logged(client, "a3", "sent", "sent")
    by_ask = dict(zip(asks_of(svc.apns.requests), svc.apns.requests, strict=True))
    assert set(by_ask) == {"a1", "a2", "a3"}
    assert by_ask["a2"].headers["apns-collapse-id"] == seen.headers["apns-collapse-id"]
    assert by_ask["a3"].headers["apns-collapse-id"] != seen.headers["apns-collapse-id"]
    assert alert(by_ask["a2"]) == {
        "title": "Permission needed in Deploy notes",
        "subtitle": "Run step a2?",
    }
    assert alert(by_ask["a3"])["title"] == "Permission needed in Fix ghp_•••• leak"
    # No deadline: it waits an hour for an offline phone (issue 10.4), on both services.
    an_hour = math.ceil(rig.clock().timestamp()) + 3600
    assert by_ask["a2"].headers["apns-expiration"] == str(an_hour)
    fcm_a2 = next(r.message for r in svc.fcm.requests if r.message["data"]["ask"] == "a2")  # type: ignore[index]
    assert fcm_a2["android"]["ttl"] == "3600s"  # type: ignore[index]

    # X1: the secret never reached either service, not even in part.
    for raw in [r.body for r in svc.apns.requests] + [
        json.dumps(r.message).encode() for r in svc.fcm.requests
    ]:
        assert SECRET.encode() not in raw
        assert SECRET[4:20].encode() not in raw
    assert fcm_asks(svc) == {"a1", "a2", "a3"}


async def test_P2_private_content_only_inside_the_envelope(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy notes"})
    apns_key, fcm_key = os.urandom(32), os.urandom(32)
    apns_dev = await register(client, "apns", APNS_TOKEN, apns_key)
    fcm_dev = await register(client, "fcm", FCM_TOKEN, fcm_key)
    devices = (await get_json(client, "/api/v1/devices"))["devices"]
    assert {d["device_id"]: d["private"] for d in devices} == {apns_dev: True, fcm_dev: True}
    bad = {"provider": "apns", "token": "b2" * 32, "key": base64.b64encode(b"k" * 16).decode()}
    await post_json(client, "/api/v1/devices", bad, status=400)

    await raise_ask(convs["c1"], "a1", push_title="Deploy " + SECRET, push_line="to prod")
    await logged(client, "a1", "sent", "sent")
    inner = {
        "v": 1,
        "type": "ask",
        "machine": MACHINE,
        "agent": "desk",
        "conversation": "c1",
        "ask": "a1",
        "headline": "Permission needed in Deploy notes",
        "pane": "Deploy notes",
        "title": "Deploy ghp_••••",
        "line": "to prod",
    }

    (seen,) = svc.apns.requests
    generic = CAT["push_private"]
    assert generic == "A durable agent needs your answer"
    assert seen.json["aps"] == {  # nothing of the ask is visible
        "alert": {"title": generic},
        "sound": "default",
        "thread-id": seen.headers["apns-collapse-id"],
        "mutable-content": 1,
    }
    collie = seen.json["collie"]
    assert isinstance(collie, dict)
    assert set(collie) == {"e"}
    assert json.loads(open_envelope(apns_key, apns_dev, collie["e"])) == inner
    for word in (b"Deploy", b"ghp_", b"to prod", b'"desk"', b'"c1"', b'"a1"'):
        assert word not in seen.body
    assert "Deploy" not in seen.headers["apns-collapse-id"]

    (fcm_seen,) = svc.fcm.requests
    assert fcm_seen.message["notification"] == {"title": generic}
    data = fcm_seen.message["data"]
    assert isinstance(data, dict)
    assert set(data) == {"e"}
    assert json.loads(open_envelope(fcm_key, fcm_dev, data["e"])) == inner
    assert SECRET.encode() not in json.dumps(fcm_seen.message).encode()


async def test_X1_a_long_pane_name_is_masked_before_it_is_cut(rig: Rig, svc: Services) -> None:
    # Cut first at 200 characters, the fifth token would end "ghp_" + 28 characters + "…",
    # which no rule can recognise; masking the first four then brings it into the 60 shown.
    title = "Go " + " ".join([SECRET] * 5)
    client, _gw, convs = await start(rig, svc, {"c1": title})
    await register(client, "apns", APNS_TOKEN)
    await push_one(client, convs["c1"], "a1")
    (seen,) = svc.apns.requests
    assert alert(seen)["title"] == "Permission needed in Go " + " ".join(["ghp_••••"] * 5)
    assert SECRET[4:12].encode() not in seen.body


# --- P1: the limits, exactly at their edges --------------------------------------------------


async def test_P1_three_a_minute_per_pane(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes", "c2": "Plan"})
    await register(client, "apns", APNS_TOKEN)
    c1 = convs["c1"]
    for ask in ("a1", "a2", "a3"):
        await push_one(client, c1, ask)
    rig.clock.advance(seconds=59.999)
    await held(client, c1, "a4", "pane_minute")
    await push_one(client, convs["c2"], "b1")  # another pane is not held
    assert await cards(client, "c1") == ["a1", "a2", "a3", "a4"]  # a4 shows, with no push
    rig.clock.advance(milliseconds=1)  # the first three leave the minute now
    await push_one(client, c1, "a5")
    assert asks_of(svc.apns.requests) == ["a1", "a2", "a3", "b1", "a5"]


async def test_P1_a_burst_in_one_pane_pushes_exactly_three(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await asyncio.gather(*(raise_ask(convs["c1"], f"a{i}") for i in range(8)))

    async def outcomes() -> Counter[str]:
        return Counter(e["outcome"] for e in await log_of(client))

    async def settled() -> bool:
        done = await outcomes()
        return done["rate_limited"] + done["sent"] == 8

    await eventually(settled)
    assert await outcomes() == {"dispatched": 3, "sent": 3, "rate_limited": 5}
    assert len(svc.apns.requests) == 3


async def test_P1_ten_a_minute_per_agent_across_panes(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {f"c{i}": f"Pane {i}" for i in range(1, 6)})
    await register(client, "apns", APNS_TOKEN)
    for i in range(10):  # 3 + 3 + 3 + 1, each pane within its own limit
        await push_one(client, convs[f"c{i // 3 + 1}"], f"a{i}")
    rig.clock.advance(seconds=59.999)
    await held(client, convs["c5"], "a10", "agent_minute")
    rig.clock.advance(milliseconds=1)
    await push_one(client, convs["c5"], "a11")
    assert len(svc.apns.requests) == 11


async def push_thirty(client: Client, rig: Rig, convs: dict[str, ConversationHandle]) -> None:
    """30 pushes in three minutes (10 a minute over four panes)."""
    for minute in range(3):
        for i in range(10):
            await push_one(client, convs[f"c{i // 3 + 1}"], f"m{minute}-{i}")
        rig.clock.advance(minutes=1)


def many_asks(seen: ApnsSeen) -> bool:
    return alert(seen) == {"title": f"A durable agent on {MACHINE} is raising many asks"}


async def test_P1_thirty_an_hour_then_one_summary_and_an_hour_of_silence(
    rig: Rig, svc: Services
) -> None:
    client, _gw, convs = await start(rig, svc, {f"c{i}": f"Pane {i}" for i in range(1, 5)})
    await register(client, "apns", APNS_TOKEN)
    await push_thirty(client, rig, convs)
    assert len(svc.apns.requests) == 30
    assert not any(many_asks(r) for r in svc.apns.requests)

    await raise_ask(convs["c1"], "a31")  # the 31st in the hour
    entries = await logged(client, "a31", "sent")
    assert [(e["outcome"], e["reason"]) for e in entries] == [
        ("dispatched", "summary"),
        ("sent", None),
    ]
    summary = svc.apns.requests[-1]
    assert many_asks(summary)
    assert summary.json["collie"] == {"type": "many", "machine": MACHINE, "agent": "desk"}

    rig.clock.advance(seconds=1)
    await held(client, convs["c2"], "a32", "agent_silenced")
    rig.clock.advance(seconds=3598.999)  # 3599.999 s after the summary
    await held(client, convs["c3"], "a33", "agent_silenced")
    assert len(svc.apns.requests) == 31
    assert await cards(client, "c3") == ["m0-6", "m0-7", "m0-8", "m1-6", "m1-7"]  # first five
    rig.clock.advance(milliseconds=1)  # the hour of silence is over
    await push_one(client, convs["c3"], "a34")
    assert not many_asks(svc.apns.requests[-1])
    assert len(svc.apns.requests) == 32


async def test_P1_a_gateway_restart_does_not_reset_the_limits(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {f"c{i}": f"Pane {i}" for i in range(1, 5)})
    await register(client, "apns", APNS_TOKEN)
    await push_thirty(client, rig, convs)

    client, _gw = await restart_gateway(rig, svc, client)
    await raise_ask(convs["c1"], "a31")
    await logged(client, "a31", "sent")
    assert len(svc.apns.requests) == 31
    assert many_asks(svc.apns.requests[-1])  # the hour held 30 already

    client, _gw = await restart_gateway(rig, svc, client)
    rig.clock.advance(minutes=30)
    await held(client, convs["c2"], "a32", "agent_silenced")
    assert len(svc.apns.requests) == 31


async def test_P1_a_gateway_restart_keeps_the_pane_minute(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    for ask in ("a1", "a2", "a3"):
        await push_one(client, convs["c1"], ask)
    client, _gw = await restart_gateway(rig, svc, client)
    rig.clock.advance(seconds=59.999)
    await held(client, convs["c1"], "a4", "pane_minute")
    rig.clock.advance(milliseconds=1)
    await push_one(client, convs["c1"], "a5")


# --- P3: once per ask ------------------------------------------------------------------------


async def test_P3_raised_again_after_the_agents_restart_shows_without_a_push(
    rig: Rig, svc: Services
) -> None:
    client, gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await push_one(client, convs["c1"], "a1")
    await raise_ask(convs["c1"], "a2", call="t-shared")
    await logged(client, "a2", "sent")

    agent = await restart_agent(rig, gw)
    conv = await agent.open_conversation("c1")
    await raise_ask(conv, "a1")  # the same ask and tool call, raised again
    entries = await logged(client, "a1", "suppressed")
    assert entries[-1]["reason"] == "already pushed for this ask (P3)"
    await raise_ask(conv, "a3", call="t-shared")  # another ask id for the same tool call
    entries = await logged(client, "a3", "suppressed")
    assert [(e["outcome"], e["reason"]) for e in entries] == [
        ("suppressed", "already pushed for this ask (P3)")
    ]
    assert len(svc.apns.requests) == 2
    assert sorted(await cards(client, "c1")) == ["a1", "a3"]  # raised again, they show


async def test_P3_raised_again_after_the_gateways_restart_shows_without_a_push(
    rig: Rig, svc: Services
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await push_one(client, convs["c1"], "a1")

    client, gw = await restart_gateway(rig, svc, client)
    agent = await restart_agent(rig, gw)
    conv = await agent.open_conversation("c1")
    await raise_ask(conv, "a1")
    entries = await logged(client, "a1", "suppressed")
    assert [(e["outcome"], e["reason"]) for e in entries] == [
        ("dispatched", "ask"),
        ("sent", None),
        ("suppressed", "already pushed for this ask (P3)"),
    ]
    await raise_ask(conv, "a2")  # a new ask still pushes
    await logged(client, "a2", "sent")
    assert asks_of(svc.apns.requests) == ["a1", "a2"]
    assert await cards(client, "c1") == ["a1", "a2"]


async def test_P3_asks_raised_before_the_gateway_reconnects_to_a_restarted_agent(
    rig: Rig, svc: Services
) -> None:
    client, gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await push_one(client, convs["c1"], "a1")
    mirror = gw.mirrors["desk"]
    await rig.stop("desk")
    await eventually(lambda: mirror.state is LinkState.UNREACHABLE)
    agent = rig.agent("desk", runtime="desk")
    await rig.serve("desk", agent)
    conv = await agent.open_conversation("c1")
    await raise_ask(conv, "a1")  # raised again at once, before the link is back
    await raise_ask(conv, "a2")  # and a new one
    entries = await logged(client, "a1", "suppressed")
    assert entries[-1]["reason"] == "already pushed for this ask (P3)"
    await logged(client, "a2", "sent")
    assert asks_of(svc.apns.requests) == ["a1", "a2"]


async def test_P3_an_ask_raised_while_the_gateway_was_away_pushes_once_on_return(
    rig: Rig, svc: Services
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await push_one(client, convs["c1"], "a1")
    await client.close()
    await raise_ask(convs["c1"], "a2")  # raised while no gateway follows the agent
    client, _gw = await open_gateway(rig, svc)
    await logged(client, "a2", "sent")
    entries = await logged(client, "a1", "sent")
    assert [e["outcome"] for e in entries] == ["dispatched", "sent"]  # a1: nothing new
    assert asks_of(svc.apns.requests) == ["a1", "a2"]


# --- presence --------------------------------------------------------------------------------


async def open_stream(client: Client, screen: str) -> tuple[Any, str]:
    """Open the phone's live stream on ``screen``; the response and its stream id."""
    resp = await client.get(f"/api/v1/events?screen={screen}")
    assert resp.status == 200
    buffer = b""
    while b"\n\n" not in buffer:
        buffer += await resp.content.readany()
    head = buffer.split(b"\n\n", 1)[0].decode()
    assert head.startswith("event: stream\ndata: ")
    hello = json.loads(head.split("data: ", 1)[1])
    assert hello["screen"] == screen
    return resp, str(hello["stream_id"])


async def test_presence_no_push_while_a_phone_shows_that_chat(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes", "c2": "Plan"})
    await register(client, "apns", APNS_TOKEN)
    resp, stream = await open_stream(client, "chat:desk:c1")
    try:
        await raise_ask(convs["c1"], "a1")
        entries = await logged(client, "a1", "suppressed")
        assert [(e["outcome"], e["reason"]) for e in entries] == [
            ("suppressed", "a phone is showing this chat")
        ]
        await push_one(client, convs["c2"], "b1")  # another chat pushes

        rig.clock.advance(seconds=30)
        await post_json(client, "/api/v1/presence", {"stream_id": stream, "screen": "chat:desk:c1"})
        rig.clock.advance(seconds=44.999)  # 74.999 s after opening, fresh from the refresh
        await raise_ask(convs["c1"], "a2")
        await logged(client, "a2", "suppressed")

        # The phone moved to c2: c1 pushes again, c2 does not.
        await post_json(client, "/api/v1/presence", {"stream_id": stream, "screen": "chat:desk:c2"})
        await raise_ask(convs["c2"], "b2")
        await logged(client, "b2", "suppressed")
        await push_one(client, convs["c1"], "a3")
        await post_json(
            client, "/api/v1/presence", {"stream_id": "s-unknown", "screen": None}, status=404
        )
    finally:
        resp.close()
    assert asks_of(svc.apns.requests) == ["b1", "a3"]


async def test_presence_goes_stale_after_45_s_without_a_refresh(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    resp, _stream = await open_stream(client, "chat:desk:c1")
    try:
        rig.clock.advance(seconds=44.999)
        await raise_ask(convs["c1"], "a1")
        await logged(client, "a1", "suppressed")
        rig.clock.advance(milliseconds=1)  # 45 s unconfirmed: stale, the push goes out
        await push_one(client, convs["c1"], "a2")
    finally:
        resp.close()


async def test_presence_ends_when_the_stream_closes(rig: Rig, svc: Services) -> None:
    client, gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    resp, stream = await open_stream(client, "chat:desk:c1")
    resp.close()
    await eventually(lambda: stream not in gw.pushing.presence, within=2)
    await push_one(client, convs["c1"], "a1")


async def test_presence_of_a_stream_that_died_without_closing_never_swallows_a_push(
    rig: Rig, svc: Services
) -> None:
    client, gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(
            b"GET /api/v1/events?screen=chat:desk:c1 HTTP/1.1\r\n"
            b"Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
        )
        await writer.drain()
        buffer = b""
        while not re.search(rb"event: stream\ndata: \{.*\}\n\n", buffer):
            buffer += await reader.read(4096)
        match = re.search(rb'"stream_id":"([^"]+)"', buffer)
        assert match is not None
        stream = match.group(1).decode()
        assert stream in gw.pushing.presence
        await raise_ask(convs["c1"], "a1")
        await logged(client, "a1", "suppressed")
        # The phone stops reading and never closes: the gateway still counts the stream open.
        rig.clock.advance(seconds=45)
        await push_one(client, convs["c1"], "a2")
        assert stream in gw.pushing.presence  # still "open", yet it swallowed nothing
    finally:
        writer.close()
        await writer.wait_closed()


# --- provider errors through the gateway ------------------------------------------------------


async def test_gone_tokens_remove_their_devices(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    registered_ms = int(rig.clock().timestamp() * 1000)
    tokens = {"410": "b1" * 32, "410-old": "c1" * 32, "400": "d1" * 32, "ok": "e1" * 32}
    replies = {
        tokens["410"]: Reply(410, {"reason": "Unregistered", "timestamp": registered_ms + 1000}),
        # Apple's timestamp is before the token registered (again): not gone.
        tokens["410-old"]: Reply(
            410, {"reason": "Unregistered", "timestamp": registered_ms - 1000}
        ),
        tokens["400"]: Reply(400, {"reason": "BadDeviceToken"}),
    }
    svc.apns.script = lambda seen: replies.get(seen.headers[":path"].rsplit("/", 1)[1], Reply())
    svc.fcm.script = lambda seen: fcm_error(404, "UNREGISTERED", "Requested entity was not found.")
    ids = {name: await register(client, "apns", token) for name, token in tokens.items()}
    ids["fcm"] = await register(client, "fcm", FCM_TOKEN)
    assert len((await get_json(client, "/api/v1/devices"))["devices"]) == 5

    await raise_ask(convs["c1"], "a1")
    entries = await logged(client, "a1", "gone", "gone", "gone", "failed", "sent")
    outcome = {e["device"]: (e["outcome"], e["reason"]) for e in entries if e["device"]}
    assert outcome == {
        ids["410"]: ("gone", "token gone, device removed (Unregistered)"),
        ids["410-old"]: ("failed", "Unregistered"),
        ids["400"]: ("gone", "token gone, device removed (BadDeviceToken)"),
        ids["fcm"]: ("gone", "token gone, device removed (UNREGISTERED)"),
        ids["ok"]: ("sent", None),
    }
    left = {d["device_id"] for d in (await get_json(client, "/api/v1/devices"))["devices"]}
    assert left == {ids["ok"], ids["410-old"]}
    assert await cards(client, "c1") == ["a1"]


async def test_410_after_the_phone_registered_again_keeps_the_device(
    rig: Rig, svc: Services
) -> None:
    # The phone refreshes its registration while the push is out; Apple then answers 410
    # with a timestamp between the two registrations: the token is newer than that.
    svc.apns_timeout = 1.0
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    first_ms = int(rig.clock().timestamp() * 1000)
    device = await register(client, "apns", APNS_TOKEN)
    gone = Reply(410, {"reason": "Unregistered", "timestamp": first_ms + 500})
    svc.apns.script = lambda seen: "hang" if len(svc.apns.requests) == 1 else gone
    await raise_ask(convs["c1"], "a1")
    await eventually(lambda: len(svc.apns.requests) == 1)
    rig.clock.advance(seconds=1)
    assert await register(client, "apns", APNS_TOKEN) == device  # refreshed, same id
    entries = await logged(client, "a1", "gone")
    assert (entries[-1]["device"], entries[-1]["reason"]) == (
        device,
        "token gone, but the phone registered again (Unregistered)",
    )
    devices = (await get_json(client, "/api/v1/devices"))["devices"]
    assert [d["device_id"] for d in devices] == [device]
    registered = datetime.fromtimestamp(first_ms / 1000 + 1, UTC)
    assert devices[0]["registered_at"] == registered.isoformat().replace("+00:00", "Z")


async def test_sandbox_tokens_go_to_the_sandbox(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    await register(client, "apns", "b2" * 32, environment="sandbox")
    devices = (await get_json(client, "/api/v1/devices"))["devices"]
    assert sorted(d["environment"] for d in devices) == ["production", "sandbox"]
    await raise_ask(convs["c1"], "a1")
    await logged(client, "a1", "sent", "sent")
    assert [r.headers[":path"] for r in svc.apns.requests] == [f"/3/device/{APNS_TOKEN}"]
    assert [r.headers[":path"] for r in svc.sandbox.requests] == [f"/3/device/{'b2' * 32}"]
    assert svc.apns.alpn == ["h2"]
    assert svc.sandbox.alpn == ["h2"]


async def test_a_server_that_never_answers_fails_the_push_not_the_ask(
    rig: Rig, svc: Services
) -> None:
    svc.apns_timeout = 0.4
    svc.retry = RetryPolicy(max_tries=3)
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "apns", APNS_TOKEN)
    svc.apns.script = lambda seen: "hang"
    await raise_ask(convs["c1"], "a1")
    await eventually(lambda: len(svc.apns.requests) >= 1)
    # The push hangs, and the ask is on the phone already.
    assert await cards(client, "c1") == ["a1"]
    dash = await get_json(client, "/api/v1/dashboard")
    assert "failed" not in {e["outcome"] for e in await log_of(client)}
    assert any(
        r["agent"] == "desk" and r["right"].get("waiting") == 1
        for s in dash["sections"]
        for r in s.get("rows", [])
    )
    entries = await logged(client, "a1", "failed")
    assert [(e["outcome"], e["reason"]) for e in entries] == [
        ("dispatched", "ask"),
        ("failed", "timeout"),
    ]
    assert len(svc.apns.requests) == 3  # every try timed out
    assert len({r.apns_id for r in svc.apns.requests}) == 1


async def test_fcm_that_never_answers_fails_the_push(rig: Rig, svc: Services) -> None:
    svc.retry = RetryPolicy(max_tries=1)
    svc.fcm_timeout = 0.4
    client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
    await register(client, "fcm", FCM_TOKEN)
    await register(client, "apns", APNS_TOKEN)
    svc.fcm.hang = True
    await raise_ask(convs["c1"], "a1")
    entries = await logged(client, "a1", "sent", "failed")
    assert {(e["outcome"], e["reason"]) for e in entries if e["device"]} == {
        ("sent", None),
        ("failed", "timeout"),
    }


# --- S6: a webhook target through the gateway ------------------------------------------------


async def test_S6_webhook_gets_the_ask_signed(rig: Rig, svc: Services) -> None:
    secret = b"whsec_test_secret"
    async with receiver([secret]) as hook:
        svc.webhooks = [(hook.url, [secret]), ("http://127.0.0.1:9/hook", [secret])]
        svc.retry = RetryPolicy(max_tries=2)
        client, _gw, convs = await start(rig, svc, {"c1": "Notes"})
        await register(client, "apns", APNS_TOKEN)
        await raise_ask(convs["c1"], "a1", push_title="Deploy?")
        entries = await logged(client, "a1", "sent", "sent", "failed")
        webhook = sorted((e["outcome"], e["device"]) for e in entries if e["device"] == "webhook")
        assert webhook == [("failed", "webhook"), ("sent", "webhook")]
        failed = next(e for e in entries if e["outcome"] == "failed")
        assert failed["reason"]
        assert len(svc.apns.requests) == 1  # the push went out regardless
    check_delivery(hook, secret)


async def test_X1_webhook_masks_option_and_field_labels(rig: Rig, svc: Services) -> None:
    """Issue 9.10: option labels, form field labels and select option labels are masked in
    the webhook's body, as titles are."""
    secret = b"whsec_test_secret"
    key = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    async with receiver([secret]) as hook:
        svc.webhooks = [(hook.url, [secret])]
        _client, gw, convs = await start(rig, svc, {"c1": "Notes"})
        await convs["c1"].ask(
            kind="form",
            id="f1",
            title="Configure billing",
            fields=[
                FormField(id="k", kind="text", label=f"Key {key}"),
                FormField(
                    id="m",
                    kind="select",
                    label="Mode",
                    options=[Option(id="a", label=f"Allow with {key}")],
                ),
            ],
        )
        await convs["c1"].ask(
            kind="permission",
            id="p1",
            title="Charge?",
            options=[Option(id="a", label=f"Allow with {key}", role="allow")],
        )
        await eventually(lambda: len(hook.accepted) == 2)
    raw = json.dumps(hook.accepted, ensure_ascii=False)
    assert key[8:16] not in raw
    assert raw.count("sk_live_••••") == 3
    assert gw.redact(key) == "sk_live_••••"


def check_delivery(hook: Receiver, secret: bytes) -> None:
    assert hook.refused == []
    (body,) = hook.accepted
    assert body["machine"] == MACHINE
    assert body["agent"] == "desk"
    ask = body["ask"]
    assert isinstance(ask, dict)
    assert (ask["id"], ask["conversation"], ask["push_title"]) == ("a1", "c1", "Deploy?")
    ((header, raw),) = hook.raw
    assert re.fullmatch(r"t=[0-9]+,v1=[0-9a-f]{64}", header)
    t = int(header.split(",")[0][2:])
    (delivery_id,) = hook.ids
    assert delivery_id is not None
    assert re.fullmatch(r"msg_[0-9a-f]{32}", delivery_id)
    seen = SeenSet()
    assert verify(header, raw, [secret], t, seen, delivery_id=delivery_id) == t
    with pytest.raises(Duplicate):
        verify(header, raw, [secret], t, seen, delivery_id=delivery_id)  # a replay
    with pytest.raises(SignatureError):
        verify(header, raw.replace(b"a1", b"a2"), [secret], t, SeenSet())  # tampered
    with pytest.raises(SignatureError):
        verify(header, raw, [secret], t, SeenSet())  # the id header stripped


# --- the delivery log ------------------------------------------------------------------------


async def test_delivery_outcomes_are_visible_in_the_phone_api(rig: Rig, svc: Services) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes", "c2": "Plan"})
    await raise_ask(convs["c1"], "a0")
    await logged(client, "a0", "suppressed")  # no device yet
    ok = await register(client, "apns", APNS_TOKEN)
    broken = await register(client, "apns", "f0" * 32)
    busy = await register(client, "apns", "f1" * 32)
    replies = {
        "f0" * 32: Reply(400, {"reason": "BadExpirationDate"}),
        "f1" * 32: Reply(429, {"reason": "TooManyRequests"}, (("retry-after", "0"),)),
    }
    svc.apns.script = lambda seen: replies.get(seen.headers[":path"].rsplit("/", 1)[1], Reply())
    for ask in ("a1", "a2", "a3"):
        await raise_ask(convs["c1"], ask)
        await logged(client, ask, "sent", "failed", "throttled")
    await raise_ask(convs["c1"], "a4")
    await logged(client, "a4", "rate_limited")
    resp, _stream = await open_stream(client, "chat:desk:c2")
    try:
        await raise_ask(convs["c2"], "b1")
        await logged(client, "b1", "suppressed")
    finally:
        resp.close()

    newest = (await get_json(client, "/api/v1/pushes?limit=3"))["pushes"]
    assert len(newest) == 3
    assert newest[0]["ask"] == "b1"
    kinds = {
        (e["ask"], e["device"], e["outcome"], e["reason"])
        for e in await log_of(client)
        if e["ask"] in {"a0", "a1", "a4", "b1"}
    }
    assert kinds == {
        ("a0", None, "suppressed", "no device registered"),
        ("a1", None, "dispatched", "ask"),
        ("a1", ok, "sent", None),
        ("a1", broken, "failed", "BadExpirationDate"),
        ("a1", busy, "throttled", "TooManyRequests"),
        ("a4", None, "rate_limited", "pane_minute"),
        ("b1", None, "suppressed", "a phone is showing this chat"),
    }
    sent = next(e for e in await log_of(client) if e["device"] == ok)
    first_ok = next(r for r in svc.apns.requests if r.headers[":path"].endswith(APNS_TOKEN))
    assert sent["provider_id"] == first_ok.apns_id
    assert sent["conversation"] == "c1"
    assert sent["agent"] == "desk"
    await get_json(client, "/api/v1/pushes?limit=x", status=400)
