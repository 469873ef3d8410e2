"""The bridge kit (bridges/kit): its smallest bridge (docs/examples/bridge_minimal.py) run as
a process on a real Unix socket and answered by a raw HTTP client; its state on a real SQLite
file; its asks raised and changed in a real agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from bridges.kit import AgentBridge, State, Table, asks, notice, serve_until_stopped
from fixtures.agents.harness import short_dir
from wire.agent import Agent, Argument, FormField, Option, ToolRef

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "bridge_minimal.py"


async def request(sock: Path, method: str, path: str, body: object = None) -> tuple[int, Any]:
    """One HTTP/1.1 request over the Unix socket, written and read by hand (wire/SPEC.md §1)."""
    data = b"" if body is None else json.dumps(body).encode()
    reader, writer = await asyncio.open_unix_connection(str(sock))
    head = f"{method} {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    top, _, payload = raw.partition(b"\r\n\r\n")
    status = int(top.split(b" ", 2)[1])
    return status, json.loads(payload)


class Running(NamedTuple):
    proc: asyncio.subprocess.Process
    sock: Path


async def start_example(folder: Path) -> Running:
    """The example as its own process (``-v``: it logs the answer), once it says it serves."""
    sock = folder / "m.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "--socket",
        str(sock),
        "--state",
        str(folder / "m.db"),
        "-v",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.decode().strip() == f"bridge minimal: serving minimal on {sock}"
    return Running(proc, sock)


async def stop_example(running: Running) -> str:
    """SIGTERM; the process stops cleanly (0). Returns what it logged."""
    running.proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(running.proc.communicate(), 30)
    assert running.proc.returncode == 0, err.decode()
    return err.decode()


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    with short_dir() as path:
        yield path


async def test_the_minimal_bridge_gets_its_answer_exactly_once(folder: Path) -> None:
    running = await start_example(folder)
    try:
        status, conv = await request(running.sock, "GET", "/conversations/job")
        assert status == 200
        [ask] = conv["asks"]
        assert (ask["id"], ask["kind"], ask.get("version", 1)) == ("run-job", "permission", 1)
        assert [(o["id"], o["role"]) for o in ask["options"]] == [
            ("allow", "allow"),
            ("deny", "deny"),
        ]
        reply = {"request_id": "tap-1", "version": 1, "answer": {"option": "allow"}}
        assert await request(running.sock, "POST", "/asks/run-job/reply", reply) == (
            200,
            {"outcome": "accepted"},
        )
        # The phone's retry of the same tap, then another tap: neither is a second answer.
        assert await request(running.sock, "POST", "/asks/run-job/reply", reply) == (
            200,
            {"outcome": "accepted"},
        )
        other = {"request_id": "tap-2", "version": 1, "answer": {"option": "deny"}}
        assert await request(running.sock, "POST", "/asks/run-job/reply", other) == (
            200,
            {"outcome": "answered"},
        )
    finally:
        logged = await stop_example(running)
    assert logged.count("run-job: ") == 1, logged
    assert "run-job: answered allow" in logged

    # Restarted on the same state: the ask stays answered and the answer is not logged again.
    running = await start_example(folder)
    try:
        status, conv = await request(running.sock, "GET", "/conversations/job")
        assert (status, conv.get("asks", [])) == (200, [])
    finally:
        logged = await stop_example(running)
    assert "run-job: " not in logged, logged


async def test_a_bridge_whose_start_is_refused_says_so_in_one_line_and_exits_1(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Refused(AgentBridge):
        protocol = "refused"

        async def start(self) -> None:
            raise OSError("the peer is not there")

    assert await serve_until_stopped(Refused(), folder / "r.sock") == 1
    assert capsys.readouterr().err == "bridge refused: the peer is not there\n"
    assert not (folder / "r.sock").exists()


class Row(NamedTuple):
    key: str
    n: int
    note: str = ""
    extra: bytes | None = None


ROWS = Table("rows", Row)
OTHER = Table("others", Row)


def test_state_keeps_declared_tables_in_a_real_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "bridge.db"
    state = State(path, ROWS, OTHER)
    try:
        assert state.get(ROWS, "a") is None
        assert state.next(ROWS, "n") == 1
        state.put(ROWS, Row("a", 1))
        state.put(ROWS, Row("b", 5, "five", b"\x00"))
        state.put(ROWS, Row("a", 2, "two"))  # over the row of its key
        assert state.get(ROWS, "a") == Row("a", 2, "two", None)
        assert state.next(ROWS, "n") == 6
        assert not state.add(ROWS, Row("a", 9))  # taken: kept as it was
        assert state.add(ROWS, Row("c", 0))
        state.set(ROWS, "c", note="zero", n=3)
        assert state.find(ROWS, order="n") == [
            Row("a", 2, "two"),
            Row("c", 3, "zero"),
            Row("b", 5, "five", b"\x00"),
        ]
        assert state.find(ROWS, note="five") == [Row("b", 5, "five", b"\x00")]
        state.put(OTHER, Row("b", 0))
        assert [r.key for r in state.without(ROWS, OTHER)] == ["a", "c"]
        state.drop_below(ROWS, "n", 3)
        assert [r.key for r in state.find(ROWS, order="key", limit=1)] == ["b"]
        with pytest.raises(KeyError, match="no column"):
            state.set(ROWS, "a", **{"n = 1 --": 1})
    finally:
        state.close()
    # What is in the file, read without the kit: the declared columns, kept.
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT * FROM rows ORDER BY key").fetchall() == [
            ("b", 5, "five", b"\x00"),
            ("c", 3, "zero", None),
        ]
        schema = db.execute("SELECT sql FROM sqlite_master WHERE name = 'rows'").fetchone()[0]
    assert schema == (
        "CREATE TABLE rows (key TEXT PRIMARY KEY, n INTEGER NOT NULL, "
        "note TEXT NOT NULL DEFAULT '', extra BLOB)"
    )


async def test_state_off_the_loop_and_reopened(tmp_path: Path) -> None:
    state = State(tmp_path / "b.db", ROWS)
    await state.off_loop(state.put, ROWS, Row("a", 1))
    await asyncio.to_thread(state.close)
    again = State(tmp_path / "b.db", ROWS)
    try:
        assert await again.off_loop(again.get, ROWS, "a") == Row("a", 1)
    finally:
        again.close()


def test_a_row_not_waiting_for_the_disk_survives_a_killed_process(tmp_path: Path) -> None:
    """``put(durable=False)`` does not wait for the disk, yet a bridge killed right after
    keeps the row (a power cut may not); the writes after it wait for the disk again."""
    path = tmp_path / "b.db"
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from typing import NamedTuple\n"
        "from bridges.kit import State, Table\n"
        "class Row(NamedTuple):\n"
        "    key: str\n"
        "    n: int\n"
        "ROWS = Table('rows', Row)\n"
        "state = State(Path(sys.argv[1]), ROWS)\n"
        "state.put(ROWS, Row('fast', 1), durable=False)\n"
        "print(state._db.execute('PRAGMA synchronous').fetchone()[0], flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.strip() == "2"  # FULL again: the next write waits for the disk
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT key, n FROM rows").fetchall() == [("fast", 1)]


async def test_typed_asks_raise_and_change_in_a_real_agent(tmp_path: Path) -> None:
    tool = ToolRef(call_id="c1", name="deploy")
    permission = asks.permission(
        "Deploy?",
        text="to prod",
        tool=tool,
        arguments=[Argument(name="tag", value="v2", origin="typed")],
        reasons=["it touches prod"],
        irreversible=True,
    )
    assert permission["kind"] == "permission"
    assert [o.role for o in permission["options"]] == ["allow", "deny"]
    async with Agent(state_path=tmp_path / "a.db", runtime="t") as agent:
        conv = await agent.open_conversation("c", title="C")
        handle = await permission.raise_in(conv, id="p1")
        assert (handle.ask.title, handle.ask.text, handle.ask.tool) == ("Deploy?", "to prod", tool)
        assert (handle.ask.reasons, handle.ask.irreversible) == (["it touches prod"], True)
        assert handle.ask.arguments == [Argument(name="tag", value="v2", origin="typed")]
        picks = [Option(id="a", label="A"), Option(id="b", label="B")]
        await asks.choice("Which?", picks, multiple=True).change(handle)
        assert (handle.version, handle.ask.kind, handle.ask.title) == (2, "permission", "Which?")
        assert (handle.ask.options, handle.ask.multiple, handle.ask.tool) == (picks, True, None)
        text = await asks.text("Name?", max_length=40).raise_in(conv, id="t1")
        assert (text.ask.kind, text.ask.max_length) == ("text", 40)
        fields = [FormField(id="f", kind="switch", label="On")]
        form = await asks.form("Form", fields).raise_in(conv, id="f1")
        assert (form.ask.kind, form.ask.fields) == ("form", fields)
        await notice(conv, "said once", id="n1")
        await notice(conv, "said once", id="n1")
        await conv.close()
        await notice(conv, "dropped: closed")
        assert [i.text for i in conv.items if i.kind == "notice"] == ["said once"]
