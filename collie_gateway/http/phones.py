"""Phones over HTTP: pairing, the credential of every request (a phone's token, the page's
cookie, or the admin token), scopes, listing and revoking. Decode, one service call, encode;
the rules are :mod:`collie_gateway.core.phones`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Final, TypeVar

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from collie_gateway.core.answers import Record
from collie_gateway.core.cleaning import LABEL_LIMIT, clean
from collie_gateway.core.phones import (
    NOBODY,
    OPEN,
    Caller,
    CodeState,
    Effect,
    Kind,
    PairingLink,
    Scope,
    Verdict,
    authorize,
    may_revoke,
    origin_ok,
)
from collie_gateway.http.api import Tapper
from collie_gateway.http.keys import SETTINGS
from collie_gateway.http.language import words
from collie_gateway.http.openapi import Route
from collie_gateway.http.responses import encoded, http_error, json_error
from collie_gateway.http.webpage import is_web_path
from collie_gateway.services.phones import Ending, Paired, Phones
from collie_gateway.settings import Settings
from wire.messages import Time

PHONES = web.AppKey("phones", Phones)
CALLER: Final = web.RequestKey("caller", Caller)
#: The TLS fingerprint and the addresses the pairing link carries (set by the app).
LINK_PARTS = web.AppKey("link_parts", tuple)
COOKIE: Final = "collie_session"
COOKIE_AGE: Final = 400 * 86400  # the longest a browser keeps a cookie
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class PairingIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A new pairing code.

    Attributes:
        scope: The most the phone that uses it may do: `answer` (everything) or `read`.
    """

    scope: Scope = Scope.ANSWER


class PairingOut(msgspec.Struct, kw_only=True):
    """A one-time pairing code (shown once: only its hash is kept).

    Attributes:
        pairing_id: To follow the pairing (`GET /api/v1/pairings/{pairing}`); not a secret.
        code: The code the phone sends; valid once, until `expires_at`.
        link: A `collie://pair?...` link with the code, the addresses the phone may use
            (`url`, repeated) and, when the gateway serves TLS, its certificate's SHA-256
            fingerprint (`fp=sha256:<hex>`) for the phone to pin.
        expires_at: When the code stops working.
    """

    pairing_id: str
    code: str
    link: str
    expires_at: Time


class PairingStatus(msgspec.Struct, kw_only=True):
    """A pairing code's state and, once used, the phone that used it.

    Attributes:
        pairing_id: The pairing.
        state: `pending`, `used` or `expired`.
        phone_id: The phone that paired with it.
        name: That phone's name.
        scope: That phone's scope.
        check: The 6-digit check number the phone shows too.
    """

    pairing_id: str
    state: CodeState
    phone_id: str | None = None
    name: str | None = None
    scope: Scope | None = None
    check: str | None = None


class PairIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A phone pairs with a code (no other credential).

    Attributes:
        code: The pairing code (case, spaces and dashes do not count).
        name: The phone's name, as lists show it.
        scope: `read` to take less than the code allows; default: what the code allows.
        public_key: The phone's public key (any text form), mixed into the check number.
        session: The web companion: the token goes in an HttpOnly cookie, not in the body.
    """

    code: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    name: Name
    scope: Scope | None = None
    public_key: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    session: bool = False


class PairOut(msgspec.Struct, kw_only=True):
    """A phone paired.

    Attributes:
        phone_id: The phone's id (`DELETE /api/v1/phones/{phone}`).
        token: Its bearer token for every other request: shown once, kept only as a hash.
            Null for the web companion (`session`): its cookie holds it.
        scope: What it may do.
        check: 6 digits from the code and the public key; `collie-gateway pair` shows the same.
    """

    phone_id: str
    token: str | None
    scope: Scope
    check: str


class PhoneRow(msgspec.Struct, kw_only=True):
    """A paired phone (never its token).

    Attributes:
        phone_id: Its id.
        name: The name it paired with.
        scope: `answer` or `read`.
        paired_at: When it paired.
        last_seen: When it last made a request (to the minute).
        last_address: The address of that request.
    """

    phone_id: str
    name: str
    scope: Scope
    paired_at: Time
    last_seen: Time | None
    last_address: str | None


class PhoneList(msgspec.Struct, kw_only=True):
    """The phones paired and not revoked, oldest first.

    Attributes:
        phones: The phones.
    """

    phones: list[PhoneRow]


class Revoked(msgspec.Struct, kw_only=True):
    """A phone revoked: its token answers 401, its streams ended, its devices forgotten.

    Attributes:
        revoked: The phone's id.
    """

    revoked: str


# --- the credential of every request -----------------------------------------------------------


async def is_open(settings: Settings, phones: Phones) -> bool:
    """Today's open gateway: loopback (or a 0600 socket), no admin token, no phone paired
    (on any worker), no ``--public-url`` (a tunnel's requests come from loopback) and not
    ``--auth always``."""
    return (
        settings.auth != "always"
        and not settings.public_urls
        and not settings.needs_token
        and not settings.token
        and await phones.none_paired()
    )


def own_origins(request: web.Request, settings: Settings) -> list[str]:
    """The origins the page may be served from: this request's host, and the public URLs."""
    own = [f"{request.scheme}://{request.host}"]
    for url in settings.public_urls:
        parts = url.split("/", 3)
        own.append("/".join(parts[:3]))
    return own


def auth_middleware(settings: Settings) -> Middleware:
    """Check every request's credential against its route: 401 without one, 403 for a
    ``read`` phone's act or a page's request from another origin, before the route runs."""

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_web_path(request.path):
            return await handler(request)
        phones = request.app[PHONES]
        cat = words(request)
        caller, by_cookie = await _credential(request, phones)
        if caller is None and await is_open(settings, phones):
            caller = OPEN
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        verdict = authorize(caller, request.method, route)
        if verdict is Verdict.UNAUTHORIZED:
            refused = json_error(401, "unauthorized", "a valid bearer token is required")
            refused.headers["WWW-Authenticate"] = 'Bearer realm="collie-gateway"'
            return refused
        page = by_cookie or (route == "/api/v1/pair" and "Origin" in request.headers)
        origin = request.headers.get("Origin")
        if page and not origin_ok(request.method, origin, own_origins(request, settings)):
            return json_error(403, "wrong_origin", cat["phone_wrong_origin"])
        if verdict is Verdict.READ_ONLY:
            return json_error(403, "read_only", cat["phone_read_only"])
        if verdict is Verdict.ADMIN_ONLY:
            return json_error(403, "admin_only", cat["phone_admin_only"])
        if caller is not None:
            request[CALLER] = caller
        return await handler(request)

    return auth


async def _credential(request: web.Request, phones: Phones) -> tuple[Caller | None, bool]:
    """The request's caller (None: no valid credential) and whether it came by the cookie."""
    header = request.headers.get("Authorization")
    address = request.remote
    if header is not None:
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            return None, False
        return await phones.caller(given.strip(), address), False
    cookie = request.cookies.get(COOKIE)
    if cookie:
        return await phones.caller(cookie, address), True
    return None, False


def caller_of(request: web.Request) -> Caller:
    """The request's caller (nobody, on a public route without a credential)."""
    caller: Caller = request.get(CALLER, NOBODY)
    return caller


async def tapper(request: web.Request, record: Record | None) -> Tapper | None:
    """The phone the ledger names for a tap, with its name (revoked or not)."""
    phone_id = record.tap.phone if record is not None else None
    if phone_id is None:
        return None
    phone = await request.app[PHONES].repo.phone(phone_id)
    return Tapper(phone_id=phone_id, name=phone.name if phone else phone_id)


def phone_stream(request: web.Request, stream: Ending) -> Callable[[], None]:
    """A live stream opened: a revoked phone's stream ends within a second. Call what this
    returns when the stream closes."""
    phone_id = caller_of(request).phone_id
    if phone_id is None:
        return lambda: None
    phones = request.app[PHONES]
    phones.stream_opened(phone_id, stream)
    return lambda: phones.stream_closed(phone_id, stream)


# --- the routes --------------------------------------------------------------------------------


async def body_of(request: web.Request, kind: type[T]) -> T:
    """The JSON body as ``kind``.

    Raises:
        HTTPBadRequest: not JSON, or not of that shape.
    """
    try:
        return msgspec.json.decode(await request.read(), type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise http_error(web.HTTPBadRequest, "bad_request", str(exc)) from None


async def create_pairing(request: web.Request) -> web.Response:
    """A one-time pairing code for a phone (admin token): valid 5 minutes, for one phone."""
    body = await body_of(request, PairingIn) if request.can_read_body else PairingIn()
    made = await request.app[PHONES].new_code(body.scope)
    urls, fingerprint = request.app[LINK_PARTS]
    link = PairingLink(made.code, tuple(urls), fingerprint)
    out = PairingOut(
        pairing_id=made.pairing_id, code=made.code, link=str(link), expires_at=made.expires_at
    )
    return encoded(out)


async def pairing_status(request: web.Request) -> web.Response:
    """A pairing code's state (admin token): pending, used (by which phone, with the check
    number), or expired."""
    phones = request.app[PHONES]
    found = await phones.repo.pairing(request.match_info["pairing"])
    if found is None:
        return json_error(404, "not_found", "no such pairing")
    pairing, phone, check = found
    status = PairingStatus(
        pairing_id=pairing.pairing_id, state=pairing.at(request.app[SETTINGS].clock())
    )
    if phone is not None:
        status.phone_id, status.name, status.scope = phone.phone_id, phone.name, phone.scope
        status.check = check
    return encoded(status)


_REFUSALS: Final = {
    Effect.REFUSE_USED: "pair_used",
    Effect.REFUSE_EXPIRED: "pair_expired",
    Effect.NOTHING: "pair_wrong",
}


async def pair(request: web.Request) -> web.Response:
    """A phone pairs with a one-time code (no other credential): its token and check number.

    More than 10 failed codes a minute from one address are answered 429 with `Retry-After`.
    """
    phones = request.app[PHONES]
    wait = phones.retry_after(request.remote)
    if wait is not None:
        return _too_many(request, wait)
    try:
        body = await body_of(request, PairIn)
    except web.HTTPBadRequest:
        phones.failed(request.remote)  # garbage counts as a wrong code
        raise
    name = clean(body.name, LABEL_LIMIT).text.strip()
    if not name:
        phones.failed(request.remote)
        return json_error(400, "bad_request", "name: no visible characters")
    result = await phones.pair(body.code, name, body.scope, body.public_key, request.remote)
    if not isinstance(result, Paired):
        if result.retry_after is not None:
            return _too_many(request, result.retry_after)
        key = _REFUSALS[result.effect]
        return json_error(400, key, words(request)[key])
    phone = result.phone
    token = None if body.session else result.token
    answer = encoded(
        PairOut(phone_id=phone.phone_id, token=token, scope=phone.scope, check=result.check)
    )
    if body.session:
        answer.set_cookie(
            COOKIE,
            result.token,
            max_age=COOKIE_AGE,
            path="/",
            httponly=True,
            secure=request.secure,
            samesite="Strict",
        )
    return answer


def _too_many(request: web.Request, wait: int) -> web.Response:
    answer = json_error(429, "too_many", words(request).fmt("pair_too_many", seconds=wait))
    answer.headers["Retry-After"] = str(wait)
    return answer


async def list_phones(request: web.Request) -> web.Response:
    """The phones paired (admin token or any phone), never their tokens."""
    rows = await request.app[PHONES].phones()
    return encoded(PhoneList(phones=msgspec.convert(rows, list[PhoneRow], from_attributes=True)))


async def revoke_phone(request: web.Request) -> web.Response:
    """Revoke a phone (admin token; a phone itself with `me`): its token answers 401 at once,
    its open streams end within a second, its push registrations are removed."""
    caller = caller_of(request)
    target = request.match_info["phone"]
    if may_revoke(caller, target) is not Verdict.ALLOW:
        return json_error(403, "admin_only", words(request)["phone_admin_only"])
    phone_id = caller.phone_id if target == "me" and caller.phone_id else target
    if not await request.app[PHONES].revoke(phone_id):
        return json_error(404, "not_found", "no such phone")
    answer = encoded(Revoked(revoked=phone_id))
    if caller.kind is Kind.PHONE and COOKIE in request.cookies:
        answer.del_cookie(COOKIE, path="/")
    return answer


_ADMIN_ERRORS: Final = {403: "A phone's token: only the admin token may do this"}

#: The routes of phones, for the route table (and so the OpenAPI document).
PHONE_ROUTES: Final[list[Route]] = [
    Route(
        "POST",
        "/api/v1/pairings",
        create_pairing,
        PairingOut,
        body=PairingIn,
        errors=_ADMIN_ERRORS,
    ),
    Route(
        "GET",
        "/api/v1/pairings/{pairing}",
        pairing_status,
        PairingStatus,
        errors={**_ADMIN_ERRORS, 404: "No such pairing"},
    ),
    Route(
        "POST",
        "/api/v1/pair",
        pair,
        PairOut,
        body=PairIn,
        public=True,
        errors={
            400: "A wrong (`pair_wrong`), used (`pair_used`) or expired (`pair_expired`) code, "
            "or a body not of the documented shape",
            403: "From the web companion: an `Origin` that is not the gateway's own",
            429: "More than 10 failed codes a minute from one address: wait `Retry-After` seconds",
        },
    ),
    Route("GET", "/api/v1/phones", list_phones, PhoneList),
    Route(
        "DELETE",
        "/api/v1/phones/{phone}",
        revoke_phone,
        Revoked,
        errors={403: "A phone revoking another phone (only `me`)", 404: "No such phone"},
    ),
]
