"""Shared pieces of the benchmarks: helper processes that speak JSON lines, percentiles, RSS,
an SSE reader, seeding an SDK agent's SQLite file, and the report's lines.

Every helper process stops by itself: on ``quit``, when its stdin closes (the bench died), or
after ``--max-seconds``. Only loopback addresses and Unix sockets are used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import aiohttp

from wire.messages import MAX_EVENT, Conversation, encode
from wire.sse import SSEEvent, SSEParser

REPO: Final = Path(__file__).resolve().parents[1]
BENCH: Final = REPO / "bench"
HELPER_MAX_SECONDS: Final = 240.0  # a helper outlives no bench
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_FRAME_LINE: Final = re.compile(r":\d+\)$")
# Leaf frames that are waiting, not working (py-spy does not always see them as idle).
_IDLE_LEAVES: Final = (
    "EpollSelector.select (selectors.py)",
    "_connection_worker_thread (aiosqlite/core.py)",
)

Json = dict[str, Any]


# --- numbers -----------------------------------------------------------------------------


def pct(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def rss_kib(pid: int | None = None) -> int:
    """Resident memory of a process (default: this one), in KiB, from ``/proc``."""
    status = Path(f"/proc/{pid or 'self'}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc status")


@contextlib.contextmanager
def short_dir(prefix: str = "cb-") -> Iterator[Path]:
    """A fresh directory short enough for Unix socket paths; removed on exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- the report --------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def ratio(value: float, baseline: float) -> str:
    if baseline <= 0 or math.isnan(baseline) or math.isnan(value):
        return "n/a"
    return f"{value / baseline:.2f}x"


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def row(label: str, text: str) -> None:
    print(f"  {label:<34} {text}", flush=True)


# --- helper processes --------------------------------------------------------------------


class Child:
    """A helper process (``bench/<script>.py``) speaking one JSON object a line."""

    def __init__(self, script: str, args: Sequence[str], tree: Path | None = None) -> None:
        self.script = script
        self.args = list(args)
        self.tree = tree or REPO  # whose packages it imports (a baseline's worktree)
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(
        self, within: float, on_spawn: Callable[[int], Awaitable[None]] | None = None
    ) -> Json:
        """Run the helper (``on_spawn(pid)`` first) and return its first line (it is ready)."""
        # A baseline's worktree runs its own helper script: it knows its own modules.
        bench = self.tree / "bench" if (self.tree / "bench" / self.script).is_file() else BENCH
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.tree), str(bench)])}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(bench / self.script),
            *self.args,
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )
        if on_spawn is not None:
            await on_spawn(self.proc.pid)
        return await self.read(within)

    async def read(self, within: float) -> Json:
        """The helper's next line, decoded.

        Raises:
            RuntimeError: it exited or said nothing in time.
        """
        assert self.proc is not None
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(within):
                line = await self.proc.stdout.readline()
        except TimeoutError:
            await self.kill()
            raise RuntimeError(f"{self.script}: no answer in {within} s") from None
        if not line:
            await self.kill()
            raise RuntimeError(f"{self.script} exited (code {self.proc.returncode})")
        message: Json = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"{self.script}: {message['error']}")
        return message

    def send(self, command: Json) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")

    async def call(self, command: Json, within: float = 60.0) -> Json:
        """Send ``command`` and return the helper's answer."""
        self.send(command)
        return await self.read(within)

    async def close(self, within: float = 15.0) -> None:
        """Ask the helper to quit; SIGKILL it if it does not in time."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            async with asyncio.timeout(within):
                await proc.wait()
        except TimeoutError:
            await self.kill()
        self.proc = None

    async def kill(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()


Handler = Callable[[Json], Awaitable[Json]]


def say(message: Json) -> None:
    """Write one line of the helper protocol."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve_commands(handlers: dict[str, Handler], max_seconds: float) -> None:
    """The helper's side: answer commands from stdin until ``quit``, EOF or ``max_seconds``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    deadline = loop.time() + max_seconds
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            async with asyncio.timeout(left):
                line = await reader.readline()
        except TimeoutError:
            return
        if not line:
            return
        command: Json = json.loads(line)
        name = command.get("cmd", "")
        if name == "quit":
            return
        handler = handlers.get(name)
        if handler is None:
            say({"error": f"unknown command {name!r}"})
            continue
        try:
            say(await handler(command))
        except Exception as exc:
            say({"error": f"{name}: {type(exc).__name__}: {exc}"})


# --- SDK agents' state files -------------------------------------------------------------


def us(at: datetime) -> int:
    """Microseconds since the epoch, as the SDK's ``updated_us`` column keeps them."""
    return (at - _EPOCH) // timedelta(microseconds=1)


