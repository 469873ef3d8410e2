"""Issue 22: the Web Push sender (RFC 8030, 8291, 8292) against a push service of the tests'
own on 127.0.0.1 that checks every VAPID header and decrypts every body with the
subscription's private key, made here as a browser makes it."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec
from pytest_aiohttp import AiohttpServer

from push import (
    AskNotification,
    Content,
    Device,
    Forwarded,
    ManyAsksNotification,
    Outcome,
    Provider,
    RetryPolicy,
    WebPushClient,
    Withdrawal,
    check_endpoint,
    collapse_id,
    open_envelope,
    subscription_keys,
    topic,
    vapid,
)
from push.payloads import WEBPUSH_MAX_PLAINTEXT
from push.webpush import encrypt
from tests.push.conftest import DEPLOY_ASK, T0, FakeClock, FakeSleep
from tests.push.fakes import make_tls
from tests.push.webpush_fakes import Answer, Browser, FakePushService, b64url

SUBJECT = "mailto:ops@collie.test"
NOTE = DEPLOY_ASK


@pytest.fixture
async def service(aiohttp_server: AiohttpServer, clock: FakeClock) -> FakePushService:
    fake = FakePushService(clock=clock)
    server = await aiohttp_server(fake.app())
    fake.origin = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
async def client(
    content: Content, clock: FakeClock, sleeps: FakeSleep
) -> AsyncIterator[WebPushClient]:
    async with WebPushClient(
        vapid_key=vapid.generate(),
        subject=SUBJECT,
        content=content,
        clock=clock,
        sleep=sleeps,
        rng=lambda: 0.0,
    ) as web_client:
        yield web_client


def device(endpoint: str, browser: Browser, key: bytes | None = None) -> Device:
    return Device(
        id="d-web",
        provider=Provider.WEBPUSH,
        token=endpoint,
        registered_at=T0 - 60,
        webpush=browser.keys,
        key=key,
    )


def test_aes128gcm_matches_the_rfc_8291_example() -> None:
    vector = json.loads(Path("fixtures/push/webpush_vectors.json").read_text())["rfc8291"]
    sender = ec.derive_private_key(
        int.from_bytes(vapid.b64url_decode(vector["as_private"]), "big"), ec.SECP256R1()
    )
    keys = subscription_keys(vector["ua_public"], vector["auth_secret"])
    body = encrypt(
        keys,
        vector["plaintext"].encode(),
        salt=vapid.b64url_decode(vector["salt"]),
        private_key=sender,
    )
    assert b64url(body) == vector["body"]
    ua = ec.derive_private_key(
        int.from_bytes(vapid.b64url_decode(vector["ua_private"]), "big"), ec.SECP256R1()
    )
    browser = Browser(private=ua, auth=vapid.b64url_decode(vector["auth_secret"]))
    assert browser.decrypt(body) == vector["plaintext"].encode()  # the tests' own decrypter


async def test_P2_an_ask_arrives_encrypted_signed_and_readable_by_the_browser(
    service: FakePushService, client: WebPushClient
) -> None:
    endpoint, browser = service.subscribe()
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert delivery.outcome is Outcome.SENT
    assert delivery.provider_id == "/m/1"
    [seen] = service.requests
    assert seen.signer == client.public_key
    assert seen.headers["Content-Encoding"] == "aes128gcm"
    assert seen.headers["TTL"] == "3600"  # no deadline: DEFAULT_TTL
    assert seen.headers["Urgency"] == "high"
    assert seen.headers["Topic"] == topic(NOTE)
    assert len(seen.headers["Topic"]) == 32
    assert b"Deploy" not in seen.body
    assert b"pytest" not in seen.body
    assert seen.message == {
        "v": 1,
        "type": "ask",
        "machine": "m1",
        "agent": "desk",
        "conversation": "c1",
        "ask": "a1",
        "tag": collapse_id(NOTE),
        "title": "Permission needed in Deploy",
        "body": "Run the tests?\npytest -q",
    }


async def test_a_withdrawal_goes_under_the_asks_topic_at_low_urgency(
    service: FakePushService, client: WebPushClient
) -> None:
    endpoint, browser = service.subscribe()
    await client.send(device(endpoint, browser), NOTE)
    delivery = await client.send(device(endpoint, browser), Withdrawal.of(NOTE))
    assert delivery.ok
    ask, withdrawal = service.requests
    assert withdrawal.headers["Topic"] == ask.headers["Topic"]
    assert withdrawal.headers["Urgency"] == "low"
    assert withdrawal.message == {
        "v": 1,
        "type": "withdraw",
        "machine": "m1",
        "agent": "desk",
        "conversation": "c1",
        "ask": "a1",
        "tag": collapse_id(NOTE),
    }


async def test_P1_the_many_asks_push(service: FakePushService, client: WebPushClient) -> None:
    endpoint, browser = service.subscribe()
    note = ManyAsksNotification(machine="m1", agent="desk", host="desk-mac", deadline=T0 + 90)
    assert (await client.send(device(endpoint, browser), note)).ok
    [seen] = service.requests
    assert seen.headers["TTL"] == "90"  # runs to the deadline
    assert seen.message is not None
    assert seen.message["title"] == "A durable agent on desk-mac is raising many asks"
    assert seen.message["type"] == "many"


async def test_X1_a_private_device_gets_the_content_only_in_the_envelope(
    service: FakePushService, client: WebPushClient
) -> None:
    endpoint, browser = service.subscribe()
    key = bytes(range(32))
    assert (await client.send(device(endpoint, browser, key), NOTE)).ok
    [seen] = service.requests
    assert seen.message is not None
    assert set(seen.message) == {"v", "type", "tag", "title", "e"}
    assert seen.message["title"] == "A durable agent needs your answer"
    inner = json.loads(open_envelope(key, "d-web", str(seen.message["e"])))
    assert inner["pane"] == "Deploy"
    assert inner["line"] == "pytest -q"
    assert seen.headers["Topic"] == topic(NOTE, key) != topic(NOTE)


@pytest.mark.parametrize("status", [404, 410])
async def test_a_subscription_the_service_calls_gone_is_gone(
    service: FakePushService, client: WebPushClient, status: int
) -> None:
    service.script = lambda seen: status
    endpoint, browser = service.subscribe()
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert (delivery.outcome, delivery.status, delivery.attempts) == (Outcome.GONE, status, 1)


async def test_429_is_retried_after_retry_after(
    service: FakePushService, client: WebPushClient, sleeps: FakeSleep
) -> None:
    answers: Iterator[Answer] = iter([(429, {"Retry-After": "7"}), 503, 201])
    service.script = lambda seen: next(answers)
    endpoint, browser = service.subscribe()
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert (delivery.outcome, delivery.attempts) == (Outcome.SENT, 3)
    assert sleeps.delays == [7.0, 0.5]  # Retry-After, then 0.5 · 2 scaled by jitter 0.5


async def test_throttled_through_every_try(service: FakePushService, client: WebPushClient) -> None:
    service.script = lambda seen: 429
    endpoint, browser = service.subscribe()
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert (delivery.outcome, delivery.attempts) == (Outcome.THROTTLED, RetryPolicy().max_tries)


async def test_413_and_other_refusals_are_final(
    service: FakePushService, client: WebPushClient
) -> None:
    service.script = lambda seen: 413
    endpoint, browser = service.subscribe()
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert (delivery.outcome, delivery.reason, delivery.attempts) == (
        Outcome.FAILED,
        "PayloadTooLarge",
        1,
    )
    service.script = lambda seen: 403
    delivery = await client.send(device(endpoint, browser), NOTE)
    assert (delivery.reason, delivery.status, delivery.attempts) == ("HTTP 403", 403, 1)


async def test_the_longest_texts_fit_a_relay(
    service: FakePushService, client: WebPushClient
) -> None:
    endpoint, browser = service.subscribe()
    huge = AskNotification(
        machine="m" * 500, agent="a" * 500, conversation="c" * 500, ask="q" * 500,
        pane_key="p", pane="P" * 500, title="T" * 500, line="L" * 500,
    )  # fmt: skip
    assert (await client.send(device(endpoint, browser), huge)).ok
    [seen] = service.requests
    assert len(browser.decrypt(seen.body)) <= WEBPUSH_MAX_PLAINTEXT
    assert seen.message is not None
    assert str(seen.message["title"]).endswith("…")


async def test_one_vapid_token_per_origin_signed_again_at_half_its_life(
    service: FakePushService, client: WebPushClient, clock: FakeClock
) -> None:
    endpoint, browser = service.subscribe()
    for _ in range(3):
        await client.send(device(endpoint, browser), NOTE)
    assert client.tokens_signed == 1
    clock.advance(vapid.LIFETIME / 2 + 1)
    await client.send(device(endpoint, browser), NOTE)
    assert client.tokens_signed == 2
    assert len({s.headers["Authorization"] for s in service.requests}) == 2
    assert all(s.signer == client.public_key for s in service.requests)


async def test_what_is_not_a_web_push_is_not_sent(
    service: FakePushService, client: WebPushClient
) -> None:
    endpoint, browser = service.subscribe()
    apns = Device(id="d-ios", provider=Provider.APNS, token="ab" * 32, registered_at=T0)
    assert (await client.send(apns, NOTE)).reason == "not a Web Push device"
    relayed = Forwarded(body=b"x" * 120, ttl=60)
    assert (await client.send(device(endpoint, browser), relayed)).outcome is Outcome.FAILED
    far = device("http://push.example.org/push/x", browser)
    far_delivery = await client.send(far, NOTE)
    assert far_delivery.reason == "an endpoint is https:// (http:// only on a loopback address)"
    assert service.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "https://push.example.org/x",
        "http://127.0.0.1:8/p",
        "http://[::1]:9/p",
        "http://localhost/p",
    ],
)
def test_endpoints_that_may_be_pushed_to(url: str) -> None:
    assert check_endpoint(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://push.example.org/x",
        "http://10.0.0.1/x",
        "ftp://127.0.0.1/x",
        "https://user@push.example.org/x",
        "https://push.example.org/x#f",
        "https:///x",
        "https://push.example.org:99999/x",
        "https://push.example.org/" + "x" * 2048,
        "https://push.example.org/ x",
    ],
)
def test_endpoints_that_may_not(url: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        check_endpoint(url)


@pytest.mark.parametrize(
    ("p256dh", "auth"),
    [
        ("BCVxsr7N", "BTBZMqHH6r4Tts7J_aSIgg"),  # not a point
        (b64url(b"\x04" + b"\x01" * 64), "BTBZMqHH6r4Tts7J_aSIgg"),  # not on the curve
        (Browser().p256dh, "BTBZMqHH6r4Tts7J"),  # 12 bytes of auth
        (Browser().p256dh, "not base64!"),
    ],
    ids=["not-a-point", "off-the-curve", "short-auth", "auth-not-base64"],  # the keys are random
)
def test_subscription_keys_refused(p256dh: str, auth: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each says why in its own words
        subscription_keys(p256dh, auth)


async def test_COLLIE_PUSH_CA_FILE_covers_push_services(tmp_path: Path, content: Content) -> None:
    tls = make_tls(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    fake = FakePushService()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    fake.origin = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        endpoint, browser = fake.subscribe()
        key = vapid.generate()
        async with WebPushClient(
            vapid_key=key, subject=SUBJECT, content=content, verify=tls.client
        ) as trusting:
            assert (await trusting.send(device(endpoint, browser), NOTE)).ok
        async with WebPushClient(
            vapid_key=key, subject=SUBJECT, content=content, retry=RetryPolicy(max_tries=1)
        ) as system_cas:
            refused = await system_cas.send(device(endpoint, browser), NOTE)
        assert refused.outcome is Outcome.FAILED
        assert refused.reason == "connection: ClientConnectorCertificateError"
        assert len(fake.requests) == 1
    finally:
        await runner.cleanup()
