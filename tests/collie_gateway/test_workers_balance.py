"""Workers that share the work (real processes on one PostgreSQL, a lease of 1.5 s): 30 agents
balanced 10/10/10 by clean hand-overs once a third worker joins, each hand-over said once in
the log and shown by ``GET /api/v1/workers``; a fourth worker joining and one leaving while
phones stream from every worker and agents raise asks: no event lost, doubled or reset, one
push decision per ask, P1 exact; a bridge of ``sources.json`` run by one worker only and
moved once when that worker is killed -9."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
import psycopg
import pytest

from fixtures.agents.harness import short_dir
from push import PushLimiter, Quiet
from tests.bridges.conftest import SCRIPTED
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.push_fixtures import services
from tests.collie_gateway.test_shutdown import apns_token, push_env, raise_asks
from tests.collie_gateway.test_workers_lease import at, decisions, logged_agent, tails
from wire.agent import Agent

# Several gateway processes and PostgreSQL per test: on the xdist worker of the other
# test_workers_*.py, so two such crowds never share the 2 cores.
pytestmark = pytest.mark.xdist_group("pg_workers")

LEASE = 1.5
START = 40.0  # seconds a worker may take to start on a loaded machine
HANDED = re.compile(
    r"agent (\S+): following it \(lease epoch (\d+)\), handed over by (\S+) to (\S+)"
)


def worker(tmp: Path, url: str, n: int, env: dict[str, str] | None = None) -> GatewayProcess:
    """Worker ``n`` for ``tmp/sources.json`` on ``url``, lease 1.5 s, logging at INFO."""
    env = {"COLLIE_LEASE_SECONDS": str(LEASE), **(env or {})}
    log = tmp / f"w{n}.log"
    return GatewayProcess(
        tmp / "sources.json", tmp / f"unused{n}.db", log, env, ["--db", url, "-v"]
    )


def write_sources(tmp: Path, entries: list[dict[str, Any]]) -> None:
    (tmp / "sources.json").write_text(json.dumps({"durable_agents": entries}), encoding="utf-8")


async def roster(w: GatewayProcess) -> list[dict[str, Any]]:
    return list((await w.get("/api/v1/workers"))["workers"])


def shares(workers: list[dict[str, Any]]) -> list[int]:
    return sorted(len(w["agents"]) for w in workers)


async def leases(url: str) -> dict[str, tuple[str, int]]:
    """Every live agent lease: agent → (holder, epoch)."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT agent, holder, epoch FROM leases WHERE expires_at > clock_timestamp()"
            " AND agent NOT LIKE '~%%'"
        )
        return {str(a): (str(h), int(e)) for a, h, e in await cur.fetchall()}


async def log_end(url: str) -> int:
    """The shared log's last number once nothing is written for half a second."""
    last = -1
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute("SELECT seq FROM event_counter")
            row = await cur.fetchone()
            assert row is not None
            if int(row[0]) == last:
                return last
            last = int(row[0])
            await asyncio.sleep(0.5)


