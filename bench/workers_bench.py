"""Answers a second through the ledger (T1): one SQLite worker beside one and three
PostgreSQL workers, in the same run.

Run: ``python bench/workers_bench.py [--seconds S] [--concurrency C]``.

Each worker is a process of its own that opens the store as the gateway does
(``open_stores``) and, with ``--concurrency`` answers in flight, records and claims a tap
(``LedgerStore.take``) and settles it (``settle``): the two transactions of every answer,
each on a fresh ask. PostgreSQL is a throw-away server this bench starts
(``fixtures/postgres.py``: durability off, as in the tests; a production server with fsync
on is slower per commit). The agent's round trip is not in it (bench/answer_bench.py).

Not yet measured (README, "Several workers on PostgreSQL"): commit to phone event with 300
streams, and failover after a kill -9 — both wait for the lease and the event table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from collie_gateway.core.answers import Tap, on_result
from collie_gateway.store.stores import open_stores
from fixtures.postgres import ThrowawayPostgres, drop_database, new_database

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


def child(name: str, db: str, url: str, seconds: str, concurrency: str) -> None:
    count = asyncio.run(worker(Path(db), url or None, name, float(seconds), int(concurrency)))
    print(count)


async def main(seconds: float, concurrency: int) -> dict[str, float]:
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
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8, help="answers in flight a worker")
    options = parser.parse_args()
    figures = asyncio.run(main(options.seconds, options.concurrency))
    print("answers a second through the ledger (take + settle, each a fresh ask)")
    for label, rate in figures.items():
        print(f"  {label:<26} {rate:8.0f}")
    print(json.dumps(figures))
