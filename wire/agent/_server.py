"""The HTTP face of an agent: the endpoints of wire/SPEC.md on aiohttp, over a Unix socket
(mode 0600) or TCP. Decode, call the agent, encode; no behaviour of its own.

It knows the agent only as a :class:`ServedAgent` (what the endpoints call), so it imports
nothing of ``_agent.py``: imports run one way, ``_agent`` → ``_server`` → ``_store``."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware

from wire.agent._store import Store
from wire.errors import RemoteWireError
from wire.messages import (
    MAX_BODY,
    Conversation,
    ConversationPage,
    ErrorBody,
    Hello,
    PlainCommand,
    Reply,
    Reset,
    SendMessage,
    StartConversation,
    Starter,
    StarterList,
    TurnCommand,
    decode,
    encode,
)
from wire.sse import COMMENT_PING, encode_event

log = logging.getLogger(__name__)
C = TypeVar("C")


class RequestError(Exception):
    """A command refused with an HTTP error status and an ``ErrorBody`` code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ServedAgent(Protocol):
    """What the endpoints call on an agent: its hello and options, its reads and commands
    (each may raise :class:`RequestError`), and the event log ``GET /events`` reads
    (``Agent`` is the implementation)."""

    hello: Hello
    starters: list[Starter]
    token: str | None
    ping_interval: float
    middlewares: tuple[Middleware, ...]
    _store: Store

    def has(self, feature: str) -> bool: ...

    async def read_open(self) -> tuple[ConversationPage, int]: ...

    async def read_closed(
        self, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[ConversationPage, int]: ...

    async def read_conversation(self, conversation_id: str) -> tuple[Conversation | None, int]: ...

    async def command_start(self, key: bytes, cmd: StartConversation) -> bytes: ...

    async def command_message(
        self, key: bytes, conversation_id: str, msg: SendMessage
    ) -> bytes: ...

    async def command_stop(self, key: bytes, conversation_id: str, cmd: TurnCommand) -> bytes: ...

    async def command_button(
        self, key: bytes, conversation_id: str, button_id: str, cmd: TurnCommand
    ) -> bytes: ...

    async def command_close(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes: ...

    async def command_reopen(
        self, key: bytes, conversation_id: str, cmd: PlainCommand
    ) -> bytes: ...

    async def command_reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes: ...


AGENT: Final[web.AppKey[ServedAgent]] = web.AppKey("agent")
CLOSING: Final = web.AppKey("closing", asyncio.Event)
SHUTDOWN_TIMEOUT: Final = 2.0
MAX_PAGE: Final = 100  # wire/SPEC.md: limit 1..100, default 100
_CODES: Final = {401: "unauthorized", 404: "not_found"}


def _error(status: int, code: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=encode(ErrorBody(error=code, message=message)),
        content_type="application/json",
    )


def _json(body: object, event_id: int | None = None) -> web.Response:
    headers = {"Wire-Event-Id": str(event_id)} if event_id is not None else None
    return web.Response(body=encode(body), content_type="application/json", headers=headers)


def _result(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error answer carries an ``ErrorBody``; nothing the client sends crashes the agent."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except RequestError as exc:
        return _error(exc.status, exc.code, exc.message)
    except RemoteWireError as exc:
        return _error(400, "bad_request", str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, _CODES.get(exc.status, "bad_request"), exc.reason)
    except ConnectionResetError:
        # The client hung up before its request was read: nothing to answer, nothing failed.
        log.info("%s %s: the client hung up", request.method, request.path)
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return _error(500, "internal", "The agent failed to answer.")


@web.middleware
async def _auth(request: web.Request, handler: Any) -> web.StreamResponse:
    token = request.app[AGENT].token
    if token is not None:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, b"Bearer " + token.encode()):
            refusal = _error(401, "unauthorized", "A bearer token is needed.")
            refusal.headers["WWW-Authenticate"] = "Bearer"
            return refusal
    response: web.StreamResponse = await handler(request)
    return response


async def _command(request: web.Request, kind: type[C]) -> tuple[C, bytes]:
    """The decoded body and its canonical key (wire/SPEC.md §11): the route, its decoded path
    segments, and the body as the agent understood it."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(413, "bad_request", f"The body is over {MAX_BODY} bytes.") from None
    command = decode(raw, kind)
    route = request.match_info.route.resource
    canonical = route.canonical if route is not None else request.path
    return command, encode({"route": canonical, "ids": dict(request.match_info), "body": command})


async def _hello(request: web.Request) -> web.Response:
    return _json(request.app[AGENT].hello)


async def _conversations(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    state = request.query.get("state")
    if state == "open":
        page, last = await agent.read_open()
        return _json(page, last)
    if state != "closed":
        raise RequestError(400, "bad_request", "state is open or closed.")
    if not agent.has("history"):
        raise RequestError(404, "no_history", "This agent keeps no history.")
    limit = _limit(request.query.get("limit"))
    cursor = _cursor(request.query.get("cursor"))
    page, last = await agent.read_closed(limit, cursor)
    return _json(page, last)


def _limit(raw: str | None) -> int:
    if raw is None:
        return MAX_PAGE
    if not _decimal(raw) or not 1 <= int(raw) <= MAX_PAGE:
        raise RequestError(400, "bad_request", f"limit is a number from 1 to {MAX_PAGE}.")
    return int(raw)


def _cursor(raw: str | None) -> tuple[int, str] | None:
    if not raw:
        return None
    at, sep, conversation_id = raw.partition(":")
    if not sep or not _decimal(at) or not conversation_id:
        raise RequestError(400, "bad_request", "Unknown cursor.")
    return int(at), conversation_id


async def _conversation(request: web.Request) -> web.Response:
    conv, last = await request.app[AGENT].read_conversation(request.match_info["id"])
    if conv is None:
        raise RequestError(404, "not_found", "No such conversation.")
    return _json(conv, last)


async def _starters(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    return _json(StarterList(starters=agent.starters if agent.has("starters") else []))


# Not in the log, never replayed, and without an id: it does not move the reader (§10).
_RESET: Final = encode_event(None, "reset", encode(Reset()).decode())


def _event_id(raw: str) -> int | None:
    raw = raw.strip()
    return int(raw) if _decimal(raw) else None


def _decimal(raw: str) -> bool:
    """Whether ``raw`` is a non-negative decimal integer in ASCII digits (``str.isdigit``
    alone also takes "²" and "٣")."""
    return raw.isascii() and raw.isdigit()


async def _events(request: web.Request) -> web.StreamResponse:
    """``GET /events``: replay after ``Last-Event-ID`` (or ``reset`` when it cannot), then
    live events, with a ``: ping`` every ``ping_interval`` seconds."""
    agent = request.app[AGENT]
    closing = request.app[CLOSING]
    store = agent._store
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    after = store.last_event_id
    raw = request.headers.get("Last-Event-ID")
    with contextlib.suppress(ConnectionError):
        if raw is not None:
            wanted = _event_id(raw)
            if wanted is not None and store.pruned_through <= wanted <= store.last_event_id:
                after = wanted
            else:
                await response.write(_RESET)
        next_ping = loop.time() + agent.ping_interval
        while not closing.is_set():
            waiter = store.waiter()
            frames = await store.frames_after(after)
            if frames is None:  # this reader fell behind what the log keeps
                after = store.last_event_id
                await response.write(_RESET)
                continue
            if frames:
                await response.write(b"".join(f.sse for f in frames))
                after = frames[-1].id
            now = loop.time()
            if now >= next_ping:
                await response.write(COMMENT_PING)
                next_ping = now + agent.ping_interval
            if frames:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(next_ping - now):
                    await waiter.wait()
    return response


async def _start(request: web.Request) -> web.Response:
    command, key = await _command(request, StartConversation)
    return _result(await request.app[AGENT].command_start(key, command))


async def _messages(request: web.Request) -> web.Response:
    command, key = await _command(request, SendMessage)
    agent = request.app[AGENT]
    return _result(await agent.command_message(key, request.match_info["id"], command))


async def _stop(request: web.Request) -> web.Response:
    command, key = await _command(request, TurnCommand)
    agent = request.app[AGENT]
    return _result(await agent.command_stop(key, request.match_info["id"], command))


async def _button(request: web.Request) -> web.Response:
    command, key = await _command(request, TurnCommand)
    info = request.match_info
    agent = request.app[AGENT]
    return _result(await agent.command_button(key, info["id"], info["button"], command))


async def _close(request: web.Request) -> web.Response:
    command, key = await _command(request, PlainCommand)
    agent = request.app[AGENT]
    return _result(await agent.command_close(key, request.match_info["id"], command))


async def _reopen(request: web.Request) -> web.Response:
    command, key = await _command(request, PlainCommand)
    agent = request.app[AGENT]
    return _result(await agent.command_reopen(key, request.match_info["id"], command))


async def _reply(request: web.Request) -> web.Response:
    command, key = await _command(request, Reply)
    agent = request.app[AGENT]
    return _result(await agent.command_reply(key, request.match_info["id"], command))


async def _no_store(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Cache-Control"] = "no-store"


async def _on_shutdown(app: web.Application) -> None:
    app[CLOSING].set()
    app[AGENT]._store.wake()


def build_app(agent: ServedAgent) -> web.Application:
    """An aiohttp application serving ``agent``'s endpoints."""
    app = web.Application(
        middlewares=[_errors, *agent.middlewares, _auth], client_max_size=MAX_BODY
    )
    app[AGENT] = agent
    app[CLOSING] = asyncio.Event()
    app.on_shutdown.append(_on_shutdown)
    app.on_response_prepare.append(_no_store)
    router = app.router
    router.add_get("/hello", _hello)
    router.add_get("/conversations", _conversations)
    router.add_post("/conversations", _start)
    router.add_get("/conversations/{id}", _conversation)
    router.add_post("/conversations/{id}/messages", _messages)
    router.add_post("/conversations/{id}/stop", _stop)
    router.add_post("/conversations/{id}/buttons/{button}", _button)
    router.add_post("/conversations/{id}/close", _close)
    router.add_post("/conversations/{id}/reopen", _reopen)
    router.add_get("/starters", _starters)
    router.add_get("/events", _events)
    router.add_post("/asks/{id}/reply", _reply)
    return app


class AgentRunner:
    """One listening socket serving an agent; :meth:`close` stops it (the agent stays open)."""

    def __init__(
        self,
        agent: ServedAgent,
        app: web.Application,
        runner: web.AppRunner,
        *,
        url: str,
        socket_path: Path | None = None,
        port: int | None = None,
        inode: int | None = None,
        on_close: Callable[[AgentRunner], None] | None = None,
    ) -> None:
        self.agent = agent
        self.url = url
        """``http://agent`` on a Unix socket (any host will do), else ``http://host:port``."""
        self.socket_path = socket_path
        self.port = port
        self._app = app
        self._runner = runner
        self._inode = inode
        self._on_close = on_close
        self._closed = False

    def __repr__(self) -> str:
        return f"<AgentRunner {self.socket_path or self.url}>"

    async def close(self) -> None:
        """Stop listening, end the event streams, and remove the socket file."""
        if self._closed:
            return
        self._closed = True
        self._app[CLOSING].set()
        self.agent._store.wake()
        await self._runner.cleanup()
        if self._on_close is not None:
            self._on_close(self)
        path = self.socket_path
        if path is not None and self._inode is not None:
            with contextlib.suppress(FileNotFoundError):
                if path.lstat().st_ino == self._inode:
                    path.unlink()


async def _serve(agent: ServedAgent, sock: socket.socket, **kwargs: Any) -> AgentRunner:
    app = build_app(agent)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        sock.close()
        raise
    return AgentRunner(agent, app, runner, **kwargs)


def _bind_unix(path: Path) -> tuple[socket.socket, int]:
    """A socket bound at ``path`` and made 0600 before it listens: until ``listen`` every
    connection is refused, so the moment before ``chmod`` gives nobody access."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise FileExistsError(errno.EEXIST, "not a socket", str(path))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)  # left by a process that died
            else:
                raise OSError(errno.EADDRINUSE, "an agent already listens there", str(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
        sock.setblocking(False)
        return sock, path.lstat().st_ino
    except BaseException:
        sock.close()
        raise


async def serve_unix(
    agent: ServedAgent, path: Path, *, on_close: Callable[[AgentRunner], None] | None = None
) -> AgentRunner:
    """Serve ``agent`` on a Unix socket at ``path`` (mode 0600); ``on_close`` is called when
    the runner closes."""
    sock, inode = _bind_unix(path)
    return await _serve(
        agent, sock, url="http://agent", socket_path=path, inode=inode, on_close=on_close
    )


async def serve_tcp(
    agent: ServedAgent,
    host: str,
    port: int,
    *,
    on_close: Callable[[AgentRunner], None] | None = None,
) -> AgentRunner:
    """Serve ``agent`` on TCP at ``host``:``port`` (0: a free port); ``on_close`` is called
    when the runner closes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    sock.setblocking(False)
    bound = int(sock.getsockname()[1])
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return await _serve(agent, sock, url=f"http://{shown}:{bound}", port=bound, on_close=on_close)
