"""Several workers on PostgreSQL beside one SQLite worker, in the same run: answers a second
through the ledger (T1), an agent's commit to the phones' streams (D1), and failover after
the agent's follower is killed -9.

Run: ``python bench/workers_bench.py [--seconds S] [--concurrency C] [--streams N] [--asks N]
[--reader lean|aiohttp|both] [--lease S] [--kills N] [--py-spy DIR] [--before DIR] [--only
ledger|latency|balance]``; about 2–3 minutes with the defaults. The targets
(one PostgreSQL worker ≥ 3,000 answers a second, three ≥ 1.5× one; commit to phone event
with three workers at p99 within 1.2× one SQLite worker's, and ≤ 20 ms on a quiet machine)
are printed MET or MISSED, beside the load average the run saw. ``--py-spy DIR`` samples
each of the three workers during their commit-to-phone run (py-spy, the dev extra).

**Ledger.**
Each worker is a process of its own that opens the store as the gateway does
(``open_stores``) and, with ``--concurrency`` answers in flight, records and claims a tap
(``LedgerStore.take``) and settles it (``settle``): the two transactions of every answer,
each on a fresh ask. PostgreSQL is a throw-away server this bench starts
(``fixtures/postgres.py``): durability off, as in the tests, and again on a second server
with durability on (fsync and synchronous commits, as a production server). The agent's
round trip is not in it (bench/answer_bench.py). ``--before DIR`` runs each of these again,
right before it and on the same server, with the code of another checkout (e.g. ``git
archive <commit> | tar -x -C DIR``), shown as ``… (before)``: a change and the code before it
measured under the same load; so is each run of the commit to phone event (its gateways on
that code, its streams read by this tree's reader).

**Commit to phone event.** An SDK agent in this process opens a conversation, then (the
streams settled, 0.5 s) raises ``--asks`` asks, one every 50 ms; ``--streams`` live streams
(``GET /api/v1/events``), spread over the workers, each time the ``ask.raised`` of each ask
from just before the agent's commit. Gateways are real processes (``python -m collie_gateway
serve -v``): one on a SQLite file, then one and three on a PostgreSQL database of their own.
With PostgreSQL one worker follows the agent (the holder of its lease, found in the workers'
logs); every worker's streams get its events through the shared log (README, "Several workers
on PostgreSQL"), so with three workers the holder's streams and the others' are also shown
apart. The streams are read in this process, beside the agent, so a reader must cost little:
``--reader lean`` (the default, :class:`LeanWatch`) is an asyncio ``Protocol`` per stream
whose ``data_received`` only appends the chunk and ``perf_counter()`` (CLOCK_MONOTONIC, the
gateways' clock too); after the asks, once the streams have been quiet 0.2 s, each stream is
de-chunked and parsed (wire/sse.py) and every ask's event checked (each heard, once), its time
that of the chunk that completed its frame. ``--reader aiohttp`` (:class:`Watch`) reads with
aiohttp, the SSE parser and a ``json.loads`` of each event as it comes, as a phone's code
would; ``--reader both`` runs every configuration with each (``… (aiohttp reader)``). With 40
asks and 300 streams the p99 is the slowest ask or two, so each figure is shown again without
the first ask (a worker's first event pays for what is made on first use).

**Failover.** Three PostgreSQL workers with ``COLLIE_LEASE_SECONDS=--lease``. The holder
(the newest "following it (lease epoch N)" in the logs) is killed -9 while a stream is open
on each other worker; right after the kill the agent raises one ask. Measured from the kill:
until another worker's log says it follows the agent (its log line's time), and until the
streams on both surviving workers have heard that ask. The killed worker is then started
again and the next round kills the new holder (``--kills`` rounds). The SQLite baseline has
no failover: its one process is killed -9 and started again at once on the same file and
port (no supervisor's delay), timed until ``/healthz`` says the agent is ready.

**Balance.** ``--balance-agents`` agents (one SDK agent in this process served on as many
sockets) and three PostgreSQL workers started one after another (lease ``--lease``): the
time from the third worker's first heartbeat (it shows in ``GET /api/v1/workers``) until
no worker follows more than its share, the share of each, and the hand-overs the logs say.
Then the agent writes an item to one conversation on every socket, ``--balance-items``
times, and each worker's CPU time (``/proc/<pid>/stat``) over that stretch is shown with its
share of the three; beside it one SQLite worker following every agent under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiohttp

from bench._common import Spy, heading, pct, ratio, row, sse_events, verdict
from collie_gateway.core.answers import Tap, on_result
from collie_gateway.store.stores import open_stores
from fixtures.postgres import ThrowawayPostgres, drop_database, new_database
from wire.agent import Agent, ConversationHandle, Option
from wire.messages import MAX_EVENT
from wire.sse import SSEParser

PERMISSION = [Option(id="yes", label="Yes", role="allow"), Option(id="no", label="No", role="deny")]

REPO = Path(__file__).resolve().parent.parent
AGENT = "desk"
# The gateway's INFO line when a worker takes an agent's lease (services/following.py).
FOLLOWING = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: agent "
    + re.escape(AGENT)
    + r": following it \(lease epoch (\d+)\)$",
    re.MULTILINE,
)

Figures = dict[str, float]


# --- the ledger --------------------------------------------------------------------------


async def worker(
    db: Path, url: str | None, name: str, seconds: float, concurrency: int
) -> tuple[int, float]:
    """Answers this worker recorded and settled in ``seconds``, and the CPU seconds it took
    (its start left out)."""
    stores = await open_stores(db, url)
    done = 0
    cpu = time.process_time()
    deadline = time.monotonic() + seconds
    now = "2026-12-04T12:00:00+00:00"

    async def loop(lane: int) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < deadline:
            n += 1
            tap = Tap(f"{name}-{lane}-{n}", "desk", f"{name}-{lane}-{n}", 1, b'{"option":"y"}')
            decision, _ = await stores.ledger.take(tap, now)
            await stores.ledger.settle(on_result(decision.record, "accepted"), now)
            done += 1

    try:
        await asyncio.gather(*(loop(lane) for lane in range(concurrency)))
        cpu = time.process_time() - cpu
    finally:
        await stores.close()
    return done, cpu


@dataclass
class Rate:
    """Answers a second of some workers, and the CPU seconds they and the server used."""

    answers: float
    workers_cpu: float
    server_cpu: float


def server_cpu(server: ThrowawayPostgres | None) -> float:
    """CPU seconds the server's processes used so far (its ended backends included)."""
    if server is None or server.proc is None:
        return 0.0
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


