"""Agent links: one HTTP client and one follow loop per durable agent.

A link connects, reads the hello, reads the open conversations, follows the event stream and
reconnects with capped, jittered backoff. Every read has a timeout and a size limit; whatever
an agent sends, its link lands in a clear state and no other link notices.
``OSError``, ``aiohttp.ClientError`` and timeouts become ``AgentUnreachable`` in one place
(``AgentClient._call``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import aiohttp

from collie_gateway.core.mirror import AgentMirror, Change, LinkState, apply_event
from collie_gateway.core.reconnect import LinkTiming, Reconnect
from collie_gateway.errors import AgentRejected, AgentUnreachable
from collie_gateway.services.agenthttp import Broken, Late, UnixGets
from collie_gateway.services.tasks import cancelled
from collie_gateway.sources import Source
from wire.body import read_limited
from wire.errors import RemoteWireError, UnknownEvent
from wire.messages import (
    MAX_BODY,
    MAX_EVENT,
    WIRE_VERSION,
    AgentEvent,
    ConversationPage,
    ErrorBody,
    Hello,
    ItemDelta,
    Reset,
    VersionProbe,
    decode,
    decode_event,
    encode,
)
from wire.sse import SSEParser

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fetched:
    """A decoded answer and its ``Wire-Event-Id`` header."""

    status: int
    body: bytes
    event_id: str | None


class EventStream(Protocol):
    """``GET /events`` held open: its body as it arrives, and the transport under it."""

    transport: asyncio.Transport | None

    def chunks(self) -> AsyncIterator[bytes]:
        """Each batch of bytes as it arrives."""
        ...


class _AiohttpStream:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        # The transport itself (asyncio's), not aiohttp's protocol, whose flow control
        # asserts on a response that just ended.
        self.transport = resp.connection.transport if resp.connection is not None else None

    def chunks(self) -> AsyncIterator[bytes]:
        return self.resp.content.iter_any()


class AgentClient:
    """HTTP to one agent over its Unix socket or URL; never sends a token in the clear log.

    On a Unix socket the GETs (the link's hello, snapshots and event stream, the chats'
    reads) go over :class:`~collie_gateway.services.agenthttp.UnixGets`, the commands over
    aiohttp's client (made on the first command)."""

    def __init__(self, source: Source, timing: LinkTiming) -> None:
        self.source = source
        self.timing = timing
        self._headers = {"Authorization": f"Bearer {source.token}"} if source.token else {}
        self._gets: UnixGets | None = None
        if source.socket is not None:
            self.base = "http://agent"
            self._gets = UnixGets(str(source.socket), self._headers, timing.connect)
        else:
            self.base = str(source.url)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """aiohttp's session to the agent, made on first use."""
        if self._session is None:
            if self.source.socket is not None:
                connector: aiohttp.BaseConnector = aiohttp.UnixConnector(
                    path=str(self.source.socket)
                )
            else:
                connector = aiohttp.TCPConnector(limit=8)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.timing.connect, sock_connect=self.timing.connect
                ),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # an agent sets no cookie: none is kept
            )
        return self._session

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._gets is not None:
            self._gets.close()
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str, *, limit: int = MAX_BODY) -> Fetched:
        """GET ``path``; the body is read up to ``limit`` bytes.

        Raises:
            AgentUnreachable: no answer in time, or the transfer failed.
            BodyTooLarge: the body is over ``limit``.
        """
        if self._gets is None:
            return await self._call("GET", path, None, limit)
        try:
            got = await self._gets.get(path, limit, self.timing.request)
        except Late as exc:
            raise AgentUnreachable(
                f"GET {path}: no answer in time", timed_out=True, midway=exc.midway
            ) from None
        except OSError as exc:
            midway = isinstance(exc, Broken) and exc.midway
            raise AgentUnreachable(
                f"GET {path}: {type(exc).__name__}: {exc}", midway=midway
            ) from None
        return Fetched(got.status, got.body, got.headers.get("wire-event-id"))

    async def post(self, path: str, body: object, *, limit: int = MAX_BODY) -> Fetched:
        """POST ``body`` as JSON to ``path``.

        Raises:
            AgentUnreachable: no answer in time, or the transfer failed (the command may or
                may not have arrived).
            BodyTooLarge: the answer is over ``limit``.
        """
        return await self._call("POST", path, encode(body), limit)

    async def _call(self, method: str, path: str, data: bytes | None, limit: int) -> Fetched:
        timeout = aiohttp.ClientTimeout(total=self.timing.request, connect=self.timing.connect)
        headers = {"Content-Type": "application/json"} if data is not None else None
        midway = False
        try:
            async with self.session.request(
                method, self.base + path, data=data, headers=headers, timeout=timeout
            ) as resp:
                midway = True
                body = await read_limited(resp, limit)
                return Fetched(resp.status, body, resp.headers.get("Wire-Event-Id"))
        except TimeoutError:
            raise AgentUnreachable(
                f"{method} {path}: no answer in time", timed_out=True, midway=midway
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AgentUnreachable(
                f"{method} {path}: {type(exc).__name__}: {exc}", midway=midway
            ) from None

    @contextlib.asynccontextmanager
    async def stream(self, last_event_id: str | None) -> AsyncIterator[EventStream]:
        """Open ``GET /events``; each read times out after ``stream_read`` seconds.

        Raises:
            AgentUnreachable: as :meth:`get`.
            AgentRejected: the agent answered with an error status.
        """
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        try:
            async with self._open_stream(headers) as (status, stream):
                if status != 200:
                    raise AgentRejected(f"GET /events answered {status}", status=status)
                yield stream
        except TimeoutError:
            raise AgentUnreachable("the event stream went silent", timed_out=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AgentUnreachable(f"event stream: {type(exc).__name__}: {exc}") from None

    @contextlib.asynccontextmanager
    async def _open_stream(self, headers: dict[str, str]) -> AsyncIterator[tuple[int, EventStream]]:
        if self._gets is not None:
            read = self.timing.stream_read
            async with self._gets.stream("/events", headers, read) as lean:
                yield lean.status, lean
            return
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timing.connect, sock_read=self.timing.stream_read
        )
        async with self.session.get(
            self.base + "/events", headers=headers, timeout=timeout
        ) as resp:
            yield resp.status, _AiohttpStream(resp)


def error_of(fetched: Fetched) -> AgentRejected:
    """An ``AgentRejected`` for a non-2xx answer, with the agent's code and sentence."""
    try:
        err = decode(fetched.body, ErrorBody, limit=65536)
        return AgentRejected(err.message or err.error, status=fetched.status, code=err.error)
    except RemoteWireError:
        return AgentRejected(f"the agent answered {fetched.status}", status=fetched.status)


def expect(fetched: Fetched, kind: type[T]) -> T:
    """Decode a 2xx answer as ``kind``.

    Raises:
        AgentRejected: a non-2xx status.
        MalformedMessage, BodyTooLarge: the body is not a ``kind``.
    """
    if not 200 <= fetched.status < 300:
        raise error_of(fetched)
    return decode(fetched.body, kind)


class LinkListener(Protocol):
    """What a link tells the gateway."""

    def link_changed(self, mirror: AgentMirror) -> None:
        """The link's state, reason or hello changed."""

    def snapshot_taken(self, mirror: AgentMirror) -> None:
        """The open conversations were read anew (the mirror was replaced whole)."""

    def event_received(self, mirror: AgentMirror, event: AgentEvent, change: Change) -> None:
        """One event arrived and was applied to the mirror."""


class _ResetNeeded(Exception):
    pass


class AgentLink:
    """Follows one agent for as long as the gateway runs."""

    def __init__(
        self,
        source: Source,
        mirror: AgentMirror,
        listener: LinkListener,
        timing: LinkTiming,
        rng: random.Random | None = None,
        gate: asyncio.Semaphore | None = None,
        *,
        resume: bool = False,
    ) -> None:
        """``gate``: shared by the links of one gateway, it bounds how many read their hello
        and open conversations at once (``timing.connecting``); each waits its turn before its
        reads' timeouts start. None: this link waits for no other."""
        self.source = source
        self.resume = resume  # the mirror is current: the first stream resumes after it
        self.mirror = mirror
        self.listener = listener
        self.timing = timing
        self.client = AgentClient(source, timing)
        self._reconnect = Reconnect(timing, time.monotonic, rng)
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.connects = 0
        self._gate = gate or asyncio.Semaphore(1)
        # The hello changed and the listener was not told yet: it is told with the state that
        # follows it (Ready, or why not), once, not twice at every start.
        self._untold = False

    def start(self) -> None:
        """Start following in the background."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"link-{self.source.name}")

    async def close(self) -> None:
        """Stop following and close the client."""
        await cancelled(self._task)
        self._task = None
        await self.client.close()

    def _set(self, state: LinkState, reason: str = "", *, unauthorized: bool = False) -> None:
        if state is LinkState.READY:
            self.ready.set()
        else:
            self.ready.clear()
        mirror = self.mirror
        if (mirror.state, mirror.reason, mirror.unauthorized) == (state, reason, unauthorized):
            if self._untold:
                self._untold = False
                self.listener.link_changed(mirror)
        else:
            # A change of state is said once (a retry's new reason only at DEBUG): back is
            # INFO, anything else is a WARNING, also without -v.
            level = logging.DEBUG
            if mirror.state is not state or mirror.unauthorized != unauthorized:
                level = logging.INFO if state is LinkState.READY else logging.WARNING
            log.log(
                level, "agent %s: %s%s", self.source.name, state.value, reason and ": " + reason
            )
            mirror.state, mirror.reason, mirror.unauthorized = state, reason, unauthorized
            self._untold = False
            self.listener.link_changed(mirror)

    async def _run(self) -> None:
        need_snapshot = not self.resume
        while True:
            try:
                async with self._gate:
                    wire = await self._hello()
                    if wire == WIRE_VERSION and (
                        need_snapshot or self.mirror.last_event_id is None
                    ):
                        await self._snapshot()
                        need_snapshot = False
                if wire != WIRE_VERSION:
                    self._set(LinkState.VERSION_MISMATCH, f"agent speaks wire v{wire}")
                    self._reconnect.clear()
                    await asyncio.sleep(self.timing.version_recheck)
                    need_snapshot = True
                    continue
                self._set(LinkState.READY)
                self._reconnect.following()
                await self._follow()
                # The agent ended the stream cleanly: resume (at once after a stable stream).
                await self._ended()
            except _ResetNeeded:
                need_snapshot = True
                await self._ended()
            except (AgentUnreachable, AgentRejected, RemoteWireError) as exc:
                refused = isinstance(exc, AgentRejected) and exc.status in UNAUTHORIZED
                self._set(LinkState.UNREACHABLE, _reason(exc), unauthorized=refused)
                await asyncio.sleep(self._reconnect.failed())

    async def _ended(self) -> None:
        delay = self._reconnect.ended()
        if delay:
            log.info("agent %s: its event stream ended soon", self.source.name)
            await asyncio.sleep(delay)

    async def _hello(self) -> int:
        fetched = await self.client.get("/hello", limit=65536)
        probe = expect(fetched, VersionProbe)
        if probe.wire == WIRE_VERSION:
            hello = decode(fetched.body, Hello, limit=65536)
        else:
            hello = Hello(wire=probe.wire)
        if hello != self.mirror.hello or probe.wire != self.mirror.wire:
            self.mirror.hello = hello
            self.mirror.wire = probe.wire
            self._untold = True  # told by the ``_set`` that follows every hello
        return probe.wire

    async def _snapshot(self) -> None:
        self.connects += 1
        fetched = await self.client.get("/conversations?state=open")
        page = expect(fetched, ConversationPage)
        self.mirror.replace_all([c for c in page.conversations if c.state != "closed"])
        self.mirror.last_event_id = fetched.event_id or "0"
        self.listener.snapshot_taken(self.mirror)

    async def _follow(self) -> None:
        parser = SSEParser(max_line=MAX_EVENT + 64)
        loop = asyncio.get_running_loop()
        frame = self.timing.busy_read
        async with self.client.stream(self.mirror.last_event_id) as stream:
            transport = stream.transport  # nothing else reads while we wait
            last = 0.0
            resume: asyncio.TimerHandle | None = None
            try:
                async for chunk in stream.chunks():
                    decoded = [(sse.id, self._decode(sse.data)) for sse in parser.feed(chunk)]
                    for event_id, event in coalesce(decoded):
                        self._dispatch(event_id, event)
                    now = loop.time()
                    streaming = any(isinstance(e, ItemDelta) for _, e in decoded)
                    if (
                        streaming
                        and now - last < frame / 4  # several deltas a frame, not one
                        and len(chunk) < BUSY_CHUNK
                        and transport is not None
                    ):
                        # A busy stream of small writes of deltas (a reply streamed token by
                        # token): let a frame's worth gather in the socket, read it in one go
                        # and relay it as one phone event (coalesce), not one wake-up each.
                        # (A backlog comes in big chunks, read at once; other events are not
                        # held back.) A timer resumes reading and the data wakes this task:
                        # one wake-up a frame, not two.
                        transport.pause_reading()
                        if resume is not None:
                            resume.cancel()
                        resume = loop.call_later(frame, transport.resume_reading)
                        now += frame
                    last = now
            except TimeoutError:
                raise AgentUnreachable("the event stream went silent", timed_out=True) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise AgentUnreachable(f"event stream: {type(exc).__name__}: {exc}") from None
            finally:
                if resume is not None:
                    resume.cancel()

    def _decode(self, data: str) -> AgentEvent | None:
        try:
            return decode_event(data.encode())
        except UnknownEvent as exc:
            log.info("agent %s: skipped %s", self.source.name, exc)
            return None

    def _dispatch(self, event_id: str | None, event: AgentEvent | None) -> None:
        if isinstance(event, Reset):
            self.mirror.last_event_id = None
            raise _ResetNeeded
        if event_id is not None:
            self.mirror.last_event_id = event_id
        if event is not None:
            change = apply_event(self.mirror, event)
            self.listener.event_received(self.mirror, event, change)


UNAUTHORIZED = frozenset({401, 403})  # the agent refused the gateway's bearer token (D6)
BUSY_CHUNK = 8192  # ours: a smaller read, soon after another, is of a busy stream


def coalesce(
    events: list[tuple[str | None, AgentEvent | None]],
) -> list[tuple[str | None, AgentEvent | None]]:
    """Merge runs of deltas to one item into one delta (the id of the last), so a streamed
    reply read in one chunk costs one mirror update and one phone event."""
    out: list[tuple[str | None, AgentEvent | None]] = []
    for event_id, event in events:
        if isinstance(event, ItemDelta) and out:
            last_id, last = out[-1]
            if (
                isinstance(last, ItemDelta)
                and last.item_id == event.item_id
                and last.conversation_id == event.conversation_id
            ):
                merged = ItemDelta(
                    conversation_id=event.conversation_id,
                    item_id=event.item_id,
                    text=last.text + event.text,
                )
                out[-1] = (event_id if event_id is not None else last_id, merged)
                continue
        out.append((event_id, event))
    return out


def _reason(exc: Exception) -> str:
    if isinstance(exc, AgentRejected) and exc.status in UNAUTHORIZED:
        return f"the agent refused the gateway's token ({exc.status})"
    if isinstance(exc, RemoteWireError):
        return f"protocol error: {exc}"
    return str(exc)


__all__ = [
    "UNAUTHORIZED",
    "AgentClient",
    "AgentLink",
    "Fetched",
    "LinkListener",
    "error_of",
    "expect",
]
