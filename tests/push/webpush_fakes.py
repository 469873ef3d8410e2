"""A browser's side of Web Push and a push service of the tests' own, on 127.0.0.1.

Both are written here from the RFCs, without the code under test: the push service checks
each VAPID header itself (RFC 8292: ES256 over ``t`` with the key ``k``, ``aud`` its origin,
``exp`` within 24 hours), and the browser decrypts each body itself (RFC 8291: ECDH with the
subscription's private key, HKDF with the auth secret, AES-128-GCM, one record).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from push import WebPushKeys
from tests.push.fakes import b64url_decode


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _raw(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )


def _hkdf(salt: bytes, info: bytes, length: int, ikm: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


@dataclass
class Browser:
    """A subscription's keys as a browser (or the native app) makes them: a P-256 key pair
    and 16 random bytes of auth secret. Only the public key and the secret leave it."""

    private: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        return b64url(_raw(self.private.public_key()))

    @property
    def keys(self) -> WebPushKeys:
        return WebPushKeys(p256dh=_raw(self.private.public_key()), auth=self.auth)

    def decrypt(self, body: bytes) -> bytes:
        """The plaintext of an ``aes128gcm`` Web Push body (RFC 8291 §3.4, RFC 8188 §2)."""
        salt, rs, idlen = body[:16], int.from_bytes(body[16:20], "big"), body[20]
        sender, record = body[21 : 21 + idlen], body[21 + idlen :]
        assert idlen == 65, "a P-256 sender key"
        assert len(record) <= rs, "one record"
        shared = self.private.exchange(
            ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender)
        )
        info = b"WebPush: info\x00" + _raw(self.private.public_key()) + sender
        ikm = _hkdf(self.auth, info, 32, shared)
        cek = _hkdf(salt, b"Content-Encoding: aes128gcm\x00", 16, ikm)
        nonce = _hkdf(salt, b"Content-Encoding: nonce\x00", 12, ikm)
        padded = AESGCM(cek).decrypt(nonce, record, None).rstrip(b"\x00")
        assert padded.endswith(b"\x02"), "the last record ends with the delimiter 2"
        return padded[:-1]

    def json(self, body: bytes) -> dict[str, object]:
        obj = json.loads(self.decrypt(body))
        assert isinstance(obj, dict)
        return obj


def check_vapid(header: str | None, aud: str, now: float) -> tuple[str | None, str | None]:
    """(the signer's key, None) for a valid VAPID header, else (None, why)."""
    if not header or not header.startswith("vapid "):
        return None, "no vapid"
    params = dict(p.strip().split("=", 1) for p in header[len("vapid ") :].split(","))
    try:
        key = ec.EllipticCurvePublicKey.from_encoded_point(
            ec.SECP256R1(), b64url_decode(params["k"])
        )
        h, c, s = params["t"].split(".")
        head, claims, sig = (
            json.loads(b64url_decode(h)),
            json.loads(b64url_decode(c)),
            b64url_decode(s),
        )
        der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
        key.verify(der, f"{h}.{c}".encode(), ec.ECDSA(hashes.SHA256()))
    except (KeyError, ValueError, InvalidSignature):
        return None, "bad signature"
    if head.get("alg") != "ES256" or claims.get("aud") != aud:
        return None, "bad header or audience"
    if not now < claims["exp"] <= now + 86400 or not str(claims.get("sub")).startswith("mailto:"):
        return None, "bad expiry or subject"
    return params["k"], None


@dataclass
class PushSeen:
    """One message the push service received, checked and decrypted."""

    subscription: str
    headers: dict[str, str]
    body: bytes
    signer: str | None
    error: str | None
    message: dict[str, object] | None


Answer = int | tuple[int, dict[str, str]]


@dataclass
class FakePushService:
    """A Web Push service: ``POST /push/{id}``. A message without a valid VAPID header is
    refused 401 (nothing decrypted); otherwise ``script`` answers (201 by default)."""

    origin: str = ""
    subscriptions: dict[str, Browser] = field(default_factory=dict)
    requests: list[PushSeen] = field(default_factory=list)
    script: Callable[[PushSeen], Answer] = field(default=lambda seen: 201)
    clock: Callable[[], float] = time.time
    hold: asyncio.Event | None = None  # when given, each message waits for it to be set
    held: int = 0  # messages that waited for ``hold``

    def subscribe(self) -> tuple[str, Browser]:
        """A new subscription: its endpoint and the browser's keys."""
        sub_id, browser = secrets.token_urlsafe(16), Browser()
        self.subscriptions[sub_id] = browser
        return f"{self.origin}/push/{sub_id}", browser

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/push/{id}", self._push)
        return app

    async def _push(self, request: web.Request) -> web.Response:
        sub_id, body = request.match_info["id"], await request.read()
        if self.hold is not None:
            self.held += 1
            await self.hold.wait()
        signer, error = check_vapid(request.headers.get("Authorization"), self.origin, self.clock())
        browser = self.subscriptions.get(sub_id)
        message = browser.json(body) if browser is not None and signer is not None else None
        seen = PushSeen(sub_id, dict(request.headers), body, signer, error, message)
        self.requests.append(seen)
        if signer is None:
            return web.Response(status=401)
        answer = self.script(seen)
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        if status == 201:
            headers = {"Location": f"/m/{len(self.requests)}", **headers}
        return web.Response(status=status, headers=headers)
