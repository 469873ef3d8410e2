"""GETs to an agent on its Unix socket on a bare asyncio protocol: the link's hello, its
snapshots, its event stream and the reads of chats, each about a third of the CPU of
aiohttp's client (thousands of links start at once: docs/benchmarks.md, sizing).

HTTP/1.1 as wire/SPEC.md §1 uses it: keep-alive, a body framed by ``Content-Length``, chunked
or read to the end; no redirect, compression, proxy or TLS (a Unix socket has none). Errors
are as aiohttp's would be: the connection failing or the answer broken is an ``OSError`` (a
``ConnectionError``), a body over its limit ``BodyTooLarge``; the caller maps them and
times out (``AgentClient``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from wire.errors import BodyTooLarge

MAX_HEAD: Final = 64 * 1024  # ours: the status line and headers of one answer
MAX_CHUNK_LINE: Final = 1024  # ours: a chunk's size line (and each trailer line)
HIGH_WATER: Final = 256 * 1024  # ours: bytes received and not taken before reading pauses
IDLE_KEPT: Final = 1  # ours: a connection kept open between two GETs (the stream takes it)


class Broken(ConnectionError):
    """The agent's answer is not HTTP/1.1 as it must be, or it hung up in the middle;
    ``midway``: after its answer began."""

    def __init__(self, message: str, *, midway: bool = False) -> None:
        super().__init__(message)
        self.midway = midway


class Late(TimeoutError):
    """No whole answer in time; ``midway``: its answer began."""

    def __init__(self, *, midway: bool) -> None:
        super().__init__("no answer in time")
        self.midway = midway


class CannotConnect(ConnectionError):
    """No connection to the agent's socket (none listens there, or it refused)."""


class _Part(enum.Enum):
    HEAD = enum.auto()
    LENGTH = enum.auto()
    CHUNK_SIZE = enum.auto()
    CHUNK_DATA = enum.auto()
    CHUNK_END = enum.auto()
    TRAILERS = enum.auto()
    TO_EOF = enum.auto()
    DONE = enum.auto()


