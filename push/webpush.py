"""A Web Push sender (RFC 8030, 8291, 8292) on aiohttp: ``aes128gcm`` encryption to the
subscription's keys with ``http_ece``, VAPID signing, ``TTL``, ``Urgency`` and ``Topic``.

A 404 or 410 from the push service means the subscription is gone. 429 and 5xx are retried
with the senders' policy (capped, jittered, honouring Retry-After, at most 3 tries); every
other answer is final. Endpoints are ``https://``, or ``http://`` on a loopback address (a
relay on the same machine, the tests); redirects are never followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Final, cast
from urllib.parse import urlsplit

import aiohttp
import http_ece
from cryptography.hazmat.primitives.asymmetric import ec

from push import vapid
from push._retry import Again, RetryPolicy, Tries, parse_retry_after
from push._session import OwnedSession
from push.errors import PayloadTooLarge
from push.models import Delivery, Device, Forwarded, Message, Outcome, Provider, WebPushKeys
from push.payloads import Content, webpush_message

log = logging.getLogger(__name__)

TIMEOUT: Final = 10.0
MAX_ENDPOINT: Final = 2048
RECORD_SIZE: Final = 4096  # one record: every payload we make fits it
GONE: Final = frozenset({404, 410})  # RFC 8030 §7.3 (410), and unknown subscriptions (404)
SALT_BYTES: Final = 16


def check_endpoint(url: str) -> str:
    """``url`` if it may be pushed to: ``https://`` with a host, or ``http://`` on a
    loopback address; no user info, no fragment.

    Raises:
        ValueError: why not.
    """
    if len(url) > MAX_ENDPOINT or not url.isascii() or any(c.isspace() for c in url):
        raise ValueError("an endpoint is an ASCII URL of at most 2048 characters")
    parts = urlsplit(url)
    try:
        host = parts.hostname
        parts.port  # noqa: B018 - raises for a port out of range
    except ValueError:
        raise ValueError("the endpoint's host or port is malformed") from None
    if not host or parts.username is not None or parts.fragment:
        raise ValueError("an endpoint has a host, and no user info or fragment")
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and _loopback(host):
        return url
    raise ValueError("an endpoint is https:// (http:// only on a loopback address)")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def subscription_keys(p256dh: str, auth: str) -> WebPushKeys:
    """The keys of ``PushSubscription.toJSON().keys`` (base64url), checked: ``p256dh`` a
    point on P-256, ``auth`` 16 bytes.

    Raises:
        ValueError: why they are refused.
    """
    vapid.load_public_key(p256dh)
    return WebPushKeys(p256dh=vapid.b64url_decode(p256dh), auth=vapid.b64url_decode(auth))


def encrypt(
    keys: WebPushKeys,
    plaintext: bytes,
    *,
    salt: bytes | None = None,
    private_key: ec.EllipticCurvePrivateKey | None = None,
) -> bytes:
    """The ``aes128gcm`` body of ``plaintext`` for a subscription (RFC 8291): one record,
    a fresh sender key and salt unless given (the RFC's vector gives both)."""
    body = http_ece.encrypt(
        plaintext,
        salt=salt if salt is not None else os.urandom(SALT_BYTES),
        private_key=private_key or ec.generate_private_key(ec.SECP256R1()),
        dh=keys.p256dh,
        auth_secret=keys.auth,
        version="aes128gcm",
        rs=RECORD_SIZE,
    )
    return cast(bytes, body)


class WebPushClient(OwnedSession):
    """Sends notifications and withdrawals to Web Push subscriptions.

    Usage::

        async with WebPushClient(vapid_key=key, subject="mailto:ops@example.org",
                                 content=Content(strings=catalogue)) as web:
            delivery = await web.send(device, note)

    ``verify`` (an SSL context trusting another CA; False: no checks), ``session``,
    ``clock``, ``sleep`` and ``rng`` are injectable, as for the other senders.
    """

    def __init__(
        self,
        *,
        vapid_key: ec.EllipticCurvePrivateKey,
        subject: str,
        content: Content,
        session: aiohttp.ClientSession | None = None,
        timeout: float = TIMEOUT,
        retry: RetryPolicy | None = None,
        verify: ssl.SSLContext | bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not subject.startswith(("mailto:", "https://")):
            raise ValueError("a VAPID subject is a mailto: or https:// contact")
        self._key = vapid_key
        self._subject = subject
        self._content = content
        self._own(session, verify=verify, timeout=timeout)
        self._timeout = timeout
        self._tries = Tries("web push", log, retry or RetryPolicy(), sleep, rng)
        self._clock = clock
        self._tokens: dict[str, tuple[str, float]] = {}  # audience -> (header, expiry)
        self.tokens_signed = 0

    @property
    def public_key(self) -> str:
        """The VAPID public key, as the page subscribes with it."""
        return vapid.public_key(self._key)

    def authorization(self, endpoint: str) -> str:
        """The VAPID header for ``endpoint``'s origin; one token per origin, signed anew
        when half its lifetime has passed."""
        aud, now = vapid.audience(endpoint), self._clock()
        cached = self._tokens.get(aud)
        if cached is not None and cached[1] - now > vapid.LIFETIME / 2:
            return cached[0]
        header = vapid.authorization(self._key, aud, subject=self._subject, now=now)
        self._tokens[aud] = (header, now + vapid.LIFETIME)
        self.tokens_signed += 1
        return header

    def request(self, device: Device, note: Message) -> tuple[dict[str, str], bytes]:
        """The headers (but ``Authorization``) and encrypted body of ``note`` to ``device``.

        Raises:
            PayloadTooLarge: the plaintext does not fit.
            ValueError: not a Web Push device, or a relayed message.
        """
        if device.webpush is None or isinstance(note, Forwarded):
            raise ValueError("not a Web Push device or message")
        msg = webpush_message(device, note, content=self._content, now=self._clock())
        headers = {
            "TTL": str(msg.ttl),
            "Urgency": msg.urgency.value,
            "Topic": msg.topic,
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
        }
        return headers, encrypt(device.webpush, msg.plaintext)

    async def send(self, device: Device, note: Message) -> Delivery:
        """Send ``note`` to ``device``; the outcome, never an exception for it."""
        if device.provider is not Provider.WEBPUSH:
            return Delivery.of(device, Outcome.FAILED, reason="not a Web Push device")
        try:
            url = check_endpoint(device.token)
            headers, body = self.request(device, note)
        except PayloadTooLarge:
            return Delivery.of(device, Outcome.FAILED, reason="PayloadTooLarge")
        except ValueError as exc:
            return Delivery.of(device, Outcome.FAILED, reason=str(exc))
        return await self._post(device, url, headers, body)

    async def _post(
        self, device: Device, url: str, headers: dict[str, str], body: bytes
    ) -> Delivery:
        tries = 0

        async def attempt() -> Delivery | Again:
            nonlocal tries
            tries += 1
            try:
                auth = {"Authorization": self.authorization(url)}
                async with (
                    asyncio.timeout(self._timeout),
                    self._http().post(
                        url, data=body, headers={**headers, **auth}, allow_redirects=False
                    ) as resp,
                ):
                    status, location = resp.status, resp.headers.get("Location")
                    retry_header = resp.headers.get("Retry-After")
            except TimeoutError:
                return Again("timeout")
            except aiohttp.ClientError as exc:
                return Again(f"connection: {type(exc).__name__}")
            except Exception as exc:
                log.exception("web push failed unexpectedly for device %s", device.id)
                reason = f"internal: {type(exc).__name__}"
                return Delivery.of(device, Outcome.FAILED, reason, None, None, tries)
            reason = f"HTTP {status}"
            if 200 <= status < 300:
                return Delivery.of(device, Outcome.SENT, None, status, location, tries)
            if status in GONE:
                return Delivery.of(device, Outcome.GONE, reason, status, None, tries)
            if status == 413:
                reason = "PayloadTooLarge"
            if status != 429 and status < 500:
                return Delivery.of(device, Outcome.FAILED, reason, status, None, tries)
            return Again(reason, status, parse_retry_after(retry_header, self._clock()))

        def give_up(outcome: Outcome, last: Again) -> Delivery:
            return Delivery.of(device, outcome, last.reason, last.status, None, tries)

        return await self._tries.run(device, attempt, give_up)
