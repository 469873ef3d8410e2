"""The command line: help, exit codes, refusing bad configuration, serving for real."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from collie_gateway.__main__ import EXIT_CONFIG, main, push_targets_from_env
from collie_gateway.errors import ConfigError


def test_cli_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out
    assert "demo" in out


def test_cli_bad_sources_exit_2_with_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sources.json"
    path.write_text('{"durable_agents": [{"name": "a"}]}', encoding="utf-8")
    code = main(["serve", "--sources", str(path), "--db", str(tmp_path / "g.db")])
    assert code == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"{path}: entry 1 ('a'): give exactly one of" in err


def test_cli_public_address_without_token_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLLIE_TOKEN", raising=False)
    path = tmp_path / "sources.json"
    path.write_text('{"durable_agents": []}', encoding="utf-8")
    code = main(
        ["serve", "--sources", str(path), "--db", str(tmp_path / "g.db"), "--host", "0.0.0.0"]
    )
    assert code == EXIT_CONFIG
    assert "needs a bearer token" in capsys.readouterr().err


def test_cli_push_settings_must_come_whole() -> None:
    with pytest.raises(ConfigError, match="APNs needs all of"):
        push_targets_from_env({"COLLIE_APNS_KEY_ID": "K"})
    with pytest.raises(ConfigError, match="needs COLLIE_WEBHOOK_SECRETS"):
        push_targets_from_env({"COLLIE_WEBHOOK_URL": "http://127.0.0.1:9/h"})
    assert push_targets_from_env({}) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_cli_serve_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    path.write_text(
        json.dumps({"durable_agents": [{"name": "gone", "socket": str(tmp_path / "x.sock")}]}),
        encoding="utf-8",
    )
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "collie_gateway",
            "serve",
            "--sources",
            str(path),
            "--db",
            str(tmp_path / "g.db"),
            "--port",
            str(port),
        ],
        env={**os.environ, "COLLIE_TOKEN": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        body = None
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                        body = await resp.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            assert body == {"ok": True, "agents": 1, "ready": 0}
            async with http.get(f"http://127.0.0.1:{port}/api/v1/dashboard") as resp:
                dash = await resp.json()
        assert dash["sections"][-1]["rows"][0]["agent"] == "gone"
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, err.decode()
    assert (tmp_path / "g.db").exists()


async def test_cli_serve_on_unix_socket_created_0600(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    path.write_text('{"durable_agents": []}', encoding="utf-8")
    sock = tmp_path / "phone.sock"
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "collie_gateway", "serve", "--sources", str(path)],
        *["--db", str(tmp_path / "g.db"), "--unix", str(sock), "--host", "0.0.0.0"],
        env={**os.environ, "COLLIE_TOKEN": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        body = None
        connector = aiohttp.UnixConnector(path=str(sock))
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(600):
                try:
                    async with http.get("http://gateway/healthz") as resp:
                        body = await resp.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        assert body == {"ok": True, "agents": 0, "ready": 0}
        assert sock.stat().st_mode & 0o777 == 0o600
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, err.decode()