async def run(
    db: Path,
    url: str | None,
    workers: int,
    seconds: float,
    concurrency: int,
    server: ThrowawayPostgres | None = None,
    repo: Path = REPO,
) -> Rate:
    """Answers a second of ``workers`` processes on one store (with the code in ``repo``)."""
    args = [str(db), url or "", str(seconds), str(concurrency)]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.workers_bench",
            "--child",
            f"w{i}",
            *args,
            cwd=repo,
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(workers)
    ]
    before = server_cpu(server)  # the workers' migration included: a few ms
    said = [(await p.communicate())[0].split() for p in procs]
    await asyncio.sleep(0.2)  # the server reaps the ended backends
    used = server_cpu(server) - before
    return Rate(sum(int(n) for n, _ in said) / seconds, sum(float(c) for _, c in said), used)


def child(name: str, db: str, url: str, seconds: str, concurrency: str) -> None:
    count, cpu = asyncio.run(worker(Path(db), url or None, name, float(seconds), int(concurrency)))
    print(count, cpu)


async def ledger(
    servers: Sequence[ThrowawayPostgres],
    seconds: float,
    concurrency: int,
    before: Path | None = None,
) -> Figures:
    """Answers a second: one SQLite worker, one and three on PostgreSQL (each server); and
    the CPU time an answer took in the workers and in the server (``…: cpu us`` keys). With
    ``before``, each also with that checkout's code, just before (``… (before)``)."""
    rates: Figures = {}
    got: dict[str, Rate] = {}
    repos = [(before, " (before)"), (REPO, "")] if before is not None else [(REPO, "")]
    with tempfile.TemporaryDirectory() as tmp:
        for repo, tag in repos:
            db = Path(tmp) / f"g{tag}.db"
            got[f"sqlite, 1 worker{tag}"] = await run(db, None, 1, seconds, concurrency, None, repo)
        for server in servers:
            for workers in (1, 3):
                for repo, tag in repos:
                    url = new_database(server.url())
                    try:
                        unused = Path(tmp) / "unused.db"
                        rate = await run(unused, url, workers, seconds, concurrency, server, repo)
                    finally:
                        drop_database(server.url(), url)
                    got[label_of(backend_of(server), workers) + tag] = rate
    for label, rate in got.items():
        rates[label] = rate.answers
    for label, rate in got.items():
        done = max(rate.answers * seconds, 1.0)
        rates[f"{label}: workers cpu us"] = rate.workers_cpu / done * 1e6
        rates[f"{label}: server cpu us"] = rate.server_cpu / done * 1e6
    return rates


def backend_of(server: ThrowawayPostgres) -> str:
    return "postgresql durable" if server.durable else "postgresql"


def label_of(backend: str, workers: int) -> str:
    return f"{backend}, {workers} worker{'s' if workers > 1 else ''}"


# --- gateway processes -------------------------------------------------------------------


