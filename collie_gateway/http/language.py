"""The language each phone request is answered in: its ``Accept-Language``, else its
``?lang=``, else the gateway's default (``collie_gateway.strings.language``).

A request's catalogue is chosen once and kept on the request; every answer that used one
says which (``Content-Language``) and that it varies with ``Accept-Language``.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from collie_gateway.strings import Catalogue, Catalogues, choose_language

LANGUAGES: Final = web.AppKey("languages", Catalogues)
_CHOSEN: Final = web.RequestKey("catalogue", Catalogue)


def words(request: web.Request) -> Catalogue:
    """The catalogue of the language ``request`` asks for (chosen once per request)."""
    chosen = request.get(_CHOSEN)
    if isinstance(chosen, Catalogue):
        return chosen
    chosen = request.app[LANGUAGES].choose(
        request.headers.get("Accept-Language"), request.query.get("lang")
    )
    request[_CHOSEN] = chosen
    return chosen


def stream_language(request: web.Request) -> str | None:
    """The language tag a live stream is worded in; None: the default language (events are
    published in it)."""
    chosen = words(request)
    return None if chosen is request.app[LANGUAGES].default else chosen.lang


def named_language(request: web.Request) -> str | None:
    """The language the request's ``Accept-Language`` names among those the gateway speaks
    (even the default), else None."""
    header = request.headers.get("Accept-Language")
    if not header:
        return None
    return choose_language(header, None, request.app[LANGUAGES].languages, "") or None


async def language_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``Content-Language`` and ``Vary: Accept-Language`` on an answer worded for its request."""
    chosen = request.get(_CHOSEN)
    if chosen is not None:
        response.headers["Content-Language"] = chosen.lang
        vary = response.headers.get("Vary")
        if vary is None:
            response.headers["Vary"] = "Accept-Language"
        elif "accept-language" not in vary.lower():
            response.headers["Vary"] = vary + ", Accept-Language"
