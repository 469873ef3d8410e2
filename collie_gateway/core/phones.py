"""Phones of one's own, pure: pairing codes, phone tokens, scopes, who may use which route,
the check number, the pairing link and the limiter of failed pairings. No I/O, no clock:
``now`` is passed in.

A pairing code lives through the transition table :data:`CODE_TRANSITIONS`
(``(state, input) -> (effect, next state)``): issued ``pending``, it pairs one phone and is
``used``, or its time runs out and it is ``expired``; anything else is refused, never undone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import math
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit

CODE_BYTES: Final = 20  # 160 bits of randomness (at least 128): 32 base32 letters
CODE_TTL: Final = timedelta(minutes=5)  # a pairing code is valid this long by default
TOKEN_BYTES: Final = 32  # 256 bits: a phone's token cannot be guessed
TOKEN_PREFIX: Final = "collie"  # tokens read ``collie.<phone_id>.<secret>``: scanners know them
MAX_TOKEN_CHARS: Final = 200  # longer is no token of ours: refused before any hashing
FAILURES_PER_WINDOW: Final = 10  # failed pairings from one address in a window (then 429)
FAILURE_WINDOW: Final = 60.0  # seconds
LIMITER_ADDRESSES: Final = 4096  # ours: addresses the limiter remembers at most
CHECK_DIGITS: Final = 6
LINK_SCHEME: Final = "collie://pair"


class Scope(StrEnum):
    """What a phone may do: ``answer`` everything, or ``read`` only (it sees everything)."""

    ANSWER = "answer"
    READ = "read"


class Verdict(StrEnum):
    """The decision on one request, before its route runs."""

    ALLOW = "allow"
    UNAUTHORIZED = "unauthorized"  # 401: no valid credential
    READ_ONLY = "read_only"  # 403: a read phone's act; nothing is sent or recorded
    ADMIN_ONLY = "admin_only"  # 403: a phone on a route of the admin token


class Kind(StrEnum):
    """Who a request comes from."""

    OPEN = "open"  # loopback, no phone paired, no ``--auth always``: today's open gateway
    ADMIN = "admin"  # the admin token (``COLLIE_TOKEN``)
    PHONE = "phone"  # a paired phone's token (or the page's cookie)
    NOBODY = "nobody"  # no credential, on a route that needs none


@dataclass(frozen=True, slots=True)
class Caller:
    """A request's credential, once checked."""

    kind: Kind
    phone_id: str | None = None
    scope: Scope = Scope.ANSWER

    @property
    def acts(self) -> bool:
        """Whether it may send to agents (answer, message, command, starter, register)."""
        if self.kind is Kind.PHONE:
            return self.scope is Scope.ANSWER
        return self.kind is not Kind.NOBODY


OPEN: Final = Caller(Kind.OPEN)
ADMIN: Final = Caller(Kind.ADMIN)
NOBODY: Final = Caller(Kind.NOBODY, scope=Scope.READ)

#: Routes (method, path template) no credential is needed for.
PUBLIC_ROUTES: Final = frozenset({("GET", "/healthz"), ("POST", "/api/v1/pair")})
#: Routes of the admin token alone (and of the open gateway).
ADMIN_ROUTES: Final = frozenset(
    {
        ("POST", "/api/v1/pairings"),
        ("GET", "/api/v1/pairings/{pairing}"),
        ("GET", "/api/v1/workers"),
    }
)
#: What a ``read`` phone may do besides reading: say which screen it shows, and revoke itself.
#: Every other route that is not a read is an act, so a route added later is refused to it.
READ_MAY: Final = frozenset({("POST", "/api/v1/presence"), ("DELETE", "/api/v1/phones/{phone}")})
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def authorize(caller: Caller | None, method: str, route: str) -> Verdict:
    """Whether ``caller`` (None: no valid credential) may use the route ``route`` (its path
    template, e.g. ``/api/v1/agents/{agent}``) with ``method``."""
    key = (method, route)
    if key in PUBLIC_ROUTES:
        return Verdict.ALLOW
    if caller is None or caller.kind is Kind.NOBODY:
        return Verdict.UNAUTHORIZED
    if caller.kind is not Kind.PHONE:
        return Verdict.ALLOW
    if key in ADMIN_ROUTES:
        return Verdict.ADMIN_ONLY
    if caller.acts or method in SAFE_METHODS or key in READ_MAY:
        return Verdict.ALLOW
    return Verdict.READ_ONLY


