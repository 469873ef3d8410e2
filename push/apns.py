"""An APNs provider client on httpx over HTTP/2 (token-based authentication).

Why not a library: ``apns2`` 0.7.2 does not import on Python 3.10+ (its ``hyper`` uses
``collections.Iterable``) and pins PyJWT < 2. ``aioapns`` 4.0 maps Apple's statuses well but
has no request timeout (a lost stream waits forever), never retries 429/5xx, and mints a new
provider JWT per connection after 10 s idle, which invites 429 TooManyProviderTokenUpdates.
aiohttp's client has no HTTP/2. So: ``httpx.AsyncClient(http2=True)`` with our own policy:
one provider JWT for the whole client, renewed at 40 minutes (Apple: refresh no more than
once every 20 minutes, never older than 60); a timeout on every request; 429 and 5xx retried
with capped, jittered backoff honouring Retry-After, at most 3 tries; a connection lost
mid-stream (GOAWAY, reset) resent with the same ``apns-id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from push._jwt import es256
from push._retry import Again, RetryPolicy, Tries, parse_retry_after
from push.errors import PayloadTooLarge
from push.models import Delivery, Device, Environment, Message, Outcome, Provider
from push.payloads import Content, apns_request, valid_apns_token
from push.payloads import apns_id as stable_apns_id

log = logging.getLogger(__name__)

# httpcore imports anyio and its asyncio backend on the first request, inside the event
# loop: some 40 ms of imports in one step. Import them with this module instead.
for _module in ("anyio", "anyio.streams.tls", "anyio._backends._asyncio"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_module)

PRODUCTION_URL: Final = "https://api.push.apple.com"
SANDBOX_URL: Final = "https://api.sandbox.push.apple.com"
TOKEN_REFRESH: Final = 40 * 60.0  # Apple: a provider token lives 20 to 60 minutes
TOKEN_REFRESH_RANGE: Final = (20 * 60.0, 60 * 60.0)
TIMEOUT: Final = 10.0
GONE_400: Final = frozenset({"BadDeviceToken", "DeviceTokenNotForTopic"})
GONE_410: Final = frozenset({"Unregistered", "ExpiredToken"})


@dataclass(frozen=True, slots=True)
class _Token:
    jwt: str
    iat: float


class ApnsClient:
    """Sends notifications to APNs; one instance per app (team, key, topic).

    Usage::

        async with ApnsClient(team_id="T", key_id="K", signing_key=pem, topic="app.bundle",
                              content=Content(strings=catalogue)) as apns:
            delivery = await apns.send(device, note)

    ``signing_key`` is the .p8 key (PEM bytes) or a loaded P-256 key. ``clock``, ``sleep``
    and ``rng`` are injectable for tests; ``verify`` is passed to httpx.
    """

    def __init__(
        self,
        *,
        team_id: str,
        key_id: str,
        signing_key: bytes | ec.EllipticCurvePrivateKey,
        topic: str,
        content: Content,
        timeout: float = TIMEOUT,
        retry: RetryPolicy | None = None,
        token_refresh: float = TOKEN_REFRESH,
        production_url: str = PRODUCTION_URL,
        sandbox_url: str = SANDBOX_URL,
        verify: ssl.SSLContext | bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if isinstance(signing_key, bytes):
            loaded = load_pem_private_key(signing_key, password=None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise ValueError("the APNs signing key is not an EC key")
            signing_key = loaded
        if not isinstance(signing_key.curve, ec.SECP256R1):
            raise ValueError("the APNs signing key is not a P-256 key")
        lo, hi = TOKEN_REFRESH_RANGE
        if not lo <= token_refresh < hi:
            raise ValueError(f"token_refresh must be in [{lo}, {hi}) seconds")
        self._team_id = team_id
        self._key_id = key_id
        self._key = signing_key
        self._topic = topic
        self._content = content
        self._timeout = timeout
        self._tries = Tries("apns", log, retry or RetryPolicy(), sleep, rng)
        self._token_refresh = token_refresh
        self._urls = {
            Environment.PRODUCTION: production_url.rstrip("/"),
            Environment.SANDBOX: sandbox_url.rstrip("/"),
        }
        self._clock = clock
        self._token: _Token | None = None
        self.tokens_minted = 0
        self._http = httpx.AsyncClient(
            http1=False,
            http2=True,
            verify=verify,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=10, keepalive_expiry=60.0),
            trust_env=False,
        )

    async def __aenter__(self) -> ApnsClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    def provider_token(self) -> str:
        """The provider JWT, minted anew only when older than ``token_refresh``."""
        now = self._clock()
        token = self._token
        if token is None or not 0 <= now - token.iat < self._token_refresh:
            return self._mint(now)
        return token.jwt

    def _mint(self, now: float) -> str:
        jwt = es256(self._key, self._key_id, {"iss": self._team_id, "iat": int(now)})
        self._token = _Token(jwt, now)
        self.tokens_minted += 1
        return jwt

    def _renew(self, rejected: str) -> None:
        # Concurrent sends may all see ExpiredProviderToken: only the first mints.
        if self._token is not None and self._token.jwt == rejected:
            self._mint(self._clock())

    async def send(self, device: Device, note: Message) -> Delivery:
        """Send ``note`` to ``device``; the outcome, never an exception for it."""
        if device.provider is not Provider.APNS:
            return Delivery.of(device, Outcome.FAILED, reason="not an APNs device")
        if not valid_apns_token(device.token):
            return Delivery.of(device, Outcome.GONE, reason="BadDeviceToken")
        try:
            req = apns_request(
                device, note, topic=self._topic, content=self._content, now=self._clock()
            )
        except PayloadTooLarge:
            return Delivery.of(device, Outcome.FAILED, reason="PayloadTooLarge")
        url = self._urls[device.environment] + req.path
        apns_id = stable_apns_id(note, device)
        requests = 0
        renewed = False

        async def attempt() -> Delivery | Again:
            nonlocal requests, renewed
            requests += 1
            jwt = self.provider_token()
            headers = {**req.headers, "authorization": f"bearer {jwt}", "apns-id": apns_id}
            try:
                async with asyncio.timeout(self._timeout):
                    resp = await self._http.post(url, content=req.body, headers=headers)
            except (TimeoutError, httpx.TimeoutException):
                return Again("timeout")
            except httpx.HTTPError as exc:
                return Again(f"connection: {type(exc).__name__}")
            except Exception as exc:
                log.exception("apns send failed unexpectedly for device %s", device.id)
                reason = f"internal: {type(exc).__name__}"
                return Delivery.of(device, Outcome.FAILED, reason, None, apns_id, requests)
            status = resp.status_code
            body = _json_object(resp.content)
            reason = str(body.get("reason") or f"HTTP {status}")
            if status == 200:
                sent_id = resp.headers.get("apns-id", apns_id)
                return Delivery.of(device, Outcome.SENT, None, status, sent_id, requests)
            if status == 403 and reason == "ExpiredProviderToken" and not renewed:
                renewed = True
                self._renew(jwt)
                return Again(reason, status, resend=True)
            if status == 400 and reason in GONE_400:
                return Delivery.of(device, Outcome.GONE, reason, status, apns_id, requests)
            if status == 410 and reason in GONE_410:
                outcome = Outcome.GONE if _gone_since(device, body) else Outcome.FAILED
                return Delivery.of(device, outcome, reason, status, apns_id, requests)
            if status != 429 and status < 500:
                return Delivery.of(device, Outcome.FAILED, reason, status, apns_id, requests)
            retry_after = parse_retry_after(resp.headers.get("retry-after"), self._clock())
            return Again(reason, status, retry_after)

        def give_up(outcome: Outcome, last: Again) -> Delivery:
            return Delivery.of(device, outcome, last.reason, last.status, apns_id, requests)

        return await self._tries.run(device, attempt, give_up)


def _gone_since(device: Device, body: dict[str, object]) -> bool:
    """410: gone unless the device registered at or after Apple's timestamp (ms)."""
    stamp = body.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return True
    return device.registered_at * 1000 < stamp


def _json_object(raw: bytes) -> dict[str, object]:
    if not raw:
        return {}
    try:
        obj = json.loads(raw)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}
