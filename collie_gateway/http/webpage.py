"""The web companion: the phone's screens as a page served at ``/`` (static files, no build).

The page is built only on the public phone API and its live stream; this module only serves
its files, with a Content-Security-Policy that allows nothing from another host. The
catalogue of the request's language is embedded in the page as JSON data (not script), with
its plural forms and ``<html lang>``, so ``--strings`` changes the page's words and the token
prompt has its words before any API call.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Final

from aiohttp import web

from collie_gateway.http.language import words
from collie_gateway.http.responses import http_error
from collie_gateway.strings import Catalogue

FILES: Final = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "icon.svg": "image/svg+xml",
    "push.js": "text/javascript",  # the Web Push subscription
    "sw.js": "text/javascript",  # the service worker: shows and closes notifications
}
MANIFEST: Final = "manifest.webmanifest"
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
STRINGS_MARK: Final = "<!--collie-strings-->"


def _read(name: str) -> bytes:
    return resources.files("collie_gateway").joinpath("web", name).read_bytes()


def _data_block(name: str, data: object) -> str:
    """A JSON data block (``<`` escaped, so no text in it can close the block)."""
    text = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="{name}">{text}</script>'


def index_html(catalogue: Catalogue) -> bytes:
    """The page in the catalogue's language, its strings and plural forms embedded."""
    blocks = _data_block("collie-strings", catalogue.texts())
    blocks += "\n" + _data_block("collie-plurals", catalogue.plurals())
    page = _read("index.html").decode("utf-8")
    page = page.replace("{{lang}}", html.escape(catalogue.lang))
    page = page.replace("{{title}}", html.escape(catalogue["web_title"]))
    return page.replace(STRINGS_MARK, blocks).encode("utf-8")


def manifest(catalogue: Catalogue) -> bytes:
    """The web app manifest: the page installs as an app (a PWA) named from the catalogue."""
    body = {
        "name": catalogue["web_title"],
        "short_name": catalogue["web_title"],
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "icons": [{"src": "/web/icon.svg", "sizes": "any", "type": "image/svg+xml"}],
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def add_web_routes(app: web.Application) -> None:
    """Serve ``/`` and ``/web/{name}``; both need no token (the page asks for it). The page
    is built once per language, on its first request."""
    pages: dict[str, bytes] = {}
    files = {name: _read(name) for name in FILES}

    async def index(request: web.Request) -> web.Response:
        catalogue = words(request)
        page = pages.get(catalogue.lang)
        if page is None:
            page = pages[catalogue.lang] = index_html(catalogue)
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=HEADERS)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == MANIFEST:
            kind = "application/manifest+json"
            installable = manifest(words(request))
            return web.Response(body=installable, content_type=kind, headers=HEADERS)
        body = files.get(name)
        if body is None:
            raise http_error(web.HTTPNotFound, "not_found", "no such file")
        return web.Response(body=body, content_type=FILES[name], headers=HEADERS)

    app.router.add_get("/", index)
    app.router.add_get("/web/{name}", asset)


def is_web_path(path: str) -> bool:
    """A path of the page's own files (served without a token)."""
    return path == "/" or path.startswith("/web/")
