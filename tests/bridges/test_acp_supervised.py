"""An ACP agent named in sources.json: the gateway runs the bridge, keeps it running
(restart with backoff) and logs its output; and the bridge run by hand from the command line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from collie_gateway.core.mirror import LinkState
from collie_gateway.errors import SourcesError
from collie_gateway.sources import Backoff, parse_sources
from tests.bridges.conftest import REPO, SCRIPTED
from tests.collie_gateway.conftest import Rig, eventually

FAST = Backoff(first=0.05, cap=0.2, stable=10.0, grace=2.0)


def test_sources_acp_entry_builds_the_bridge_command() -> None:
    entry = {"name": "claude", "acp": {"command": ["claude-code-acp"], "cwd": "~/src/shop"}}
    [source] = parse_sources({"durable_agents": [entry]}, "sources.json", {})
    home = Path("~").expanduser()
    assert source.socket == home / ".collie/agents/claude.sock"
    assert source.bridge is not None
    assert source.bridge.socket == source.socket
    assert source.bridge.argv == (
        sys.executable,
        "-m",
        "bridges.acp",
        "--socket",
        str(home / ".collie/agents/claude.sock"),
        "--state",
        str(home / ".collie/agents/claude.acp.db"),
        "--cwd",
        str(home / "src/shop"),
        "--",
        "claude-code-acp",
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "c", "acp": {"command": ["x"]}, "socket": "/s"},
            'a bridge ("acp") is given alone, without "socket", "url" or another bridge',
        ),
        ({"name": "c", "acp": {"command": []}}, '"command" must be a non-empty list of strings'),
        ({"name": "c", "acp": ["x"]}, "entry 1 ('c'): \"acp\" must be an object"),
        ({"name": "c", "acp": {"command": ["x"], "cwd": 3}}, '"cwd" must be a folder or a list'),
        ({"name": "c", "acp": {"command": ["x"], "env": {}}}, "unknown key 'env'"),
    ],
)
def test_sources_bad_acp_entries(entry: dict[str, object], message: str) -> None:
    with pytest.raises(SourcesError) as caught:
        parse_sources({"durable_agents": [entry]}, "sources.json", {})
    assert message in str(caught.value)


async def test_the_gateway_runs_restarts_and_logs_its_bridge(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    caplog.set_level(logging.INFO, logger="collie_gateway.bridge.claude")
    entry = {
        "name": "claude",
        "acp": {
            "command": SCRIPTED,
            "cwd": str(rig.tmp),
            "socket": str(rig.tmp / "claude.sock"),
            "state": str(rig.tmp / "claude.db"),
        },
    }
    sources = parse_sources({"durable_agents": [entry]}, "sources.json", {})
    _, gw = await rig.gateway(sources, bridge_backoff=FAST)
    mirror = gw.mirrors["claude"]
    await eventually(lambda: mirror.state is LinkState.READY, 30.0)
    assert mirror.hello is not None
    assert mirror.hello.runtime == "scripted"
    child = gw.supervisor.children["claude"]
    assert child.starts == 1
    serving = f"claude: bridge acp: serving scripted on {rig.tmp / 'claude.sock'}"
    await eventually(lambda: serving in caplog.messages)
    # The bridge's ordinary output is INFO: it shows with -v only (issue 25.7).
    [said] = [r for r in caplog.records if r.getMessage() == serving]
    assert said.levelno == logging.INFO
    assert child.process is not None
    os.killpg(child.process.pid, signal.SIGKILL)  # the bridge and its agent
    await eventually(lambda: child.starts == 2, 30.0)
    await eventually(lambda: mirror.state is LinkState.READY, 30.0)
    assert any("bridge claude exited (-9); restarting in" in m for m in caplog.messages)


async def test_cli_bridge_acp_serves_by_hand_and_stops_on_sigterm(rig: Rig) -> None:
    sock = rig.tmp / "hand.sock"
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "collie_gateway", "bridge", "acp"),
        *("--socket", str(sock), "--state", str(rig.tmp / "hand.db"), "--cwd", str(rig.tmp)),
        *("--", *SCRIPTED),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), "ACP_NAME": "by-hand"},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30.0)
    assert line.decode().strip() == f"bridge acp: serving by-hand on {sock}"
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as http,
        http.get("http://agent/hello") as resp,
    ):
        hello = json.loads(await resp.read())
    assert hello["runtime"] == "by-hand"
    assert (sock.stat().st_mode & 0o777) == 0o600
    starters = [rig.tmp.name]
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as http,
        http.get("http://agent/starters") as resp,
    ):
        assert [s["label"] for s in (await resp.json())["starters"]] == starters
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 15.0) == 0


async def test_cli_bridge_acp_without_a_command_exits_2(rig: Rig) -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "collie_gateway", "bridge", "acp"),
        *("--socket", str(rig.tmp / "x.sock"), "--state", str(rig.tmp / "x.db")),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert err.decode().strip() == "bridge acp: give the agent's command after --"


async def test_cli_bridge_acp_agent_that_cannot_start_exits_1(rig: Rig) -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bridges.acp"),
        *("--socket", str(rig.tmp / "x.sock"), "--state", str(rig.tmp / "x.db")),
        *("--", str(rig.tmp / "no-such-agent")),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 1
    assert "bridge acp: [Errno 2] No such file or directory" in err.decode()
