"""The MCP bridge named in sources.json: the gateway runs it, and a real MCP client's ask is
answered through the gateway's phone API; and its command line (issue 24)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path

import pytest
from mcp.client.client import Client

from bridges.mcp import main
from collie_gateway.core.mirror import LinkState
from collie_gateway.errors import SourcesError
from collie_gateway.sources import Backoff, parse_sources
from tests.bridges.conftest import REPO
from tests.bridges.mcp_rig import tool_json
from tests.collie_gateway.conftest import Rig, eventually, post_json

FAST = Backoff(first=0.05, cap=0.2, stable=10.0, grace=2.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_sources_mcp_entry_builds_the_bridge_command() -> None:
    [source] = parse_sources(
        {"durable_agents": [{"name": "asks", "mcp": {"port": 8790}}]}, "sources.json", {}
    )
    home = Path("~").expanduser()
    assert source.socket == home / ".collie/agents/asks.sock"
    assert source.bridge is not None
    assert source.bridge.argv == (
        sys.executable,
        "-m",
        "bridges.mcp",
        "--socket",
        str(home / ".collie/agents/asks.sock"),
        "--state",
        str(home / ".collie/agents/asks.mcp.db"),
        "--port",
        "8790",
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a", "mcp": {}, "socket": "/s"}, 'a bridge ("mcp") is given alone'),
        ({"name": "a", "mcp": [8790]}, '"mcp" must be an object, e.g. {"port": 8790}'),
        ({"name": "a", "mcp": {"port": "8790"}}, '"port" must be a port number'),
        ({"name": "a", "mcp": {"port": 70000}}, '"port" must be a port number'),
        ({"name": "a", "mcp": {"host": "0.0.0.0"}}, "unknown key 'host' (known: port, socket"),
    ],
)
def test_sources_bad_mcp_entries(entry: dict[str, object], message: str) -> None:
    with pytest.raises(SourcesError) as caught:
        parse_sources({"durable_agents": [entry]}, "sources.json", {})
    assert message in str(caught.value)


async def test_the_gateway_runs_the_bridge_and_the_phone_answers_an_mcp_call(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    caplog.set_level(logging.INFO, logger="collie_gateway.bridge.asks")
    port = free_port()
    entry = {
        "name": "asks",
        "mcp": {
            "port": port,
            "socket": str(rig.tmp / "asks.sock"),
            "state": str(rig.tmp / "asks.db"),
        },
    }
    sources = parse_sources({"durable_agents": [entry]}, "sources.json", {})
    client, gw = await rig.gateway(sources, bridge_backoff=FAST)
    mirror = gw.mirrors["asks"]
    await eventually(lambda: mirror.state is LinkState.READY, 30.0)
    assert mirror.hello is not None
    assert mirror.hello.runtime == "mcp"
    url = f"http://127.0.0.1:{port}/mcp"
    async with Client(url, mode="legacy") as mcp:
        task = asyncio.create_task(
            mcp.call_tool("ask_choice", {"question": "Ship it?", "options": ["yes", "no"]})
        )
        await eventually(lambda: any(c.asks for c in mirror.conversations.values()), 20.0)
        [ask] = [a for c in mirror.conversations.values() for a in c.asks]
        body = {"request_id": "r1", "version": 1, "answer": {"option": "o1"}}
        result = await post_json(client, f"/api/v1/agents/asks/asks/{ask.id}/answer", body)
        assert result["outcome"] == "accepted"
        assert tool_json(await asyncio.wait_for(task, 10)) == {
            "outcome": "answered",
            "choice": "yes",
        }
    serving = f"asks: bridge mcp: serving {url} on {rig.tmp / 'asks.sock'}"
    assert serving in caplog.messages


def test_cli_bridge_mcp_without_socket_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == "bridge mcp: give --socket and --state (or --stdio)"


def test_cli_bridge_mcp_on_a_port_in_use_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--port", str(port), "--socket", str(tmp_path / "x.sock")]
        assert main([*argv, "--state", str(tmp_path / "x.db")]) == 1
    assert "bridge mcp: [Errno 98] Address already in use" in capsys.readouterr().err