@dataclass
class Gateway:
    """One gateway process (a worker): its base URL and its log."""

    proc: asyncio.subprocess.Process
    base: str
    log: Path
    port: int

    def follows(self) -> list[tuple[float, int]]:
        """(wall time, epoch) of each lease of the agent this worker's log says it took."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = []
        for stamp, epoch in FOLLOWING.findall(text):
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
            found.append((at, int(epoch)))
        return found

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def spawn(
    tmp: Path,
    db: str,
    log: Path,
    port: int,
    env: Mapping[str, str] | None = None,
    repo: Path = REPO,
) -> Gateway:
    """Start ``collie_gateway serve -v`` for ``tmp/sources.json`` on ``db`` (not waited for),
    with the code in ``repo``."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(repo)}
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "collie_gateway", "serve", "-v",
            "--sources", str(tmp / "sources.json"), "--db", db, "--port", str(port),
            cwd=repo, stdout=out, stderr=out, env=env,
        )  # fmt: skip
    return Gateway(proc, f"http://127.0.0.1:{port}", log, port)


async def wait_ready(gateway: Gateway, within: float = 60.0) -> float:
    """Poll ``/healthz`` every 10 ms until the agent is ready; ``perf_counter`` then."""
    deadline = time.perf_counter() + within
    async with aiohttp.ClientSession() as http:
        while time.perf_counter() < deadline:
            if not gateway.alive:
                break
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(gateway.base + "/healthz") as resp:
                    if (await resp.json())["ready"] >= 1:
                        return time.perf_counter()
            await asyncio.sleep(0.01)
    tail = gateway.log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{gateway.log.name}: agent not ready in {within} s:\n{tail}")


async def start_worker(
    tmp: Path, db: str, name: str, env: Mapping[str, str] | None = None, repo: Path = REPO
) -> Gateway:
    """A gateway process on ``db``, once its agent is ready; its log is ``tmp/name.log``."""
    gateway = await spawn(tmp, db, tmp / f"{name}.log", free_port(), env, repo)
    await wait_ready(gateway)
    return gateway


async def stop(gateways: Sequence[Gateway]) -> None:
    """SIGTERM every worker still alive; SIGKILL one that has not stopped in 15 s."""
    for gateway in gateways:
        if gateway.alive:
            gateway.proc.terminate()
    for gateway in gateways:
        try:
            async with asyncio.timeout(15.0):
                await gateway.proc.wait()
        except TimeoutError:
            gateway.proc.kill()
            await gateway.proc.wait()


def holder(gateways: Sequence[Gateway]) -> tuple[Gateway, int] | None:
    """The worker whose log names the newest lease of the agent, and its epoch."""
    best: tuple[Gateway, int] | None = None
    for gateway in gateways:
        for _, epoch in gateway.follows():
            if best is None or epoch > best[1]:
                best = (gateway, epoch)
    return best


@contextlib.asynccontextmanager
async def agent_in(tmp: Path) -> AsyncIterator[Agent]:
    """An SDK agent on ``tmp/desk.sock`` and ``tmp/sources.json`` naming it."""
    agent = Agent(runtime="desk", state_path=tmp / "desk.agent.db")
    runner = await agent.serve_unix(tmp / "desk.sock")
    sources = {"durable_agents": [{"name": AGENT, "socket": str(tmp / "desk.sock")}]}
    (tmp / "sources.json").write_text(json.dumps(sources), encoding="utf-8")
    try:
        yield agent
    finally:
        await runner.close()
        await agent.close()


