"""The links' GETs on a Unix socket (``services/agenthttp.py``): answers framed every way
HTTP/1.1 frames them, fed whole and byte by byte; keep-alive; and agents that break the
protocol, hang up or answer too much."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.errors import AgentUnreachable
from collie_gateway.services.agenthttp import Answer, Broken, Late, UnixGets
from collie_gateway.services.links import AgentClient
from collie_gateway.sources import Source
from wire.errors import BodyTooLarge

BODY = b'{"wire":1,"runtime":"desk"}'
FRAMINGS = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n" + BODY,
    "chunked": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\n" + BODY[:5] + b"\r\n16\r\n" + BODY[5:] + b"\r\n0\r\nX-Trailer: t\r\n\r\n"
    ),
    "interim first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n" + BODY
    ),
}


class Wire(asyncio.Transport):
    """What ``Answer`` writes to and closes, in memory (the byte-by-byte tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def fed(raw: bytes, *, step: int) -> Answer:
    answer = Answer()
    answer.connection_made(Wire())
    answer.begin(b"GET /hello HTTP/1.1\r\n\r\n")
    for i in range(0, len(raw), step):
        answer.data_received(raw[i : i + step])
    return answer


@pytest.mark.parametrize("step", [1, 7, 10_000])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_each_framing_whole_and_byte_by_byte(framing: str, step: int) -> None:
    answer = fed(FRAMINGS[framing], step=step)
    assert answer.done
    assert answer.error is None
    assert answer.status == 200
    assert answer.take() == BODY
    assert answer.reusable


def test_a_body_to_the_end_of_the_connection() -> None:
    answer = fed(b"HTTP/1.1 200 OK\r\n\r\n" + BODY, step=3)
    assert answer.received == len(BODY)
    answer.eof_received()  # it ends only with the connection
    assert answer.done
    assert answer.take() == BODY
    assert not answer.reusable


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 70_000,
    ],
    ids=["not http", "status", "header", "length", "chunk size", "chunk end", "long head"],
)
def test_a_broken_answer_is_an_error_and_closes_the_connection(raw: bytes) -> None:
    answer = fed(raw, step=1000)
    assert isinstance(answer.error, Broken)
    assert answer.transport is not None
    assert answer.transport.is_closing()
    assert not answer.reusable


@contextlib.asynccontextmanager
async def agent(
    tmp: Path, reply: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
) -> AsyncIterator[tuple[Path, list[int]]]:
    """A Unix socket served by ``reply`` (one call per connection); yields its path and a
    list that counts the connections."""
    path = tmp / "agent.sock"
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await reply(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(serve, path=str(path))
    try:
        yield path, connections
    finally:
        server.close()
        await server.wait_closed()


def answers(*bodies: bytes, then_close: bool = False) -> Callable[..., Awaitable[None]]:
    """Answer each request with the next body (Content-Length), then wait or hang up."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in bodies:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        if not then_close:
            await reader.read()

    return reply


async def test_keep_alive_one_connection_for_several_gets(tmp_path: Path) -> None:
    async with agent(tmp_path, answers(b"{}", b"[]", b"{}")) as (path, connections):
        gets = UnixGets(str(path), {}, connect=1.0)
        bodies = [(await gets.get("/x", 100, within=2.0)).body for _ in range(3)]
        gets.close()
    assert bodies == [b"{}", b"[]", b"{}"]
    assert len(connections) == 1


async def test_a_kept_connection_the_agent_closed_is_tried_again_on_a_new_one(
    tmp_path: Path,
) -> None:
    async with agent(tmp_path, answers(b"{}", then_close=True)) as (path, connections):
        gets = UnixGets(str(path), {}, connect=1.0)
        first = await gets.get("/x", 100, within=2.0)
        await asyncio.sleep(0.05)  # the agent has hung up the kept connection
        second = await gets.get("/x", 100, within=2.0)
        gets.close()
    assert (first.body, second.body) == (b"{}", b"{}")
    assert len(connections) == 2


def head_then(raw: bytes, *, hang: bool) -> Callable[..., Awaitable[None]]:
    """Answer the first request with ``raw``, then wait (``hang``) or hang up."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await (reader.read() if hang else writer.drain())

    return reply


async def failure(tmp: Path, raw: bytes, *, hang: bool, within: float = 2.0) -> Exception:
    """What ``UnixGets.get`` raises against an agent answering ``raw``."""
    async with agent(tmp, head_then(raw, hang=hang)) as (path, _):
        gets = UnixGets(str(path), {}, connect=1.0)
        try:
            await gets.get("/x", 1000, within=within)
        except (OSError, TimeoutError, BodyTooLarge) as exc:
            return exc
        finally:
            gets.close()
    raise AssertionError("the GET did not fail")


async def test_a_body_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n{"
    exc = await failure(tmp_path, raw, hang=True)
    assert isinstance(exc, BodyTooLarge)
    assert "over the limit" in str(exc)


async def test_an_answer_cut_midway_says_so(tmp_path: Path) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"
    exc = await failure(tmp_path, raw, hang=False)
    assert isinstance(exc, Broken)
    assert exc.midway


async def test_no_answer_in_time_is_late(tmp_path: Path) -> None:
    exc = await failure(tmp_path, b"", hang=True, within=0.2)
    assert isinstance(exc, Late)
    assert not exc.midway


async def test_the_client_names_the_socket_nobody_serves(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sock"
    client = AgentClient(Source(name="desk", socket=missing), LinkTiming(request=1.0))
    with pytest.raises(AgentUnreachable, match=str(missing)):
        await client.get("/hello")
    await client.close()


async def test_an_event_stream_comes_in_batches_and_goes_silent(tmp_path: Path) -> None:
    async def events(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        assert b"Last-Event-ID: 7\r\n" in request
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for line in (b": ping\n\n", b"id: 8\ndata: {}\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
            await writer.drain()
            await asyncio.sleep(0.02)
        await reader.read()

    timing = LinkTiming(stream_read=0.3)
    async with agent(tmp_path, events) as (path, _):
        client = AgentClient(Source(name="desk", socket=path), timing)
        got: list[bytes] = []
        with pytest.raises(AgentUnreachable, match="went silent"):
            await read_all(client, got)
        await client.close()
    assert b"".join(got) == b": ping\n\nid: 8\ndata: {}\n\n"


async def read_all(client: AgentClient, into: list[bytes]) -> None:
    async with client.stream("7") as stream:
        async for chunk in stream.chunks():
            into.append(chunk)
