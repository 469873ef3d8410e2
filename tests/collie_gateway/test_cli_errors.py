"""Errors that explain themselves (issue 11.6), each seen through the CLI run as a process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from collie_gateway.errors import StoreError
from collie_gateway.store.database import Database
from collie_gateway.store.schema import DELTAS as MIGRATIONS
from fixtures.agents.harness import REPO, serve_agent, short_dir
from wire.agent import Agent, Starter

EXIT_CONFIG = 2


def _run(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run ``collie-gateway ARGS`` in ``cwd`` to its end (it must end soon: a refusal)."""
    return subprocess.run(
        [sys.executable, "-m", "collie_gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLLIE_TOKEN": "", **(env or {})},
        check=False,
    )


def _sources(tmp: Path, entries: list[dict[str, str]] | None = None) -> Path:
    path = tmp / "sources.json"
    path.write_text(json.dumps({"durable_agents": entries or []}), encoding="utf-8")
    return path


def _one_line_refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a refusal prints on stderr, having checked exit 2 and no traceback."""
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_port_out_of_range_is_one_line_exit_2(tmp_path: Path) -> None:
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--port", "99999")
    assert _one_line_refusal(done) == "collie-gateway: --port 99999 is not a port (0 to 65535)"
    assert not (tmp_path / "collie.db").exists()


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (None, "No such file or directory"),
        ("{not json", "not a JSON file"),
        ('{"no_such_key": "x"}', "unknown string key 'no_such_key'"),
    ],
)
def test_strings_file_missing_or_invalid_is_named_exit_2(
    tmp_path: Path, content: str | None, fault: str
) -> None:
    strings = tmp_path / "phone-strings.json"
    if content is not None:
        strings.write_text(content, encoding="utf-8")
    sources = _sources(tmp_path)
    db = tmp_path / "g.db"
    commands = [["serve", "--sources", str(sources)]]
    if content is None:  # the demo reads the file the same way: once is enough
        commands.append(["demo", "--state-dir", str(tmp_path)])
    for command in commands:
        done = _run(*command, "--db", str(db), "--port", "0", "--strings", str(strings))
        line = _one_line_refusal(done)
        assert line.startswith(f"collie-gateway: --strings {strings}: "), line
        assert fault in line
    assert not db.exists()
    assert not (tmp_path / "desk.db").exists(), "the demo started agents before refusing"


def test_unix_socket_in_a_missing_folder_names_the_path(tmp_path: Path) -> None:
    sock = tmp_path / "no" / "such" / "phone.sock"
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--unix", str(sock))
    line = _one_line_refusal(done)
    assert line == (
        f"collie-gateway: --unix {sock}: the folder {tmp_path / 'no' / 'such'} does not exist"
    )


def test_port_in_use_is_said_first(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for command in (
            ["serve", "--sources", str(_sources(tmp_path))],
            ["demo", "--state-dir", str(tmp_path / "demo")],
        ):
            done = _run(*command, "--port", str(port), "--db", str(tmp_path / "g.db"))
            line = _one_line_refusal(done)
            assert line.startswith(f"collie-gateway: port {port} on 127.0.0.1 is in use"), line
            assert done.stdout == "", "hints printed before the refusal"
    assert not (tmp_path / "demo" / "desk.db").exists(), "the demo started agents"


# --- a SQLite file this gateway cannot use ------------------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` (the database, its -wal and -shm), name -> content."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _gateway_file(path: Path, *, wal: bool) -> None:
    """A store as this gateway leaves it, then made one schema version newer."""
    asyncio.run(_open_and_close(path))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        if not wal:
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("CREATE TABLE from_the_future(x)")
        conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")


async def _open_and_close(path: Path) -> None:
    store = await Database.open(path)
    await store.close()


NEWER = (
    "collie-gateway: {db}: schema version {v} is newer than this gateway knows ({known});"
    " update the gateway (the file was not changed)"
)


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback-journal"])
def test_a_file_from_a_newer_gateway_is_one_line_exit_2_and_left_untouched(
    tmp_path: Path, wal: bool
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = state / "g.db"
    _gateway_file(db, wal=wal)
    before = _files(state)
    assert list(before) == ["g.db"]
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--db", str(db), "--port", "0")
    line = _one_line_refusal(done)
    assert line == NEWER.format(db=db, v=len(MIGRATIONS) + 1, known=len(MIGRATIONS))
    assert done.stdout == "", "it said it serves before refusing"
    assert _files(state) == before


def test_a_newer_schema_still_in_the_wal_of_a_running_gateway_is_seen(tmp_path: Path) -> None:
    # The newer gateway runs (or crashed): its version change is in the -wal, not yet in the
    # main file, whose header still says the old version.
    state = tmp_path / "state"
    state.mkdir()
    db = state / "g.db"
    asyncio.run(_open_and_close(db))
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as newer:
        newer.execute("PRAGMA wal_autocheckpoint=0")
        newer.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
        assert int.from_bytes(db.read_bytes()[60:64], "big") == len(MIGRATIONS)
        before = {k: v for k, v in _files(state).items() if not k.endswith("-shm")}
        done = _run("serve", "--sources", str(_sources(tmp_path)), "--db", str(db))
        line = _one_line_refusal(done)
        assert line == NEWER.format(db=db, v=len(MIGRATIONS) + 1, known=len(MIGRATIONS))
        after = {k: v for k, v in _files(state).items() if not k.endswith("-shm")}
        assert after == before


def test_a_file_that_is_not_a_database_is_one_line_exit_2_and_left_untouched(
    tmp_path: Path,
) -> None:
    sources = _sources(tmp_path)
    db = tmp_path / "g.db"
    db.write_bytes(b"my notes, not a database\n" * 300)
    before = _files(tmp_path)
    done = _run("serve", "--sources", str(sources), "--db", str(db), "--port", "0")
    line = _one_line_refusal(done)
    assert line == f"collie-gateway: {db}: not a gateway database (file is not a database)"
    assert _files(tmp_path) == before


async def test_the_store_refuses_a_newer_file_in_process_too(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    await asyncio.to_thread(_gateway_file, db, wal=True)
    before = _files(tmp_path)
    with pytest.raises(StoreError, match="is newer than this gateway knows"):
        await Database.open(db)
    assert _files(tmp_path) == before


# --- a gateway process serving a phone API ---------------------------------------------------


async def _wait_ready(http: aiohttp.ClientSession, agents: int) -> None:
    for _ in range(400):
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get("/healthz") as resp:
                if (await resp.json())["ready"] >= agents:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway did not get ready")


@contextlib.asynccontextmanager
async def _gateway(
    tmp: Path, sources: Path, token: str
) -> AsyncIterator[tuple[aiohttp.ClientSession, Path]]:
    """``collie-gateway serve`` on a Unix socket with a token; a session that sends it."""
    sock = tmp / "phone.sock"
    db = tmp / "state" / "g.db"
    db.parent.mkdir(exist_ok=True)  # --db's folder must exist, as --unix's (issue 25.5)
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "collie_gateway", "serve", "--sources", str(sources)],
        *["--db", str(db), "--unix", str(sock)],
        cwd=REPO,
        env={**os.environ, "COLLIE_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        connector = aiohttp.UnixConnector(path=str(sock))
        async with aiohttp.ClientSession("http://gateway", connector=connector) as http:
            yield http, db
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, err.decode()


async def test_http_errors_explain_themselves(tmp_path: Path) -> None:
    with short_dir() as tmp:
        agent = Agent(
            runtime="desk",
            features=["history", "starters"],
            starters=[Starter(id="note", label="Take a note")],
            state_path=tmp / "desk.db",
        )
        async with serve_agent(agent, socket_path=tmp / "desk.sock"):
            sources = _sources(tmp, [{"name": "desk", "socket": str(tmp / "desk.sock")}])
            async with _gateway(tmp, sources, token="s3cret") as (http, db):
                await _wait_ready(http, 0)
                # 401 names its scheme.
                async with http.get("/api/v1/dashboard") as resp:
                    assert resp.status == 401
                    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                    assert (await resp.json())["error"] == "unauthorized"
                http.headers["Authorization"] = "Bearer s3cret"
                await _wait_ready(http, 1)
                # Unknown routes and methods answer the JSON error body.
                async with http.get("/api/v1/nope") as resp:
                    assert resp.status == 404
                    assert resp.content_type == "application/json"
                    assert await resp.json() == {
                        "error": "not_found",
                        "message": "no route /api/v1/nope",
                    }
                async with http.delete("/api/v1/dashboard") as resp:
                    assert resp.status == 405
                    assert (await resp.json())["error"] == "method_not_allowed"
                    assert "GET" in resp.headers["Allow"]
                # A mistyped starter, a bad cursor.
                start = {"request_id": "r-1", "starter": "notte"}
                async with http.post("/api/v1/agents/desk/conversations", json=start) as resp:
                    assert await resp.json() == {
                        "outcome": "not_found",
                        "message": "No starter named “notte”.",
                        "conversation_id": None,
                    }
                async with http.get("/api/v1/agents/desk/closed?cursor=garbage") as resp:
                    assert resp.status == 400
                    body = await resp.json()
                    assert body["error"] == "bad_cursor"
                    assert "the cursor is not valid" in body["message"]
                # The state file and its WAL companions are the person's only.
                for path in (db, db.with_name("g.db-wal"), db.with_name("g.db-shm")):
                    assert path.stat().st_mode & 0o777 == 0o600, path
            assert (tmp / "desk.db").stat().st_mode & 0o777 == 0o600


async def test_demo_prints_where_to_look_at_once_into_a_file(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "demo.out"
    with out.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "collie_gateway", "demo", "--port", str(port)],
            *["--state-dir", str(tmp_path / "demo")],
            cwd=REPO,
            env={**os.environ, "COLLIE_TOKEN": ""},
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(600):
                if "dashboard:" in out.read_text(encoding="utf-8"):
                    break
                await asyncio.sleep(0.05)
            text = out.read_text(encoding="utf-8")
            assert proc.returncode is None, "the demo ended"
            # Stop it once it serves (its signal handlers are then in place).
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                await _wait_ready(http, 0)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 20)
    assert f"  dashboard:  curl http://127.0.0.1:{port}/api/v1/dashboard" in text
    assert 'desk\'s starter "Ask me something"' in text
