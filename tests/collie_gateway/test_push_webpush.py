"""Issue 22 in the gateway: Web Push devices, withdrawal when an ask closes, push health and a
device's test notification. SDK agents raise asks on real sockets; the gateway pushes to the
fake APNs and FCM and to a push service of the tests' own (``tests/push/webpush_fakes.py``),
which checks every VAPID header and decrypts every body with the subscription's private key."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from collie_gateway.__main__ import push_targets_from_env
from collie_gateway.errors import ConfigError
from collie_gateway.strings import Catalogue
from push import Content, WebPushClient, Withdrawal, collapse_id, open_envelope, vapid
from tests.collie_gateway.conftest import Rig, eventually, get_json, post_json
from tests.collie_gateway.push_fixtures import Services, serve
from tests.collie_gateway.test_push_http import (
    APNS_TOKEN,
    FCM_TOKEN,
    MACHINE,
    SECRET,
    Client,
    log_of,
    logged,
    open_stream,
    raise_ask,
    register,
    restart_gateway,
    start,
    svc,
)
from tests.push.fakes import make_tls
from tests.push.webpush_fakes import Browser, FakePushService, b64url

__all__ = ["svc"]  # the fixture, shared with test_push_http


@pytest.fixture
async def web(rig: Rig) -> AsyncIterator[FakePushService]:
    fake = FakePushService(clock=time.time)
    async with serve(fake.app()) as base:
        fake.origin = base
        yield fake


async def subscribe(client: Client, web: FakePushService) -> tuple[str, Browser]:
    """A browser's subscription, registered as the page does; the device id and its keys."""
    endpoint, browser = web.subscribe()
    body = {
        "provider": "webpush",
        "endpoint": endpoint,
        "expirationTime": None,
        "keys": {"p256dh": browser.p256dh, "auth": b64url(browser.auth)},
    }
    answer = await post_json(client, "/api/v1/devices", body)
    return str(answer["device_id"]), browser


def messages(web: FakePushService) -> list[dict[str, Any]]:
    return [dict(seen.message or {}) for seen in web.requests]


async def answer(client: Client, ask: str, request_id: str) -> dict[str, Any]:
    """A tap on another phone: the answer through the phone API."""
    tap = {"request_id": request_id, "version": 1, "answer": {"option": "yes"}}
    result: dict[str, Any] = await post_json(client, f"/api/v1/agents/desk/asks/{ask}/answer", tap)
    return result


async def test_the_vapid_key_is_made_once_and_kept(rig: Rig, svc: Services) -> None:
    client, _gw, _convs = await start(rig, svc, {"c1": "Deploy"})
    first = (await get_json(client, "/api/v1/push/vapid"))["public_key"]
    assert isinstance(first, str)
    assert len(first) == 87  # 65 bytes, base64url without padding
    client, _gw = await restart_gateway(rig, svc, client)
    assert (await get_json(client, "/api/v1/push/vapid"))["public_key"] == first


