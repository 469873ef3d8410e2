"""Every shell block a page marks runnable runs as shown.

A page marks a block with an HTML comment on the line before its fence:

    <!-- runnable -->               run it; it must exit 0 (what it starts in the background
                                    lives until the page is done)
    <!-- runnable: serves -->       a server a person leaves running in its own terminal:
                                    started, waited for until /healthz answers, stopped with
                                    Ctrl-C (SIGINT) when the page is done, and it must exit 0
    <!-- runnable: demo -->         the page says "with the demo running": the test starts
                                    `collie-gateway demo` first
    <!-- runnable: postgresql -->   COLLIE_DATABASE_URL names a fresh PostgreSQL database, as
                                    the page's set-up before it exported one

A block followed by ``<!-- output -->`` and a fence says what it prints: its output must hold
that text.

The blocks of one page run in order, in one fresh folder that is also ``HOME`` (so
``~/.collie`` is the test's), with this checkout's ``collie-gateway`` and ``python`` first on
``PATH``, on loopback only, each bounded in time. The one departure from "as shown": the ports.
Each port a page names (``127.0.0.1:8765``, ``--port 8801``, ``"port": 8790``) is a free port
instead, the same one everywhere on the page, and a gateway started without ``--port`` is
given the page's 8765, so a test never meets a gateway already running. A block whose output
is JSON must not be an error body (``{"error": …}``), so a refused request fails the page too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fixtures.agents.harness import REPO, short_dir
from tests.collie_gateway.processes import free_port

MARKED = re.compile(
    r"^<!-- runnable(?:: ([\w, -]+))? -->\n```(?:sh|bash)\n(.*?)^```$"
    r"(?:\n+<!-- output -->\n```\w*\n(.*?)^```$)?",
    re.M | re.S,
)
PORT = re.compile(r"(?:127\.0\.0\.1:|--port |\"port\": )(\d{4,5})\b")
GATEWAY = re.compile(r"\bcollie-gateway (?:serve|demo)\b")
DEMO_PORT = 8765
BLOCK_SECONDS = 120
READY_SECONDS = 60


@dataclass(frozen=True)
class Block:
    """A runnable block of a page: its options and its commands."""

    options: frozenset[str]
    text: str
    output: str = ""  # what the page says it prints: the block's output must hold it


def blocks(page: Path) -> list[Block]:
    """The blocks ``page`` marks runnable, in order."""
    found = MARKED.findall(page.read_text(encoding="utf-8"))
    marks = [frozenset(filter(None, map(str.strip, o.split(",")))) for o, _, _ in found]
    return [Block(m, t, out) for m, (_, t, out) in zip(marks, found, strict=True)]


PAGES = [p for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if blocks(p)]


@dataclass
class Session:
    """One page's run: its folder, environment, ports and the processes it started."""

    folder: Path
    env: dict[str, str]
    ports: dict[int, int] = field(default_factory=dict)
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)

    def moved(self, text: str) -> str:
        """``text`` with each port of the page replaced by its free port."""
        for old in {int(p) for p in PORT.findall(text)} | {DEMO_PORT}:
            self.ports.setdefault(old, free_port())
        text = PORT.sub(lambda m: m[0].replace(m[1], str(self.ports[int(m[1])])), text)
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if GATEWAY.search(line) and "--port" not in line:  # the default, 8765, moved too
                lines[n] = GATEWAY.sub(rf"\g<0> --port {self.ports[DEMO_PORT]}", line)
        return "\n".join(lines) + "\n"

    def start(self, command: str) -> None:
        """Start a server a person would leave running, and wait until it answers."""
        ports = PORT.findall(command) or [str(self.ports[DEMO_PORT])]
        log = self.folder / f"server-{len(self.servers)}.log"
        with log.open("wb") as out:  # the server writes its own copy of the descriptor
            proc = subprocess.Popen(
                ["bash", "-c", "exec " + command],
                cwd=self.folder,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.servers.append(proc)
        _ready(f"http://127.0.0.1:{ports[-1]}/healthz", proc, log)

    def run(self, commands: str) -> str:
        """Run a block to its end; its output. It must exit 0 within the bound."""
        log = self.folder / f"block-{len(self.groups)}.log"
        with log.open("wb") as out:  # a file, not a pipe: what it leaves running holds it open
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", commands],
                cwd=self.folder,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.groups.append(proc.pid)
        try:
            proc.wait(timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"over {BLOCK_SECONDS} s:\n{commands}") from None
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, f"exit {proc.returncode}:\n{commands}\n{text}"
        return text

    def stop(self) -> list[tuple[subprocess.Popen[bytes], int | None]]:
        """Ctrl-C every server, end what blocks left running; each server's exit code."""
        for proc in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        codes: list[tuple[subprocess.Popen[bytes], int | None]] = []
        for proc in self.servers:
            try:
                codes.append((proc, proc.wait(timeout=30)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                codes.append((proc, None))
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
        return codes


def _ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log.read_text()}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=2) as resp,
        ):
            if resp.status == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in {READY_SECONDS} s: {log.read_text()}")


