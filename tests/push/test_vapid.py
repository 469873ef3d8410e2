"""Issue 22: VAPID keys and headers (RFC 8292), signed and verified."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from push import vapid
from tests.push.conftest import T0
from tests.push.webpush_fakes import b64url, check_vapid

AUD = "https://push.example.org"
SUB = "mailto:ops@collie.test"


def test_a_key_pair_round_trips_through_pem_and_its_public_point() -> None:
    key = vapid.generate()
    again = vapid.from_pem(vapid.to_pem(key))
    assert vapid.public_key(again) == vapid.public_key(key)
    raw = vapid.b64url_decode(vapid.public_key(key))
    assert (len(raw), raw[0]) == (65, 4)  # the page's applicationServerKey
    assert vapid.public_key(vapid.load_public_key(vapid.public_key(key))) == vapid.public_key(key)


def test_from_pem_refuses_another_curve() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(ValueError, match="P-256"):
        vapid.from_pem(vapid.to_pem(other))


def test_a_header_verifies_here_and_with_the_tests_own_checker() -> None:
    key = vapid.generate()
    header = vapid.authorization(key, AUD, subject=SUB, now=T0)
    assert header.startswith("vapid t=")
    verified = vapid.verify(header, aud=AUD, now=T0 + 1)
    assert verified.public_key == vapid.public_key(key)
    assert (verified.subject, verified.expires) == (SUB, int(T0) + vapid.LIFETIME)
    assert check_vapid(header, AUD, T0 + 1) == (vapid.public_key(key), None)


def _header_with(claims: dict[str, object]) -> str:
    key = vapid.generate()
    from push._jwt import es256

    return f"vapid t={es256(key, None, claims)}, k={vapid.public_key(key)}"


@pytest.mark.parametrize(
    ("header", "now", "why"),
    [
        (None, T0, "no VAPID authorization"),
        ("Bearer abc", T0, "not the vapid scheme"),
        ("vapid t=a.b.c", T0, "vapid needs t and k"),
        ("vapid t=a.b.c, t=d.e.f, k=x", T0, "malformed vapid parameters"),
        ("vapid t=a.b.c, k=BCVx", T0, "malformed VAPID token or key"),
        (_header_with({"aud": AUD, "exp": int(T0) + 60, "sub": SUB}), T0 + 60, "has expired"),
        (_header_with({"aud": AUD, "exp": int(T0) + 90_000, "sub": SUB}), T0, "24 hours"),
        (_header_with({"aud": "https://other.example", "exp": int(T0) + 60}), T0, "audience"),
        (_header_with({"aud": AUD}), T0, "no expiry"),
        (_header_with({"aud": AUD, "exp": True}), T0, "no expiry"),
    ],
)
def test_refused_headers_say_why(header: str | None, now: float, why: str) -> None:
    with pytest.raises(vapid.VapidError, match=why):
        vapid.verify(header, aud=AUD, now=now)


def test_a_token_with_another_key_in_k_is_refused() -> None:
    header = vapid.authorization(vapid.generate(), AUD, subject=SUB, now=T0)
    token = header.split(",")[0]
    forged = f"{token}, k={vapid.public_key(vapid.generate())}"
    with pytest.raises(vapid.VapidError, match="does not match k"):
        vapid.verify(forged, aud=AUD, now=T0)


def test_changed_claims_break_the_signature() -> None:
    header = vapid.authorization(vapid.generate(), AUD, subject=SUB, now=T0)
    token, key = header.removeprefix("vapid t=").split(", k=")
    h, _, s = token.split(".")
    claims = b64url(json.dumps({"aud": AUD, "exp": int(T0) + 99, "sub": SUB}).encode())
    with pytest.raises(vapid.VapidError, match="does not match k"):
        vapid.verify(f"vapid t={h}.{claims}.{s}, k={key}", aud=AUD, now=T0)


@given(st.text(max_size=300))
def test_no_header_crashes_the_verifier(header: str) -> None:
    with pytest.raises(vapid.VapidError):
        vapid.verify(header, aud=AUD, now=T0)


def test_lifetime_is_bounded() -> None:
    with pytest.raises(ValueError, match="at most 86400 s"):
        vapid.authorization(vapid.generate(), AUD, subject=SUB, now=T0, lifetime=90_000)