def may_revoke(caller: Caller, target: str) -> Verdict:
    """Whether ``caller`` may revoke the phone ``target`` (``me``: itself): the admin token
    (or the open gateway) any phone, a phone only itself."""
    if caller.kind in (Kind.OPEN, Kind.ADMIN):
        return Verdict.ALLOW
    if caller.kind is Kind.PHONE and target in ("me", caller.phone_id):
        return Verdict.ALLOW
    return Verdict.ADMIN_ONLY


def origin_ok(method: str, origin: str | None, own: Iterable[str]) -> bool:
    """Whether a request of the page (its cookie) may change state: a read always; anything
    else only with an ``Origin`` that is one of the gateway's ``own`` origins."""
    if method in SAFE_METHODS:
        return True
    return origin is not None and origin.lower().rstrip("/") in {o.lower() for o in own}


# --- pairing codes -----------------------------------------------------------------------------


class CodeState(StrEnum):
    """A pairing code's state."""

    PENDING = "pending"
    USED = "used"
    EXPIRED = "expired"


class CodeInput(StrEnum):
    """What happens to a pairing code."""

    REDEEM = "redeem"  # a phone sends it
    TIMEOUT = "timeout"  # its time ran out


class Effect(StrEnum):
    """What a step of a pairing code does."""

    PAIR = "pair"  # make the phone and its token
    REFUSE_USED = "refuse_used"
    REFUSE_EXPIRED = "refuse_expired"
    NOTHING = "nothing"


CODE_TRANSITIONS: Final[Mapping[tuple[CodeState, CodeInput], tuple[Effect, CodeState]]] = {
    (CodeState.PENDING, CodeInput.REDEEM): (Effect.PAIR, CodeState.USED),
    (CodeState.PENDING, CodeInput.TIMEOUT): (Effect.NOTHING, CodeState.EXPIRED),
    (CodeState.USED, CodeInput.REDEEM): (Effect.REFUSE_USED, CodeState.USED),
    (CodeState.USED, CodeInput.TIMEOUT): (Effect.NOTHING, CodeState.USED),
    (CodeState.EXPIRED, CodeInput.REDEEM): (Effect.REFUSE_EXPIRED, CodeState.EXPIRED),
    (CodeState.EXPIRED, CodeInput.TIMEOUT): (Effect.NOTHING, CodeState.EXPIRED),
}


def step(state: CodeState, event: CodeInput) -> tuple[Effect, CodeState]:
    """One transition of :data:`CODE_TRANSITIONS`."""
    return CODE_TRANSITIONS[(state, event)]


@dataclass(frozen=True, slots=True)
class Pairing:
    """A pairing code as stored: never the code itself, only its hash.

    ``phone_id`` is the phone it paired (once ``used``).
    """

    pairing_id: str
    code_hash: str
    scope: Scope
    created_at: datetime
    expires_at: datetime
    state: CodeState = CodeState.PENDING
    phone_id: str | None = None

    def at(self, now: datetime) -> CodeState:
        """Its state at ``now``: a pending code past its time is expired."""
        if now >= self.expires_at:
            return step(self.state, CodeInput.TIMEOUT)[1]
        return self.state


def redeem(pairing: Pairing | None, now: datetime) -> tuple[Effect, CodeState | None]:
    """What a phone's code does at ``now``: ``PAIR`` (the code is used from now on), or the
    refusal; a code of no pairing (None) is refused as wrong (``NOTHING``, no state)."""
    if pairing is None:
        return Effect.NOTHING, None
    return step(pairing.at(now), CodeInput.REDEEM)


def new_code() -> str:
    """A fresh pairing code: 32 letters and digits in groups of 4 (160 random bits)."""
    raw = base64.b32encode(secrets.token_bytes(CODE_BYTES)).decode("ascii").lower()
    return "-".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def normal_code(code: str) -> str:
    """A typed code as it was made: case, spaces and dashes do not count; a ``0`` typed for
    an ``o`` and a ``1`` for an ``i`` are forgiven (base32 has neither digit)."""
    kept = "".join(ch for ch in code.lower() if ch not in " -\t\n")
    return kept.replace("0", "o").replace("1", "i")


def code_hash(code: str) -> str:
    """The stored form of a pairing code."""
    return hashlib.sha256(normal_code(code).encode("utf-8", "surrogateescape")).hexdigest()


def check_number(code: str, public_key: str | None) -> str:
    """The 6 digits the phone and the gateway both show once paired: from the code and the
    phone's public key (so a person sees the phone that paired is theirs)."""
    key = normal_code(code).encode("utf-8", "surrogateescape")
    message = b"collie-pair-check\0" + (public_key or "").encode("utf-8", "surrogateescape")
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return f"{int.from_bytes(digest[:8], 'big') % 10**CHECK_DIGITS:0{CHECK_DIGITS}d}"


