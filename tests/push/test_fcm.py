"""The FCM client against a fake FCM v1 API and token endpoint (aiohttp, loopback)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from push import (
    AskNotification,
    Content,
    DeviceGone,
    FcmClient,
    Outcome,
    ServiceAccount,
    open_envelope,
)
from tests.push.conftest import PROJECT, T0, FakeClock, FakeSleep, apns_device, fcm_device
from tests.push.fakes import FakeFcm, FcmReply, FcmSeen, fcm_error

NOTE = AskNotification(
    machine="m1",
    agent="desk",
    conversation="conv-1",
    ask="ask-1",
    pane_key="m1/desk/conv-1",
    pane="Refactor parser",
    title="Run the tests?",
    line="pytest -q",
    deadline=T0 + 90.2,
)

MakeClient = Callable[..., FcmClient]


@pytest.fixture
def fake(fcm_server: tuple[FakeFcm, TestServer]) -> FakeFcm:
    return fcm_server[0]


@pytest.fixture
def make_client(
    fcm_server: tuple[FakeFcm, TestServer],
    service_account: ServiceAccount,
    content: Content,
    clock: FakeClock,
    sleeps: FakeSleep,
) -> MakeClient:
    _, server = fcm_server

    def make(**overrides: object) -> FcmClient:
        options: dict[str, object] = {
            "content": content,
            "base_url": str(server.make_url("/")),
            "timeout": 5.0,
            "clock": clock,
            "sleep": sleeps,
            "rng": lambda: 0.0,
        }
        options.update(overrides)
        return FcmClient(service_account, **options)  # type: ignore[arg-type]

    return make


def script(*replies: FcmReply) -> Callable[[FcmSeen], FcmReply]:
    queue = list(replies)
    return lambda seen: queue.pop(0) if queue else FcmReply(200)


async def test_P2_sent_with_ttl_collapse_key_and_ids(
    make_client: MakeClient, fake: FakeFcm
) -> None:
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.ok
    assert delivery.provider_id == f"projects/{PROJECT}/messages/0:1"
    [seen] = fake.requests
    message = seen.message
    assert message["token"] == fcm_device().token
    assert message["notification"] == {
        "title": "Permission needed in Refactor parser",
        "body": "Run the tests?\npytest -q",
    }
    assert message["data"] == {
        "type": "ask",
        "machine": "m1",
        "agent": "desk",
        "conversation": "conv-1",
        "ask": "ask-1",
    }
    android = message["android"]
    assert isinstance(android, dict)
    assert android["ttl"] == "91s"
    assert android["priority"] == "high"
    assert android["collapse_key"] == android["notification"]["tag"]


async def test_the_assertion_is_rs256_for_the_messaging_scope(
    make_client: MakeClient, fake: FakeFcm
) -> None:
    async with make_client() as fcm:
        assert (await fcm.send(fcm_device(), NOTE)).ok
    [claims] = fake.assertions
    assert claims["iat"] == int(T0)
    assert claims["exp"] == int(T0) + 3600


async def test_one_oauth_token_for_many_sends_renewed_before_expiry(
    make_client: MakeClient, fake: FakeFcm, clock: FakeClock
) -> None:
    async with make_client() as fcm:
        deliveries = await asyncio.gather(*(fcm.send(fcm_device(), NOTE) for _ in range(30)))
        assert all(d.ok for d in deliveries)
        assert fcm.tokens_fetched == 1
        assert fake.token_calls == 1
        clock.advance(3599 - 300 - 0.001)  # 5 minutes before expiry: still the same token
        assert (await fcm.send(fcm_device(), NOTE)).ok
        assert fcm.tokens_fetched == 1
        clock.advance(0.001)
        assert (await fcm.send(fcm_device(), NOTE)).ok
        assert fcm.tokens_fetched == 2
    assert {r.token for r in fake.requests} == set(fake.issued)


async def test_a_401_refreshes_the_token_once(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep
) -> None:
    async with make_client() as fcm:
        assert (await fcm.send(fcm_device(), NOTE)).ok
        fake.revoked.add(fake.issued[0])
        delivery = await fcm.send(fcm_device(), NOTE)
        assert delivery.ok
        assert delivery.attempts == 2
        assert fcm.tokens_fetched == 2
        assert sleeps.delays == []


async def test_a_second_401_is_a_failure(make_client: MakeClient, fake: FakeFcm) -> None:
    async with make_client() as fcm:
        assert (await fcm.send(fcm_device(), NOTE)).ok
        fake.revoked.add(fake.issued[0])
        fake.script = lambda seen: fcm_error(401, "UNAUTHENTICATED")
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.status == 401
    assert delivery.attempts == 2


async def test_third_party_auth_error_does_not_refresh(
    make_client: MakeClient, fake: FakeFcm
) -> None:
    fake.script = lambda seen: fcm_error(401, "THIRD_PARTY_AUTH_ERROR")
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
        assert fcm.tokens_fetched == 1
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "THIRD_PARTY_AUTH_ERROR"


BAD_TOKEN = "The registration token is not a valid FCM registration token"
TOKEN_VIOLATION = {
    "@type": "type.googleapis.com/google.rpc.BadRequest",
    "fieldViolations": [{"field": "message.token", "description": "Invalid registration token"}],
}
PAYLOAD_VIOLATION = {
    "@type": "type.googleapis.com/google.rpc.BadRequest",
    "fieldViolations": [{"field": "message.data[0].value", "description": "Invalid value"}],
}


@pytest.mark.parametrize(
    ("reply", "outcome", "reason"),
    [
        (
            fcm_error(404, "UNREGISTERED", "Requested entity was not found."),
            Outcome.GONE,
            "UNREGISTERED",
        ),
        (fcm_error(400, "INVALID_ARGUMENT", BAD_TOKEN), Outcome.GONE, "INVALID_ARGUMENT"),
        (
            FcmReply(
                400,
                {
                    "error": {
                        "code": 400,
                        "status": "INVALID_ARGUMENT",
                        "message": "x",
                        "details": [TOKEN_VIOLATION],
                    }
                },
            ),
            Outcome.GONE,
            "INVALID_ARGUMENT",
        ),
        # INVALID_ARGUMENT about the payload leaves the device alone.
        (
            fcm_error(400, "INVALID_ARGUMENT", "Message is too big"),
            Outcome.FAILED,
            "INVALID_ARGUMENT",
        ),
        (
            FcmReply(
                400,
                {
                    "error": {
                        "code": 400,
                        "status": "INVALID_ARGUMENT",
                        "message": "x",
                        "details": [PAYLOAD_VIOLATION],
                    }
                },
            ),
            Outcome.FAILED,
            "INVALID_ARGUMENT",
        ),
        (fcm_error(403, "SENDER_ID_MISMATCH"), Outcome.FAILED, "SENDER_ID_MISMATCH"),
        (fcm_error(404, "NOT_FOUND"), Outcome.FAILED, "NOT_FOUND"),
        (FcmReply(418, None), Outcome.FAILED, "HTTP 418"),
    ],
)
async def test_status_outcomes(
    make_client: MakeClient, fake: FakeFcm, reply: FcmReply, outcome: Outcome, reason: str
) -> None:
    fake.script = script(reply)
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert (delivery.outcome, delivery.reason, delivery.attempts) == (outcome, reason, 1)


async def test_unregistered_raises_device_gone_on_request(
    make_client: MakeClient, fake: FakeFcm
) -> None:
    fake.script = script(fcm_error(404, "UNREGISTERED"))
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    with pytest.raises(DeviceGone):
        delivery.raise_for_outcome()


async def test_429_honours_retry_after(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep
) -> None:
    fake.script = script(fcm_error(429, "QUOTA_EXCEEDED", headers=(("Retry-After", "11"),)))
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.ok
    assert delivery.attempts == 2
    assert sleeps.delays == [11.0]


async def test_429_on_every_try_is_throttled_after_3(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep
) -> None:
    fake.script = lambda seen: fcm_error(429, "QUOTA_EXCEEDED")
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.outcome is Outcome.THROTTLED
    assert delivery.attempts == 3
    assert sleeps.delays == [0.25, 0.5]


@pytest.mark.parametrize(("status", "code"), [(500, "INTERNAL"), (503, "UNAVAILABLE")])
async def test_5xx_retried_3_tries(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep, status: int, code: str
) -> None:
    fake.script = lambda seen: fcm_error(status, code)
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert (delivery.outcome, delivery.reason, delivery.attempts) == (Outcome.FAILED, code, 3)
    assert len(fake.requests) == 3


async def test_token_endpoint_5xx_is_retried_and_400_is_not(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep
) -> None:
    fake.token_script = lambda n: FcmReply(503, {"error": "unavailable"}) if n == 1 else None
    async with make_client() as fcm:
        assert (await fcm.send(fcm_device(), NOTE)).ok
    assert len(sleeps.delays) == 1
    fake.token_script = lambda n: FcmReply(400, {"error": "invalid_grant"})
    async with make_client() as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "oauth: HTTP 400"


async def test_a_forged_assertion_is_refused_by_the_fake(
    make_client: MakeClient, service_account: ServiceAccount, content: Content
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    forged = ServiceAccount(
        project_id=service_account.project_id,
        client_email=service_account.client_email,
        private_key=other,
        token_uri=service_account.token_uri,
    )
    async with make_client() as reference:
        base = reference._send_url.split("/v1/")[0]
    async with FcmClient(forged, content=content, base_url=base) as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.reason == "oauth: HTTP 400"


async def test_a_server_that_never_answers_times_out(
    make_client: MakeClient, fake: FakeFcm, sleeps: FakeSleep
) -> None:
    async with make_client(timeout=0.2) as fcm:
        assert (await fcm.send(fcm_device(), NOTE)).ok  # the token first
        fake.hang = True
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "timeout"
    assert delivery.attempts == 3


def test_a_service_account_is_checked_when_read() -> None:
    key = ec.generate_private_key(ec.SECP256R1())  # not RSA: rejected when read
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    raw = {"project_id": "p", "client_email": "e", "private_key": pem, "token_uri": "u"}
    with pytest.raises(ValueError, match="RSA"):
        ServiceAccount.from_json(raw)
    with pytest.raises(ValueError, match="lacks 'private_key'"):
        ServiceAccount.from_json(json.dumps({"project_id": "p"}))
    with pytest.raises(ValueError, match="JSON object"):
        ServiceAccount.from_json("[]")


async def test_a_closed_port_is_a_connection_failure(
    make_client: MakeClient, service_account: ServiceAccount, content: Content, sleeps: FakeSleep
) -> None:
    closed = ServiceAccount(
        project_id="p",
        client_email=service_account.client_email,
        private_key=service_account.private_key,
        token_uri="http://127.0.0.1:9/token",
    )
    async with FcmClient(closed, content=content, sleep=sleeps, timeout=2.0) as fcm:
        delivery = await fcm.send(fcm_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "oauth: ClientConnectorError"
    assert len(sleeps.delays) == 2


async def test_a_session_passed_in_stays_open(make_client: MakeClient) -> None:
    async with aiohttp.ClientSession() as session:
        async with make_client(session=session) as fcm:
            assert (await fcm.send(fcm_device(), NOTE)).ok
        assert not session.closed


async def test_P2_private_device_gets_only_an_envelope(
    make_client: MakeClient, fake: FakeFcm
) -> None:
    key = b"k" * 32
    async with make_client() as fcm:
        assert (await fcm.send(fcm_device("droid-1", key=key), NOTE)).ok
    [seen] = fake.requests
    envelope = seen.message["data"]["e"]  # type: ignore[index]
    assert isinstance(envelope, str)
    visible = json.dumps(seen.message).replace(envelope, "")
    for secret in ("m1", "desk", "conv-1", "ask-1", "Refactor", "Run the tests", "pytest"):
        assert secret not in visible
    assert seen.message["notification"] == {"title": "A durable agent needs your answer"}
    data = seen.message["data"]
    assert isinstance(data, dict)
    inner = json.loads(open_envelope(key, "droid-1", data["e"]))
    assert inner["conversation"] == "conv-1"
    assert inner["line"] == "pytest -q"


async def test_an_apns_device_is_refused(make_client: MakeClient, fake: FakeFcm) -> None:
    async with make_client() as fcm:
        delivery = await fcm.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert fake.requests == []
