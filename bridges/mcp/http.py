"""The MCP bridge's HTTP shell: the ``mcp`` package's Streamable HTTP session manager behind
uvicorn on a loopback socket, at ``/mcp``.

Two things the package leaves to its host are done here: a session's end (the client's
``DELETE``, or no request in flight for ``idle`` seconds: a killed client) is reported to the
bridge; and a request in the 2026 stateless era (no session, so no conversation) is answered
``-32022`` naming the handshake versions, so a client falls back to ``initialize``.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Generator
from typing import Any

import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

PATH = "/mcp"
MAX_BODY = 1024 * 1024  # one JSON-RPC message: a permission's arguments fit well within


class _Manager(StreamableHTTPSessionManager):
    """The package's session manager, telling ``ended`` when a session is discarded."""

    def __init__(self, *, ended: Callable[[str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ended = ended

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        known = session_id in self._server_instances
        await super()._discard_session(session_id, transport)
        if known:
            self._ended(session_id)


class _HandshakeOnly:
    """Answer a request in a protocol version without a session with ``-32022``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                await _refuse(version, send)
                return
        await self.app(scope, receive, send)


async def _refuse(version: str, send: Send) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": f"Protocol version {version} is not served here: use initialize",
                "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
            },
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def app(server: Server[Any], *, idle: float, ended: Callable[[str], None]) -> ASGIApp:
    """The ASGI app serving ``server`` at ``/mcp`` (loopback hosts only: DNS rebinding)."""
    manager = _Manager(
        ended=ended,
        app=server,
        session_idle_timeout=idle,
        max_request_body_size=MAX_BODY,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )
    routes = [Route(PATH, endpoint=StreamableHTTPASGIApp(manager))]
    return _HandshakeOnly(Starlette(routes=routes, lifespan=lambda _: manager.run()))


class Uvicorn(uvicorn.Server):
    """uvicorn that leaves signals to its host."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def server(asgi: ASGIApp) -> Uvicorn:
    """uvicorn for ``asgi``, quiet, closing open streams within a second on shutdown."""
    config = uvicorn.Config(
        asgi, log_level="warning", lifespan="on", timeout_graceful_shutdown=1, access_log=False
    )
    return Uvicorn(config)
