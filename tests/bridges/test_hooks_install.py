"""``collie-gateway hooks install|uninstall|status`` on settings files that already hold other
hooks, ``hook codex`` carrying Codex's hook to the bridge, and the ``hooks`` sources entry."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridges.hooks import keys, settings
from collie_gateway.__main__ import main
from collie_gateway.core.mirror import LinkState
from collie_gateway.errors import SourcesError
from collie_gateway.sources import parse_sources
from tests.bridges.hooks_rig import Hooks, running, sample
from tests.bridges.test_mcp_supervised import FAST, free_port
from tests.collie_gateway.conftest import ClientFactory, Rig, eventually, post_json

REPO = Path(__file__).resolve().parents[2]
THEIRS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
    },
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv(keys.ENV, str(tmp_path / "keys.json"))
    return tmp_path


def test_install_claude_code_keeps_everything_and_uninstall_takes_out_exactly_its_own(
    homes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = homes / "claude" / "settings.json"
    where.parent.mkdir()
    where.write_text(json.dumps(THEIRS))
    assert main(["hooks", "install", "claude-code", "--port", "8795"]) == 0
    first = json.loads(where.read_text())
    assert mode(where) == 0o600
    assert first["model"] == "opus"
    assert first["permissions"] == THEIRS["permissions"]
    assert first["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    assert first["hooks"]["Stop"][0] == THEIRS["hooks"]["Stop"][0]
    assert sorted(settings.installed(first, "claude-code")) == sorted(
        settings.EVENTS["claude-code"]
    )
    [permission] = first["hooks"]["PermissionRequest"]
    hook = permission["hooks"][0]
    assert (permission["matcher"], hook["type"], hook["url"], hook["timeout"]) == (
        "*",
        "http",
        "http://127.0.0.1:8795/hooks/claude-code",
        settings.HOLD,
    )
    secret = hook["headers"]["Authorization"].removeprefix("Bearer ")
    kept = json.loads((homes / "keys.json").read_text())
    assert kept == {"claude-code": keys.digest(secret)}  # hashed, never the secret
    assert secret not in (homes / "keys.json").read_text()
    assert mode(homes / "keys.json") == 0o600
    assert main(["hooks", "install", "claude-code", "--port", "8795"]) == 0
    assert json.loads(where.read_text()) == first  # idempotent; the credential kept
    assert main(["hooks", "uninstall", "claude-code"]) == 0
    assert json.loads(where.read_text()) == THEIRS
    assert json.loads((homes / "keys.json").read_text()) == {}
    assert "installed" not in capsys.readouterr().err


def test_install_into_a_project_and_a_missing_file(homes: Path) -> None:
    project = homes / "shop"
    assert main(["hooks", "install", "claude-code", "--project", str(project)]) == 0
    local = project / ".claude" / "settings.local.json"
    found = json.loads(local.read_text())
    assert set(found) == {"hooks"}
    assert not (homes / "claude" / "settings.json").exists()
    assert main(["hooks", "uninstall", "claude-code", "--project", str(project)]) == 0
    assert json.loads(local.read_text()) == {}


def test_a_settings_file_that_is_not_json_is_left_alone(
    homes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = homes / "claude" / "settings.json"
    where.parent.mkdir()
    where.write_text("{ not json")
    assert main(["hooks", "install", "claude-code"]) == 1
    assert where.read_text() == "{ not json"
    assert "settings.json" in capsys.readouterr().err


def test_install_codex_keeps_its_hooks_and_uninstall_is_exact(homes: Path) -> None:
    where = homes / "codex" / "hooks.json"
    where.parent.mkdir()
    where.write_text(json.dumps({"hooks": THEIRS["hooks"]}))
    assert main(["hooks", "install", "codex", "--port", "8796"]) == 0
    found = json.loads(where.read_text())
    assert found["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    [permission] = found["hooks"]["PermissionRequest"]
    command = permission["hooks"][0]["command"]
    assert command.endswith("-m collie_gateway hook codex --port 8796")
    key_file = homes / "codex" / "collie-hook.key"
    assert mode(key_file) == 0o600
    assert json.loads((homes / "keys.json").read_text()) == {
        "codex": keys.digest(key_file.read_text().strip())
    }
    assert main(["hooks", "install", "codex", "--port", "8796"]) == 0
    assert json.loads(where.read_text()) == found
    assert main(["hooks", "uninstall", "codex"]) == 0
    assert json.loads(where.read_text()) == {"hooks": THEIRS["hooks"]}
    assert not key_file.exists()


@pytest.fixture
async def hooks(aiohttp_client: ClientFactory) -> AsyncIterator[Hooks]:
    async with running(aiohttp_client) as found:
        yield found


async def test_hook_codex_carries_the_question_and_prints_the_answer(
    hooks: Hooks, homes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(hooks.bridge.port)
    keys_path = str(hooks.bridge.keys_path)
    assert main(["hooks", "install", "codex", "--port", port, "--keys", keys_path]) == 0
    assert await asyncio.to_thread(main, ["hooks", "status", "codex", "--port", port]) == 0
    said = capsys.readouterr().out
    assert "PermissionRequest" in said
    assert "answers" in said
    hooks_json = json.loads((homes / "codex" / "hooks.json").read_text())
    command = hooks_json["hooks"]["PermissionRequest"][0]["hooks"][0]["command"]
    body = hooks.body("PermissionRequest", client="codex")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CODEX_HOME": str(homes / "codex")}
    proc = await asyncio.create_subprocess_shell(
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(body).encode())
    proc.stdin.close()
    [(_, ask)] = await hooks.wait_asks(1, within=20)
    await hooks.answer(ask, {"option": "deny"})
    out, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, err
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "Denied on the phone."},
        }
    }


def test_status_without_a_bridge(homes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hooks", "status", "claude-code", "--port", "9"]) == 1
    out = capsys.readouterr().out
    assert "nothing installed" in out
    assert "does not answer" in out


def test_sources_hooks_entry(tmp_path: Path) -> None:
    entry = {"name": "claude-code", "hooks": {"port": 8791, "keys": str(tmp_path / "k.json")}}
    [source] = parse_sources({"durable_agents": [entry]}, "sources.json", {})
    assert source.bridge is not None
    argv = list(source.bridge.argv)
    assert argv[:3] == [sys.executable, "-m", "bridges.hooks"]
    assert argv[argv.index("--port") + 1] == "8791"
    assert argv[argv.index("--keys") + 1] == str(tmp_path / "k.json")
    with pytest.raises(SourcesError, match="unknown key 'host'"):
        parse_sources(
            {"durable_agents": [{"name": "a", "hooks": {"host": "0.0.0.0"}}]}, "s.json", {}
        )


async def test_the_gateway_runs_the_bridge_from_sources_and_the_phone_answers(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    caplog.set_level(logging.INFO, logger="collie_gateway.bridge.claude-code")
    port, keys_path = free_port(), rig.tmp / "keys.json"
    keys.remember(keys_path, "claude-code", "s3cret")
    spec = {"port": port, "socket": str(rig.tmp / "cc.sock"), "state": str(rig.tmp / "cc.db")}
    entry = {"name": "claude-code", "hooks": {**spec, "keys": str(keys_path)}}
    sources = parse_sources({"durable_agents": [entry]}, "sources.json", {})
    client, gw = await rig.gateway(sources, bridge_backoff=FAST)
    mirror = gw.mirrors["claude-code"]
    await eventually(lambda: mirror.state is LinkState.READY, 30.0)
    assert mirror.hello is not None
    assert mirror.hello.runtime == "hooks"
    body = sample("claude-code", "PermissionRequest", "s1", rig.tmp, rig.tmp / "t.jsonl")
    url = f"http://127.0.0.1:{port}/hooks/claude-code"
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer s3cret"}) as http:
        held = asyncio.create_task(http.post(url, json=body))
        await eventually(lambda: any(c.asks for c in mirror.conversations.values()), 20.0)
        [ask] = [a for c in mirror.conversations.values() for a in c.asks]
        answer = {"request_id": "r1", "version": 1, "answer": {"option": "deny"}}
        result = await post_json(client, f"/api/v1/agents/claude-code/asks/{ask.id}/answer", answer)
        assert result["outcome"] == "accepted"
        async with await asyncio.wait_for(held, 10) as resp:
            decision = (await resp.json())["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny"
    assert any("bridge hooks: serving" in m for m in caplog.messages)
