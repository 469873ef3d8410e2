"""An FCM HTTP v1 client on aiohttp, with its own async OAuth 2.0 JWT-bearer token exchange.

Why not ``pyfcm``: 2.1.1 is synchronous (it would block the event loop), sleeps on 429
Retry-After without bound, and its async path raises inside a running loop (its bug #348).
So: aiohttp, one access token shared by every send and renewed before it expires (and once
on a 401), a timeout on every request, 429 and 5xx retried with capped backoff honouring
Retry-After, at most 3 tries. Token gone (FCM docs, "Manage FCM registration tokens"): 404
with errorCode UNREGISTERED, or 400 INVALID_ARGUMENT that names the registration token (a
BadRequest violation on ``message.token``, or an FcmError INVALID_ARGUMENT whose message
says the registration token is not valid); any other INVALID_ARGUMENT is our payload's
fault and leaves the device alone. 401 THIRD_PARTY_AUTH_ERROR (the project's APNs
credentials) is not our token's fault: no refresh. SENDER_ID_MISMATCH is reported, not gone:
it also follows from a wrong service account, which must not erase every device.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import aiohttp
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from push._jwt import rs256
from push._retry import Again, RetryPolicy, Tries, parse_retry_after
from push._session import OwnedSession
from push.errors import PayloadTooLarge
from push.models import Delivery, Device, Message, Outcome, Provider
from push.payloads import Content, fcm_message

log = logging.getLogger(__name__)

FCM_URL: Final = "https://fcm.googleapis.com"
SCOPE: Final = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_LIFETIME: Final = 3600  # Google: at most one hour
TOKEN_MARGIN: Final = 300.0  # renew this long before the access token expires
TIMEOUT: Final = 10.0
_FCM_ERROR: Final = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
_BAD_REQUEST: Final = "type.googleapis.com/google.rpc.BadRequest"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceAccount:
    """The parts of a Google service account key the client uses."""

    project_id: str
    client_email: str
    private_key: rsa.RSAPrivateKey
    token_uri: str
    private_key_id: str | None = None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, object]) -> ServiceAccount:
        """Read a service account JSON key file's content.

        Raises:
            ValueError: a field is missing, or the key is not an RSA PEM key.
        """
        obj = json.loads(data) if isinstance(data, str | bytes) else data
        if not isinstance(obj, Mapping):
            raise ValueError("a service account is a JSON object")

        def text(name: str) -> str:
            value = obj.get(name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"service account lacks {name!r}")
            return value

        key = load_pem_private_key(text("private_key").encode(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the service account key is not an RSA key")
        kid = obj.get("private_key_id")
        return cls(
            project_id=text("project_id"),
            client_email=text("client_email"),
            private_key=key,
            token_uri=text("token_uri"),
            private_key_id=kid if isinstance(kid, str) and kid else None,
        )


@dataclass(frozen=True, slots=True)
class _Access:
    token: str
    expires_at: float


class _TokenFailure(Exception):
    def __init__(self, reason: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _FcmError:
    code: str | None
    token_invalid: bool

    @classmethod
    def parse(cls, status: int, raw: bytes) -> _FcmError:
        try:
            obj = json.loads(raw) if raw else {}
        except ValueError:
            obj = {}
        err = obj.get("error") if isinstance(obj, dict) else None
        if not isinstance(err, dict):
            return cls(None, False)
        status_name = err.get("status")
        message = err.get("message")
        fcm_code: str | None = None
        token_field = False
        details = err.get("details")
        for detail in details if isinstance(details, list) else []:
            if not isinstance(detail, dict):
                continue
            if detail.get("@type") == _FCM_ERROR and isinstance(detail.get("errorCode"), str):
                fcm_code = detail["errorCode"]
            elif detail.get("@type") == _BAD_REQUEST:
                violations = detail.get("fieldViolations")
                for v in violations if isinstance(violations, list) else []:
                    if isinstance(v, dict) and v.get("field") == "message.token":
                        token_field = True
        names_token = isinstance(message, str) and "registration token" in message.lower()
        token_invalid = status == 400 and (
            token_field or (fcm_code == "INVALID_ARGUMENT" and names_token)
        )
        code = fcm_code or (status_name if isinstance(status_name, str) else None)
        return cls(code, token_invalid)


class FcmClient(OwnedSession):
    """Sends notifications through FCM HTTP v1; one instance per Firebase project.

    Usage::

        async with FcmClient(ServiceAccount.from_json(raw), content=Content(strings=cat)) as fcm:
            delivery = await fcm.send(device, note)

    ``session`` is used as given (and not closed); without one the client opens its own.
    ``base_url`` (a relay, a test double), ``verify`` (an SSL context trusting another CA;
    False: no checks), ``clock``, ``sleep`` and ``rng`` are injectable; the token endpoint
    is the account's ``token_uri``.
    """

    def __init__(
        self,
        account: ServiceAccount,
        *,
        content: Content,
        session: aiohttp.ClientSession | None = None,
        base_url: str = FCM_URL,
        timeout: float = TIMEOUT,
        retry: RetryPolicy | None = None,
        token_margin: float = TOKEN_MARGIN,
        verify: ssl.SSLContext | bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._account = account
        self._content = content
        self._own(session, verify=verify, timeout=timeout)
        project = quote(account.project_id, safe="")
        self._send_url = f"{base_url.rstrip('/')}/v1/projects/{project}/messages:send"
        self._timeout = timeout
        self._tries = Tries("fcm", log, retry or RetryPolicy(), sleep, rng)
        self._margin = token_margin
        self._clock = clock
        self._access: _Access | None = None
        self._token_lock = asyncio.Lock()
        self.tokens_fetched = 0

    async def _access_token(self) -> str:
        """The OAuth access token, fetched only when missing or about to expire; one
        exchange at a time, shared by every send."""
        access = self._access
        if access is not None and self._clock() < access.expires_at - self._margin:
            return access.token
        async with self._token_lock:
            access = self._access
            if access is not None and self._clock() < access.expires_at - self._margin:
                return access.token
            self._access = await self._fetch_token()
            return self._access.token

    def _invalidate(self, rejected: str) -> None:
        if self._access is not None and self._access.token == rejected:
            self._access = None

    async def _fetch_token(self) -> _Access:
        account = self._account
        now = self._clock()
        assertion = rs256(
            account.private_key,
            account.private_key_id,
            {
                "iss": account.client_email,
                "scope": SCOPE,
                "aud": account.token_uri,
                "iat": int(now),
                "exp": int(now) + ASSERTION_LIFETIME,
            },
        )
        form = {"grant_type": GRANT_TYPE, "assertion": assertion}
        try:
            async with (
                asyncio.timeout(self._timeout),
                self._http().post(account.token_uri, data=form) as resp,
            ):
                status, raw = resp.status, await resp.read()
                retry_after = parse_retry_after(resp.headers.get("Retry-After"), now)
        except TimeoutError:
            raise _TokenFailure("timeout", retryable=True) from None
        except aiohttp.ClientError as exc:
            raise _TokenFailure(type(exc).__name__, retryable=True) from None
        if status != 200:
            transient = status == 429 or status >= 500
            raise _TokenFailure(f"HTTP {status}", retryable=transient, retry_after=retry_after)
        try:
            body = json.loads(raw)
            token, expires_in = body["access_token"], body.get("expires_in", 3600)
            if not isinstance(token, str) or not isinstance(expires_in, int | float):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise _TokenFailure("malformed token response", retryable=False) from None
        self.tokens_fetched += 1
        return _Access(token, now + float(expires_in))

    async def send(self, device: Device, note: Message) -> Delivery:
        """Send ``note`` to ``device``; the outcome, never an exception for it."""
        if device.provider is not Provider.FCM:
            return Delivery.of(device, Outcome.FAILED, reason="not an FCM device")
        try:
            message = fcm_message(device, note, content=self._content, now=self._clock())
        except PayloadTooLarge:
            return Delivery.of(device, Outcome.FAILED, reason="PayloadTooLarge")
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        requests = 0
        refreshed = False

        async def attempt() -> Delivery | Again:
            nonlocal requests, refreshed
            try:
                token = await self._access_token()
                requests += 1
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
                async with (
                    asyncio.timeout(self._timeout),
                    self._http().post(self._send_url, data=body, headers=headers) as resp,
                ):
                    status, raw = resp.status, await resp.read()
                    retry_header = resp.headers.get("Retry-After")
            except _TokenFailure as failure:
                reason = f"oauth: {failure.reason}"
                if not failure.retryable:
                    return Delivery.of(device, Outcome.FAILED, reason, None, None, requests)
                return Again(reason, retry_after=failure.retry_after)
            except TimeoutError:
                return Again("timeout")
            except aiohttp.ClientError as exc:
                return Again(f"connection: {type(exc).__name__}")
            except Exception as exc:
                log.exception("fcm send failed unexpectedly for device %s", device.id)
                reason = f"internal: {type(exc).__name__}"
                return Delivery.of(device, Outcome.FAILED, reason, None, None, requests)
            if status == 200:
                name = _json_field(raw, "name")
                return Delivery.of(device, Outcome.SENT, None, status, name, requests)
            err = _FcmError.parse(status, raw)
            reason = err.code or f"HTTP {status}"
            if status == 401 and err.code != "THIRD_PARTY_AUTH_ERROR" and not refreshed:
                refreshed = True
                self._invalidate(token)
                return Again(reason, status, resend=True)
            if err.code == "UNREGISTERED" or err.token_invalid:
                return Delivery.of(device, Outcome.GONE, reason, status, None, requests)
            if status != 429 and status < 500:
                return Delivery.of(device, Outcome.FAILED, reason, status, None, requests)
            return Again(reason, status, parse_retry_after(retry_header, self._clock()))

        def give_up(outcome: Outcome, last: Again) -> Delivery:
            return Delivery.of(device, outcome, last.reason, last.status, None, requests)

        return await self._tries.run(device, attempt, give_up)


def _json_field(raw: bytes, name: str) -> str | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None
