"""The APNs client against a fake APNs speaking HTTP/2 over TLS on loopback."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from push import (
    ApnsClient,
    AskNotification,
    Content,
    Device,
    DeviceGone,
    Environment,
    Outcome,
    Provider,
    RetryPolicy,
    Throttled,
    open_envelope,
)
from tests.push.conftest import KEY_ID, T0, TEAM_ID, TOPIC, FakeClock, FakeSleep, apns_device
from tests.push.fakes import Action, ApnsSeen, FakeApns, Reply, Script, Tls

NOTE = AskNotification(
    machine="m1",
    agent="desk",
    conversation="conv-1",
    ask="ask-1",
    pane_key="m1/desk/conv-1",
    pane="Refactor parser",
    title="Run the tests?",
    line="pytest -q in ./repo",
    deadline=T0 + 300.5,
)

MakeClient = Callable[..., ApnsClient]


@pytest.fixture
def make_client(
    apns_server: FakeApns,
    sandbox_server: FakeApns,
    tls: Tls,
    apns_pem: bytes,
    content: Content,
    clock: FakeClock,
    sleeps: FakeSleep,
) -> MakeClient:
    def make(**overrides: object) -> ApnsClient:
        options: dict[str, object] = {
            "team_id": TEAM_ID,
            "key_id": KEY_ID,
            "signing_key": apns_pem,
            "topic": TOPIC,
            "content": content,
            "timeout": 5.0,
            "production_url": apns_server.url,
            "sandbox_url": sandbox_server.url,
            "verify": tls.client,
            "clock": clock,
            "sleep": sleeps,
            "rng": lambda: 0.0,
        }
        options.update(overrides)
        return ApnsClient(**options)  # type: ignore[arg-type]

    return make


def script(*actions: Action) -> Script:
    """Answer requests with ``actions`` in turn, then 200."""
    queue = list(actions)
    return lambda seen: queue.pop(0) if queue else Reply(200)


async def test_P2_sent_with_the_headers_apple_expects(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.SENT
    assert delivery.status == 200
    [seen] = apns_server.requests
    assert apns_server.alpn == ["h2"]
    assert seen.headers[":path"] == "/3/device/" + "a1" * 32
    assert seen.headers["apns-topic"] == TOPIC
    assert seen.headers["apns-push-type"] == "alert"
    assert seen.headers["apns-priority"] == "10"
    assert seen.headers["apns-expiration"] == str(int(T0) + 301)  # the deadline, rounded up
    assert len(seen.headers["apns-collapse-id"]) == 32
    assert str(uuid.UUID(seen.apns_id)) == seen.apns_id == delivery.provider_id
    assert seen.jwt_error is None
    aps = seen.json["aps"]
    assert isinstance(aps, dict)
    assert aps["alert"] == {
        "title": "Permission needed in Refactor parser",
        "subtitle": "Run the tests?",
        "body": "pytest -q in ./repo",
    }
    assert seen.json["collie"] == {
        "type": "ask",
        "machine": "m1",
        "agent": "desk",
        "conversation": "conv-1",
        "ask": "ask-1",
    }


async def test_one_provider_jwt_for_many_sends_renewed_at_40_minutes(
    make_client: MakeClient, apns_server: FakeApns, clock: FakeClock
) -> None:
    async with make_client() as apns:
        deliveries = await asyncio.gather(*(apns.send(apns_device(), NOTE) for _ in range(40)))
        assert all(d.ok for d in deliveries)
        assert apns.tokens_minted == 1
        assert len(apns_server.jwts) == 1
        clock.advance(40 * 60 - 0.001)
        assert (await apns.send(apns_device(), NOTE)).ok
        assert apns.tokens_minted == 1
        clock.advance(0.001)
        assert (await apns.send(apns_device(), NOTE)).ok
        assert apns.tokens_minted == 2
        assert len(apns_server.jwts) == 2


def test_token_refresh_must_lie_between_20_and_60_minutes(
    make_client: MakeClient,
) -> None:
    with pytest.raises(ValueError, match="token_refresh"):
        make_client(token_refresh=19 * 60.0)
    with pytest.raises(ValueError, match="token_refresh"):
        make_client(token_refresh=60 * 60.0)


def test_signing_key_must_be_p256(make_client: MakeClient) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(ValueError, match="P-256"):
        make_client(signing_key=p384)
    pem = p384.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="P-256"):
        make_client(signing_key=pem)


REGISTERED = T0 - 86_400


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (Reply(400, {"reason": "BadDeviceToken"}), Outcome.GONE),
        (Reply(400, {"reason": "DeviceTokenNotForTopic"}), Outcome.GONE),
        (Reply(400, {"reason": "BadTopic"}), Outcome.FAILED),
        (Reply(400, {"reason": "BadExpirationDate"}), Outcome.FAILED),
        (Reply(403, {"reason": "InvalidProviderToken"}), Outcome.FAILED),
        (Reply(403, {"reason": "BadCertificateEnvironment"}), Outcome.FAILED),
        (Reply(405, {"reason": "MethodNotAllowed"}), Outcome.FAILED),
        (Reply(413, {"reason": "PayloadTooLarge"}), Outcome.FAILED),
        # 410: gone only when the device registered before Apple's timestamp (ms).
        (
            Reply(410, {"reason": "Unregistered", "timestamp": int(REGISTERED * 1000) + 1}),
            Outcome.GONE,
        ),
        (
            Reply(410, {"reason": "Unregistered", "timestamp": int(REGISTERED * 1000)}),
            Outcome.FAILED,
        ),
        (
            Reply(410, {"reason": "Unregistered", "timestamp": int(REGISTERED * 1000) - 1}),
            Outcome.FAILED,
        ),
        (Reply(410, {"reason": "ExpiredToken", "timestamp": int(T0 * 1000)}), Outcome.GONE),
        (Reply(410, {"reason": "Unregistered"}), Outcome.GONE),
        (Reply(410, {"reason": "Unregistered", "timestamp": "soon"}), Outcome.GONE),
        (Reply(404, None), Outcome.FAILED),
    ],
)
async def test_status_outcomes(
    make_client: MakeClient, apns_server: FakeApns, reply: Reply, outcome: Outcome
) -> None:
    apns_server.script = script(reply)
    async with make_client() as apns:
        delivery = await apns.send(apns_device(registered_at=REGISTERED), NOTE)
    assert delivery.outcome is outcome
    assert delivery.status == reply.status
    assert delivery.reason == (reply.body or {}).get("reason", f"HTTP {reply.status}")
    assert len(apns_server.requests) == 1 == delivery.attempts


async def test_gone_raises_device_gone_on_request(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    apns_server.script = script(Reply(400, {"reason": "BadDeviceToken"}))
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    with pytest.raises(DeviceGone, match="BadDeviceToken"):
        delivery.raise_for_outcome()


async def test_429_retried_after_retry_after(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = script(Reply(429, {"reason": "TooManyRequests"}, (("retry-after", "7"),)))
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.SENT
    assert delivery.attempts == 2
    assert sleeps.delays == [7.0]
    assert len({r.apns_id for r in apns_server.requests}) == 1


async def test_429_on_every_try_is_throttled_after_3(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = lambda seen: Reply(429, {"reason": "TooManyRequests"})
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.THROTTLED
    assert delivery.attempts == 3
    assert sleeps.delays == [0.25, 0.5]  # capped exponential backoff, jitter at its floor
    with pytest.raises(Throttled):
        delivery.raise_for_outcome()


@pytest.mark.parametrize("status", [500, 503])
async def test_5xx_retried_3_tries(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep, status: int
) -> None:
    apns_server.script = lambda seen: Reply(status, {"reason": "ServiceUnavailable"})
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "ServiceUnavailable"
    assert delivery.attempts == 3
    assert len(apns_server.requests) == 3
    assert len(sleeps.delays) == 2


async def test_backoff_is_capped_and_jittered(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = lambda seen: Reply(500, {"reason": "InternalServerError"})
    policy = RetryPolicy(max_tries=6, base=1.0, cap=4.0)
    async with make_client(retry=policy, rng=lambda: 0.999) as apns:
        await apns.send(apns_device(), NOTE)
    assert [round(d, 2) for d in sleeps.delays] == [1.0, 2.0, 4.0, 4.0, 4.0]


async def test_retry_after_as_http_date(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep, clock: FakeClock
) -> None:
    when = format_datetime(datetime.fromtimestamp(T0 + 12, UTC), usegmt=True)
    apns_server.script = script(
        Reply(503, {"reason": "ServiceUnavailable"}, (("retry-after", when),))
    )
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.ok
    assert sleeps.delays == [12.0]


async def test_retry_after_beyond_the_cap_stops_at_once(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = lambda seen: Reply(
        429, {"reason": "TooManyRequests"}, (("retry-after", "3600"),)
    )
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.THROTTLED
    assert delivery.attempts == 1
    assert sleeps.delays == []


async def test_expired_provider_token_mints_a_new_one_and_resends_once(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = script(Reply(403, {"reason": "ExpiredProviderToken"}))
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
        assert apns.tokens_minted == 2
    assert delivery.ok
    assert delivery.attempts == 2
    assert sleeps.delays == []
    first, second = apns_server.requests
    assert first.jwt != second.jwt
    assert first.apns_id == second.apns_id


async def test_expired_provider_token_twice_fails(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    apns_server.script = lambda seen: Reply(403, {"reason": "ExpiredProviderToken"})
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
        assert apns.tokens_minted == 2
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "ExpiredProviderToken"
    assert delivery.attempts == 2


async def test_expired_provider_token_seen_by_many_sends_mints_once(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    first_jwt: list[str] = []

    def reject_first_jwt(seen: ApnsSeen) -> Reply:
        assert seen.jwt is not None
        first_jwt[:] = first_jwt or [seen.jwt]
        if seen.jwt == first_jwt[0]:
            return Reply(403, {"reason": "ExpiredProviderToken"})
        return Reply(200)

    apns_server.script = reject_first_jwt
    async with make_client() as apns:
        apns.provider_token()
        deliveries = await asyncio.gather(*(apns.send(apns_device(), NOTE) for _ in range(10)))
        assert apns.tokens_minted == 2
    assert all(d.ok for d in deliveries)


async def test_wrong_signing_key_is_refused_by_the_fake(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    async with make_client(signing_key=other) as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "InvalidProviderToken"
    assert apns_server.requests[0].jwt_error == "InvalidProviderToken"


@pytest.mark.parametrize("override", [{"key_id": "OTHERKEY00"}, {"team_id": "OTHERTEAM0"}])
async def test_wrong_kid_or_iss_is_refused_by_the_fake(
    make_client: MakeClient, apns_server: FakeApns, override: dict[str, str]
) -> None:
    async with make_client(**override) as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.reason == "InvalidProviderToken"


async def test_a_server_that_never_answers_times_out_on_every_try(
    make_client: MakeClient, apns_server: FakeApns, sleeps: FakeSleep
) -> None:
    apns_server.script = lambda seen: "hang"
    async with make_client(timeout=0.2) as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "timeout"
    assert delivery.attempts == 3
    assert len(sleeps.delays) == 2
    assert len({r.apns_id for r in apns_server.requests}) == 1


@pytest.mark.parametrize("action", ["goaway", "goaway-processed", "drop"])
async def test_connection_lost_mid_stream_is_resent_with_the_same_apns_id(
    make_client: MakeClient, apns_server: FakeApns, action: Action
) -> None:
    apns_server.script = script(action)
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), NOTE)
    assert delivery.ok
    first, second = apns_server.requests
    assert first.apns_id == second.apns_id == delivery.provider_id
    assert first.connection != second.connection


async def test_goaway_for_a_later_stream_resends_on_a_new_connection(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    apns_server.script = script(Reply(200), "goaway")
    async with make_client() as apns:
        assert (await apns.send(apns_device(), NOTE)).ok
        assert (await apns.send(apns_device(), NOTE)).ok
    _, lost, resent = apns_server.requests
    assert lost.apns_id == resent.apns_id
    assert lost.connection != resent.connection


async def test_environment_is_chosen_per_device(
    make_client: MakeClient, apns_server: FakeApns, sandbox_server: FakeApns
) -> None:
    async with make_client() as apns:
        await apns.send(apns_device(environment=Environment.SANDBOX), NOTE)
        await apns.send(apns_device(environment=Environment.PRODUCTION), NOTE)
        await apns.send(apns_device(environment=Environment.SANDBOX), NOTE)
    assert len(sandbox_server.requests) == 2
    assert len(apns_server.requests) == 1


async def test_P2_private_device_gets_only_an_envelope(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    key = bytes(range(32))
    device = apns_device("phone-7", key=key)
    async with make_client() as apns:
        assert (await apns.send(device, NOTE)).ok
    [seen] = apns_server.requests
    envelope = seen.json["collie"]["e"]  # type: ignore[index]
    assert isinstance(envelope, str)
    visible = seen.body.decode().replace(envelope, "") + json.dumps(
        {k: v for k, v in seen.headers.items() if k != "authorization"}
    )
    for secret in ("m1", "desk", "conv-1", "ask-1", "Refactor", "Run the tests", "pytest"):
        assert secret not in visible
    aps = seen.json["aps"]
    assert isinstance(aps, dict)
    assert aps["alert"] == {"title": "A durable agent needs your answer"}
    assert aps["mutable-content"] == 1
    collie = seen.json["collie"]
    assert isinstance(collie, dict)
    inner = json.loads(open_envelope(key, "phone-7", collie["e"]))
    assert inner["ask"] == "ask-1"
    assert inner["title"] == "Run the tests?"
    assert inner["headline"] == "Permission needed in Refactor parser"


async def test_devices_it_cannot_serve(make_client: MakeClient, apns_server: FakeApns) -> None:
    async with make_client() as apns:
        android = Device(id="a", provider=Provider.FCM, token="t", registered_at=T0)
        not_hex = Device(id="b", provider=Provider.APNS, token="../../x", registered_at=T0)
        assert (await apns.send(android, NOTE)).outcome is Outcome.FAILED
        assert (await apns.send(not_hex, NOTE)).outcome is Outcome.GONE
    assert apns_server.requests == []


async def test_payload_too_large_is_failed_without_a_request(
    make_client: MakeClient, apns_server: FakeApns
) -> None:
    huge = AskNotification(
        machine="m" * 5000, agent="a", conversation="c", ask="x", pane_key="p", pane="p"
    )
    async with make_client() as apns:
        delivery = await apns.send(apns_device(), huge)
    assert delivery.outcome is Outcome.FAILED
    assert delivery.reason == "PayloadTooLarge"
    assert apns_server.requests == []