class Watch:
    """One phone stream: when each ``ask.raised`` arrived (``perf_counter``), by ask id."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.times: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in sse_events(self.resp):
                if event.event == "ask.raised":
                    self.times[json.loads(event.data)["ask"]["id"]] = time.perf_counter()
                    self._changed.set()
        finally:
            self._changed.set()  # the stream ended: waiters look again

    async def heard(self, ask_id: str) -> float:
        """When this stream heard ``ask_id`` (waits for it)."""
        while ask_id not in self.times:
            if self._task.done():
                raise RuntimeError(f"the stream ended before {ask_id} was heard")
            self._changed.clear()
            await self._changed.wait()
        return self.times[ask_id]

    async def wait_all(self, ask_ids: Sequence[str]) -> None:
        """Wait until this stream heard every ask of ``ask_ids``."""
        for ask_id in ask_ids:
            await self.heard(ask_id)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await self._task
        self.resp.close()


class LeanWatch(asyncio.Protocol):
    """One phone stream read raw, as lean as a reader can be: ``data_received`` keeps each
    chunk with its arrival time (``perf_counter``) and nothing else. After the run the
    stream is de-chunked and parsed (wire/sse.py), and each ``ask.raised`` timed by the
    chunk that completed its frame; every ask's event is checked there, once a stream."""

    def __init__(self) -> None:
        self.chunks: list[tuple[float, bytes]] = []
        self.times: dict[str, float] = {}
        self.transport: asyncio.Transport | None = None
        self.ended = False

    @classmethod
    async def open(cls, base: str) -> LeanWatch:
        """``GET /api/v1/events`` on ``base`` (``http://127.0.0.1:port``)."""
        host, port = base.removeprefix("http://").rsplit(":", 1)
        loop = asyncio.get_running_loop()
        _, watch = await loop.create_connection(cls, host, int(port))
        assert watch.transport is not None
        request = f"GET /api/v1/events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        watch.transport.write(request.encode())
        return watch

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.perf_counter(), data))

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True

    def parse(self) -> None:
        """:attr:`times` from what arrived so far; an ask heard twice is an error."""
        parser = SSEParser(max_line=MAX_EVENT + 64)
        times: dict[str, float] = {}
        chunks = list(self.chunks)
        for (at, _), body in zip(chunks, body_by_chunk([c for _, c in chunks]), strict=True):
            for event in parser.feed(body):
                if event.event == "ask.raised":
                    ask_id = json.loads(event.data)["ask"]["id"]
                    if ask_id in times:
                        raise RuntimeError(f"{ask_id} heard twice on one stream")
                    times[ask_id] = at
        self.times = times

    async def wait_all(self, ask_ids: Sequence[str]) -> None:
        """Wait until the stream has been quiet 0.2 s and holds every ask of ``ask_ids``
        (parsed only then: no parsing while events arrive)."""
        while True:
            last = self.chunks[-1][0] if self.chunks else 0.0
            if time.perf_counter() - last >= 0.2:
                self.parse()
                if all(a in self.times for a in ask_ids):
                    return
                if self.ended:
                    raise RuntimeError("the stream ended before every ask was heard")
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def body_by_chunk(chunks: Sequence[bytes]) -> list[bytes]:
    """The body bytes (de-chunked) each of ``chunks`` carried, from a raw HTTP/1.1
    response."""
    raw = b"".join(chunks)
    head = raw.find(b"\r\n\r\n")
    if head < 0:
        return [b"" for _ in chunks]
    chunked = b"transfer-encoding: chunked" in raw[:head].lower()
    spans = data_spans(raw, head + 4) if chunked else [(head + 4, len(raw))]
    out: list[bytes] = []
    at = k = 0
    for chunk in chunks:
        end = at + len(chunk)
        got = []
        while k < len(spans) and spans[k][0] < end:
            start, stop = spans[k]
            got.append(raw[max(start, at) : min(stop, end)])
            if stop > end:
                break
            k += 1
        out.append(b"".join(got))
        at = end
    return out


def data_spans(raw: bytes, at: int) -> list[tuple[int, int]]:
    """(start, end) in ``raw`` of each chunk's data of a chunked body starting at ``at``."""
    spans = []
    while (eol := raw.find(b"\r\n", at)) >= 0:
        size = int(raw[at:eol].split(b";")[0], 16)
        if size == 0:
            break
        begin = eol + 2
        spans.append((begin, min(begin + size, len(raw))))
        at = begin + size + 2
    return spans


# --- commit to phone event ---------------------------------------------------------------


@dataclass
class Latency:
    """Seconds from commit to ``ask.raised``, every stream's; the holder's streams apart."""

    every: list[float] = field(default_factory=list)
    holder: list[float] = field(default_factory=list)
    others: list[float] = field(default_factory=list)
    later: list[float] = field(default_factory=list)  # every stream's, the first ask left out
    profiles: dict[str, str] = field(default_factory=dict)  # worker -> py-spy's top


async def stream_latency(
    dbs: list[str],
    streams: int,
    asks: int,
    spy: Path | None = None,
    repo: Path = REPO,
    reader: str = "lean",
) -> Latency:
    """Seconds from an ask's commit to its ``ask.raised`` on every stream, read by
    :class:`LeanWatch` (``reader`` "lean") or :class:`Watch` ("aiohttp"); with ``spy``, each
    worker sampled by py-spy meanwhile."""
    with tempfile.TemporaryDirectory(prefix="wb-", dir="/tmp") as folder:
        tmp = Path(folder)
        async with agent_in(tmp) as agent:
            started: list[Gateway] = []
            try:
                for i, db in enumerate(dbs):
                    started.append(await start_worker(tmp, db, f"w{i}", None, repo))
                found = holder(started)
                held = found[0] if found is not None else None
                connector = aiohttp.TCPConnector(limit=0)
                async with aiohttp.ClientSession(connector=connector) as http:
                    on = [started[i % len(started)] for i in range(streams)]
                    watches: list[Watch | LeanWatch] = []
                    for g in on:
                        watches.append(
                            await LeanWatch.open(g.base)
                            if reader == "lean"
                            else Watch(await http.get(g.base + "/api/v1/events"))
                        )
                    # Opened before the streams settle: the first ask is timed alone, not
                    # on top of the conversation's opening (its reads, its list events).
                    conv = await agent.open_conversation("bench", title="Bench")
                    await asyncio.sleep(0.5)
                    spies = [
                        Spy(g.proc.pid, spy / f"w{i}{'-holder' if g is held else ''}.txt")
                        for i, g in enumerate(started)
                        if spy is not None
                    ]
                    for one in spies:
                        await one.start()
                    sent: dict[str, float] = {}
                    for n in range(asks):
                        sent[f"b{n}"] = time.perf_counter()
                        await conv.ask(
                            kind="permission", id=f"b{n}", title="Go?", options=PERMISSION
                        )
                        await asyncio.sleep(0.05)
                    async with asyncio.timeout(60):
                        for watch in watches:
                            await watch.wait_all(list(sent))
                    result = Latency()
                    for one in spies:
                        result.profiles[one.out.stem] = await one.stop()
                    for gateway, watch in zip(on, watches, strict=True):
                        took = [watch.times[a] - sent[a] for a in sent]
                        result.every += took
                        result.later += took[1:]
                        (result.holder if gateway is held else result.others).extend(took)
                    for watch in watches:
                        await watch.close()
            finally:
                await stop(started)
    return result


