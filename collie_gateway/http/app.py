"""``create_app(settings)``: the phone API as an aiohttp application."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from collie_gateway.errors import ConfigError
from collie_gateway.gateway import Gateway
from collie_gateway.http import routes
from collie_gateway.http.keys import AGENTS, ANSWERS, BUS, CHATS, CREW, PUSHING, ROWS, SETTINGS
from collie_gateway.http.language import LANGUAGES, language_headers
from collie_gateway.http.responses import json_error
from collie_gateway.http.webpage import add_web_routes, is_web_path
from collie_gateway.settings import Settings

#: The gateway the app opened (or was given): for tests and benchmarks; the routes use the
#: services' own keys.
GATEWAY = web.AppKey("gateway", Gateway)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_OPEN_PATHS = frozenset({"/healthz"})


def check_settings(settings: Settings) -> None:
    """Refuse settings that would expose the phone API without a token.

    Raises:
        ConfigError: a non-loopback host and no (or an empty) token.
    """
    if settings.needs_token and not settings.token:
        raise ConfigError(
            f"the phone API on {settings.host} needs a bearer token: set COLLIE_TOKEN "
            "(only 127.0.0.1 may go without one)"
        )


def _auth_middleware(token: str) -> Middleware:
    expected = token.encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in _OPEN_PATHS or is_web_path(request.path):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        ok = (
            scheme.lower() == "bearer"
            and bool(given)
            and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected)
        )
        if not ok:
            refused = json_error(401, "unauthorized", "a valid bearer token is required")
            refused.headers["WWW-Authenticate"] = 'Bearer realm="collie-gateway"'
            return refused
        return await handler(request)

    return auth


_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own errors (unknown route, wrong method, body too large) as the API's JSON
    error body; errors the routes raise already carry it."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        words = {
            404: f"no route {request.path}",
            405: f"{request.method} is not allowed on {request.path}",
            413: "the body is over 1 MiB",
        }
        answer = json_error(
            exc.status,
            _CODES.get(exc.status, "http_error"),
            words.get(exc.status, exc.reason),
        )
        if exc.status == 405 and "Allow" in exc.headers:
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer


async def _stopping(app: web.Application) -> None:
    """At a stop, before requests in flight get their grace: end every live stream (a phone
    reconnects with ``Last-Event-ID`` to the next run), and let answers on their way settle
    briefly, or answer the phone "uncertain" (T1)."""
    if GATEWAY in app:
        app[BUS].close()
        await app[ANSWERS].settle_replies()


def create_app(settings: Settings, gateway: Gateway | None = None) -> web.Application:
    """The phone API. Without ``gateway``, one is opened on startup and closed on cleanup.

    Raises:
        ConfigError: as :func:`check_settings`.
    """
    check_settings(settings)
    middlewares: list[Middleware] = [json_errors]
    if settings.token:
        middlewares.append(_auth_middleware(settings.token))
    app = web.Application(middlewares=middlewares, client_max_size=1024 * 1024)
    app[SETTINGS] = settings
    app[LANGUAGES] = settings.languages
    app.on_response_prepare.append(language_headers)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        gw = gateway if gateway is not None else await Gateway.open(settings)
        app[GATEWAY] = gw
        app[AGENTS], app[ROWS], app[CHATS] = gw.agents, gw.rows, gw.chats
        app[ANSWERS], app[PUSHING], app[CREW], app[BUS] = gw.answers, gw.pushing, gw.crew, gw.bus
        yield
        if gateway is None:
            await gw.close()

    app.cleanup_ctx.append(lifespan)
    app.on_shutdown.append(_stopping)
    routes.add_routes(app)
    add_web_routes(app)
    return app
