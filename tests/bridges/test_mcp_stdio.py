"""``collie-gateway bridge mcp --stdio``: a host that only launches commands reaches the
long-lived bridge through it; the process keeps no asks of its own (spec T1, R3; issue 24)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

from bridges.mcp.bridge import ASK_ENDED, SESSION_ENDED
from tests.bridges.conftest import REPO
from tests.bridges.mcp_rig import Mcp, call_soon, tool_json


def relay_argv(url: str) -> list[str]:
    return ["-m", "collie_gateway", "bridge", "mcp", "--stdio", "--url", url]


async def test_T1_an_ask_through_the_stdio_process_titled_with_its_folder(quick: Mcp) -> None:
    mcp = quick
    shop = mcp.rig.tmp / "shop"
    shop.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=relay_argv(mcp.bridge.url),
        cwd=shop,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    info = Implementation(name="gemini-cli", version="1")
    async with Client(params, mode="legacy", client_info=info) as client:
        task = await call_soon(client, "ask_text", {"question": "Branch name?"})
        [(conv, ask)] = await mcp.wait_asks(1)
        snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
        assert snapshot is not None
        assert (snapshot.title, snapshot.workspace) == ("gemini-cli · shop", str(shop))
        await mcp.answer(ask, {"text": "fix/login"})
        result = await asyncio.wait_for(task, 10)
        assert tool_json(result) == {"outcome": "answered", "text": "fix/login"}
    # The host closed the process's stdin: the session ends with it.
    await mcp.wait_text(conv, "notice", SESSION_ENDED)


async def _line(proc: asyncio.subprocess.Process, request_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    for _ in range(50):
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            return message
    raise AssertionError(f"no answer to request {request_id}")


async def _send(proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    await proc.stdin.drain()


async def test_T1_R3_the_stdio_process_killed_mid_ask_ends_it_in_the_bridge(quick: Mcp) -> None:
    mcp = quick
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bridges.mcp", "--stdio", "--url", mcp.bridge.url),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(mcp.rig.tmp),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "codex", "version": "1"},
        }
        await _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        assert (await _line(proc, 1))["result"]["serverInfo"]["name"] == "collie"
        await _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = {"name": "ask_text", "arguments": {"question": "Deploy now?"}}
        await _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        [(conv, ask)] = await mcp.wait_asks(1)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await mcp.wait_asks(0)
        await mcp.wait_text(conv, "notice", SESSION_ENDED)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert ASK_ENDED.format(title="Deploy now?") in await mcp.texts(conv, "notice")
    late = await mcp.answer(ask, {"text": "yes"}, request_id="r-late")
    assert late["outcome"] == "decided"
