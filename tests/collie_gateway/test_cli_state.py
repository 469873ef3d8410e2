"""Where the gateway keeps its files, seen through the CLI run as a process (issue 25.5, 25.10):
``--db`` naming a folder or a missing folder is refused like ``--unix``; the demo keeps its
state in one folder, reused by the next run, ``--fresh`` to start over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest

from fixtures.agents.harness import REPO
from tests.collie_gateway.processes import free_port
from tests.collie_gateway.test_cli_errors import _one_line_refusal, _run


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal (exit 2, no traceback), nothing printed before it."""
    assert done.stdout == "", "something was printed before the refusal"
    return _one_line_refusal(done)


def _sources(tmp: Path) -> Path:
    path = tmp / "sources.json"
    path.write_text(json.dumps({"durable_agents": []}), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_db_naming_a_folder_is_refused_before_anything_starts(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    where = ["--sources", str(_sources(tmp_path))] if command == "serve" else []
    state = ["--state-dir", str(tmp_path / "demo")] if command == "demo" else []
    done = _run(command, *where, *state, "--db", str(folder), "--port", "0")
    assert _refusal(done) == (
        f"collie-gateway: --db {folder} is a folder: name the SQLite file, "
        f"e.g. --db {folder / 'collie.db'}"
    )
    assert list(folder.iterdir()) == []
    assert not (tmp_path / "demo").exists(), "the demo started before refusing"


def test_db_in_a_missing_folder_is_refused_as_unix_is(tmp_path: Path) -> None:
    db = tmp_path / "no" / "such" / "g.db"
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--db", str(db), "--port", "0")
    assert _refusal(done) == (
        f"collie-gateway: --db {db}: the folder {tmp_path / 'no' / 'such'} does not exist"
    )
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_help_says_where_the_db_is_and_that_its_folder_must_exist(command: str) -> None:
    done = _run(command, "--help")
    text = " ".join(done.stdout.split())
    if command == "serve":
        assert (
            "--db DB SQLite file (default: collie.db in the current folder); its folder "
            "must exist, as --unix's" in text
        )
    else:
        assert "--db DB SQLite file (default: collie.db in the state folder)" in text
        assert "reused by the next run (default: ~/.collie/demo)" in text
        assert "--fresh start over: remove the demo's files from the state folder first" in text


async def _demo_run(
    home: Path, tmp: Path, *extra: str, start: str | None = None
) -> tuple[str | None, list[str]]:
    """Run ``collie-gateway demo`` with ``HOME`` and ``TMPDIR`` of the test's own until desk's
    conversations show; open one from desk's starter ``start`` if given; return its id and
    the ids of desk's open conversations, then stop the demo."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "collie_gateway", "demo", "--port", str(port), *extra],
        cwd=REPO,
        env={**os.environ, "COLLIE_TOKEN": "", "HOME": str(home), "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    opened: str | None = None
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            ids = await _listed(http, None)
            if start is not None:
                body = {"request_id": str(uuid.uuid4()), "starter": start}
                async with http.post("/api/v1/agents/desk/conversations", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    opened = (await resp.json())["conversation_id"]
                ids = await _listed(http, opened)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
    return opened, ids


async def _listed(http: aiohttp.ClientSession, conversation: str | None) -> list[str]:
    """Desk's open conversations once they list ``conversation`` (or any, given None)."""
    for _ in range(600):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get("/api/v1/agents/desk/conversations") as resp:
                if resp.status == 200:
                    ids = [r["conversation_id"] for r in (await resp.json())["rows"]]
                    if ids and (conversation is None or conversation in ids):
                        return ids
        await asyncio.sleep(0.05)
    raise AssertionError(f"desk's list never showed {conversation or 'a conversation'}")


async def test_demo_keeps_its_state_in_one_place_reused_until_fresh(tmp_path: Path) -> None:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    opened, _ = await _demo_run(home, tmp, start="asks")
    assert opened is not None
    state = home / ".collie" / "demo"
    assert (state / "collie.db").is_file()
    assert (state / "desk.db").is_file()
    _, again = await _demo_run(home, tmp)
    assert opened in again, "the second run did not reuse the first run's state"
    _, fresh = await _demo_run(home, tmp, "--fresh")
    assert opened not in fresh, "--fresh kept the earlier run's conversation"
    assert list(tmp.iterdir()) == [], "the demo left files in the temp folder"
