"""The LangGraph bridge's test rig: the bridge serving a graph of ``fixtures/langgraph/graphs``
on a real Unix socket (in this process, or as its own process; the graph run here, or on an
Agent Server), and a raw wire client."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bridges.kit import AgentBridge
from bridges.langgraph.backend import InProcess as Local
from bridges.langgraph.bridge import LangGraphBridge
from bridges.langgraph.server import Server
from tests.bridges.test_kit import request
from wire.agent import AgentRunner

REPO = Path(__file__).resolve().parents[2]
GRAPHS = "fixtures.langgraph.graphs"


@dataclass
class Wire:
    """A raw wire client of one bridge's socket."""

    sock: Path

    async def start(self) -> str:
        """A new thread from the New page's starter: its conversation id."""
        status, body = await request(
            self.sock, "POST", "/conversations", {"request_id": rid(), "starter": "thread"}
        )
        assert (status, body["outcome"]) == (200, "accepted"), body
        return str(body["conversation_id"])

    async def say(self, conv: str, text: str) -> None:
        """A message typed in the conversation."""
        body = {"request_id": rid(), "text": text}
        status, result = await request(self.sock, "POST", f"/conversations/{conv}/messages", body)
        assert (status, result["outcome"]) == (200, "accepted"), result

    async def read(self, conv: str) -> dict[str, Any]:
        """The conversation with its items and open asks."""
        status, body = await request(self.sock, "GET", f"/conversations/{conv}")
        assert status == 200, body
        return dict(body)

    async def reply(
        self, ask: dict[str, Any], answer: dict[str, Any], *, version: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        """An answer to ``ask`` (at its version unless given)."""
        body = {"request_id": rid(), "version": version or ask.get("version", 1), "answer": answer}
        status, result = await request(
            self.sock, "POST", f"/asks/{quote(ask['id'], safe='')}/reply", body
        )
        return status, dict(result)

    async def asks(self, conv: str, count: int) -> list[dict[str, Any]]:
        """The conversation's open asks, once there are ``count`` of them."""
        got: list[dict[str, Any]] = []

        async def enough() -> bool:
            nonlocal got
            got = (await self.read(conv)).get("asks", [])
            return len(got) == count

        await until(enough)
        return got

    async def items(self, conv: str, test: Callable[[list[dict[str, Any]]], bool]) -> list[Any]:
        """The conversation's items, once ``test`` holds for them."""
        got: list[dict[str, Any]] = []

        async def holds() -> bool:
            nonlocal got
            got = (await self.read(conv)).get("items", [])
            return test(got)

        await until(holds)
        return got


def rid() -> str:
    """A fresh request id."""
    return "r-" + secrets.token_hex(6)


async def until(test: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``test`` holds (20 s at most)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 20.0
    while not await test():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def two_turns(wire: Wire, conv: str) -> None:
    """Two messages to the chat graph: its reply streamed and made final, then the thread's
    next turn."""
    await wire.say(conv, "hello there")
    said = "You said: hello there"
    await wire.items(conv, lambda i: any(x.get("text") == said and x.get("final", True) for x in i))
    await wire.say(conv, "again")
    await wire.items(conv, lambda i: "You said: again" in texts(i))


async def expires(wire: Wire) -> None:
    """A thread of the ``bare`` graph, its deadline 1 s: the ask shows it, expires, and the
    interrupt is resumed with ``None``; a tap after is ``expired``."""
    conv = await wire.start()
    await wire.say(conv, "hi")
    [ask] = await wire.asks(conv, 1)
    assert ask["deadline"]  # the phone shows "Expires in …"
    await wire.items(conv, lambda i: "Hello, None" in texts(i))
    _, late = await wire.reply(ask, {"text": "Ada"})
    assert late["outcome"] == "expired"


async def deploys(wire: Wire) -> None:
    """The guide's example graph (``docs/examples/graphs/deploy.py``), as the guide runs it."""
    conv = await wire.start()
    await wire.say(conv, "v2")
    [allow] = await wire.asks(conv, 1)
    assert (allow["kind"], allow["title"]) == ("permission", "Deploy v2 to production?")
    await wire.reply(allow, {"option": "allow"})
    [scale] = await wire.asks(conv, 1)
    assert scale["kind"] == "form"
    await wire.reply(scale, {"fields": {"replicas": "3"}})
    await wire.items(conv, lambda i: "Deployed v2 on 3 replicas." in texts(i))


def texts(items: list[dict[str, Any]], kind: str = "reply") -> list[str]:
    """The texts of the items of ``kind``."""
    return [i.get("text", "") for i in items if i["kind"] == kind]


@dataclass
class InProcess:
    """The bridge in this process: ``open()`` again after ``close()`` is a restart."""

    folder: Path
    graph: str
    input: str = "messages"
    graph_spec: str = ""  # a graph elsewhere than fixtures/langgraph/graphs
    bridge: LangGraphBridge | None = None
    local: Local | None = None  # the bridge's graph, for another client of its threads
    runner: AgentRunner | None = None

    @property
    def wire(self) -> Wire:
        return Wire(self.folder / "lg.sock")

    async def open(self) -> Wire:
        spec = self.graph_spec or f"{GRAPHS}:{self.graph}"
        self.local = Local(spec, self.folder / "graphs.sqlite")
        self.bridge = LangGraphBridge(self.local, state=self.folder / "lg.db", input=self.input)
        await self.bridge.start()
        self.runner = await self.bridge.serve_unix(self.folder / "lg.sock")
        return self.wire

    async def close(self) -> None:
        bridge: AgentBridge | None = self.bridge
        if bridge is not None:
            await bridge.close()
        self.bridge = None


async def spawn(folder: Path, graph: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """The bridge as its own process (``python -m bridges.langgraph``), once it serves."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridges.langgraph",
        "--graph",
        f"{GRAPHS}:{graph}",
        "--checkpoints",
        str(folder / "graphs.sqlite"),
        "--socket",
        str(folder / "lg.sock"),
        "--state",
        str(folder / "lg.db"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert b"serving" in line, line
    return proc


@dataclass
class Served:
    """The bridge in this process, a client of an Agent Server; ``open()`` again after
    ``close()`` is a restart."""

    folder: Path
    url: str
    assistant: str
    input: str = "messages"
    poll: float | None = None
    bridge: LangGraphBridge | None = None

    @property
    def wire(self) -> Wire:
        return Wire(self.folder / "lg.sock")

    async def open(self) -> Wire:
        backend = Server(self.url, self.assistant, self.poll)
        self.bridge = LangGraphBridge(backend, state=self.folder / "lg.db", input=self.input)
        await self.bridge.start()
        await self.bridge.serve_unix(self.folder / "lg.sock")
        return self.wire

    async def close(self) -> None:
        if self.bridge is not None:
            await self.bridge.close()
        self.bridge = None

    async def __aenter__(self) -> Wire:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
