"""Helper process: many wire-v1 agents in one process, each on its own Unix socket, speaking
wire/SPEC.md on bare asyncio (no aiohttp, no SQLite): a cheap fleet, so that a bench of
thousands of agents measures the gateway, not the agents' own start.

Each agent answers as an SDK agent of ``_agents.py`` would at rest: the same hello
(``runtime`` "bench", feature ``history``), ``GET /conversations?state=open`` with its ``open``
idle conversations (as ``seed_agent_db`` writes them) and ``Wire-Event-Id``, an empty closed
list, ``GET /conversations/{id}``, no starters, and ``GET /events`` with replay after
``Last-Event-ID`` (a ``reset`` when it cannot) and a ``: ping`` every 15 s. Asks it raises
(``ask_once``) are answerable (``POST /asks/{id}/reply``, recorded by request id, §11); any
other command is ``refused``. It keeps its log in memory (the last 1,000 events), so it
stands for an agent that never restarts.

Run by the benches: ``python bench/_wirefleet.py SPEC.json``, the spec as ``_agents.py``'s
(``name``, ``socket``, ``open``; other keys ignored). First line out:
``{"ready": {name: {"url": ..., "socket": ..., "extra": []}}, "seconds": s}``. Commands:
``ask_once`` (``agent``, ``after``: the agent decides it that many seconds later),
``quit``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import sys
import time
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, unquote

import msgspec

from bench._common import HELPER_MAX_SECONDS, Json, say, serve_commands
from wire.answers import check_answer
from wire.errors import RemoteWireError
from wire.messages import (
    MAX_BODY,
    AgentEvent,
    Ask,
    AskRaised,
    AskResolved,
    Conversation,
    ConversationPage,
    ConversationUpdated,
    ErrorBody,
    Hello,
    Option,
    Reply,
    ReplyResult,
    Reset,
    StarterList,
    decode,
    encode,
)
from wire.sse import COMMENT_PING, encode_event

HELLO: Final = encode(
    Hello(wire=1, runtime="bench", subtitle="a benchmark agent", features=["history"])
)
KEEP: Final = 1000  # events kept for replay (wire/SPEC.md §10: at least the last 1000)
PING: Final = 15.0  # seconds between pings (§9)
MAX_HEAD: Final = 64 * 1024
_RESET: Final = encode_event(None, "reset", encode(Reset()).decode())
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    413: "Too Large",
}
_STREAM_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def response(status: int, body: bytes, event_id: int | None = None) -> bytes:
    """One whole HTTP/1.1 answer with a JSON body (keep-alive)."""
    extra = f"Wire-Event-Id: {event_id}\r\n" if event_id is not None else ""
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n{extra}\r\n"
    )
    return head.encode() + body


def error(status: int, code: str, message: str) -> bytes:
    return response(status, encode(ErrorBody(error=code, message=message)))


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class FleetAgent:
    """One agent: its open conversations, its event log, its open streams and its asks."""

    def __init__(self, name: str, open_count: int, now: datetime) -> None:
        self.name = name
        self.conversations = {
            c.id: c
            for c in (
                Conversation(
                    id=f"c{i:06d}",
                    title=f"Fix the flaky test in module {i % 977}: retry on timeout",
                    subtitle=f"branch feature/bench-{i}",
                    state="idle",
                    updated_at=now - timedelta(seconds=i),
                    turn=3,
                    workspace="~/src/bench",
                )
                for i in range(open_count)
            )
        }
        self.log: deque[tuple[int, bytes]] = deque(maxlen=KEEP)
        self.last_id = 0
        self.streams: set[asyncio.Transport] = set()
        self.asks: dict[str, Ask] = {}
        self.replies: dict[str, tuple[bytes, bytes]] = {}  # request id: (canonical, answer)
        self._page: bytes | None = None
        self.raised = 0

    def page(self) -> bytes:
        """``GET /conversations?state=open``, encoded once per change."""
        if self._page is None:
            convs = list(self.conversations.values())
            self._page = response(200, encode(ConversationPage(conversations=convs)), self.last_id)
        return self._page

    def emit(self, *events: AgentEvent) -> None:
        """Log each event and send it to every open stream."""
        frames = []
        for event in events:
            self.last_id += 1
            data = encode(event).decode()
            frame = encode_event(self.last_id, str(event.__struct_config__.tag), data)
            self.log.append((self.last_id, frame))
            frames.append(frame)
            if isinstance(event, ConversationUpdated):
                self.conversations[event.conversation.id] = event.conversation
        self._page = None
        out = chunk(b"".join(frames))
        for transport in self.streams:
            transport.write(out)

    def replay(self, raw: str | None) -> bytes:
        """What a new stream sends first: the events after ``raw``, or ``reset`` (§10)."""
        if raw is None:
            return b""
        raw = raw.strip()
        first = self.log[0][0] - 1 if self.log else self.last_id
        if raw.isascii() and raw.isdigit() and first <= int(raw) <= self.last_id:
            return b"".join(frame for event_id, frame in self.log if event_id > int(raw))
        return _RESET

    def raise_ask(self, loop: asyncio.AbstractEventLoop, after: float) -> str:
        """A choice ask on the first conversation; the agent decides it ``after`` s later."""
        conv = next(iter(self.conversations.values()))
        self.raised += 1
        now = datetime.now(UTC)
        ask = Ask(
            id=f"ask-{self.name}-{self.raised}",
            conversation=conv.id,
            kind="choice",
            title="Which branch should I merge?",
            options=[Option(id="main", label="main"), Option(id="next", label="next")],
            raised_at=now,
        )
        self.asks[ask.id] = ask
        waiting = _with(conv, asks=[*conv.asks, ask], state="waiting", updated_at=now)
        self.emit(AskRaised(ask=ask), ConversationUpdated(conversation=waiting))
        loop.call_later(after, self.resolve, ask.id, "decided", None)
        return ask.id

    def resolve(self, ask_id: str, how: str, request_id: str | None) -> None:
        ask = self.asks.pop(ask_id, None)
        if ask is None:
            return
        conv = self.conversations[ask.conversation]
        asks = [a for a in conv.asks if a.id != ask_id]
        now = datetime.now(UTC)
        state = "waiting" if asks else "idle"
        resolved = AskResolved(
            ask_id=ask_id, conversation_id=conv.id, how=how, request_id=request_id, at=now
        )
        updated = _with(conv, asks=asks, state=state, updated_at=now)
        self.emit(resolved, ConversationUpdated(conversation=updated))

    def reply(self, ask_id: str, body: bytes) -> bytes:
        """``POST /asks/{id}/reply`` (§12.1, recorded by request id as §11 says)."""
        try:
            reply = decode(body, Reply)
        except RemoteWireError as exc:
            return error(400, "bad_request", str(exc))
        canonical = encode({"ask": ask_id, "body": reply})
        kept = self.replies.get(reply.request_id)
        if kept is not None:
            if kept[0] != canonical:
                return error(409, "request_id_reused", "That request id was used already.")
            return kept[1]
        ask = self.asks.get(ask_id)
        if ask is None:
            result = ReplyResult(outcome="not_open")
        elif reply.version != ask.version:
            result = ReplyResult(outcome="changed")
        elif (problem := check_answer(ask, reply.answer)) is not None:
            return error(400, "bad_request", problem)
        else:
            result = ReplyResult(outcome="accepted")
        answer = response(200, encode(result))
        self.replies[reply.request_id] = (canonical, answer)
        if result.outcome == "accepted":
            self.resolve(ask_id, "answered", reply.request_id)
        return answer


def _with(conv: Conversation, **changes: Any) -> Conversation:
    return msgspec.structs.replace(conv, **changes)


class Connection(asyncio.Protocol):
    """One client connection to one agent: HTTP/1.1 requests one after another, until one of
    them is ``GET /events`` (then the connection is that stream)."""

    def __init__(self, agent: FleetAgent) -> None:
        self.agent = agent
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.agent.streams.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.streaming:
            return  # a stream's client sends nothing more that matters
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0 and not self.streaming:
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, _, rest = lines[0].partition(" ")
            target = rest.rpartition(" ")[0]
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            size = int(headers.get("content-length", "0") or 0)
            if size > MAX_BODY:
                self._send(error(413, "bad_request", f"The body is over {MAX_BODY} bytes."))
                self._close()
                return
            if len(self.buffer) < end + 4 + size:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + size])
            del self.buffer[: end + 4 + size]
            self._send(self.answer(method, target, headers, body))
            if headers.get("connection", "").lower() == "close" and not self.streaming:
                self._close()
                return
        if len(self.buffer) > MAX_HEAD:
            self._close()

    def _send(self, data: bytes) -> None:
        if self.transport is not None and data:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        """The answer to one request (wire/SPEC.md §6)."""
        path, _, query = target.partition("?")
        parts = [unquote(p) for p in path.split("/")[1:]]
        agent = self.agent
        if method == "GET":
            if parts == ["hello"]:
                return response(200, HELLO)
            if parts == ["events"]:
                return self._stream(headers.get("last-event-id"))
            if parts == ["conversations"]:
                return self._list(parse_qs(query))
            if len(parts) == 2 and parts[0] == "conversations":
                conv = agent.conversations.get(parts[1])
                if conv is None:
                    return error(404, "not_found", "No such conversation.")
                whole = _with(conv, items=[])
                return response(200, encode(whole), agent.last_id)
            if parts == ["starters"]:
                return response(200, encode(StarterList()))
        elif method == "POST":
            if len(parts) == 3 and parts[0] == "asks" and parts[2] == "reply":
                return agent.reply(parts[1], body)
            if parts[:1] == ["conversations"] and len(parts) in (1, 3, 4):
                refused = {"outcome": "refused", "reason": "A benchmark agent takes no commands."}
                return response(200, encode(refused))
        return error(404, "not_found", "No such path.")

    def _list(self, query: dict[str, list[str]]) -> bytes:
        state = query.get("state", [""])[-1]
        if state == "open":
            return self.agent.page()
        if state != "closed":
            return error(400, "bad_request", "state is open or closed.")
        limit = query.get("limit", ["100"])[-1]
        if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= 100):
            return error(400, "bad_request", "limit is a number from 1 to 100.")
        if query.get("cursor", [""])[-1]:
            return error(400, "bad_request", "Unknown cursor.")
        return response(200, encode(ConversationPage()), self.agent.last_id)

    def _stream(self, last_event_id: str | None) -> bytes:
        assert self.transport is not None
        self.streaming = True
        self.agent.streams.add(self.transport)
        loop = asyncio.get_running_loop()
        loop.call_later(PING, ping, loop, self.agent, self.transport)
        first = self.agent.replay(last_event_id)
        return _STREAM_HEAD + (chunk(first) if first else b"")


def listen(path: Path) -> socket.socket:
    """A Unix socket at ``path``, mode 0600 before it listens (as the SDK's)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    sock.setblocking(False)
    return sock


_PING_CHUNK: Final = chunk(COMMENT_PING)


def ping(loop: asyncio.AbstractEventLoop, agent: FleetAgent, transport: asyncio.Transport) -> None:
    """A ``: ping`` every ``PING`` seconds on one stream, counted from its start as an SDK
    agent's (§9): the streams of a fleet ping at their own times, not all at once."""
    if transport in agent.streams and not transport.is_closing():
        transport.write(_PING_CHUNK)
        loop.call_later(PING, ping, loop, agent, transport)


async def serve(agent: FleetAgent, path: Path) -> asyncio.Server:
    """Serve ``agent`` on a new Unix socket at ``path``."""
    loop = asyncio.get_running_loop()
    factory = functools.partial(Connection, agent)
    return await loop.create_unix_server(factory, sock=listen(path), backlog=64)


def stop(servers: list[asyncio.Server], agents: Iterable[FleetAgent]) -> None:
    """Stop listening and end every open stream."""
    for server in servers:
        server.close()
    for agent in agents:
        for transport in list(agent.streams):
            transport.close()


async def main(spec: Json) -> None:
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    now = datetime.now(UTC)
    agents: dict[str, FleetAgent] = {}
    servers: list[asyncio.Server] = []
    where: Json = {}
    try:
        for s in spec["agents"]:
            agent = agents[s["name"]] = FleetAgent(s["name"], int(s.get("open", 0)), now)
            path = Path(s["socket"])
            servers.append(await serve(agent, path))
            where[agent.name] = {"url": "http://agent", "socket": str(path), "extra": []}
        say({"ready": where, "seconds": time.perf_counter() - started})

        async def ask_once(command: Json) -> Json:
            agent = agents[command["agent"]]
            return {"ask": agent.raise_ask(loop, float(command.get("after", 0.5)))}

        await serve_commands(
            {"ask_once": ask_once}, float(spec.get("max_seconds", HELPER_MAX_SECONDS))
        )
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stop(servers, agents.values())


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