async def latencies(
    fast: ThrowawayPostgres,
    durable: ThrowawayPostgres,
    streams: int,
    asks: int,
    spy: Path | None = None,
    before: Path | None = None,
    readers: Sequence[str] = ("lean",),
) -> tuple[Figures, dict[str, str]]:
    """p50 and p99 (ms) of commit to phone event: one SQLite worker, one and three on
    PostgreSQL (and, with three, on the holder's streams and on the others'), three on
    PostgreSQL with durability on; py-spy's top of each of the three (``spy``). With
    ``before``, each run also with that checkout's code, just before it. Each
    run once with each of ``readers``; the first one's figures are untagged."""
    figures: Figures = {}
    profiles: dict[str, str] = {}
    runs: list[tuple[ThrowawayPostgres | None, int, Path, str]] = []
    for pg, count in ((None, 1), (fast, 1), (fast, 3), (durable, 3)):
        if before is not None:
            runs.append((pg, count, before, " (before)"))
        runs.append((pg, count, REPO, ""))
    runs = [(pg, n, repo, tag + (f" ({r} reader)" if r != readers[0] else ""))
            for pg, n, repo, tag in runs for r in readers]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for server, workers, repo, tag in runs:
            label = label_of("sqlite" if server is None else backend_of(server), workers) + tag
            url = new_database(server.url()) if server is not None else ""
            watched = spy if server is fast and workers == 3 and not tag else None
            reader = next((r for r in readers[1:] if f"({r} reader)" in tag), readers[0])
            try:
                dbs = [url] * workers if url else [str(Path(tmp) / "g.db")]
                got = await stream_latency(dbs, streams, asks, watched, repo, reader)
            finally:
                if server is not None:
                    drop_database(server.url(), url)
            profiles |= got.profiles
            parts = [(label, got.every), (f"{label}, after the first ask", got.later)]
            if workers > 1:
                parts += [(f"{label}, holder's", got.holder), (f"{label}, others'", got.others)]
            for name, samples in parts:
                figures[f"{name}: p50 ms"] = pct(samples, 50) * 1000
                figures[f"{name}: p99 ms"] = pct(samples, 99) * 1000
    return figures, profiles


# --- failover ----------------------------------------------------------------------------


async def taken_after(survivors: Sequence[Gateway], epoch: int, killed_at: float) -> float:
    """Seconds from ``killed_at`` (wall) to the first log line of a survivor taking a newer
    lease of the agent (the line's own time)."""
    while True:
        newer = [at for g in survivors for at, e in g.follows() if e > epoch]
        if newer:
            return min(newer) - killed_at
        await asyncio.sleep(0.02)


async def failover_round(
    http: aiohttp.ClientSession,
    workers: list[Gateway],
    conv: ConversationHandle,
    n: int,
    within: float,
) -> tuple[float, float, Gateway]:
    """Kill -9 the holder; seconds to the lease taken, and to the ask heard on the others'
    streams. Returns them and the killed worker."""
    found = holder(workers)
    if found is None:
        raise RuntimeError("no worker's log says it follows the agent")
    old, epoch = found
    survivors = [g for g in workers if g is not old]
    watches = [Watch(await http.get(g.base + "/api/v1/events")) for g in survivors]
    try:
        await conv.ask(kind="permission", id=f"pre{n}", title="Before?", options=PERMISSION)
        async with asyncio.timeout(30):  # the streams are live before the kill
            for watch in watches:
                await watch.heard(f"pre{n}")
        killed_wall, killed = time.time(), time.perf_counter()
        old.proc.kill()
        await conv.ask(kind="permission", id=f"post{n}", title="After?", options=PERMISSION)
        async with asyncio.timeout(within):
            taken = await taken_after(survivors, epoch, killed_wall)
            heard = [await watch.heard(f"post{n}") - killed for watch in watches]
        await old.proc.wait()
    finally:
        for watch in watches:
            await watch.close()
    return taken, max(heard), old


