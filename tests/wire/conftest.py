"""Fixtures for the wire tests: a fake clock, agents on a tmp state file, HTTP and SSE helpers."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from fixtures.agents.harness import AgentAddress, Served, serve_agent
from tests.timing import WAIT
from wire.agent import Agent
from wire.messages import FEATURES, AgentEvent, decode_event
from wire.sse import SSEEvent, SSEParser

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, at: datetime = START) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **delta: float) -> None:
        self.at += timedelta(**delta)


AgentFactory = Callable[..., Agent]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "agent.db"


@pytest.fixture
def make_agent(state: Path, clock: FakeClock) -> AgentFactory:
    """A factory of agents on the test's state file and clock, declaring every feature."""

    def make(**kwargs: Any) -> Agent:
        kwargs.setdefault("state_path", state)
        kwargs.setdefault("now", clock)
        kwargs.setdefault("features", FEATURES)
        kwargs.setdefault("runtime", "test")
        kwargs.setdefault("expiry_interval", 3600.0)
        return Agent(**kwargs)

    return make


@pytest.fixture
async def served(make_agent: AgentFactory) -> AsyncIterator[Served]:
    """An agent with every feature, served on a Unix socket."""
    async with serve_agent(make_agent()) as s:
        yield s


@dataclass
class Answer:
    """A status and a decoded JSON body."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class Client:
    """HTTP to an agent over its address; bodies in and out as plain JSON values."""

    def __init__(self, address: AgentAddress, token: str | None = None) -> None:
        self.address = address
        self.http = address.session(token=token)

    async def close(self) -> None:
        await self.http.close()

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        async with self.http.get(path, headers=headers) as resp:
            return Answer(resp.status, await resp.json(), dict(resp.headers))

    async def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Answer:
        data = io.BytesIO(raw if raw is not None else msgspec.json.encode(body))
        async with self.http.post(
            path, data=data, headers={"Content-Type": "application/json"}
        ) as resp:
            return Answer(resp.status, await resp.json(), dict(resp.headers))

    async def outcome(self, path: str, body: Any) -> str:
        """POST and return the outcome of a 200 answer."""
        answer = await self.post(path, body)
        assert answer.status == 200, answer
        return str(answer.body["outcome"])

    def events(self, last_event_id: str | None = None) -> EventStream:
        return EventStream(self.http, last_event_id)


class EventStream:
    """``GET /events`` read as SSE events; ``raw`` keeps every byte (comments too)."""

    def __init__(self, http: aiohttp.ClientSession, last_event_id: str | None) -> None:
        self.http = http
        self.last_event_id = last_event_id
        self.raw = bytearray()
        self._parser = SSEParser()
        self._ready: list[SSEEvent] = []
        self._resp: aiohttp.ClientResponse | None = None
        self.headers: dict[str, str] = {}

    async def __aenter__(self) -> EventStream:
        headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id is not None else {}
        self._resp = await self.http.get("/events", headers=headers)
        self.headers = dict(self._resp.headers)
        assert self._resp.status == 200
        assert self._resp.headers["Content-Type"].startswith("text/event-stream")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._resp is not None
        self._resp.close()

    async def _fill(self) -> bool:
        assert self._resp is not None
        chunk = await self._resp.content.readany()
        if not chunk:
            return False
        self.raw += chunk
        self._ready += self._parser.feed(chunk)
        return True

    async def next(self, within: float = WAIT) -> SSEEvent:
        """The next event."""
        async with asyncio.timeout(within):
            while not self._ready:
                if not await self._fill():
                    raise EOFError("the stream ended")
        return self._ready.pop(0)

    async def take(self, n: int, within: float = WAIT) -> list[SSEEvent]:
        """The next ``n`` events."""
        return [await self.next(within) for _ in range(n)]

    async def until(self, type_: str, within: float = WAIT) -> list[SSEEvent]:
        """Events up to and including the first of ``type_``."""
        seen: list[SSEEvent] = []
        while not seen or seen[-1].event != type_:
            seen.append(await self.next(within))
        return seen

    async def wait_raw(self, needle: bytes, within: float = WAIT) -> None:
        """Read until ``needle`` arrived (comments included)."""
        async with asyncio.timeout(within):
            while needle not in self.raw:
                if not await self._fill():
                    raise EOFError("the stream ended")

    async def quiet(self, seconds: float = 0.1) -> list[SSEEvent]:
        """Whatever events arrive within ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    if not await self._fill():
                        break
        except TimeoutError:
            pass
        ready, self._ready = self._ready, []
        return ready


def decoded(events: list[SSEEvent]) -> list[AgentEvent]:
    """Each event's data decoded as a wire event (every one must decode)."""
    return [decode_event(e.data) for e in events]


@pytest.fixture
async def client(served: Served) -> AsyncIterator[Client]:
    c = Client(served.address)
    try:
        yield c
    finally:
        await c.close()


async def eventually(check: Callable[[], bool], within: float = WAIT) -> None:
    """Wait until ``check()`` holds (what a background task does shows up a little later)."""
    async with asyncio.timeout(within):
        while True:
            if check():
                return
            await asyncio.sleep(0.005)  # polling: the checks read state no event announces


def message(request_id: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    """A ``SendMessage`` body."""
    return {"request_id": request_id, "text": text, **extra}
