"""The web companion: the phone's screens as a page served at ``/`` (static files, no build).

The page is built only on the public phone API and its live stream; this module only serves
its files, with a Content-Security-Policy that allows nothing from another host. The
catalogue is embedded in the page as JSON data (not script), so ``--strings`` changes the
page's words and the token prompt has its words before any API call.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Final

from aiohttp import web

from collie_gateway.http.responses import http_error
from collie_gateway.strings import Catalogue

FILES: Final = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "icon.svg": "image/svg+xml",
    "push.js": "text/javascript",  # the Web Push subscription (issue 22)
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


def index_html(catalogue: Catalogue) -> bytes:
    """The page with the catalogue embedded as a JSON data block (``<`` escaped, so no text
    in it can close the block)."""
    data = json.dumps(catalogue.texts(), ensure_ascii=False).replace("<", "\\u003c")
    block = f'<script type="application/json" id="collie-strings">{data}</script>'
    page = _read("index.html").decode("utf-8")
    page = page.replace("{{lang}}", "en").replace("{{title}}", html.escape(catalogue["web_title"]))
    return page.replace(STRINGS_MARK, block).encode("utf-8")


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


def add_web_routes(app: web.Application, catalogue: Catalogue) -> None:
    """Serve ``/`` and ``/web/{name}``; both need no token (the page asks for it)."""
    page = index_html(catalogue)
    files = {name: _read(name) for name in FILES}
    installable = manifest(catalogue)

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=HEADERS)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == MANIFEST:
            kind = "application/manifest+json"
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
