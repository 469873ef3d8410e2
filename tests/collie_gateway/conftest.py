"""Fixtures for the gateway's end-to-end tests: SDK agents on real sockets, a real gateway
behind real HTTP, and a real SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.gateway import Gateway
from collie_gateway.serving import GATEWAY, gateway_app
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.collie_gateway.pg_fixtures import pg_admin, pg_url  # noqa: F401 (fixtures)
from tests.timing import WAIT
from wire.agent import Agent, AgentRunner

FAST = LinkTiming(
    connect=1.0,
    request=2.0,
    stream_read=1.0,
    backoff_first=0.05,
    backoff_cap=0.2,
    version_recheck=0.5,
)

# For tests whose every link blip would show (a golden trace): a machine busy with the suite's
# other workers may hold this process back for more than FAST's second.
PATIENT = dataclasses.replace(FAST, connect=10.0, request=10.0, stream_read=10.0)

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


class Clock:
    """An injectable clock: tests move time, nothing sleeps for it."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Rig:
    """Agents on sockets and a gateway for them, torn down together."""

    tmp: Path
    make_client: ClientFactory
    clock: Clock = field(default_factory=Clock)
    agents: dict[str, Agent] = field(default_factory=dict)
    runners: dict[str, AgentRunner] = field(default_factory=dict)
    sockets: dict[str, Path] = field(default_factory=dict)
    client: TestClient[Any, Any] | None = None

    def agent(self, name: str, **kwargs: Any) -> Agent:
        """A new SDK agent with its own state file (not yet served)."""
        kwargs.setdefault("features", [])
        kwargs.setdefault("ping_interval", 0.2)
        kwargs.setdefault("now", self.clock)
        agent = Agent(state_path=self.tmp / f"{name}.agent.db", **kwargs)
        self.agents[name] = agent
        return agent

    async def serve(self, name: str, agent: Agent | None = None) -> Path:
        """Serve an agent on its Unix socket (the same path each time)."""
        agent = agent or self.agents[name]
        self.agents[name] = agent
        path = self.sockets.setdefault(name, self.tmp / f"{name}.sock")
        self.runners[name] = await agent.serve_unix(path)
        return path

    async def serve_tcp(self, name: str, agent: Agent | None = None) -> str:
        """Serve an agent on 127.0.0.1 (a fresh port)."""
        agent = agent or self.agents[name]
        self.agents[name] = agent
        runner = await agent.serve_tcp("127.0.0.1", 0)
        self.runners[name] = runner
        return str(runner.url)

    async def stop(self, name: str) -> None:
        """Stop serving (the agent keeps its state file)."""
        runner = self.runners.pop(name, None)
        if runner is not None:
            await runner.close()
        agent = self.agents.pop(name, None)
        if agent is not None:
            await agent.close()

    async def gateway(
        self, sources: list[Source], **settings: Any
    ) -> tuple[TestClient[Any, Any], Gateway]:
        """A gateway on a real SQLite file behind a real HTTP server."""
        settings.setdefault("timing", FAST)
        settings.setdefault("clock", self.clock)
        settings.setdefault("db_path", self.tmp / "gateway.db")
        app = gateway_app(Settings(sources=sources, **settings))
        self.client = await self.make_client(app)
        return self.client, self.client.app[GATEWAY]

    async def close(self) -> None:
        for name in list(self.runners):
            await self.stop(name)
        for agent in self.agents.values():
            await agent.close()


async def rigged(make_client: ClientFactory) -> AsyncIterator[Rig]:
    """A rig in a fresh folder, its agents closed at the end."""
    with short_dir() as tmp:
        rig = Rig(tmp=tmp, make_client=make_client)
        try:
            yield rig
        finally:
            await rig.close()


@pytest.fixture
async def rig(aiohttp_client: ClientFactory) -> AsyncIterator[Rig]:
    async for made in rigged(aiohttp_client):
        yield made


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], within: float = WAIT
) -> None:
    """Wait until ``check()`` is true (polling every 10 ms), or fail after ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not true within {within} s: {check}")
        await asyncio.sleep(0.01)


async def get_json(client: TestClient[Any, Any], path: str, status: int = 200) -> Any:
    """GET ``path`` and return its JSON, checking the status."""
    resp = await client.get(path)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def post_json(client: TestClient[Any, Any], path: str, body: Any, status: int = 200) -> Any:
    """POST JSON and return the answer's JSON, checking the status."""
    resp = await client.post(path, json=body)
    assert resp.status == status, await resp.text()
    return await resp.json()


@contextlib.asynccontextmanager
async def raw_agent(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], path: Path
) -> AsyncIterator[web.AppRunner]:
    """A hand-written (hostile) agent on a Unix socket: every request goes to ``handler``."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.UnixSite(runner, str(path))
    await site.start()
    try:
        yield runner
    finally:
        await runner.cleanup()
