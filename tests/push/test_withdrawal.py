"""Issue 22: withdrawals — an answered, decided or expired ask takes its notification back.
APNs gets a background push (content-available, priority 5), FCM a data message; neither
alerts. Through the fake APNs and FCM of ``fakes.py``."""

from __future__ import annotations

import json

from aiohttp.test_utils import TestServer

from push import (
    ApnsClient,
    Content,
    FcmClient,
    ServiceAccount,
    Withdrawal,
    apns_id,
    apns_request,
    collapse_id,
    fcm_message,
    open_envelope,
)
from tests.push.conftest import (
    DEPLOY_ASK,
    KEY_ID,
    T0,
    TEAM_ID,
    TOPIC,
    FakeClock,
    apns_device,
    fcm_device,
)
from tests.push.fakes import FakeApns, FakeFcm

NOTE = DEPLOY_ASK
GONE = Withdrawal.of(NOTE)
IDS = {"type": "withdraw", "machine": "m1", "agent": "desk", "conversation": "c1", "ask": "a1"}
KEY = bytes(range(32))


def test_apns_withdrawal_is_a_background_push_naming_the_ask(content: Content) -> None:
    req = apns_request(apns_device(), GONE, topic=TOPIC, content=content, now=T0)
    assert dict(req.headers) == {
        "apns-push-type": "background",
        "apns-priority": "5",
        "apns-expiration": str(int(T0) + 3600),
        "apns-topic": TOPIC,
        "content-type": "application/json",
    }
    assert json.loads(req.body) == {
        "aps": {"content-available": 1},
        "collie": {**IDS, "thread": collapse_id(NOTE)},
    }


def test_apns_withdrawal_of_a_private_device_names_the_ask_only_sealed(content: Content) -> None:
    device = apns_device(key=KEY)
    req = apns_request(device, GONE, topic=TOPIC, content=content, now=T0)
    body = json.loads(req.body)
    assert body["aps"] == {"content-available": 1}
    assert set(body["collie"]) == {"e"}
    inner = json.loads(open_envelope(KEY, device.id, body["collie"]["e"]))
    assert inner == {"v": 1, **IDS, "thread": collapse_id(NOTE, KEY)}


def test_a_withdrawal_has_its_own_stable_apns_id() -> None:
    device = apns_device()
    assert apns_id(GONE, device) == apns_id(GONE, device) != apns_id(NOTE, device)


def test_fcm_withdrawal_is_a_data_message(content: Content) -> None:
    msg = fcm_message(fcm_device(), GONE, content=content, now=T0)["message"]
    assert isinstance(msg, dict)
    assert "notification" not in msg
    assert msg["data"] == {**IDS, "tag": collapse_id(NOTE)}
    assert msg["android"] == {"priority": "normal", "ttl": "3600s"}


async def test_through_the_fake_apns(
    apns_server: FakeApns, apns_pem: bytes, content: Content, clock: FakeClock
) -> None:
    async with ApnsClient(
        team_id=TEAM_ID,
        key_id=KEY_ID,
        signing_key=apns_pem,
        topic=TOPIC,
        content=content,
        production_url=apns_server.url,
        verify=False,
        clock=clock,
    ) as apns:
        delivery = await apns.send(apns_device(), GONE)
    assert delivery.ok
    [seen] = apns_server.requests
    assert (seen.headers["apns-push-type"], seen.headers["apns-priority"]) == ("background", "5")
    assert seen.apns_id == apns_id(GONE, apns_device())
    assert "alert" not in seen.json["aps"]  # type: ignore[operator]


async def test_through_the_fake_fcm(
    fcm_server: tuple[FakeFcm, TestServer],
    service_account: ServiceAccount,
    content: Content,
) -> None:
    fake, server = fcm_server
    async with FcmClient(
        service_account, content=content, base_url=str(server.make_url(""))
    ) as fcm:
        assert (await fcm.send(fcm_device(), GONE)).ok
    [seen] = fake.requests
    assert seen.message["data"] == {**IDS, "tag": collapse_id(NOTE)}
    assert "notification" not in seen.message
