"""Signed webhooks (people-in-the-loop S6): post an ask as JSON to another channel, and the
function a receiver uses to verify a delivery.

Headers: ``Collie-Webhook-Id: <id>`` and ``Collie-Signature: t=<unix seconds>,v1=<hex>
[,v1=<hex>…]`` where each hex is HMAC-SHA256 under one secret of the bytes ``f"{id}.{t}."``
followed by the raw body (Standard Webhooks' order); one ``v1`` per secret while secrets
rotate. The id names the delivery: it is the same on every retry (each retry is signed afresh
with a later ``t``), so a receiver that took a try whose answer was lost drops the retry as a
duplicate. Without an id the signed bytes are ``f"{t}."`` and the body (Stripe's scheme, so its
test cases apply). A receiver accepts a delivery whose ``t`` is within ±300 s of its own clock
(300 accepted, 301 refused), whose raw body matches one ``v1`` under one of its secrets, and
whose id (or, without one, whose signed bytes) it has not seen: a duplicate raises
``Duplicate``, which a receiver answers with 2xx so the sender stops retrying.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import random
import re
import secrets as secrets_module
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import aiohttp

from push._retry import RetryPolicy, parse_retry_after
from push._session import OwnedSession
from push.errors import Duplicate, SignatureError

log = logging.getLogger(__name__)

SIGNATURE_HEADER: Final = "Collie-Signature"
ID_HEADER: Final = "Collie-Webhook-Id"
TOLERANCE: Final = 300  # S6: five minutes either way
MAX_HEADER: Final = 4096
MAX_SIGNATURES: Final = 8
TIMEOUT: Final = 10.0

# Strict and ASCII only: int() would take "١٢٣" and " 12 ", this does not.
_ELEMENT: Final = r"[a-z0-9]{1,16}=[!-+\--<>-~]{1,128}"
_HEADER: Final = re.compile(rf"{_ELEMENT}(?:,{_ELEMENT})*", re.ASCII)
_T: Final = re.compile(r"(?:0|[1-9][0-9]{0,11})", re.ASCII)
_V1: Final = re.compile(r"[0-9a-f]{64}", re.ASCII)
_ID: Final = re.compile(r"[A-Za-z0-9_\-]{1,64}", re.ASCII)

Secret = str | bytes


def _key(secret: Secret) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def _signed(t: int, body: bytes, delivery_id: str | None) -> bytes:
    head = f"{t}." if delivery_id is None else f"{delivery_id}.{t}."
    return head.encode("ascii") + body


def _mac(secret: Secret, signed: bytes) -> bytes:
    return hmac.new(_key(secret), signed, hashlib.sha256).digest()


def webhook_id(name: str) -> str:
    """A delivery id derived from ``name`` (e.g. an ask's once key): ``msg_`` and 32 hex."""
    return "msg_" + hashlib.sha256(b"collie-webhook\0" + name.encode()).hexdigest()[:32]


def sign(body: bytes, secrets: Sequence[Secret], t: int, delivery_id: str | None = None) -> str:
    """The ``Collie-Signature`` value for ``body`` sent at ``t`` (under ``delivery_id``, the
    ``Collie-Webhook-Id``, when given): one ``v1`` per secret."""
    if not secrets:
        raise ValueError("at least one secret")
    if delivery_id is not None and not _ID.fullmatch(delivery_id):
        raise ValueError("a webhook id is 1 to 64 of A-Z a-z 0-9 _ -")
    signed = _signed(t, body, delivery_id)
    return ",".join([f"t={t}", *(f"v1={_mac(s, signed).hex()}" for s in secrets)])


def parse_header(header: str) -> tuple[int, list[bytes]]:
    """``t`` and the ``v1`` signatures of a header; other schemes are ignored.

    Raises:
        SignatureError: the header is malformed, or has no ``t`` or no ``v1``.
    """
    if len(header) > MAX_HEADER or not _HEADER.fullmatch(header):
        raise SignatureError("malformed signature header")
    t: int | None = None
    sigs: list[bytes] = []
    for element in header.split(","):
        name, _, value = element.partition("=")
        if name == "t":
            if t is not None or not _T.fullmatch(value):
                raise SignatureError("malformed or repeated t")
            t = int(value)
        elif name == "v1":
            if not _V1.fullmatch(value) or len(sigs) >= MAX_SIGNATURES:
                raise SignatureError("malformed v1, or too many")
            sigs.append(bytes.fromhex(value))
    if t is None or not sigs:
        raise SignatureError("a header needs t and v1")
    return t, sigs


class Seen(Protocol):
    """The deliveries a receiver has accepted inside the tolerance window."""

    def first_seen(self, key: bytes, t: int, now: float) -> bool:
        """Record ``key`` (signed at ``t``); False when it was already recorded."""
        ...


class SeenSet:
    """An in-memory ``Seen`` that forgets a delivery once its ``t`` is out of the window,
    when a replay would be refused for its age anyway."""

    def __init__(self, tolerance: float = TOLERANCE) -> None:
        self._tolerance = tolerance
        self._seen: dict[bytes, int] = {}
        self._prune_at = 1024

    def __len__(self) -> int:
        return len(self._seen)

    def first_seen(self, key: bytes, t: int, now: float) -> bool:
        """Record ``key`` (signed at ``t``); False when it was already recorded."""
        if len(self._seen) >= self._prune_at:
            horizon = now - self._tolerance
            self._seen = {k: v for k, v in self._seen.items() if v >= horizon}
            self._prune_at = max(1024, 2 * len(self._seen))
        if key in self._seen:
            return False
        self._seen[key] = t
        return True


def verify(
    header: str,
    raw_body: bytes,
    secrets: Sequence[Secret],
    now: float,
    seen: Seen,
    *,
    delivery_id: str | None = None,
    tolerance: float = TOLERANCE,
) -> int:
    """Check a delivery before its body is parsed; its ``t`` when it is valid.
    ``delivery_id`` is the ``Collie-Webhook-Id`` header as received (None if absent).

    Raises:
        Duplicate: a valid delivery whose id (or signed bytes) was already accepted: a
            retry of one taken; answer it 2xx and do not act on it again.
        SignatureError: malformed header or id, ``t`` more than ``tolerance`` from
            ``now``, or no ``v1`` matching under any secret.
    """
    if not secrets:
        raise ValueError("at least one secret")
    if delivery_id is not None and not _ID.fullmatch(delivery_id):
        raise SignatureError("malformed webhook id")
    t, sigs = parse_header(header)
    if abs(now - t) > tolerance:
        raise SignatureError("timestamp outside the tolerance")
    signed = _signed(t, raw_body, delivery_id)
    expected = [_mac(s, signed) for s in secrets]
    matched = False
    for sig in sigs:
        for mac in expected:
            matched |= hmac.compare_digest(sig, mac)
    if not matched:
        raise SignatureError("no matching signature")
    if delivery_id is not None:
        key = b"id\0" + delivery_id.encode("ascii")
    else:
        key = hashlib.sha256(signed).digest()
    if not seen.first_seen(key, t, now):
        raise Duplicate("delivery replayed")
    return t


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookResult:
    """How a webhook delivery ended; ``ok`` when the receiver answered 2xx."""

    ok: bool
    status: int | None = None
    reason: str | None = None
    attempts: int = 0


class WebhookTarget(OwnedSession):
    """Posts signed JSON bodies to one URL; a failure is returned, never raised.

    Usage::

        hook = WebhookTarget("https://example.org/hook", secrets=[new, old])
        result = await hook.post(msgspec.json.encode(ask))
    """

    def __init__(
        self,
        url: str,
        secrets: Sequence[Secret],
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = TIMEOUT,
        retry: RetryPolicy | None = None,
        verify: ssl.SSLContext | bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not secrets:
            raise ValueError("at least one secret")
        self._url = url
        self._secrets = list(secrets)
        self._own(session, verify=verify)
        self._timeout = timeout
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng

    @property
    def url(self) -> str:
        """Where deliveries go."""
        return self._url

    async def post(self, body: bytes, *, webhook_id: str | None = None) -> WebhookResult:
        """Post ``body`` (JSON bytes) under ``webhook_id`` (a fresh random id if None), the
        same id on each try, signed afresh with a later ``t``; 429, 5xx and lost connections
        are retried per the retry policy."""
        delivery_id = webhook_id or "msg_" + secrets_module.token_hex(16)
        session = self._http()
        tries = 0
        t = -1
        while True:
            tries += 1
            status: int | None = None
            retry_after: float | None = None
            # Each try gets a later t: a receiver that saw (and failed) the last try would
            # otherwise refuse this one as a replay.
            t = max(int(self._clock()), t + 1)
            headers = {
                "Content-Type": "application/json",
                ID_HEADER: delivery_id,
                SIGNATURE_HEADER: sign(body, self._secrets, t, delivery_id),
            }
            try:
                async with (
                    asyncio.timeout(self._timeout),
                    session.post(self._url, data=body, headers=headers) as resp,
                ):
                    status = resp.status
                    await resp.read()
                    retry_header = resp.headers.get("Retry-After")
            except TimeoutError:
                reason = "timeout"
            except aiohttp.ClientError as exc:
                reason = f"connection: {type(exc).__name__}"
            except Exception as exc:
                log.exception("webhook post failed unexpectedly")
                reason = f"internal: {type(exc).__name__}"
                return WebhookResult(ok=False, reason=reason, attempts=tries)
            else:
                if 200 <= status < 300:
                    return WebhookResult(ok=True, status=status, attempts=tries)
                reason = f"HTTP {status}"
                if status != 429 and status < 500:
                    return WebhookResult(ok=False, status=status, reason=reason, attempts=tries)
                retry_after = parse_retry_after(retry_header, self._clock())
            delay = self._retry.delay(tries, retry_after, self._rng)
            if delay is None:
                return WebhookResult(ok=False, status=status, reason=reason, attempts=tries)
            await self._sleep(delay)
