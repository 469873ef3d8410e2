"""Spec S6: signed webhooks, Stripe's scheme, verified by a receiver with a seen-set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_aiohttp import AiohttpServer

from push import SeenSet, SignatureError, WebhookTarget, sign, verify
from push.webhook import SIGNATURE_HEADER, parse_header
from tests.push.conftest import FakeClock, FakeSleep

FIXTURES = Path(__file__).parents[2] / "fixtures" / "push"
T = 1_700_000_000
BODY = b'{"ask":{"id":"ask-1","kind":"permission","title":"Run tests?"}}'
SECRET = "whsec_current"


@pytest.mark.parametrize(
    "vector",
    json.loads((FIXTURES / "webhook_vectors.json").read_text(encoding="utf-8")),
    ids=lambda v: v["description"],
)
def test_S6_vectors(vector: dict[str, object]) -> None:
    given_ = vector["input"]
    assert isinstance(given_, dict)
    body = given_["body"].encode()
    assert sign(body, given_["secrets"], given_["t"]) == vector["expect"]
    for secret in given_["secrets"]:
        assert verify(str(vector["expect"]), body, [secret], given_["t"], SeenSet()) == given_["t"]


@pytest.mark.parametrize("offset", [-300, -299.5, 0, 299.999, 300])
def test_S6_accepted_within_300_seconds_either_way(offset: float) -> None:
    header = sign(BODY, [SECRET], T)
    assert verify(header, BODY, [SECRET], T + offset, SeenSet()) == T


@pytest.mark.parametrize("offset", [-301, -300.001, 300.001, 301, 86_400])
def test_S6_refused_beyond_300_seconds_either_way(offset: float) -> None:
    header = sign(BODY, [SECRET], T)
    with pytest.raises(SignatureError, match="tolerance"):
        verify(header, BODY, [SECRET], T + offset, SeenSet())


def test_S6_a_tampered_body_is_refused() -> None:
    header = sign(BODY, [SECRET], T)
    with pytest.raises(SignatureError, match="no matching"):
        verify(header, BODY.replace(b"Run", b"Rm "), [SECRET], T, SeenSet())


def test_S6_the_same_json_serialized_again_is_refused() -> None:
    header = sign(BODY, [SECRET], T)
    again = json.dumps(json.loads(BODY), indent=1).encode()
    assert json.loads(again) == json.loads(BODY)
    assert again != BODY
    with pytest.raises(SignatureError, match="no matching"):
        verify(header, again, [SECRET], T, SeenSet())


def test_S6_a_changed_timestamp_is_refused() -> None:
    header = sign(BODY, [SECRET], T).replace(f"t={T}", f"t={T + 1}")
    with pytest.raises(SignatureError, match="no matching"):
        verify(header, BODY, [SECRET], T, SeenSet())


def test_S6_rotation_one_v1_per_secret() -> None:
    header = sign(BODY, ["new", "old"], T)
    assert header.count("v1=") == 2
    assert verify(header, BODY, ["new"], T, SeenSet()) == T  # a receiver already rotated
    assert verify(header, BODY, ["old"], T, SeenSet()) == T  # a receiver not yet rotated
    assert verify(header, BODY, ["other", "old"], T, SeenSet()) == T
    with pytest.raises(SignatureError):
        verify(header, BODY, ["other"], T, SeenSet())
    assert verify(sign(BODY, [b"raw-bytes"], T), BODY, ["raw-bytes"], T, SeenSet()) == T


def test_S6_a_replay_inside_the_window_is_refused() -> None:
    seen = SeenSet()
    header = sign(BODY, [SECRET], T)
    assert verify(header, BODY, [SECRET], T + 10, seen) == T
    with pytest.raises(SignatureError, match="replayed"):
        verify(header, BODY, [SECRET], T + 20, seen)
    with pytest.raises(SignatureError, match="tolerance"):
        verify(header, BODY, [SECRET], T + 301, seen)  # and outside it, refused for its age
    assert verify(sign(BODY, [SECRET], T + 1), BODY, [SECRET], T + 20, seen) == T + 1


def test_S6_a_bad_signature_does_not_enter_the_seen_set() -> None:
    seen = SeenSet()
    bad = f"t={T},v1={'0' * 64}"
    with pytest.raises(SignatureError):
        verify(bad, BODY, [SECRET], T, seen)
    assert len(seen) == 0
    assert verify(sign(BODY, [SECRET], T), BODY, [SECRET], T, seen) == T


def test_seen_set_forgets_what_left_the_window() -> None:
    seen = SeenSet()
    for i in range(1024):
        assert seen.first_seen(i.to_bytes(4, "big"), T, T)
    assert seen.first_seen(b"late", T + 400, T + 400)
    assert len(seen) == 1  # the 1024 from T were beyond the window and dropped


MALFORMED = [
    "",
    "t=",
    f"t={T}",
    "v1=" + "a" * 64,
    f"t=١٧٠٠٠٠٠٠٠٠,v1={'a' * 64}",  # Arabic-Indic digits: int() takes them, we do not
    f"t=１７００,v1={'a' * 64}",  # fullwidth digits
    f"t= {T},v1={'a' * 64}",
    f"t={T} ,v1={'a' * 64}",
    f"t=+{T},v1={'a' * 64}",
    f"t=-{T},v1={'a' * 64}",
    f"t=0{T},v1={'a' * 64}",
    f"t={T}.5,v1={'a' * 64}",
    f"t={T},v1={'A' * 64}",
    f"t={T},v1={'a' * 63}",
    f"t={T},v1={'a' * 65}",
    f"t={T},v1={'g' * 64}",
    f"t={T},t={T},v1={'a' * 64}",
    f"t={T},,v1={'a' * 64}",
    f"t={T};v1={'a' * 64}",
    f"t={T}, v1={'a' * 64}",
    f"T={T},V1={'a' * 64}",
    f"t={T},v1={'a' * 64},",
    f"t={T},v1={'a' * 64}\n",
    f"t={T},v1={'a' * 64}" + f",v1={'b' * 64}" * 8,
    "t=1" + "0" * 20 + f",v1={'a' * 64}",
    f"t={T},v1=é{'a' * 63}",
]


@pytest.mark.parametrize("header", MALFORMED)
def test_S6_malformed_headers_raise_signature_error(header: str) -> None:
    with pytest.raises(SignatureError):
        verify(header, BODY, [SECRET], T, SeenSet())


def test_S6_other_schemes_are_ignored() -> None:
    header = sign(BODY, [SECRET], T) + ",v0=" + "c" * 64
    assert verify(header, BODY, [SECRET], T, SeenSet()) == T


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.lists(
            st.tuples(
                st.sampled_from(["t", "v1", "v0", "x", "", "T"]),
                st.text(alphabet="0123456789abcdef١٢٣=, \t-+é", max_size=70),
            ),
            max_size=6,
        ).map(lambda parts: ",".join(f"{k}={v}" for k, v in parts)),
    )
)
def test_S6_fuzz_any_header_parses_or_raises_signature_error(header: str) -> None:
    try:
        t, sigs = parse_header(header)
    except SignatureError:
        return
    assert t >= 0
    assert sigs
    assert all(len(s) == 32 for s in sigs)
    with pytest.raises(SignatureError):
        verify(header, BODY, [SECRET], float(t), SeenSet())


def test_verify_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="secret"):
        verify(sign(BODY, [SECRET], T), BODY, [], T, SeenSet())
    with pytest.raises(ValueError, match="secret"):
        sign(BODY, [], T)


# --- posting --------------------------------------------------------------------------------


async def receiver(
    aiohttp_server: AiohttpServer, answers: list[int]
) -> tuple[TestServer, list[int]]:
    seen, verified = SeenSet(), []

    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()  # raw bytes, verified before parsing
        t = verify(request.headers[SIGNATURE_HEADER], raw, [SECRET], T, seen)
        verified.append(t)
        json.loads(raw)
        return web.Response(status=answers.pop(0) if answers else 204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    return await aiohttp_server(app), verified


async def test_S6_post_signs_and_a_receiver_verifies(aiohttp_server: AiohttpServer) -> None:
    server, verified = await receiver(aiohttp_server, [])
    async with WebhookTarget(str(server.make_url("/hook")), [SECRET], clock=lambda: T) as hook:
        result = await hook.post(BODY)
    assert result.ok
    assert result.status == 204
    assert verified == [T]


async def test_S6_a_failed_delivery_is_reported_not_raised(aiohttp_server: AiohttpServer) -> None:
    server, verified = await receiver(aiohttp_server, [503, 503, 503])
    sleep = FakeSleep()
    async with WebhookTarget(
        str(server.make_url("/hook")), [SECRET], clock=lambda: T, sleep=sleep
    ) as hook:
        result = await hook.post(BODY)
    assert not result.ok
    assert result.status == 503
    assert result.attempts == 3
    assert verified == [T, T + 1, T + 2]  # each try is a new delivery to the seen-set
    server2, _ = await receiver(aiohttp_server, [400])
    async with WebhookTarget(str(server2.make_url("/hook")), [SECRET], clock=lambda: T) as hook:
        refused = await hook.post(BODY)
    assert not refused.ok
    assert refused.reason == "HTTP 400"
    assert refused.attempts == 1


async def test_S6_a_retry_is_signed_afresh_and_accepted(aiohttp_server: AiohttpServer) -> None:
    server, verified = await receiver(aiohttp_server, [500])
    clock = FakeClock(T + 5.0)  # the retry comes 0.25 s later: the same second
    async with WebhookTarget(
        str(server.make_url("/hook")),
        [SECRET],
        clock=clock,
        sleep=FakeSleep(clock),
        rng=lambda: 0.0,
    ) as hook:
        result = await hook.post(BODY)
    assert result.ok
    assert result.attempts == 2
    assert verified == [T + 5, T + 6]


async def test_S6_an_unreachable_receiver_is_reported() -> None:
    async with WebhookTarget("http://127.0.0.1:9/hook", [SECRET], sleep=FakeSleep()) as hook:
        result = await hook.post(BODY)
    assert not result.ok
    assert result.reason == "connection: ClientConnectorError"