def seed_agent_db(path: Path, *, open_count: int, closed_count: int, now: datetime) -> None:
    """Write conversations straight into an SDK agent's SQLite file (its own schema,
    ``wire.agent._store._SCHEMA``): ``open_count`` idle ones and ``closed_count`` closed ones,
    one row each in ``conversations(id, state, updated_us, data)`` where ``data`` is the
    msgspec JSON of a ``wire.messages.Conversation`` without items. Far faster than the SDK,
    which commits (and fsyncs) once per conversation."""
    from wire.agent._store import _SCHEMA

    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA)
        rows = []
        for index in range(open_count + closed_count):
            closed = index >= open_count
            conv = Conversation(
                id=f"c{index:06d}",
                title=f"Fix the flaky test in module {index % 977}: retry on timeout",
                subtitle=f"branch feature/bench-{index}",
                state="closed" if closed else "idle",
                updated_at=now - timedelta(seconds=index),
                turn=3,
                workspace="~/src/bench",
            )
            rows.append((conv.id, conv.state, us(conv.updated_at), encode(conv)))
        db.executemany(
            "INSERT INTO conversations (id, state, updated_us, data) VALUES (?, ?, ?, ?)", rows
        )
        db.commit()
    finally:
        db.close()


# --- reading server-sent events ----------------------------------------------------------


async def get_latencies(
    http: aiohttp.ClientSession,
    paths: dict[str, str],
    requests: int,
    budget_s: float,
    *,
    warmup: int,
    rng: random.Random | None = None,
) -> dict[str, list[float]]:
    """Seconds per GET of each of ``paths`` (key -> URL or path), keep-alive: ``warmup``
    untimed rounds, then up to ``requests`` rounds of each path once (in a random order each
    round when ``rng`` is given) while within ``budget_s``. A status other than 200 stops it."""
    times: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(warmup):
        for url in paths.values():
            async with http.get(url) as resp:
                await resp.read()
    clock = Timer()
    for _ in range(requests):
        order = list(paths)
        if rng is not None:
            rng.shuffle(order)
        for key in order:
            t = time.perf_counter()
            async with http.get(paths[key]) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{paths[key]} answered {resp.status}")
            times[key].append(time.perf_counter() - t)
        if clock.elapsed > budget_s:
            break
    return times


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[SSEEvent]:
    """The events of a ``text/event-stream`` response, parsed by the project's parser."""
    parser = SSEParser(max_line=MAX_EVENT + 64)
    async for chunk in resp.content.iter_any():
        for event in parser.feed(chunk):
            yield event