async def test_P2_a_web_push_device_gets_the_ask_signed_and_encrypted(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy notes"})
    key = (await get_json(client, "/api/v1/push/vapid"))["public_key"]
    device, _browser = await subscribe(client, web)
    await raise_ask(convs["c1"], "a1", push_title="Ship it?")
    entries = await logged(client, "a1", "sent")
    assert [(e["outcome"], e["device"]) for e in entries] == [
        ("dispatched", None),
        ("sent", device),
    ]
    [seen] = web.requests
    assert seen.signer == key
    assert seen.headers["Urgency"] == "high"
    assert seen.headers["TTL"] == "3600"
    assert seen.message == {
        "v": 1,
        "type": "ask",
        "machine": MACHINE,
        "agent": "desk",
        "conversation": "c1",
        "ask": "a1",
        "tag": collapse_id(
            Withdrawal(
                machine=MACHINE,
                agent="desk",
                conversation="c1",
                ask="a1",
                pane_key=f"{MACHINE}/desk/c1",
            )
        ),
        "title": "Permission needed in Deploy notes",
        "body": "Ship it?",
    }
    devices = (await get_json(client, "/api/v1/devices"))["devices"]
    assert [(d["device_id"], d["provider"]) for d in devices] == [(device, "webpush")]


async def test_withdrawal_after_a_tap_on_another_phone_reaches_every_device_once(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy"})
    web_device, _browser = await subscribe(client, web)
    ios = await register(client, "apns", APNS_TOKEN)
    android = await register(client, "fcm", FCM_TOKEN)
    await raise_ask(convs["c1"], "a1")
    await logged(client, "a1", "sent", "sent", "sent")
    taken = await answer(client, "a1", "tap-1")
    assert taken["outcome"] == "accepted", taken
    entries = await logged(client, "a1", "withdrawn", "withdrawn", "withdrawn")
    withdrawn = sorted(e["device"] for e in entries if e["outcome"] == "withdrawn")
    assert withdrawn == sorted([web_device, ios, android])
    # Web Push: the ask's Topic, low urgency; the worker closes the notification by its tag.
    ask_push, withdrawal = web.requests
    assert withdrawal.headers["Topic"] == ask_push.headers["Topic"]
    assert withdrawal.headers["Urgency"] == "low"
    assert withdrawal.message is not None
    assert ask_push.message is not None
    assert (withdrawal.message["type"], withdrawal.message["ask"]) == ("withdraw", "a1")
    assert withdrawal.message["tag"] == ask_push.message["tag"]
    # APNs: a background push naming the ask; FCM: a data message.
    background = svc.apns.requests[-1]
    assert background.headers["apns-push-type"] == "background"
    assert background.headers["apns-priority"] == "5"
    assert background.json["aps"] == {"content-available": 1}
    collie = background.json["collie"]
    assert isinstance(collie, dict)
    assert (collie["type"], collie["ask"]) == ("withdraw", "a1")
    data = svc.fcm.requests[-1].message
    assert "notification" not in data
    assert data["data"]["type"] == "withdraw"  # type: ignore[index]
    # Once per device: nothing more, whatever else the ask goes through.
    await answer(client, "a1", "tap-2")
    await eventually(lambda: True)
    assert len(web.requests) == 2
    assert len(svc.apns.requests) == 2
    assert len(svc.fcm.requests) == 2


async def test_P1_withdrawals_never_count_against_the_limits(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy"})
    await subscribe(client, web)
    await raise_ask(convs["c1"], "a1")
    await logged(client, "a1", "sent")
    await answer(client, "a1", "tap-1")
    await logged(client, "a1", "withdrawn")
    for ask in ("a2", "a3"):  # 3 a minute per pane: a1, a2, a3 — the withdrawal took none
        await raise_ask(convs["c1"], ask)
        await logged(client, ask, "sent")
    await raise_ask(convs["c1"], "a4")
    entries = await logged(client, "a4", "rate_limited")
    assert [(e["outcome"], e["reason"]) for e in entries] == [("rate_limited", "pane_minute")]
    assert [m["type"] for m in messages(web)] == ["ask", "withdraw", "ask", "ask"]


async def test_a_gone_subscription_is_removed(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy"})
    device, _browser = await subscribe(client, web)
    web.script = lambda seen: 410
    await raise_ask(convs["c1"], "a1")
    entries = await logged(client, "a1", "gone")
    gone = next(e for e in entries if e["outcome"] == "gone")
    assert (gone["device"], gone["reason"]) == (device, "token gone, device removed (HTTP 410)")
    assert (await get_json(client, "/api/v1/devices"))["devices"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"provider": "webpush", "endpoint": "http://push.example.org/p",
             "keys": {"p256dh": Browser().p256dh, "auth": "BTBZMqHH6r4Tts7J_aSIgg"}},
            "an endpoint is https:// (http:// only on a loopback address)",
        ),
        (
            {"provider": "webpush", "token": "abc"},
            "webpush takes an endpoint and keys (PushSubscription.toJSON())",
        ),
        (
            {"provider": "apns", "endpoint": "https://push.example.org/p"},
            "apns takes a token, not an endpoint or keys",
        ),
        (
            {"provider": "webpush", "endpoint": "https://push.example.org/p",
             "keys": {"p256dh": "BCVx", "auth": "BTBZMqHH6r4Tts7J_aSIgg"}},
            "a public key is an uncompressed P-256 point (65 bytes)",
        ),
    ],
)  # fmt: skip
async def test_registrations_refused_say_why(
    rig: Rig, svc: Services, body: dict[str, Any], message: str
) -> None:
    client, _gw, _convs = await start(rig, svc, {"c1": "Deploy"})
    resp = await client.post("/api/v1/devices", json=body)
    assert resp.status == 400
    assert (await resp.json())["message"] == message


async def test_a_devices_test_notification_and_push_health(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, _convs = await start(rig, svc, {"c1": "Deploy"})
    device, _browser = await subscribe(client, web)
    before = await get_json(client, "/api/v1/push/health")
    assert [(p["provider"], p["ok"]) for p in before["providers"]] == [
        ("apns", None), ("fcm", None), ("webpush", None),
    ]  # fmt: skip
    result = await post_json(client, f"/api/v1/devices/{device}/test", {})
    assert result == {"device_id": device, "outcome": "sent", "reason": None, "status": 201}
    assert messages(web)[0]["title"] == f"Notifications from {MACHINE} arrive on this device"
    assert messages(web)[0]["type"] == "test"
    web.script = lambda seen: 400
    failed = await post_json(client, f"/api/v1/devices/{device}/test", {})
    assert (failed["outcome"], failed["reason"]) == ("failed", "HTTP 400")
    client, _gw = await restart_gateway(rig, svc, client)  # health survives a restart
    health = {
        p["provider"]: p for p in (await get_json(client, "/api/v1/push/health"))["providers"]
    }
    assert health["webpush"]["ok"] is False
    assert health["webpush"]["last_failure"]["reason"] == "HTTP 400"
    assert health["webpush"]["last_success"]["at"] <= health["webpush"]["last_failure"]["at"]
    tests = [e for e in await log_of(client) if e["device"] == device]
    assert [(e["outcome"], e["reason"]) for e in tests] == [
        ("sent", "test"), ("failed", "test: HTTP 400"),
    ]  # fmt: skip
    missing = await client.post("/api/v1/devices/d-nobody/test", json={})
    assert missing.status == 404


async def test_a_push_that_arrives_after_the_answer_is_withdrawn_from_its_device(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy"})
    device, _browser = await subscribe(client, web)
    web.hold = asyncio.Event()
    await raise_ask(convs["c1"], "a1")
    await eventually(lambda: web.held == 1)  # the push is on its way
    await answer(client, "a1", "tap-1")
    await eventually(lambda: cards_gone(client))
    web.hold.set()  # it arrives after the answer
    entries = await logged(client, "a1", "sent", "withdrawn")
    assert [e["device"] for e in entries if e["outcome"] == "withdrawn"] == [device]
    assert [m["type"] for m in messages(web)] == ["ask", "withdraw"]


async def cards_gone(client: Client) -> bool:
    view = await get_json(client, "/api/v1/agents/desk/conversations/c1")
    return not view["cards"]["cards"]


async def test_an_ask_pushed_before_a_restart_is_withdrawn_after_it(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Deploy"})
    device, _browser = await subscribe(client, web)
    await raise_ask(convs["c1"], "a1")
    await logged(client, "a1", "sent")
    client, _gw = await restart_gateway(rig, svc, client)
    await answer(client, "a1", "tap-1")
    entries = await logged(client, "a1", "withdrawn")
    assert [e["device"] for e in entries if e["outcome"] == "withdrawn"] == [device]
    client, _gw = await restart_gateway(rig, svc, client)  # and not again after another
    await asyncio.sleep(0.3)
    assert [m["type"] for m in messages(web)] == ["ask", "withdraw"]


def test_COLLIE_VAPID_SUBJECT_must_be_a_contact() -> None:
    with pytest.raises(ConfigError, match="COLLIE_VAPID_SUBJECT is a mailto: or https:// contact"):
        push_targets_from_env({"COLLIE_VAPID_SUBJECT": "ops"})


async def test_a_CA_file_alone_configures_the_web_push_sender(rig: Rig) -> None:
    make_tls(rig.tmp)
    factory = push_targets_from_env({"COLLIE_PUSH_CA_FILE": str(rig.tmp / "ca.pem")})
    assert factory is not None
    targets = factory(Content(strings=Catalogue()))
    assert (dict(targets.senders), list(targets.webhooks)) == ({}, [])
    assert targets.webpush is not None
    sender = targets.webpush(vapid.generate())
    assert isinstance(sender, WebPushClient)
    await sender.aclose()


async def test_X1_presence_and_private_mode_hold_for_web_push_as_for_apns(
    rig: Rig, svc: Services, web: FakePushService
) -> None:
    client, _gw, convs = await start(rig, svc, {"c1": "Notes", "c2": f"Fix {SECRET} leak"})
    endpoint, browser = web.subscribe()
    key = bytes(range(32))
    body = {
        "provider": "webpush",
        "endpoint": endpoint,
        "keys": {"p256dh": browser.p256dh, "auth": b64url(browser.auth)},
        "key": base64.b64encode(key).decode(),
    }
    device = (await post_json(client, "/api/v1/devices", body))["device_id"]
    resp, _stream = await open_stream(client, "chat:desk:c1")
    try:
        await raise_ask(convs["c1"], "a1")
        entries = await logged(client, "a1", "suppressed")
        assert [e["reason"] for e in entries] == ["a phone is showing this chat"]
        await raise_ask(convs["c2"], "b1", push_line=f"export TOKEN={SECRET}")
        await logged(client, "b1", "sent")
    finally:
        resp.close()
    [seen] = web.requests
    assert seen.message is not None
    assert set(seen.message) == {"v", "type", "tag", "title", "e"}
    assert seen.message["title"] == "A durable agent needs your answer"
    inner = json.loads(open_envelope(key, device, str(seen.message["e"])))
    assert inner["pane"] == "Fix ghp_•••• leak"
    assert inner["line"] == "export TOKEN=ghp_••••"
    assert SECRET[8:].encode() not in browser.decrypt(seen.body)