async def last_phone_event(url: str) -> int:
    """The number of the shared log's last phone event once nothing is written for half a
    second."""
    await log_end(url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT max(seq) FROM events WHERE type NOT LIKE '~%%'")
        row = await cur.fetchone()
    assert row is not None
    assert row[0] is not None
    return int(row[0])


FOLLOWING = re.compile(r"agent (\S+): following it \(lease epoch (\d+)\)")


def follows_in(w: GatewayProcess) -> list[tuple[str, int]]:
    """(agent, epoch) of every lease a worker's log says it took."""
    text = w.log.read_text(errors="replace") if w.log.exists() else ""
    return [(m[1], int(m[2])) for m in FOLLOWING.finditer(text)]


def handed(gateways: list[GatewayProcess]) -> list[tuple[str, int, str, str]]:
    """Every hand-over the workers' logs say: (agent, epoch, from, to)."""
    found = []
    for w in gateways:
        if w.log.exists():
            text = w.log.read_text(errors="replace")
            found += [(m[1], int(m[2]), m[3], m[4]) for m in HANDED.finditer(text)]
    return found


# --- phone streams --------------------------------------------------------------------------

Event = tuple[str, str, str]  # (id, type, data)


async def read_stream(resp: aiohttp.ClientResponse, into: list[Event]) -> None:
    """Every event of a live stream into ``into`` (pings skipped) until it ends."""
    with contextlib.closing(resp), contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
        while True:
            block = (await resp.content.readuntil(b"\n\n")).decode()
            if not block:
                return  # the stream ended
            lines = block.strip().splitlines()
            fields = dict(line.split(": ", 1) for line in lines if ": " in line)
            if "event" in fields:
                into.append((fields.get("id", ""), fields["event"], fields.get("data", "")))


def numbers(events: list[Event]) -> list[int]:
    return [int(i.rsplit("-", 1)[1]) for i, _, _ in events if i]


def asks_raised(events: list[Event]) -> list[str]:
    """``agent/ask`` of each live ``ask.raised`` event."""
    found = []
    for _, kind, data in events:
        if kind == "ask.raised":
            body = json.loads(data)
            found.append(f"{body['agent']}/{body['ask']['id']}")
    return found


def resets(events: list[Event]) -> list[Event]:
    return [e for e in events if e[1] in ("reset", "list.reset")]


# --- 1. thirty agents, three workers --------------------------------------------------------


async def test_30_agents_balance_10_10_10_within_two_leases_of_the_third_worker(
    pg_url: str,
) -> None:
    with short_dir() as tmp:
        agent, follows = logged_agent(tmp / "desk.db", 0.2)
        names = [f"a{n:02}" for n in range(30)]
        for name in names:
            await agent.serve_unix(tmp / f"{name}.sock")
        write_sources(tmp, [{"name": n, "socket": str(tmp / f"{n}.sock")} for n in names])
        gateways = [worker(tmp, pg_url, n) for n in range(3)]
        try:
            async with aiohttp.ClientSession() as http:
                await gateways[0].start(ready=30, within=START)
                streams: list[list[Event]] = [[]]
                resp = await http.get(gateways[0].base + "/api/v1/events")
                readers = [asyncio.create_task(read_stream(resp, streams[0]))]
                before = await log_end(pg_url)  # the first snapshots told: no reset after
                await gateways[1].start(ready=30, within=START)
                await eventually(lambda: _balanced(gateways[0], 2), within=4 * LEASE)
                streams.append([])
                resp = await http.get(gateways[1].base + "/api/v1/events")
                readers.append(asyncio.create_task(read_stream(resp, streams[1])))

                # The third joins: measured from its first heartbeat to 10/10/10.
                loop = asyncio.get_running_loop()
                started = loop.time()
                joining = asyncio.create_task(gateways[2].start(ready=30, within=START))
                joined = balanced = None
                while balanced is None and loop.time() - started < 20:
                    seen = await roster(gateways[0])
                    if joined is None and len(seen) == 3:
                        joined = loop.time()
                    if len(seen) == 3 and shares(seen) == [10, 10, 10]:
                        balanced = loop.time()
                    await asyncio.sleep(0.05)
                try:
                    await joining
                except AssertionError:
                    print(await gateways[2].get("/healthz"), tails(gateways))
                    raise
                assert joined is not None, tails(gateways)
                assert balanced is not None, f"{shares(seen)}\n{tails(gateways)}"
                took = balanced - joined
                print(f"balanced {took:.2f} s after the third worker's first heartbeat"
                      f" ({balanced - started:.2f} s after its process started)")  # fmt: skip
                assert took <= 2 * LEASE, took
                await asyncio.sleep(LEASE)  # settled: nothing more moves
                assert shares(await roster(gateways[2])) == [10, 10, 10]
                live = await leases(pg_url)
                for reader in readers:
                    reader.cancel()
        finally:
            for gateway in gateways:
                await gateway.stop()
            await agent.close()
        assert sorted(live) == names
        # Each hand-over is said once, by the worker that took it: every take after the
        # first of an agent (epoch 1) is one, and no worker died.
        said = handed(gateways)
        assert len(said) == len({(a, e) for a, e, _, _ in said})  # each hand-over said once
        # Every take is said once, a hand-over or not: as many as the epochs given (those
        # of the workers' stops, after, left out).
        takes = [(a, e) for w in gateways for a, e in follows_in(w) if e <= live[a][1]]
        assert len(takes) == len(set(takes)) == sum(e for _, e in live.values()), takes
        assert len(said) >= 25, said  # 15 to the second worker, 10 to the third
        assert follows.overlaps() == []
        for events in streams:  # no reset once the first snapshots were told, none twice
            told = [e for e in resets(events) if int(e[0].rsplit("-", 1)[1]) > before]
            assert told == []
            assert numbers(events) == sorted(set(numbers(events)))


async def _balanced(w: GatewayProcess, n: int) -> bool:
    seen = await roster(w)
    return len(seen) == n and max(shares(seen)) == -(-30 // n)


async def test_the_workers_roster_names_each_worker_its_agents_and_lease_epochs(
    pg_url: str,
) -> None:
    with short_dir() as tmp:
        agent = Agent(runtime="desk", state_path=tmp / "desk.db", ping_interval=0.2)
        names = ["a0", "a1", "a2", "a3"]
        for name in names:
            await agent.serve_unix(tmp / f"{name}.sock")
        write_sources(tmp, [{"name": n, "socket": str(tmp / f"{n}.sock")} for n in names])
        gateways = [worker(tmp, pg_url, n) for n in range(2)]
        try:
            for gateway in gateways:
                await gateway.start(ready=4, within=START)
            await eventually(lambda: _even(gateways[1]), within=4 * LEASE)
            seen = await roster(gateways[1])
            live = await leases(pg_url)
            host = socket.gethostname()
            by_pid = {w.proc.pid: w for w in gateways if w.proc is not None}
            assert sorted(w["pid"] for w in seen) == sorted(by_pid)
            for row in seen:
                assert row["host"] == host
                assert row["worker"] == f"{host}:{row['pid']}"
                assert row["bridges"] == []
                assert row["duties"] == []
                for held in row["agents"]:
                    assert live[held["name"]] == (row["worker"], held["epoch"])
                beat = row["last_heartbeat"].replace("Z", "+00:00")
                age = time.time() - datetime.fromisoformat(beat).timestamp()
                assert -1 < age < LEASE, age  # renewed every third of a lease
        finally:
            for gateway in gateways:
                await gateway.stop()
            await agent.close()


async def _even(w: GatewayProcess) -> bool:
    seen = await roster(w)
    return len(seen) == 2 and shares(seen) == [2, 2]


# --- 2. a fourth joins and one leaves, with phones streaming and asks raised ------------------

AGENTS = 6
PANES = 4
ASKS = 3  # per pane: 12 an agent, P1's 10 an agent a minute bites


async def test_a_worker_joining_and_one_leaving_lose_double_and_reset_nothing(
    pg_url: str,
) -> None:
    with short_dir() as tmp:
        async with services(tmp, time.time) as svc:
            agents = [
                Agent(runtime="desk", state_path=tmp / f"d{n}.db", ping_interval=0.2)
                for n in range(AGENTS)
            ]
            for n, agent in enumerate(agents):
                await agent.serve_unix(tmp / f"d{n}.sock")
            write_sources(
                tmp, [{"name": f"d{n}", "socket": str(tmp / f"d{n}.sock")} for n in range(AGENTS)]
            )
            env = push_env(tmp, svc)
            gateways = [worker(tmp, pg_url, n, env) for n in range(4)]
            try:
                await _join_and_leave(tmp, pg_url, agents, gateways, svc)
            finally:
                for gateway in gateways:
                    await gateway.stop()
                for agent in agents:
                    await agent.close()


async def _join_and_leave(
    tmp: Path, url: str, agents: list[Agent], gateways: list[GatewayProcess], svc: Any
) -> None:
    first, second, third, fourth = gateways
    try:
        await asyncio.gather(*(w.start(ready=AGENTS, within=START) for w in (first, second, third)))
    except AssertionError:
        for w in (first, second, third):
            print(w.log.name, await w.get("/healthz"))
        print(tails(gateways))
        raise
    await second.post("/api/v1/devices", {"provider": "apns", "token": apns_token(1)})
    all_asks = [f"d{a}/k{p}-{k}" for a in range(AGENTS) for p in range(PANES) for k in range(ASKS)]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        seen: dict[str, list[Event]] = {}
        tasks: dict[str, asyncio.Task[None]] = {}

        async def stream(name: str, w: GatewayProcess, last: str | None = None) -> None:
            headers = {"Last-Event-ID": last} if last else {}
            resp = await http.get(w.base + "/api/v1/events", headers=headers)
            seen.setdefault(name, [])
            tasks[name] = asyncio.create_task(read_stream(resp, seen[name]))

        await log_end(url)  # the streams open while nothing is told: each starts alike
        for name, w in (("first", first), ("second", second), ("third", third)):
            await stream(name, w)
        convs = [
            [await agents[a].open_conversation(f"p{p}", title=f"Pane {p}") for p in range(PANES)]
            for a in range(AGENTS)
        ]

        async def produce() -> None:
            for k in range(ASKS):
                for p in range(PANES):
                    for a in range(AGENTS):
                        await raise_asks(convs[a][p], f"k{p}-{k}")
                        await asyncio.sleep(0.03)

        producing = asyncio.create_task(produce())
        await asyncio.sleep(1.0)
        await fourth.start(ready=AGENTS, within=START)  # joins: takes its share by hand-over
        await stream("fourth", fourth)
        await eventually(lambda: _spread(fourth), within=4 * LEASE)
        await asyncio.sleep(0.5)
        # The first leaves cleanly; its phone resumes on the second.
        mark = seen["first"]
        await first.stop()
        await tasks["first"]
        last = [i for i, _, _ in mark if i][-1]
        await stream("first-again", second, last)
        await producing
        for a, agent in enumerate(agents):
            await agent.open_conversation("done", title=f"done d{a}")

        def done(events: list[Event]) -> bool:
            ends = {e[2] for e in events if e[1] == "list.row" and '"done"' in e[2]}
            return len(ends) >= AGENTS

        for name in ("second", "third", "fourth", "first-again"):
            await eventually(lambda name=name: done(seen[name]), within=20)
        # Every stream told up to the log's last phone event (one told after the last
        # ``done`` row, a push logged late, reaches each stream in its time).
        end = await last_phone_event(url)
        for name in ("second", "third", "fourth", "first-again"):
            await eventually(lambda name=name: end in numbers(seen[name]), within=20)
        for task in tasks.values():
            task.cancel()

    for name in seen:  # what was told after ``end`` reached some streams only: left out
        seen[name] = [e for e in seen[name] if not e[0] or int(e[0].rsplit("-", 1)[1]) <= end]
    whole = seen["second"]  # a stream that never broke
    assert resets(whole) == []
    assert sorted(asks_raised(whole)) == sorted(all_asks)  # each ask once
    for name in ("third",):
        assert numbers(seen[name]) == numbers(whole), name
    resumed = seen["first"] + seen["first-again"][1:]
    got = numbers(resumed)
    assert got == sorted(set(got))  # nothing twice
    assert got == [n for n in numbers(whole) if n >= got[0]][: len(got)]  # nothing lost
    for name in ("first", "first-again", "fourth"):
        assert resets(seen[name]) == [], name
    assert len(handed(gateways)) >= 2  # the fourth took its share; the first's were taken

    # One push decision per ask, exactly the decisions one limiter makes (P1, P3).
    async def all_decided() -> bool:
        log = (await second.get("/api/v1/pushes?limit=1000"))["pushes"]
        return len({(e["agent"], e["ask"]) for e in decisions(log)}) >= len(all_asks)

    await eventually(all_decided, within=30)
    await asyncio.sleep(1.0)
    log = (await third.get("/api/v1/pushes?limit=1000"))["pushes"]
    made = decisions(log)
    keys = [f"{e['agent']}/{e['ask']}" for e in made]
    assert sorted(keys) == sorted(all_asks)
    limiter = PushLimiter()
    expected = []
    for e in made:
        decision = limiter.decide(f"{e['agent']}/{e['conversation']}", e["agent"], "host", at(e))
        expected.append(decision.reason.value if isinstance(decision, Quiet) else "sent")
    actual = [e["reason"] if e["outcome"] == "rate_limited" else "sent" for e in made]
    assert actual == expected
    pushed = [
        f"{b['agent']}/{b['ask']}"
        for r in svc.apns.requests
        for b in [cast(dict[str, Any], r.json["collie"])]
        if b.get("type", "ask") == "ask"
    ]
    assert len(pushed) == len(set(pushed)), "an ask pushed twice"
    sent = {k for k, e in zip(keys, made, strict=True) if e["outcome"] == "dispatched"}
    assert set(pushed) <= sent


async def _spread(w: GatewayProcess) -> bool:
    seen = await roster(w)
    return len(seen) == 4 and max(shares(seen)) == 2


# --- 3. a bridge runs once, and moves once -------------------------------------------------

SERVING = "bridge acp: serving scripted on"


def bridge_starts(gateways: list[GatewayProcess]) -> dict[int, int]:
    """How many times each worker's log says the bridge served."""
    return {
        n: w.log.read_text(errors="replace").count(SERVING) if w.log.exists() else 0
        for n, w in enumerate(gateways)
    }


async def test_a_bridge_in_sources_runs_on_one_worker_and_moves_once_when_it_is_killed(
    pg_url: str,
) -> None:
    with short_dir() as tmp:
        entry = {
            "name": "claude",
            "acp": {
                "command": SCRIPTED,
                "cwd": str(tmp),
                "socket": str(tmp / "claude.sock"),
                "state": str(tmp / "claude.db"),
            },
        }
        write_sources(tmp, [entry])
        gateways = [worker(tmp, pg_url, n) for n in range(3)]
        try:
            await asyncio.gather(*(w.start(ready=1, within=START) for w in gateways))
            await asyncio.sleep(2 * LEASE)  # the others keep trying: nothing starts there
            assert sorted(bridge_starts(gateways).values()) == [0, 0, 1], tails(gateways)
            runner = await _bridge_runner(gateways)
            await runner.kill()
            survivors = [w for w in gateways if w is not runner]
            await eventually(lambda: sum(bridge_starts(survivors).values()) == 1, within=15)
            for w in survivors:
                await eventually(lambda w=w: _ready(w), within=15)
            await asyncio.sleep(2 * LEASE)
            assert sum(bridge_starts(survivors).values()) == 1, tails(gateways)
            moved_to = await _bridge_runner(survivors)
            assert moved_to is not runner
            for w in gateways:
                text = w.log.read_text(errors="replace")
                assert "already" not in text, tails(gateways)
                assert "exited" not in text, tails(gateways)
        finally:
            for gateway in gateways:
                await gateway.stop()


async def _ready(w: GatewayProcess) -> bool:
    return bool((await w.get("/healthz"))["ready"] == 1)


async def _bridge_runner(gateways: list[GatewayProcess]) -> GatewayProcess:
    """The worker the roster says runs the bridge ``claude``."""
    live = [w for w in gateways if w.proc is not None]
    seen = await roster(live[0])
    [row] = [r for r in seen if [b["name"] for b in r["bridges"]] == ["claude"]]
    [w] = [w for w in live if w.proc is not None and w.proc.pid == row["pid"]]
    return w