async def failover(server: ThrowawayPostgres, lease: float, kills: int) -> Figures:
    """Failover after kill -9 of the holder among three PostgreSQL workers, ``kills`` times."""
    env = {"COLLIE_LEASE_SECONDS": str(lease)}
    taken: list[float] = []
    heard: list[float] = []
    url = new_database(server.url())
    try:
        with tempfile.TemporaryDirectory(prefix="wf-", dir="/tmp") as folder:
            tmp = Path(folder)
            async with agent_in(tmp) as agent:
                workers: list[Gateway] = []
                every: list[Gateway] = []
                try:
                    for i in range(3):
                        workers.append(await start_worker(tmp, url, f"w{i}", env))
                        every.append(workers[-1])
                    conv = await agent.open_conversation("failover", title="Failover")
                    async with aiohttp.ClientSession() as http:
                        for n in range(kills):
                            a, b, old = await failover_round(http, workers, conv, n, 4 * lease + 30)
                            taken.append(a)
                            heard.append(b)
                            if n + 1 < kills:  # three workers again for the next round
                                again = await start_worker(tmp, url, f"w{3 + n}", env)
                                workers[workers.index(old)] = again
                                every.append(again)
                finally:
                    await stop(every)
    finally:
        drop_database(server.url(), url)
    return spread("failover: lease taken s", taken) | spread("failover: ask heard s", heard)


async def sqlite_restart(kills: int) -> Figures:
    """Kill -9 a SQLite gateway and start it again at once (same file and port): seconds
    from the kill to ``/healthz`` ready, ``kills`` times."""
    took: list[float] = []
    with tempfile.TemporaryDirectory(prefix="wr-", dir="/tmp") as folder:
        tmp = Path(folder)
        async with agent_in(tmp) as agent:
            await agent.open_conversation("restart", title="Restart")
            db = str(tmp / "g.db")
            gateway = await start_worker(tmp, db, "s0")
            try:
                for n in range(kills):
                    killed = time.perf_counter()
                    gateway.proc.kill()
                    await gateway.proc.wait()
                    gateway = await spawn(tmp, db, tmp / f"s{n + 1}.log", gateway.port)
                    took.append(await wait_ready(gateway) - killed)
            finally:
                await stop([gateway])
    return spread("sqlite restart: ready s", took)


def spread(label: str, samples: list[float]) -> Figures:
    """Median, least and most of ``samples``."""
    return {
        label: statistics.median(samples),
        f"{label} min": min(samples),
        f"{label} max": max(samples),
    }


# --- balance: thirty agents over three workers, and each worker's CPU ------------------------

HANDED = re.compile(r"following it \(lease epoch \d+\), handed over by")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def roster(gateway: Gateway) -> list[dict[str, object]]:
    async with aiohttp.ClientSession() as http, http.get(gateway.base + "/api/v1/workers") as r:
        return list((await r.json())["workers"])


def holdings(workers: list[dict[str, object]]) -> list[int]:
    return sorted(len(w["agents"]) for w in workers)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def many_agents(tmp: Path, count: int) -> AsyncIterator[list[ConversationHandle]]:
    """One SDK agent served on ``count`` sockets, named in ``tmp/sources.json``; a
    conversation open on it (seen by every one of them)."""
    agent = Agent(runtime="desk", state_path=tmp / "many.agent.db")
    names = [f"a{n:02}" for n in range(count)]
    for name in names:
        await agent.serve_unix(tmp / f"{name}.sock")
    entries = [{"name": n, "socket": str(tmp / f"{n}.sock")} for n in names]
    (tmp / "sources.json").write_text(json.dumps({"durable_agents": entries}), encoding="utf-8")
    try:
        yield [await agent.open_conversation("load", title="Load")]
    finally:
        await agent.close()


async def cpu_under_load(
    gateways: Sequence[Gateway], conv: ConversationHandle, items: int
) -> list[float]:
    """Each worker's CPU seconds while the agent writes ``items`` items, then settles."""
    before = [cpu_seconds(g.proc.pid) for g in gateways]
    for n in range(items):
        await conv.append(text=f"item {n}")
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.0)  # what was written is read and applied
    return [cpu_seconds(g.proc.pid) - b for g, b in zip(gateways, before, strict=True)]


