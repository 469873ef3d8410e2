"""``create_app(settings, rooms)``: the phone API as an aiohttp application, on the services
the composition root opens (``serving.gateway_app`` hands it the gateway's)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

from collie_gateway.errors import ConfigError
from collie_gateway.http import routes
from collie_gateway.http.keys import (
    AGENTS,
    ANSWERS,
    BUS,
    CHATS,
    CREW,
    PUSHING,
    ROSTER,
    ROWS,
    SETTINGS,
)
from collie_gateway.http.language import LANGUAGES, language_headers
from collie_gateway.http.phones import LINK_PARTS, PHONES, auth_middleware
from collie_gateway.http.responses import json_error
from collie_gateway.http.webpage import add_web_routes
from collie_gateway.services.agents import Agents
from collie_gateway.services.answers import Answers
from collie_gateway.services.chats import Chats
from collie_gateway.services.crew import Crew
from collie_gateway.services.phonebus import PhoneBus
from collie_gateway.services.phones import Phones
from collie_gateway.services.pushing import Pushing
from collie_gateway.services.roster import Roster
from collie_gateway.services.rows import Rows
from collie_gateway.settings import Settings


class Rooms(Protocol):
    """The services the routes call, each under its app key (a ``Gateway`` is one)."""

    agents: Agents
    rows: Rows
    chats: Chats
    answers: Answers
    pushing: Pushing
    crew: Crew
    bus: PhoneBus
    phones: Phones
    roster: Roster


#: Opens the services at the app's start and closes them at its clean-up.
OpenRooms = Callable[[], AbstractAsyncContextManager[Rooms]]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
    if BUS in app:
        app[BUS].close()
        await app[ANSWERS].settle_replies()


def create_app(settings: Settings, rooms: OpenRooms) -> web.Application:
    """The phone API on the services ``rooms`` opens at start-up and closes at clean-up.

    Raises:
        ConfigError: as :func:`check_settings`.
    """
    check_settings(settings)
    middlewares: list[Middleware] = [json_errors, auth_middleware(settings)]
    app = web.Application(middlewares=middlewares, client_max_size=1024 * 1024)
    app[SETTINGS] = settings
    app[LANGUAGES] = settings.languages
    app.on_response_prepare.append(language_headers)
    fingerprint = settings.tls.fingerprint if settings.tls is not None else None
    app[LINK_PARTS] = (settings.public_urls, fingerprint)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        async with rooms() as gw:
            app[AGENTS], app[ROWS], app[CHATS] = gw.agents, gw.rows, gw.chats
            app[ANSWERS], app[PUSHING], app[CREW] = gw.answers, gw.pushing, gw.crew
            app[BUS], app[PHONES], app[ROSTER] = gw.bus, gw.phones, gw.roster
            yield

    app.cleanup_ctx.append(lifespan)
    app.on_shutdown.append(_stopping)
    routes.add_routes(app)
    add_web_routes(app)
    return app