@dataclass
class Timer:
    """Wall time since creation, in seconds."""

    start: float = 0.0

    def __post_init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def profile_top(path: Path, count: int = 18) -> str:
    """The top of a cProfile dump, by own time and by cumulative time."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(count)
    stats.sort_stats("cumulative").print_stats(count)
    return out.getvalue()


# --- agents and sources ------------------------------------------------------------------


def write_spec(tmp: Path, agents: list[Json], max_seconds: float = HELPER_MAX_SECONDS) -> Path:
    """The spec file of ``_agents.py``."""
    path = tmp / f"agents-{len(list(tmp.glob('agents-*.json')))}.json"
    path.write_text(json.dumps({"agents": agents, "max_seconds": max_seconds}))
    return path


def write_sources(tmp: Path, ready: Json, name: str = "sources.json") -> Path:
    """A ``sources.json`` for the agents ``_agents.py`` said it serves (dashboard order)."""
    entries = []
    for agent, where in ready.items():
        if where["socket"]:
            entries.append({"name": agent, "socket": where["socket"]})
        else:
            entries.append({"name": agent, "url": where["url"]})
    path = tmp / name
    path.write_text(json.dumps({"durable_agents": entries}))
    return path


async def start_agents(
    tmp: Path,
    agents: list[Json],
    within: float = 120.0,
    max_seconds: float = HELPER_MAX_SECONDS,
    script: str = "_agents.py",
) -> tuple[Child, Json]:
    """Start ``_agents.py`` (or ``script``, which takes the same spec: ``_wirefleet.py``; it
    stops by itself after ``max_seconds``); returns it and where each agent listens."""
    child = Child(script, [str(write_spec(tmp, agents, max_seconds))])
    first = await child.start(within)
    return child, first["ready"]


async def start_gateway(
    sources: Path,
    db: Path,
    *extra: str,
    within: float = 120.0,
    on_spawn: Callable[[int], Awaitable[None]] | None = None,
    tree: Path | None = None,
) -> tuple[Child, Json]:
    """Start ``_gateway.py``; returns it and its first line (port, Ready time, memory).
    ``tree``: import the gateway from that worktree (a baseline), not this one."""
    child = Child("_gateway.py", ["--sources", str(sources), "--db", str(db), *extra], tree)
    return child, await child.start(within, on_spawn)


# --- profiling from outside --------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Spy:
    """``py-spy record`` attached to a helper for one phase; :meth:`stop` returns its top."""

    def __init__(self, pid: int, out: Path, rate: int = 1000) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self.proc: asyncio.subprocess.Process | None = None

    @staticmethod
    def binary() -> str | None:
        beside = Path(sys.executable).parent / "py-spy"
        return str(beside) if beside.exists() else shutil.which("py-spy")

    async def start(self) -> None:
        exe = self.binary()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.proc = await asyncio.create_subprocess_exec(
            exe,
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            str(self.rate),
            "--format",
            "raw",
            "--output",
            str(self.out),
            "--nonblocking",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.sleep(0.3)  # attached

    async def stop(self, count: int = 14) -> str:
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(15.0):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        return spy_top(self.out, count)


def spy_top(path: Path, count: int = 14) -> str:
    """The functions seen most in a py-spy raw (collapsed stacks) file: own and inclusive."""
    if not path.exists():
        return "(no py-spy output)"
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        samples = int(n)
        frames = [_FRAME_LINE.sub(")", f) for f in stack.split(";")]
        if frames[-1] in _IDLE_LEAVES:
            continue
        total += samples
        leaf = frames[-1]
        own[leaf] = own.get(leaf, 0) + samples
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + samples
    if not total:
        return "(no samples)"
    lines = [f"    {total} samples at work (waiting in epoll or a sqlite queue left out); own:"]
    for name, hits in sorted(own.items(), key=lambda kv: -kv[1])[:count]:
        lines.append(f"    {100 * hits / total:5.1f}%  {name}")
    lines.append("    inclusive:")
    for name, hits in sorted(inclusive.items(), key=lambda kv: -kv[1])[:count]:
        lines.append(f"    {100 * hits / total:5.1f}%  {name}")
    return "\n".join(lines)


class Probe:
    """Per phase of a bench: the gateway's CPU time, and optionally a cProfile dump
    (``--profile DIR``, in the gateway) or a py-spy sample (``--py-spy DIR``, from outside)."""

    def __init__(self, gateway: Child, profile: Path | None, spy: Path | None) -> None:
        self.gateway = gateway
        self.profile = profile
        self.spy_dir = spy
        self.cpu: dict[str, float] = {}
        self.spied: dict[str, str] = {}
        self.dumps: dict[str, Path] = {}
        self._spy: Spy | None = None
        self._cpu0 = 0.0

    async def begin(self, phase: str) -> None:
        if self.profile is not None:
            await self.gateway.call({"cmd": "profile_start"})
        if self.spy_dir is not None:
            self._spy = Spy(self.gateway.pid, self.spy_dir / f"{phase}.txt")
            await self._spy.start()
        self._cpu0 = cpu_seconds(self.gateway.pid)

    async def end(self, phase: str) -> None:
        self.cpu[phase] = cpu_seconds(self.gateway.pid) - self._cpu0
        if self._spy is not None:
            self.spied[phase] = await self._spy.stop()
            self._spy = None
        if self.profile is not None:
            answer = await self.gateway.call({"cmd": "profile_stop", "phase": phase})
            self.dumps[phase] = Path(answer["profile"])

    def print(self) -> None:
        for phase, text in self.spied.items():
            heading(f"py-spy: the gateway during {phase}")
            print(text)
        for phase, path in self.dumps.items():
            heading(f"cProfile: the gateway during {phase} ({path})")
            print(profile_top(path, 16))


def bench_main(
    p: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], Awaitable[Any]],
    report: Callable[[Any, argparse.Namespace], None],
    cap: float = 170.0,
) -> None:
    """The shared tail of every bench script: the profiling options, the run (capped at
    ``cap`` seconds, 170 unless a script needs longer), the report and the total time."""
    p.add_argument("--profile", type=Path, help="cProfile the gateway per phase, dumps here")
    p.add_argument("--py-spy", type=Path, help="py-spy the gateway per phase, output here")
    args = p.parse_args()
    for where in (args.profile, args.py_spy):
        if where is not None:
            where.mkdir(parents=True, exist_ok=True)
    clock = Timer()
    results = asyncio.run(asyncio.wait_for(run(args), timeout=cap))
    report(results, args)
    print(f"\n(total {clock.elapsed:.0f} s)")