class Answer(asyncio.Protocol):
    """One connection; each answer on it parsed as it arrives, its body kept until taken."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.part = _Part.DONE
        self.status = 0
        self.headers: dict[str, str] = {}
        self.declared: int | None = None  # Content-Length
        self.body: list[bytes] = []
        self.pending = 0  # bytes in ``body``
        self.received = 0  # body bytes of this answer so far
        self.left = 0  # of the current length or chunk
        self.keep_alive = True
        self.closed = False
        self.error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        # Reading pauses while this much is received and not taken (the event stream); a
        # GET's body is bounded by its limit instead.
        self.high_water: int | None = None

    # --- asyncio's side ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.part is _Part.DONE:  # nothing asked: the agent broke keep-alive
            self.keep_alive = False
            return
        self.buffer += data
        try:
            self._parse()
        except Broken as exc:
            exc.midway = self.status != 0
            self._fail(exc)
        high = self.high_water
        if high is not None and self.pending > high and self.transport and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        if self.part is _Part.TO_EOF:
            self.part = _Part.DONE
        self.closed = True
        self.keep_alive = False
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.keep_alive = False
        if self.part is _Part.TO_EOF and exc is None:
            self.part = _Part.DONE
        elif self.part is not _Part.DONE and self.error is None:
            said = f"the agent hung up: {exc}" if exc else "the agent hung up"
            self.error = Broken(said, midway=self.status != 0)
        self._wake()

    # --- the reader's side ---

    def begin(self, request: bytes) -> None:
        """Send one request; its answer is parsed from now."""
        assert self.transport is not None
        self.part, self.status, self.headers, self.declared = _Part.HEAD, 0, {}, None
        self.body, self.pending, self.received, self.left = [], 0, 0, 0
        self.transport.write(request)

    def take(self) -> bytes:
        """The body bytes received and not taken yet."""
        data = b"".join(self.body) if len(self.body) != 1 else self.body[0]
        self.body, self.pending = [], 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def wait(self) -> None:
        """Until more of the answer arrives, it ends, or the connection does."""
        if self.error is not None:
            raise self.error
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    @property
    def done(self) -> bool:
        return self.part is _Part.DONE

    @property
    def reusable(self) -> bool:
        """Whether another request may go on this connection."""
        return self.done and self.keep_alive and not self.closed and not self.buffer

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self.error = exc
        self.keep_alive = False
        self.close()

    # --- the parser ---

    def _parse(self) -> None:
        buf = self.buffer
        while buf:
            part = self.part
            if part is _Part.HEAD:
                if not self._head():
                    return
            elif part is _Part.LENGTH or part is _Part.CHUNK_DATA:
                self._keep(min(self.left, len(buf)))
                if self.left == 0:
                    self.part = _Part.DONE if part is _Part.LENGTH else _Part.CHUNK_END
            elif part is _Part.TO_EOF:
                self._keep(len(buf))
            elif part is _Part.CHUNK_END:
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise Broken("a chunk does not end with CRLF")
                del buf[:2]
                self.part = _Part.CHUNK_SIZE
            elif part is _Part.CHUNK_SIZE or part is _Part.TRAILERS:
                line = self._line()
                if line is None:
                    return
                if part is _Part.TRAILERS:
                    if not line:
                        self.part = _Part.DONE
                    continue
                self.left = _chunk_size(line)
                self.part = _Part.CHUNK_DATA if self.left else _Part.TRAILERS
            else:  # DONE: what follows belongs to no request
                self.keep_alive = False
                return

    def _line(self) -> bytes | None:
        end = self.buffer.find(b"\r\n")
        if end < 0:
            if len(self.buffer) > MAX_CHUNK_LINE:
                raise Broken("a chunk line is too long")
            return None
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    def _keep(self, n: int) -> None:
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        self.body.append(data)
        self.pending += n
        self.received += n
        if self.part is not _Part.TO_EOF:
            self.left -= n

    def _head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise Broken(f"the answer's head is over {MAX_HEAD} bytes")
            return False
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not (code.isascii() and code.isdigit()):
            raise Broken(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise Broken("a header line without a colon")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim answer: the real one follows
            return True
        self.status, self.headers = status, headers
        self.keep_alive = version == "HTTP/1.1" and headers.get("connection", "") != "close"
        self._framing(headers, status)
        return True

    def _framing(self, headers: dict[str, str], status: int) -> None:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.part = _Part.CHUNK_SIZE
        elif "content-length" in headers:
            raw = headers["content-length"]
            if not (raw.isascii() and raw.isdigit()):
                raise Broken(f"a Content-Length of {raw[:40]!r}")
            self.declared = self.left = int(raw)
            self.part = _Part.LENGTH if self.left else _Part.DONE
        elif status in (204, 304):
            self.part = _Part.DONE
        else:
            self.part = _Part.TO_EOF
            self.keep_alive = False


def _chunk_size(line: bytes) -> int:
    digits = line.split(b";", 1)[0].strip()
    try:
        size = int(digits, 16)
    except ValueError:
        raise Broken(f"a chunk size of {digits[:20]!r}") from None
    if size < 0:
        raise Broken("a negative chunk size")
    return size


@dataclass(frozen=True, slots=True)
class Got:
    """An answer read whole."""

    status: int
    body: bytes
    headers: dict[str, str]


class UnixGets:
    """GETs to one agent's Unix socket, keeping up to ``IDLE_KEPT`` connections open."""

    def __init__(self, path: str, headers: dict[str, str], connect: float) -> None:
        self.path = path
        self.connect = connect
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        self._idle: list[Answer] = []

    def _request(self, path: str, headers: dict[str, str] | None) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = f"GET {path} HTTP/1.1\r\nHost: agent\r\n{extra}"
        return head.encode("latin-1") + self._extra + b"\r\n"

    async def _connection(self) -> tuple[Answer, bool]:
        """An idle connection (True) or a new one (False)."""
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect):
                _, conn = await loop.create_unix_connection(Answer, self.path)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise CannotConnect(f"cannot connect to {self.path}: {why}") from None
        return conn, False

    def _release(self, conn: Answer) -> None:
        if conn.reusable and len(self._idle) < IDLE_KEPT:
            self._idle.append(conn)
        else:
            conn.close()

    async def get(self, path: str, limit: int, within: float) -> Got:
        """``GET path``, its body read whole within ``limit`` bytes and ``within`` seconds.

        Raises:
            Late: no whole answer in time.
            OSError: the connection failed or the answer is not HTTP (``Broken``).
            BodyTooLarge: the declared or actual body is over ``limit``.
        """
        request = self._request(path, None)
        conn: Answer | None = None
        try:
            async with asyncio.timeout(within):
                for attempt in (1, 2):
                    conn, reused = await self._connection()
                    try:
                        return await self._read(conn, request, limit)
                    except Broken:
                        # A kept connection the agent closed meanwhile: once more, anew.
                        if not (reused and attempt == 1 and conn.status == 0):
                            raise
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise Late(midway=conn is not None and conn.status != 0) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, conn: Answer, request: bytes, limit: int) -> Got:
        try:
            conn.begin(request)
            while not conn.done:
                if conn.declared is not None and conn.declared > limit:
                    raise BodyTooLarge(
                        f"body of {conn.declared} bytes is over the limit of {limit}"
                    )
                if conn.received > limit:
                    raise BodyTooLarge(f"body over the limit of {limit} bytes")
                await conn.wait()
            if conn.received > limit:
                raise BodyTooLarge(f"body over the limit of {limit} bytes")
        except BaseException:
            conn.close()
            raise
        got = Got(conn.status, conn.take(), conn.headers)
        self._release(conn)
        return got

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, headers: dict[str, str], read_timeout: float
    ) -> AsyncIterator[Stream]:
        """``GET path`` held open: the answer's head, then its body as it comes.

        Raises:
            OSError: as :meth:`get`.
            TimeoutError: the head did not come within ``read_timeout``.
        """
        conn, _ = await self._connection()
        conn.high_water = HIGH_WATER
        try:
            conn.begin(self._request(path, headers))
            async with asyncio.timeout(read_timeout):
                while conn.status == 0 and not conn.done:
                    await conn.wait()
            yield Stream(conn, read_timeout)
        finally:
            conn.close()

    def close(self) -> None:
        """Close the connections kept."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class Stream:
    """An answer read as it comes (the event stream)."""

    def __init__(self, conn: Answer, read_timeout: float) -> None:
        self._conn = conn
        self._timeout = read_timeout
        self.status = conn.status
        self.transport = conn.transport

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each batch of body bytes as it arrives; ends with the body.

        Raises:
            TimeoutError: nothing arrived for ``read_timeout`` seconds.
            OSError: the connection failed or the body is broken.
        """
        conn = self._conn
        while True:
            if conn.pending:
                yield conn.take()
                continue
            if conn.done:
                return
            async with asyncio.timeout(self._timeout):
                await conn.wait()
