"""Workers started and ended in a loop (a lease of 0.6 s): every worker that starts becomes
ready (its screens show every agent ready, through the holder or by following the log), and
the shared log has no hole: its numbers run without a gap to the counter, and every worker
applies it to its end. Half of the ends are clean stops, half as a kill -9 leaves things
(nothing given back, nothing more written: the leases run out).

The workers are gateways opened in the test's process, each under a name of its own: a
process start costs seconds on a loaded machine, and what is tested is the start-up path
(the log's bounds read, the ring loaded, the hello, the leases), the same in either.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import psycopg
import pytest

from collie_gateway import workers as workers_module
from collie_gateway.gateway import Gateway
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from fixtures.agents.harness import short_dir
from tests.collie_gateway.conftest import eventually
from wire.agent import Agent

# Its own xdist group: a minute of many workers starting, alone on its xdist worker.
pytestmark = pytest.mark.xdist_group("workers_loop")

LEASE = 0.6
AGENTS = 3
ENDS = 30.0  # seconds a worker's stop (or a kill's end) may take: never a hang
BOUND = 45.0  # seconds of starts at most
STARTS = 300  # and at most this many


async def vanish(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """End a worker as kill -9 leaves the database: no lease given back, nothing queued
    written; its heartbeat and leases run out."""
    workers = gw.workers
    assert workers is not None
    following = workers.following
    assert following is not None
    following.held.clear()  # nothing to give back

    async def nothing() -> None:
        return None

    following.settle = nothing  # nothing more read or written
    monkeypatch.setattr(workers.log, "drain", nothing)
    await workers.log.close()
    await gw.close()


async def log_numbers(url: str) -> tuple[list[int], int]:
    """The numbers kept in the log, in order, and the counter."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT seq FROM events ORDER BY seq")
        kept = [int(r[0]) for r in await cur.fetchall()]
        cur = await conn.execute("SELECT seq FROM event_counter")
        row = await cur.fetchone()
    assert row is not None
    return kept, int(row[0])


def applied(gw: Gateway) -> int:
    assert gw.workers is not None
    return gw.workers.bus._seq


async def test_workers_started_and_ended_in_a_loop_become_ready_with_no_hole_in_the_log(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="collie_gateway.services.worklog")
    loop = asyncio.get_running_loop()
    rng = random.Random(36)
    with short_dir() as tmp:
        agent = Agent(runtime="desk", state_path=tmp / "desk.db", ping_interval=0.2)
        for n in range(AGENTS):
            await agent.serve_unix(tmp / f"x{n}.sock")
        conv = await agent.open_conversation("c", title="Flow")
        sources = [Source(f"x{n}", socket=tmp / f"x{n}.sock") for n in range(AGENTS)]
        settings = Settings(
            sources=sources,
            db_path=Path(tmp / "unused.db"),
            database_url=pg_url,
            lease_seconds=LEASE,
        )
        live: list[Gateway] = []
        starts, kills, stalls, waits = 0, 0, [], []
        opened: list[float] = []
        ended: list[float] = []
        deadline = loop.time() + BOUND
        try:
            while loop.time() < deadline and starts < STARTS:
                name = f"loop:{starts}"
                monkeypatch.setattr(workers_module, "worker_name", lambda name=name: name)
                began = loop.time()
                gw = await asyncio.wait_for(Gateway.open(settings), 20)
                opened.append(loop.time() - began)
                live.append(gw)
                starts += 1
                try:
                    await eventually(lambda gw=gw: len(gw.agents.ready()) == AGENTS, within=10)
                except AssertionError:
                    stalls.append((name, {n: m.state.value for n, m in gw.agents.mirrors.items()}))
                waits.append(loop.time() - began)
                if rng.random() < 0.5:
                    await asyncio.wait_for(
                        conv.append(text=f"line {starts}"), ENDS
                    )  # entries flow while workers come and go
                if len(live) > 2:
                    victim = live.pop(rng.randrange(len(live)))
                    t = loop.time()
                    if rng.random() < 0.5:
                        await asyncio.wait_for(vanish(victim, monkeypatch), ENDS)
                        kills += 1
                    else:
                        await asyncio.wait_for(victim.close(), ENDS)  # a stop that ends
                    ended.append(loop.time() - t)
            kept, counter = await log_numbers(pg_url)
            for gw in live:  # each live worker applies the log to its end
                await eventually(lambda gw=gw: applied(gw) == counter, within=5)
        finally:
            for gw in live:
                await asyncio.wait_for(gw.close(), ENDS)
            await asyncio.wait_for(agent.close(), ENDS)
    print(
        f"{starts} starts ({kills} as killed) in {BOUND - (deadline - loop.time()):.1f} s;"
        f" ready after {sorted(waits)[len(waits) // 2]:.2f} s (median),"
        f" {max(waits):.2f} s at most; open {sum(opened) / len(opened):.2f} s,"
        f" end {sum(ended) / max(len(ended), 1):.2f} s (means)"
    )
    assert stalls == []
    assert kept == list(range(kept[0], counter + 1))  # no hole, up to the counter
    assert [r.getMessage() for r in caplog.records if "pruned" in r.getMessage()] == []
    assert starts >= 20
