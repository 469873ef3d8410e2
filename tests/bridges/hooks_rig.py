"""The hooks bridge on a free loopback port and a real gateway following it (agent
``claude-code``), driven with the JSON Claude Code and Codex send (``fixtures/hooks/``) and
the phone API."""

from __future__ import annotations

import asyncio
import copy
import io
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp.test_utils import TestClient

from bridges.hooks import keys
from bridges.hooks.bridge import HooksBridge
from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.collie_gateway.conftest import ClientFactory, Rig, eventually, get_json, post_json

AGENT = "claude-code"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hooks"
SECRETS = {"claude-code": "secret-of-claude", "codex": "secret-of-codex"}


def sample(client: str, name: str, session: str, cwd: Path, transcript: Path) -> dict[str, Any]:
    """A hook body from the fixtures, for ``session`` in ``cwd``."""
    found = "claude-code-2.1.json" if client == "claude-code" else "codex-0.171.json"
    body: dict[str, Any] = copy.deepcopy(json.loads((FIXTURES / found).read_text())["hooks"][name])
    fill = {"SESSION": session, "CWD": str(cwd), "TRANSCRIPT": str(transcript)}
    return {k: fill.get(v, v) if isinstance(v, str) else v for k, v in body.items()}


@dataclass
class Hooks:
    """The bridge, a gateway following it, and an HTTP client posting hooks."""

    rig: Rig
    bridge: HooksBridge
    client: TestClient[Any, Any]
    gw: Gateway
    http: aiohttp.ClientSession
    tasks: list[asyncio.Task[tuple[int, Any]]] = field(default_factory=list)

    def body(self, name: str, session: str = "s1", client: str = AGENT) -> dict[str, Any]:
        shop = self.rig.tmp / "shop"
        return sample(client, name, session, shop, self.rig.tmp / f"{session}.jsonl")

    async def post(
        self, body: Any, client: str = AGENT, secret: str | None = None
    ) -> tuple[int, Any]:
        """POST a hook (bytes as they are, else JSON); the status and the JSON answered."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        secret = SECRETS[client] if secret is None else secret
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        url = self.bridge.url(client)
        async with self.http.post(url, data=io.BytesIO(data), headers=headers) as resp:
            return resp.status, await resp.json()

    def hold(self, body: Any, client: str = AGENT) -> asyncio.Task[tuple[int, Any]]:
        """POST a hook that is held (a PermissionRequest); the task ends with its answer."""
        task = asyncio.create_task(self.post(body, client))
        self.tasks.append(task)
        return task

    def conv_id(self, session: str = "s1", client: str = AGENT) -> str:
        return self.bridge.sessions[session].conv.id

    def open_asks(self) -> list[tuple[str, str]]:
        mirror = self.gw.mirrors[AGENT]
        return [(c.id, a.id) for c in mirror.conversations.values() for a in c.asks]

    async def wait_asks(self, n: int, within: float = 10.0) -> list[tuple[str, str]]:
        await eventually(lambda: len(self.open_asks()) == n, within)
        return self.open_asks()

    async def answer(
        self, ask: str, body: dict[str, Any], request_id: str = "r1", status: int = 200
    ) -> dict[str, Any]:
        payload = {"request_id": request_id, "version": 1, "answer": body}
        result: dict[str, Any] = await post_json(
            self.client, f"/api/v1/agents/{AGENT}/asks/{ask}/answer", payload, status
        )
        return result

    async def say(self, conv: str, text: str, request_id: str = "m1") -> dict[str, Any]:
        result: dict[str, Any] = await post_json(
            self.client,
            f"/api/v1/agents/{AGENT}/conversations/{conv}/messages",
            {"request_id": request_id, "text": text},
        )
        return result

    async def chat(self, conv: str) -> dict[str, Any]:
        result: dict[str, Any] = await get_json(
            self.client, f"/api/v1/agents/{AGENT}/conversations/{conv}?all_cards=true"
        )
        return result

    async def items(self, conv: str) -> list[dict[str, Any]]:
        found, _ = await self.bridge.agent.read_conversation(conv)
        assert found is not None
        return [msgspec.to_builtins(i) for i in found.items or []]

    async def texts(self, conv: str, kind: str) -> list[str]:
        return [i["text"] for i in await self.items(conv) if i["kind"] == kind]

    async def wait_text(self, conv: str, kind: str, text: str, within: float = 10.0) -> None:
        async def seen() -> bool:
            return text in await self.texts(conv, kind)

        await eventually(seen, within)


async def start_bridge(base: Rig, **bridge_args: Any) -> HooksBridge:
    """The bridge on a free port (or ``port``), its credentials kept hashed."""
    keys_path = base.tmp / "keys.json"
    for client, secret in SECRETS.items():
        keys.remember(keys_path, client, secret)
    bridge_args.setdefault("port", 0)
    bridge = HooksBridge(
        state_path=base.tmp / "hooks.db",
        keys_path=keys_path,
        now=base.clock,
        poll=0.05,
        ping_interval=0.2,
        expiry_interval=0.05,
        **bridge_args,
    )
    await bridge.start()
    base.runners[AGENT] = await bridge.serve_unix(base.tmp / "hooks.sock")
    return bridge


@asynccontextmanager
async def running(
    aiohttp_client: ClientFactory,
    gateway: Callable[[Rig], dict[str, Any]] | None = None,
    **bridge_args: Any,
) -> AsyncIterator[Hooks]:
    """The rig in a fresh short folder, torn down after; ``gateway``: the gateway's settings
    for the rig (its push targets)."""
    with short_dir() as tmp:
        (tmp / "shop").mkdir()
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        bridge = await start_bridge(base, **bridge_args)
        settings = gateway(base) if gateway is not None else {}
        source = Source(name=AGENT, socket=tmp / "hooks.sock")
        client, gw = await base.gateway([source], **settings)
        await eventually(lambda: gw.mirrors[AGENT].state is LinkState.READY)
        http = aiohttp.ClientSession()
        found = Hooks(base, bridge, client, gw, http)
        try:
            yield found
        finally:
            for task in found.tasks:
                task.cancel()
            await asyncio.gather(*found.tasks, return_exceptions=True)
            await http.close()
            await base.close()
            await found.bridge.close()
