"""Fixtures for the ACP bridge: the scripted ACP agent (``fixtures/acp/scripted.py``, built on
the ``agent-client-protocol`` package) as a real child process, the bridge in this process on a
real Unix socket, and a real gateway following it through its phone API."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from bridges.acp import AcpBridge
from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.bridges.mcp_rig import mcp, quick  # noqa: F401  (the MCP bridge's fixtures)
from tests.collie_gateway.conftest import (  # noqa: F401  (rig: a fixture used here too)
    ClientFactory,
    Rig,
    eventually,
    get_json,
    post_json,
    rig,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = [sys.executable, "-m", "fixtures.acp.scripted"]
Client = TestClient[Any, Any]


def agent_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The scripted agent's environment: importable from the repo, logging its stdin."""
    (tmp / "acp-state").mkdir(exist_ok=True)
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "ACP_LOG": str(tmp / "acp.log"),
        "ACP_STATE": str(tmp / "acp-state"),
        **extra,
    }


@dataclass
class Acp:
    """The bridge, its agent and a gateway following it (agent ``claude``)."""

    rig: Rig
    tmp: Path
    bridge: AcpBridge
    client: Client
    gw: Gateway
    env: dict[str, str] = field(default_factory=dict)

    async def start(self) -> str:
        """A new conversation from the first starter, as the phone starts one."""
        result = await post_json(
            self.client,
            "/api/v1/agents/claude/conversations",
            {"request_id": f"start-{len(self.bridge.sessions)}", "starter": "folder-1"},
        )
        conv_id: str = result["conversation_id"]
        await eventually(lambda: conv_id in self.gw.mirrors["claude"].conversations)
        return conv_id

    async def say(self, conv: str, text: str, request_id: str | None = None) -> dict[str, Any]:
        body = {"request_id": request_id or f"m-{text}-{os.urandom(3).hex()}", "text": text}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/claude/conversations/{conv}/messages", body
        )
        return result

    async def chat(self, conv: str) -> dict[str, Any]:
        result: dict[str, Any] = await get_json(
            self.client, f"/api/v1/agents/claude/conversations/{conv}?all_cards=true"
        )
        return result

    async def items(self, conv: str) -> list[dict[str, Any]]:
        """The conversation's items as the bridge keeps them (its wire snapshot)."""
        found, _ = await self.bridge.agent.read_conversation(conv)
        assert found is not None
        return [json.loads(json.dumps(i, default=str)) for i in _plain(found.items or [])]

    async def texts(self, conv: str, kind: str) -> list[str]:
        return [i["text"] for i in await self.items(conv) if i["kind"] == kind]

    async def wait_text(self, conv: str, kind: str, text: str, within: float = 10.0) -> None:
        async def seen() -> bool:
            return text in await self.texts(conv, kind)

        await eventually(seen, within)

    def open_asks(self, conv: str) -> list[str]:
        mirror = self.gw.mirrors["claude"].conversations.get(conv)
        return [] if mirror is None else [a.id for a in mirror.asks]

    async def wait_asks(self, conv: str, n: int) -> list[str]:
        await eventually(lambda: len(self.open_asks(conv)) == n, 10.0)
        return self.open_asks(conv)

    async def answer(
        self, ask: str, request_id: str, body: dict[str, Any], version: int = 1
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": version, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/claude/asks/{ask}/answer", payload
        )
        return result

    def log(self) -> list[dict[str, Any]]:
        """Every line the agent's processes read on stdin: ``{"pid", "message"}``."""
        path = self.tmp / "acp.log"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [{"pid": r["pid"], "message": json.loads(r["line"])} for r in rows]

    def responses(self, pid: int | None = None) -> list[dict[str, Any]]:
        """The answers the agent's processes received to their own requests."""
        return [
            r["message"]
            for r in self.log()
            if "method" not in r["message"] and (pid is None or r["pid"] == pid)
        ]

    def kill(self) -> int:
        """kill -9 the agent's process; returns its pid."""
        proc = self.bridge.process
        assert proc is not None
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        return proc.pid


def _plain(items: list[Any]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(i) for i in items]


async def acp_rig(
    base: Rig,
    *,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    **bridge_args: Any,
) -> Acp:
    """Start the bridge on the scripted agent, and a gateway for it."""
    tmp = base.tmp
    env = env or agent_env(tmp)
    bridge_args.setdefault("restart_first", 0.05)
    bridge_args.setdefault("ping_interval", 0.2)
    bridge = AcpBridge(
        command=command or SCRIPTED,
        state_path=tmp / "claude.db",
        cwds=[str(tmp)],
        env=env,
        now=base.clock,
        **bridge_args,
    )
    await bridge.start()
    sock = tmp / "claude.sock"
    runner = await bridge.serve_unix(sock)
    base.runners["claude"] = runner
    client, gw = await base.gateway([Source(name="claude", socket=sock)])
    await eventually(lambda: gw.mirrors["claude"].state is LinkState.READY)
    return Acp(base, tmp, bridge, client, gw, env)


@pytest.fixture
async def acp(aiohttp_client: ClientFactory) -> AsyncIterator[Acp]:
    with short_dir() as tmp:
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        found = await acp_rig(base)
        try:
            yield found
        finally:
            await base.close()
            await found.bridge.close()
