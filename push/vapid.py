"""VAPID (RFC 8292): the gateway's key pair, the ``Authorization: vapid t=…, k=…`` header a
sender signs, and its verification by a push service (the relay, the tests' own). Pure:
``now`` is passed in.

The public key travels as the base64url (unpadded) uncompressed P-256 point: the page's
``applicationServerKey`` and the header's ``k``. The JWT is ES256 with the claims ``aud``
(the endpoint's origin), ``exp`` (at most 24 hours ahead) and ``sub`` (a ``mailto:`` or
``https:`` contact).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from push._jwt import b64url, es256

LIFETIME: Final = 12 * 3600  # ours: half of RFC 8292's 24-hour limit
MAX_LIFETIME: Final = 24 * 3600  # RFC 8292 §2
MAX_HEADER: Final = 2048
_PARAM: Final = re.compile(r"\s*([a-z]{1,8})\s*=\s*([A-Za-z0-9_\-.=]{1,1500})\s*", re.ASCII)


class VapidError(ValueError):
    """A VAPID header that is missing, malformed, expired, for another audience, or whose
    signature does not match its key."""


def b64url_decode(text: str) -> bytes:
    """Base64url with or without padding.

    Raises:
        ValueError: not base64url.
    """
    if not re.fullmatch(r"[A-Za-z0-9_\-]*={0,2}", text, re.ASCII):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except binascii.Error:
        raise ValueError("not base64url") from None


def generate() -> ec.EllipticCurvePrivateKey:
    """A new VAPID key pair (P-256)."""
    return ec.generate_private_key(ec.SECP256R1())


def to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The private key as unencrypted PKCS#8 PEM (what the gateway stores)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def from_pem(pem: bytes) -> ec.EllipticCurvePrivateKey:
    """A VAPID private key from PEM.

    Raises:
        ValueError: not a P-256 private key.
    """
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("a VAPID key is a P-256 private key")
    return key


def public_key(key: ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) -> str:
    """The public key as the page and the header's ``k`` carry it."""
    pub = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    raw = pub.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64url(raw)


def load_public_key(text: str) -> ec.EllipticCurvePublicKey:
    """A P-256 public key from its base64url uncompressed point.

    Raises:
        ValueError: not an uncompressed point on P-256.
    """
    raw = b64url_decode(text)
    if len(raw) != 65 or raw[0] != 0x04:
        raise ValueError("a public key is an uncompressed P-256 point (65 bytes)")
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)


def audience(endpoint: str) -> str:
    """The ``aud`` for a push endpoint: its origin (scheme, host, port as written)."""
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


def authorization(
    key: ec.EllipticCurvePrivateKey,
    aud: str,
    *,
    subject: str,
    now: float,
    lifetime: int = LIFETIME,
) -> str:
    """``vapid t=<JWT>, k=<public key>`` for pushes to the origin ``aud`` (RFC 8292 §3)."""
    if not 0 < lifetime <= MAX_LIFETIME:
        raise ValueError(f"a VAPID token lives at most {MAX_LIFETIME} s")
    claims = {"aud": aud, "exp": int(now) + lifetime, "sub": subject}
    return f"vapid t={es256(key, None, claims)}, k={public_key(key)}"


@dataclass(frozen=True, slots=True)
class Verified:
    """What a valid VAPID header proves: the signer's public key (base64url) and claims."""

    public_key: str
    subject: str | None
    expires: int


def verify(header: str | None, *, aud: str, now: float) -> Verified:
    """Check an ``Authorization`` header as a push service does: the ``vapid`` scheme with
    ``t`` and ``k``, an ES256 JWT signed by ``k``, ``aud`` this service's origin, ``exp``
    after ``now`` and at most 24 hours ahead.

    Raises:
        VapidError: why it is refused.
    """
    if not header or len(header) > MAX_HEADER:
        raise VapidError("no VAPID authorization")
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "vapid":
        raise VapidError("not the vapid scheme")
    params: dict[str, str] = {}
    for part in rest.split(","):
        match = _PARAM.fullmatch(part)
        if match is None or match[1] in params:
            raise VapidError("malformed vapid parameters")
        params[match[1]] = match[2]
    if "t" not in params or "k" not in params:
        raise VapidError("vapid needs t and k")
    try:
        key = load_public_key(params["k"])
        head_b64, claims_b64, sig_b64 = params["t"].split(".")
        head = json.loads(b64url_decode(head_b64))
        claims = json.loads(b64url_decode(claims_b64))
        sig = b64url_decode(sig_b64)
    except ValueError:
        raise VapidError("malformed VAPID token or key") from None
    if not isinstance(head, dict) or head.get("alg") != "ES256" or len(sig) != 64:
        raise VapidError("the VAPID token is not ES256")
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    try:
        key.verify(der, f"{head_b64}.{claims_b64}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise VapidError("the VAPID signature does not match k") from None
    return _claims(claims, public_key(key), aud, now)


def _claims(claims: object, key: str, aud: str, now: float) -> Verified:
    if not isinstance(claims, dict):
        raise VapidError("the VAPID claims are not an object")
    if claims.get("aud") != aud:
        raise VapidError("the VAPID token is for another audience")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int):
        raise VapidError("the VAPID token has no expiry")
    if exp <= now:
        raise VapidError("the VAPID token has expired")
    if exp > now + MAX_LIFETIME:
        raise VapidError("the VAPID token expires more than 24 hours ahead")
    sub = claims.get("sub")
    return Verified(key, sub if isinstance(sub, str) else None, exp)