def new_id(prefix: str) -> str:
    """An id to show and to put in a URL (not a secret): ``prefix`` and 12 hex digits."""
    return f"{prefix}{secrets.token_hex(6)}"


# --- phone tokens ------------------------------------------------------------------------------


def new_token(phone_id: str) -> str:
    """A phone's token: ``collie.<phone_id>.<secret>`` with 256 random bits in the secret."""
    return f"{TOKEN_PREFIX}.{phone_id}.{secrets.token_urlsafe(TOKEN_BYTES)}"


def token_hash(token: str) -> str:
    """The only form of a token that is stored (SHA-256: the token is 256 random bits, so a
    slow hash adds nothing)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def token_phone(token: str) -> str | None:
    """The phone id a token names, or None when it is no token of ours."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1]


def token_matches(token: str, stored_hash: str) -> bool:
    """Whether ``token`` is the one whose hash is ``stored_hash`` (in constant time)."""
    return hmac.compare_digest(token_hash(token), stored_hash)


# --- the pairing link --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PairingLink:
    """What a ``collie://pair?...`` link carries: the code, the addresses the phone may use,
    and the SHA-256 fingerprint of the gateway's certificate (hex) when it serves TLS."""

    code: str
    urls: tuple[str, ...] = ()
    fingerprint: str | None = None

    def __str__(self) -> str:
        query: list[tuple[str, str]] = [("code", self.code)]
        query += [("url", url) for url in self.urls]
        if self.fingerprint:
            query.append(("fp", "sha256:" + self.fingerprint))
        return f"{LINK_SCHEME}?{urlencode(query)}"

    @classmethod
    def parse(cls, link: str) -> PairingLink:
        """The link's parts.

        Raises:
            ValueError: not a pairing link, or it has no code.
        """
        parts = urlsplit(link)
        if f"{parts.scheme}://{parts.netloc}{parts.path}" != LINK_SCHEME:
            raise ValueError(f"not a pairing link: {link[:60]!r}")
        pairs = parse_qsl(parts.query)
        codes = [v for k, v in pairs if k == "code"]
        if len(codes) != 1:
            raise ValueError("a pairing link carries exactly one code")
        fps = [v.removeprefix("sha256:") for k, v in pairs if k == "fp"]
        return cls(codes[0], tuple(v for k, v in pairs if k == "url"), fps[0] if fps else None)


def spaced_fingerprint(fingerprint: str) -> str:
    """A hex fingerprint as people compare it: ``AB:CD:…``."""
    upper = fingerprint.upper()
    return ":".join(upper[i : i + 2] for i in range(0, len(upper), 2))


# --- failed pairings ---------------------------------------------------------------------------


def address_key(address: str | None) -> str:
    """Whose failures count together: an IPv4 address, or an IPv6 address's /64 (one
    machine usually holds a whole /64)."""
    if not address:
        return "?"
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class FailureLimiter:
    """At most ``limit`` failed pairings per ``window`` seconds from one address; past them,
    how many seconds to wait (``Retry-After``). Remembers at most ``max_addresses`` (the
    oldest goes first). Pure: the shell passes its monotonic clock's ``now`` in."""

    def __init__(
        self,
        limit: int = FAILURES_PER_WINDOW,
        window: float = FAILURE_WINDOW,
        max_addresses: int = LIMITER_ADDRESSES,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_addresses = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str | None, now: float) -> int | None:
        """Seconds to wait before trying again (at least 1), or None: may try now."""
        times = self._recent(address_key(address), now)
        if times is None or len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - now))

    def failed(self, address: str | None, now: float) -> None:
        """Count one failed pairing from ``address`` at ``now``."""
        key = address_key(address)
        times = self._recent(key, now)
        if times is None:
            while len(self._failures) >= self.max_addresses:
                self._failures.popitem(last=False)
            times = self._failures[key] = deque(maxlen=self.limit)
        times.append(now)
        self._failures.move_to_end(key)

    def forgive(self, address: str | None, at: float) -> None:
        """Take back the failure counted at ``at`` (a try counted before its code was looked
        up, which then paired)."""
        times = self._failures.get(address_key(address))
        if times is not None and at in times:
            times.remove(at)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times


# --- what is shown of a phone ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phone:
    """A paired phone (or page, or crew lead): never its token, only the token's hash."""

    phone_id: str
    name: str
    scope: Scope
    paired_at: datetime
    token_hash: str
    last_seen: datetime | None = None
    last_address: str | None = None
    revoked_at: datetime | None = None

    @property
    def caller(self) -> Caller:
        """The credential its token gives."""
        return Caller(Kind.PHONE, self.phone_id, self.scope)
