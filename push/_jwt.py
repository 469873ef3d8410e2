"""Compact JWS signing for the provider tokens: ES256 (APNs) and RS256 (Google OAuth). Pure."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 7515)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _signing_input(header: Mapping[str, object], claims: Mapping[str, object]) -> bytes:
    def part(obj: Mapping[str, object]) -> str:
        return b64url(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())

    return f"{part(header)}.{part(claims)}".encode("ascii")


def es256(key: ec.EllipticCurvePrivateKey, kid: str | None, claims: Mapping[str, object]) -> str:
    """A JWT signed ES256 (P-256, raw r||s signature as JWS requires); without a ``kid``
    the header is ``{"alg":"ES256","typ":"JWT"}`` (VAPID, RFC 8292 §2)."""
    header = {"alg": "ES256", "kid": kid} if kid is not None else {"alg": "ES256", "typ": "JWT"}
    signing_input = _signing_input(header, claims)
    r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{signing_input.decode('ascii')}.{b64url(raw)}"


def rs256(key: rsa.RSAPrivateKey, kid: str | None, claims: Mapping[str, object]) -> str:
    """A JWT signed RS256 (RSASSA-PKCS1-v1_5 with SHA-256)."""
    header: dict[str, object] = {"alg": "RS256", "typ": "JWT"}
    if kid:
        header["kid"] = kid
    signing_input = _signing_input(header, claims)
    sig = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode('ascii')}.{b64url(sig)}"
