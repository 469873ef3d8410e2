"""Spec S6: signed webhooks, Stripe's scheme, verified by a receiver with a seen-set."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_aiohttp import AiohttpServer

from push import Duplicate, SeenSet, SignatureError, WebhookTarget, sign, verify, webhook_id
from push.webhook import ID_HEADER, SIGNATURE_HEADER, parse_header
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


# --- the delivery id (issue 10.5) -----------------------------------------------------------


def test_S6_the_id_is_signed_with_the_body() -> None:
    header = sign(BODY, [SECRET], T, "msg_1")
    assert verify(header, BODY, [SECRET], T, SeenSet(), delivery_id="msg_1") == T
    # Standard Webhooks' order: id, then t, then the body.
    mac = hmac.new(SECRET.encode(), f"msg_1.{T}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={T},v1={mac}"
    with pytest.raises(SignatureError, match="no matching"):
        verify(header, BODY, [SECRET], T, SeenSet(), delivery_id="msg_2")
    with pytest.raises(SignatureError, match="no matching"):
        verify(header, BODY, [SECRET], T, SeenSet())  # the id header stripped
    with pytest.raises(SignatureError, match="malformed webhook id"):
        verify(header, BODY, [SECRET], T, SeenSet(), delivery_id="msg 1")


def test_S6_a_second_delivery_of_one_id_is_a_duplicate_even_signed_afresh() -> None:
    seen = SeenSet()
    assert verify(sign(BODY, [SECRET], T, "msg_1"), BODY, [SECRET], T, seen, delivery_id="msg_1")
    with pytest.raises(Duplicate):
        verify(
            sign(BODY, [SECRET], T + 7, "msg_1"), BODY, [SECRET], T + 7, seen, delivery_id="msg_1"
        )
    # Another id is another delivery, though the body is the same.
    assert verify(sign(BODY, [SECRET], T, "msg_2"), BODY, [SECRET], T, seen, delivery_id="msg_2")


def test_S6_webhook_ids_are_stable_per_name() -> None:
    assert webhook_id("ask-1") == webhook_id("ask-1") != webhook_id("ask-2")
    assert webhook_id("ask-1").startswith("msg_")
    assert len(webhook_id("ask-1")) == 36


# --- posting --------------------------------------------------------------------------------


@dataclass
class Hook:
    """A receiver as docs/phones.md shows it: verify, drop duplicates by id (answer 2xx), act."""

    answers: list[int]  # its own answers to deliveries it acts on (then 204)
    seen: SeenSet = field(default_factory=SeenSet)
    acted: list[int] = field(default_factory=list)  # t of each delivery acted on
    ids: list[str] = field(default_factory=list)  # the id of every try
    duplicates: int = 0
    slow: float = 0.0  # seconds it takes to act (longer than the sender waits: a timeout)

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()  # raw bytes, verified before parsing
        delivery_id = request.headers.get(ID_HEADER)
        self.ids.append(delivery_id or "")
        status = self.answers.pop(0) if self.answers else 204
        if status >= 500:
            return web.Response(status=status)  # overloaded: nothing taken
        try:
            t = verify(
                request.headers[SIGNATURE_HEADER], raw, [SECRET], T, self.seen,
                delivery_id=delivery_id,
            )  # fmt: skip
        except Duplicate:
            self.duplicates += 1
            return web.Response(status=200)  # taken before: do not act again
        json.loads(raw)
        self.acted.append(t)
        await asyncio.sleep(self.slow)
        return web.Response(status=status)


async def receiver(aiohttp_server: AiohttpServer, hook: Hook) -> TestServer:
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    return await aiohttp_server(app)


async def test_S6_post_signs_and_a_receiver_verifies(aiohttp_server: AiohttpServer) -> None:
    hook = Hook([])
    server = await receiver(aiohttp_server, hook)
    async with WebhookTarget(str(server.make_url("/hook")), [SECRET], clock=lambda: T) as target:
        result = await target.post(BODY, webhook_id="msg_a1")
    assert result.ok
    assert result.status == 204
    assert hook.acted == [T]
    assert hook.ids == ["msg_a1"]


async def test_S6_a_failed_delivery_is_reported_not_raised(aiohttp_server: AiohttpServer) -> None:
    hook = Hook([503, 503, 503])
    server = await receiver(aiohttp_server, hook)
    sleep = FakeSleep()
    async with WebhookTarget(
        str(server.make_url("/hook")), [SECRET], clock=lambda: T, sleep=sleep
    ) as target:
        result = await target.post(BODY)
    assert not result.ok
    assert result.status == 503
    assert result.attempts == 3
    assert len(set(hook.ids)) == 1  # one delivery, three tries: one id (a random one)
    assert hook.ids[0].startswith("msg_")
    hook2 = Hook([400])
    server2 = await receiver(aiohttp_server, hook2)
    async with WebhookTarget(str(server2.make_url("/hook")), [SECRET], clock=lambda: T) as target:
        refused = await target.post(BODY)
    assert not refused.ok
    assert refused.reason == "HTTP 400"
    assert refused.attempts == 1


async def test_S6_a_retry_is_signed_afresh_and_accepted(aiohttp_server: AiohttpServer) -> None:
    hook = Hook([500])
    server = await receiver(aiohttp_server, hook)
    clock = FakeClock(T + 5.0)  # the retry comes 0.25 s later: the same second
    async with WebhookTarget(
        str(server.make_url("/hook")),
        [SECRET],
        clock=clock,
        sleep=FakeSleep(clock),
        rng=lambda: 0.0,
    ) as target:
        result = await target.post(BODY, webhook_id="msg_a1")
    assert result.ok
    assert result.attempts == 2
    assert hook.acted == [T + 6]
    assert hook.ids == ["msg_a1", "msg_a1"]


async def test_S6_a_slow_receiver_acts_once_on_a_delivery_retried_after_a_timeout(
    aiohttp_server: AiohttpServer,
) -> None:
    # Issue 10.5: the first try is taken but its answer comes after the sender gave up; the
    # retries carry the same id and are dropped as duplicates, answered 200.
    hook = Hook([], slow=0.5)
    server = await receiver(aiohttp_server, hook)
    async with WebhookTarget(
        str(server.make_url("/hook")), [SECRET], clock=lambda: T, timeout=0.2, sleep=FakeSleep()
    ) as target:
        result = await target.post(BODY, webhook_id="msg_a1")
    assert result.ok
    assert result.status == 200
    assert result.attempts == 2
    assert hook.acted == [T]
    assert hook.duplicates == 1
    assert hook.ids == ["msg_a1", "msg_a1"]


async def test_S6_an_unreachable_receiver_is_reported() -> None:
    async with WebhookTarget("http://127.0.0.1:9/hook", [SECRET], sleep=FakeSleep()) as hook:
        result = await hook.post(BODY)
    assert not result.ok
    assert result.reason == "connection: ClientConnectorError"


async def test_S6_the_documented_receiver_acts_once_on_a_retried_delivery(
    aiohttp_server: AiohttpServer,
) -> None:
    # The receiver shown in docs/phones.md ("Webhooks: dropping duplicates"), run as written.
    page = (Path(__file__).parents[2] / "docs" / "phones.md").read_text(encoding="utf-8")
    section = page.split("### Webhooks: dropping duplicates", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    acted: list[dict[str, object]] = []

    def act_on(body: dict[str, object]) -> None:
        acted.append(body)

    async def slow_hook(request: web.Request) -> web.StreamResponse:
        response: web.StreamResponse = await namespace["hook"](request)
        # The first delivery's answer comes after the sender gave up waiting.
        await asyncio.sleep(0.5 if len(acted) == 1 and response.status == 204 else 0)
        return response

    namespace: dict[str, Any] = {"web": web, "time": time, "json": json, "SECRET": SECRET}
    namespace["act_on"] = act_on
    exec(compile(code, "docs/phones.md", "exec"), namespace)
    app = web.Application()
    app.router.add_post("/hook", slow_hook)
    server = await aiohttp_server(app)
    async with WebhookTarget(
        str(server.make_url("/hook")), [SECRET], timeout=0.2, sleep=FakeSleep()
    ) as target:
        result = await target.post(BODY, webhook_id="msg_a1")  # the first answer is too late
    assert result.ok
    assert result.status == 200  # the retry: a duplicate, answered 200
    assert result.attempts == 2
    assert acted == [json.loads(BODY)]