@contextlib.contextmanager
def session(database_url: str | None) -> Iterator[Session]:
    with short_dir() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        bin_dir = str(Path(sys.executable).parent)  # this venv's, as after the README's set-up
        env |= {"HOME": str(folder), "PATH": bin_dir + os.pathsep + env.get("PATH", "")}
        env["PYTHONPATH"] = str(REPO)  # this checkout, whichever one the venv was made from
        if database_url is not None:
            env["COLLIE_DATABASE_URL"] = database_url
        run = Session(folder, env)
        try:
            yield run
        finally:
            codes = run.stop()
        for proc, code in codes:
            assert code == 0, f"{proc.args!r} ended with {code} on Ctrl-C"


def _no_error_body(output: str, commands: str) -> None:
    decoder = json.JSONDecoder()
    for line in output.splitlines():
        at = 0
        while line.startswith("{", at):  # curl prints bodies one after another
            body, at = decoder.raw_decode(line, at)
            assert "error" not in body, f"{commands}\nanswered {body}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_runnable_block_runs_as_shown(page: Path, request: pytest.FixtureRequest) -> None:
    marked = blocks(page)
    needs_pg = any("postgresql" in b.options for b in marked)
    url = request.getfixturevalue("pg_url") if needs_pg else None
    with session(url) as run:
        for block in marked:
            unknown = block.options - {"serves", "demo", "postgresql"}
            assert unknown == set(), f"{page.name}: unknown marks {unknown}"
            text = run.moved(block.text)
            if "demo" in block.options and not run.servers:
                run.start(run.moved("collie-gateway demo").strip())
            if "serves" in block.options:
                run.start(text.strip())
            else:
                output = run.run(text)
                _no_error_body(output, text)
                assert block.output.strip() in output, f"{text}\nprinted {output!r}"


def test_the_readme_marks_the_demo_and_its_dashboard_and_each_page_its_first_example() -> None:
    readme = blocks(REPO / "README.md")
    assert [b.text.strip() for b in readme[:2]] == [
        "collie-gateway demo",
        "curl -s http://127.0.0.1:8765/api/v1/dashboard",
    ]
    assert readme[0].options == {"serves"}
    pages = {p.name for p in PAGES}
    first = {"README.md", "configuration.md", "crew.md", "phones.md", "phone-api.md"}
    assert first | {"postgresql.md"} <= pages


def test_the_readmes_set_up_is_what_ci_does_and_its_test_command_is_cis() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    fences = re.findall(r"^```sh\n(.*?)^```$", readme, re.M | re.S)
    set_up, tests = fences[0].strip(), "bash .ci/run"
    assert set_up == "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]'"
    assert tests in [f.strip() for f in fences]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv .venv" in ci
    assert ". .venv/bin/activate" in ci
    assert "pip install --quiet -e '.[dev]'" in ci
    # Lint, then the tests with mypy checking beside them; either failing fails the run.
    lines = ci.rstrip().splitlines()
    assert "ruff check ." in lines
    assert 'mypy >"$mypy_log" 2>&1 &' in lines
    assert lines[-4:] == [
        "python -m pytest -q || status=$?",
        'wait "$mypy_pid" || status=1',
        'cat "$mypy_log"',
        'exit "$status"',
    ]