async def balance(server: ThrowawayPostgres, count: int, lease: float, items: int) -> Figures:
    env = {"COLLIE_LEASE_SECONDS": str(lease)}
    figures: Figures = {}
    with tempfile.TemporaryDirectory(prefix="wb-") as folder:
        tmp = Path(folder)
        async with many_agents(tmp, count) as [conv]:
            one = await spawn(tmp, str(tmp / "one.db"), tmp / "one.log", free_port())
            await wait_ready(one)
            [alone] = await cpu_under_load([one], conv, items)
            await stop([one])
            figures["sqlite, 1 worker: cpu s"] = alone
            url = new_database(server.url())
            gateways: list[Gateway] = []
            try:
                for n in range(3):
                    if n == 2:
                        third = await spawn(tmp, url, tmp / "w2.log", free_port(), env)
                        gateways.append(third)
                        joined = balanced = None
                        cap = -(-count // 3)
                        while balanced is None:
                            seen = await roster(gateways[0])
                            now = time.perf_counter()
                            joined = joined or (now if len(seen) == 3 else None)
                            if len(seen) == 3 and max(holdings(seen)) <= cap:
                                balanced = now
                            await asyncio.sleep(0.05)
                        assert joined is not None
                        figures["balanced after s"] = balanced - joined
                        await wait_ready(third)
                    else:
                        gateways.append(await start_worker(tmp, url, f"w{n}", env))
                await asyncio.sleep(2 * lease)  # settled
                for n, held in enumerate(holdings(await roster(gateways[0]))):
                    figures[f"share {n}"] = held
                used = await cpu_under_load(gateways, conv, items)
                for n, spent in enumerate(used):
                    figures[f"postgresql worker {n}: cpu s"] = spent
                logs = [g.log.read_text(errors="replace") for g in gateways]
                figures["hand-overs"] = sum(len(HANDED.findall(text)) for text in logs)
                figures["leases lost"] = sum(text.count(": lease lost") for text in logs)
            finally:
                await stop(gateways)
                drop_database(server.url(), url)
    return figures


def report_balance(figures: Figures, options: argparse.Namespace) -> None:
    heading(
        f"balance: {options.balance_agents} agents, 3 postgresql workers started one after"
        f" another, lease {options.lease:g} s"
    )
    shares = [int(v) for k, v in figures.items() if k.startswith("share ")]
    row("agents each worker follows", " / ".join(str(s) for s in shares))
    took = figures["balanced after s"]
    row(
        "balanced after the third's first heartbeat",
        f"{took:5.2f} s = {took / options.lease:.2f} × lease",
    )
    row("hand-overs (each said once)", f"{figures['hand-overs']:.0f}")
    row("leases lost (renewed late: a loaded machine)", f"{figures['leases lost']:.0f}")
    base = figures["sqlite, 1 worker: cpu s"]
    used = [v for k, v in figures.items() if k.startswith("postgresql worker")]
    heading(f"CPU while the agent writes {options.balance_items} items on every socket")
    row("sqlite, 1 worker (all agents)", f"{base:6.2f} s")
    for n, spent in enumerate(used):
        row(
            f"postgresql worker {n}",
            f"{spent:6.2f} s  {spent / sum(used):4.0%} of the three  {ratio(spent, base)} sqlite",
        )


# --- the run and the report --------------------------------------------------------------


async def main(options: argparse.Namespace) -> tuple[dict[str, Figures], dict[str, str]]:
    results: dict[str, Figures] = {"load": {"before": os.getloadavg()[0]}}
    spy: Path | None = options.py_spy  # made by the caller
    if options.only == "balance":
        with ThrowawayPostgres() as server:
            figures = await balance(
                server, options.balance_agents, options.lease, options.balance_items
            )
        return {"balance": figures}, {}
    with ThrowawayPostgres() as server, ThrowawayPostgres(durable=True) as durable:
        if options.only != "latency":
            results["ledger"] = await ledger(
                (server, durable), options.seconds, options.concurrency, options.before
            )
        if options.only == "ledger":
            results["load"]["after"] = os.getloadavg()[0]
            return results, {}
        readers = ("lean", "aiohttp") if options.reader == "both" else (options.reader,)
        lat, profiles = await latencies(
            server, durable, options.streams, options.asks, spy, options.before, readers
        )
        results["latency"] = lat
        if options.only == "latency":
            results["load"]["after"] = os.getloadavg()[0]
            return results, profiles
        results["failover"] = await failover(server, options.lease, options.kills)
        results["balance"] = await balance(
            server, options.balance_agents, options.lease, options.balance_items
        )
    results["failover"] |= await sqlite_restart(options.kills)
    results["load"]["after"] = os.getloadavg()[0]
    return results, profiles


def targets(results: dict[str, Figures]) -> list[tuple[str, bool, str]]:
    """Each target: what it asks, whether this run met it, the figures it was judged on."""
    met = []
    if "ledger" in results:
        rates = results["ledger"]
        one, three = rates["postgresql, 1 worker"], rates["postgresql, 3 workers"]
        met += [
            ("one postgresql worker >= 3,000 answers/s", one >= 3000, f"{one:.0f}/s"),
            (
                "three workers >= 1.5x one",
                three >= 1.5 * one,
                f"{three:.0f}/s = {ratio(three, one)}",
            ),
        ]
    if "latency" not in results:
        return met
    lat = results["latency"]
    p99 = lat["postgresql, 3 workers: p99 ms"]
    base = lat["sqlite, 1 worker: p99 ms"]
    load = max(results["load"].values())
    return [
        *met,
        (
            "3 workers' p99, commit to phone <= 1.2x sqlite's",
            p99 <= 1.2 * base,
            f"{p99:.1f} ms = {ratio(p99, base)} of {base:.1f} ms",
        ),
        ("3 workers' p99 <= 20 ms (a quiet machine)", p99 <= 20, f"{p99:.1f} ms, load {load:.1f}"),
    ]


def report(
    results: dict[str, Figures], profiles: dict[str, str], options: argparse.Namespace
) -> None:
    if options.only == "balance":
        report_balance(results["balance"], options)
        print(json.dumps(results))
        return
    load = results["load"]
    heading(
        f"load average (1 min) {load['before']:.1f} before, {load['after']:.1f} after, on "
        f"{os.cpu_count()} cores: every figure is beside one SQLite worker in the same run"
    )
    if "ledger" in results:
        report_ledger(results["ledger"], options)
    if options.only == "ledger":
        report_targets(results)
        return

    lat = results["latency"]
    heading(
        f"commit to phone event: {options.streams} streams spread over the workers, "
        f"{options.asks} asks"
    )
    p50, p99 = lat["sqlite, 1 worker: p50 ms"], lat["sqlite, 1 worker: p99 ms"]
    for name in dict.fromkeys(k.rsplit(": ", 1)[0] for k in lat):
        a, b = lat[f"{name}: p50 ms"], lat[f"{name}: p99 ms"]
        beside = "" if name == "sqlite, 1 worker" else f"  ({ratio(a, p50)} / {ratio(b, p99)})"
        row(name, f"p50 {a:6.1f} ms  p99 {b:6.1f} ms{beside}")

    if options.only == "latency":
        report_profiles(profiles)
        report_targets(results)
        return
    fail = results["failover"]
    lease = options.lease
    heading(
        f"failover after kill -9 of the holder: 3 postgresql workers, lease {lease:g} s, "
        f"{options.kills} kills (median, min–max)"
    )
    for label, key in (
        ("lease taken by another worker", "failover: lease taken s"),
        ("the ask raised after it, heard", "failover: ask heard s"),
    ):
        mid, low, high = fail[key], fail[f"{key} min"], fail[f"{key} max"]
        row(label, f"{mid:5.2f} s = {mid / lease:.2f} × lease  ({low:.2f}–{high:.2f} s)")
    key = "sqlite restart: ready s"
    mid, low, high = fail[key], fail[f"{key} min"], fail[f"{key} max"]
    heard = ratio(fail["failover: ask heard s"], mid)
    row("sqlite, no failover: restart", f"{mid:5.2f} s  ({low:.2f}–{high:.2f} s) to ready")
    row("failover's ask heard / restart", heard)
    report_balance(results["balance"], options)
    report_profiles(profiles)
    report_targets(results)


def report_ledger(rates: Figures, options: argparse.Namespace) -> None:
    base = rates["sqlite, 1 worker"]
    heading(
        f"answers a second through the ledger (take + settle, each a fresh ask; "
        f"{options.concurrency} in flight a worker, {options.seconds:g} s)"
    )
    for label, value in rates.items():
        if ": " in label:
            continue
        beside = "" if value is base else f"  {ratio(value, base)} sqlite"
        cpu = rates[f"{label}: workers cpu us"], rates[f"{label}: server cpu us"]
        spent = f"; CPU an answer: workers {cpu[0]:4.0f} us, server {cpu[1]:4.0f} us"
        row(label, f"{value:8.0f}/s{beside}{spent}")


def report_profiles(profiles: dict[str, str]) -> None:
    for worker, top in profiles.items():
        heading(f"py-spy: {worker}, 3 postgresql workers, commit to phone event")
        print(top)


def report_targets(results: dict[str, Figures]) -> None:
    heading("targets")
    for what, met, figures in targets(results):
        row(what, f"{verdict(met):<7} {figures}")
    print(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8, help="answers in flight a worker")
    parser.add_argument("--streams", type=int, default=300, help="phones' live streams")
    parser.add_argument("--asks", type=int, default=40, help="asks the agent raises")
    parser.add_argument("--lease", type=float, default=3.0, help="COLLIE_LEASE_SECONDS (failover)")
    parser.add_argument("--kills", type=int, default=3, help="holders killed -9, one by one")
    parser.add_argument("--py-spy", type=Path, help="py-spy each of 3 workers, output here")
    parser.add_argument("--balance-agents", type=int, default=30, help="agents to balance")
    parser.add_argument("--balance-items", type=int, default=300, help="items for the CPU")
    parser.add_argument(
        "--only", choices=["ledger", "latency", "balance"], help="run this part alone"
    )
    parser.add_argument(
        "--reader",
        choices=["lean", "aiohttp", "both"],
        default="lean",
        help="the phones' streams read raw (lean) or by aiohttp + SSE parser, or both",
    )
    parser.add_argument(
        "--before", type=Path, help="a checkout of the code before: its ledger figures beside"
    )
    options = parser.parse_args()
    if options.py_spy is not None:
        options.py_spy.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report(*asyncio.run(main(options)), options)
    print(f"(total {time.perf_counter() - started:.0f} s)")
