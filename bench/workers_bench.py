"""Several workers on PostgreSQL beside one SQLite worker, in the same run: answers a second
through the ledger (T1), and an agent's commit to the phones' streams (D1).

Run: ``python bench/workers_bench.py [--seconds S] [--concurrency C] [--streams N] [--asks N]``.

**Ledger.**
Each worker is a process of its own that opens the store as the gateway does
(``open_stores``) and, with ``--concurrency`` answers in flight, records and claims a tap
(``LedgerStore.take``) and settles it (``settle``): the two transactions of every answer,
each on a fresh ask. PostgreSQL is a throw-away server this bench starts
(``fixtures/postgres.py``: durability off, as in the tests; a production server with fsync
on is slower per commit). The agent's round trip is not in it (bench/answer_bench.py).

**Commit to phone event.** An SDK agent in this process raises ``--asks`` asks, one every
50 ms; ``--streams`` live streams (``GET /api/v1/events``), spread over the workers, each
time the ``ask.raised`` of each ask from the agent's commit. Gateways are real processes
(``python -m collie_gateway serve``): one on a SQLite file, three on one PostgreSQL database
(each follows the agent itself: README, "Several workers on PostgreSQL"). The streams are read
in this process too, so the figures carry its own load.

Not yet measured: failover after a kill -9 (it waits for the lease).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from _common import pct, sse_events

from collie_gateway.core.answers import Tap, on_result
from collie_gateway.store.stores import open_stores
from fixtures.postgres import ThrowawayPostgres, drop_database, new_database
from wire.agent import Agent, Option

PERMISSION = [Option(id="yes", label="Yes", role="allow"), Option(id="no", label="No", role="deny")]

REPO = Path(__file__).resolve().parent.parent


async def worker(db: Path, url: str | None, name: str, seconds: float, concurrency: int) -> int:
    """Answers this worker recorded and settled in ``seconds``."""
    stores = await open_stores(db, url)
    done = 0
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
    finally:
        await stores.close()
    return done


async def run(db: Path, url: str | None, workers: int, seconds: float, concurrency: int) -> float:
    """Answers a second of ``workers`` processes on one store."""
    args = [str(db), url or "", str(seconds), str(concurrency)]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--child", f"w{i}", *args, stdout=asyncio.subprocess.PIPE
        )
        for i in range(workers)
    ]
    counts = [int((await p.communicate())[0]) for p in procs]
    return sum(counts) / seconds


async def start_worker(tmp: Path, db: str, index: int) -> tuple[asyncio.subprocess.Process, str]:
    """A gateway process for ``tmp/sources.json`` on ``db``; it and its base URL, once ready."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    log = (tmp / f"w{index}.log").open("ab")
    with log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "collie_gateway", "serve", "--sources", str(tmp / "sources.json"),
            "--db", db, "--port", str(port), cwd=REPO, stdout=log, stderr=log,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        for _ in range(600):  # 60 s at most
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(base + "/healthz") as resp:
                    if (await resp.json())["ready"] >= 1:
                        return proc, base
            await asyncio.sleep(0.1)
    raise RuntimeError(f"worker {index} not ready: {(tmp / f'w{index}.log').read_text()}")


async def read_asks(
    resp: aiohttp.ClientResponse, sent: dict[str, float], got: list[float], want: int
) -> None:
    """Time each ``ask.raised`` on one stream from its commit, until ``want`` were seen."""
    seen = 0
    async for event in sse_events(resp):
        if event.event == "ask.raised":
            ask_id = json.loads(event.data)["ask"]["id"]
            got.append(time.perf_counter() - sent[ask_id])
            seen += 1
            if seen == want:
                return


async def stream_latency(dbs: list[str], streams: int, asks: int) -> list[float]:
    """Seconds from an ask's commit to its ``ask.raised`` on every stream."""
    with tempfile.TemporaryDirectory(prefix="wb-", dir="/tmp") as folder:
        tmp = Path(folder)
        agent = Agent(runtime="desk", state_path=tmp / "desk.agent.db")
        runner = await agent.serve_unix(tmp / "desk.sock")
        sources = {"durable_agents": [{"name": "desk", "socket": str(tmp / "desk.sock")}]}
        (tmp / "sources.json").write_text(json.dumps(sources), encoding="utf-8")
        started = [await start_worker(tmp, db, i) for i, db in enumerate(dbs)]
        sent: dict[str, float] = {}
        got: list[float] = []
        connector = aiohttp.TCPConnector(limit=0)
        try:
            async with aiohttp.ClientSession(connector=connector) as http:
                bases = [base for _, base in started]
                resps = [
                    await http.get(bases[i % len(bases)] + "/api/v1/events") for i in range(streams)
                ]
                readers = [asyncio.create_task(read_asks(r, sent, got, asks)) for r in resps]
                await asyncio.sleep(0.5)
                conv = await agent.open_conversation("bench", title="Bench")
                for n in range(asks):
                    sent[f"b{n}"] = time.perf_counter()
                    await conv.ask(kind="permission", id=f"b{n}", title="Go?", options=PERMISSION)
                    await asyncio.sleep(0.05)
                await asyncio.wait_for(asyncio.gather(*readers), 60)
                for resp in resps:
                    resp.close()
        finally:
            for proc, _ in started:
                proc.terminate()
                await proc.wait()
            await runner.close()
            await agent.close()
    return got


def child(name: str, db: str, url: str, seconds: str, concurrency: str) -> None:
    count = asyncio.run(worker(Path(db), url or None, name, float(seconds), int(concurrency)))
    print(count)


async def latencies(server: ThrowawayPostgres, streams: int, asks: int) -> dict[str, float]:
    """p50 and p99 (ms) of commit to phone event: one SQLite worker, three on PostgreSQL."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = new_database(server.url())
        try:
            for label, dbs in (
                ("sqlite, 1 worker", [str(Path(tmp) / "g.db")]),
                ("postgresql, 3 workers", [url] * 3),
            ):
                got = await stream_latency(dbs, streams, asks)
                figures[f"{label}: p50 ms"] = pct(got, 50) * 1000
                figures[f"{label}: p99 ms"] = pct(got, 99) * 1000
        finally:
            drop_database(server.url(), url)
    return figures


async def main(seconds: float, concurrency: int, streams: int, asks: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, ThrowawayPostgres() as server:
        results["sqlite, 1 worker"] = await run(Path(tmp) / "g.db", None, 1, seconds, concurrency)
        for workers in (1, 3):
            url = new_database(server.url())
            try:
                rate = await run(Path(tmp) / "unused.db", url, workers, seconds, concurrency)
            finally:
                drop_database(server.url(), url)
            results[f"postgresql, {workers} worker{'s' if workers > 1 else ''}"] = rate
        results.update(await latencies(server, streams, asks))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8, help="answers in flight a worker")
    parser.add_argument("--streams", type=int, default=300, help="phones' live streams")
    parser.add_argument("--asks", type=int, default=40, help="asks the agent raises")
    options = parser.parse_args()
    figures = asyncio.run(main(options.seconds, options.concurrency, options.streams, options.asks))
    print("answers a second through the ledger (take + settle, each a fresh ask);")
    print(f"commit to phone event, {options.streams} streams, {options.asks} asks")
    for label, value in figures.items():
        print(f"  {label:<34} {value:10.1f}")
    print(json.dumps(figures))
