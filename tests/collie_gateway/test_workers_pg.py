"""Three gateway workers on one PostgreSQL database (issue 23): real processes
(``python -m collie_gateway serve --db postgresql://…``) on loopback, each test its own
database.

One worker follows each agent (its lease's holder; test_workers_lease.py); what these tests
hold is what the shared store promises: an answer taken on any worker is recorded,
claimed and settled once in the one ledger, so a phone's retry on another worker after a
kill -9 gets the right outcome and the agent acts once (T1); an ask seen by all three
workers is pushed once, and a push owed by a worker killed while sending is sent by another
(P3); three workers push no more than one would (P1); a phone resuming on another worker is
told to reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from fixtures.agents.harness import SampleAgent, short_dir
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_shutdown import apns_token, push_env, raise_asks
from tests.push.fakes import ApnsSeen, Reply
from wire.agent import Agent

# Three gateway processes and PostgreSQL per test: these tests take turns on one xdist
# worker (with the other test_workers_*.py), so two such crowds never share the 2 cores.
pytestmark = pytest.mark.xdist_group("pg_workers")

TAP = {"request_id": "tap-1", "version": 1, "answer": {"option": "allow"}}
ANSWER_PATH = "/api/v1/agents/held/asks/a1/answer"
WORKERS = 3


def workers(tmp: Path, url: str, env: dict[str, str] | None = None) -> list[GatewayProcess]:
    """Three workers for ``tmp/sources.json`` on the database at ``url``."""
    return [
        GatewayProcess(
            tmp / "sources.json", tmp / f"unused{i}.db", tmp / f"w{i}.log", env, ["--db", url]
        )
        for i in range(WORKERS)
    ]


def write_sources(tmp: Path, name: str, socket: Path) -> None:
    agents = [{"name": name, "socket": str(socket)}]
    (tmp / "sources.json").write_text(json.dumps({"durable_agents": agents}), encoding="utf-8")


async def ledger(url: str, request_id: str) -> tuple[int, str | None] | None:
    """(settled, outcome) of ``request_id`` in the shared ledger."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT settled, outcome FROM answers WHERE request_id = %s", (request_id,)
        )
        row = await cur.fetchone()
    return None if row is None else (int(row[0]), row[1])


async def accepted(url: str) -> bool:
    return await ledger(url, "tap-1") == (1, "accepted")


@dataclass
class HeldScene:
    tmp: Path
    url: str
    agent: SampleAgent
    workers: list[GatewayProcess]
    release: Path
    acts_log: Path

    def acts(self) -> list[dict[str, Any]]:
        if not self.acts_log.exists():
            return []
        return [json.loads(line) for line in self.acts_log.read_text().splitlines() if line]

    async def recorded(self) -> bool:
        return await ledger(self.url, "tap-1") is not None


@contextlib.asynccontextmanager
async def held_scene(
    url: str, hold: str, make: Callable[[Path, str], list[GatewayProcess]] | None = None
) -> AsyncIterator[HeldScene]:
    """The ``held`` sample agent (its reply held until ``go`` appears, before or after it
    acts) and three workers for it (``make``; default :func:`workers`), not started."""
    with short_dir() as tmp:
        release, acts_log, sock = tmp / "go", tmp / "acts.jsonl", tmp / "held.sock"
        agent = SampleAgent(
            "held",
            state=tmp / "held.db",
            socket=sock,
            args=["--acts", str(acts_log), "--release", str(release), "--hold", hold],
        )
        write_sources(tmp, "held", sock)
        gateways = (make or workers)(tmp, url)
        try:
            yield HeldScene(tmp, url, agent, gateways, release, acts_log)
        finally:
            release.touch()
            for gateway in gateways:
                await gateway.stop()
            await agent.stop()


@pytest.mark.parametrize("hold", ["before", "after"])
async def test_T1_worker_killed_mid_answer_the_retry_on_another_worker_acts_once(
    pg_url: str, hold: str
) -> None:
    lease = {"COLLIE_LEASE_SECONDS": "1.5"}
    async with held_scene(pg_url, hold, lambda tmp, url: workers(tmp, url, lease)) as s:
        await s.agent.start()
        await asyncio.gather(*(w.start() for w in s.workers))
        first, other, third = s.workers

        async def tap() -> None:
            with contextlib.suppress(aiohttp.ClientError):
                await first.post(ANSWER_PATH, TAP)  # hangs: the worker dies under it

        tapping = asyncio.create_task(tap())
        await eventually(s.recorded)  # pending; with "after" perhaps settled already
        if hold == "after":
            await eventually(lambda: len(s.acts()) == 1)  # acted; its answer held
        await first.kill()
        await tapping
        s.release.touch()
        if hold == "after":
            # The agent's ask.resolved names tap-1: a surviving worker settles it from the
            # shared ledger, though another worker took it (and died).
            await eventually(lambda: accepted(pg_url), within=10)
        # The phone's Retry, on another worker: "not sure yet" while the agent's lease (if the
        # killed worker held it) passes to another worker, then the outcome.
        retries = [await other.post(ANSWER_PATH, TAP)]
        while not retries[-1]["settled"] and len(retries) < 5:
            assert retries[-1]["outcome"] == "uncertain", retries
            retries.append(await other.post(ANSWER_PATH, TAP))
        assert retries[-1]["outcome"] == "accepted", retries
        assert retries[-1]["settled"] is True
        status = await third.get("/api/v1/answers/tap-1")
        assert (status["outcome"], status["settled"]) == ("accepted", True)
        assert await ledger(pg_url, "tap-1") == (1, "accepted")
        await eventually(lambda: len(s.acts()) == 1)
        await asyncio.sleep(0.3)  # nothing more comes
        assert s.acts() == [{"how": "answered", "request_id": "tap-1"}]


@dataclass
class DeskScene:
    """An SDK agent ``desk`` on a socket, three workers for it (started), the push fakes."""

    agent: Agent
    workers: list[GatewayProcess]
    svc: Services

    def pushed(self) -> list[str]:
        """The ask of each push APNs received, in order."""
        return [str(r.json["collie"]["ask"]) for r in self.svc.apns.requests]  # type: ignore[index]

    async def log(self, worker: int) -> list[dict[str, Any]]:
        return list((await self.workers[worker].get("/api/v1/pushes?limit=200"))["pushes"])


@contextlib.asynccontextmanager
async def desk_scene(
    url: str, phone: bool = True, env: dict[str, str] | None = None
) -> AsyncIterator[DeskScene]:
    """The scene, a phone's APNs token registered on the second worker when ``phone``."""
    with short_dir() as tmp:
        async with services(tmp, time.time) as svc:
            agent = Agent(runtime="desk", state_path=tmp / "desk.agent.db", ping_interval=0.2)
            runner = await agent.serve_unix(tmp / "desk.sock")
            write_sources(tmp, "desk", tmp / "desk.sock")
            gateways = workers(tmp, url, {**push_env(tmp, svc), **(env or {})})
            try:
                await asyncio.gather(*(w.start() for w in gateways))
                if phone:
                    body = {"provider": "apns", "token": apns_token(1)}
                    await gateways[1].post("/api/v1/devices", body)
                yield DeskScene(agent, gateways, svc)
            finally:
                for gateway in gateways:
                    await gateway.stop()
                await runner.close()
                await agent.close()


async def test_P3_three_workers_see_each_ask_and_push_it_once(pg_url: str) -> None:
    async with desk_scene(pg_url) as s:
        for n in range(3):  # three panes: within P1's limits for one worker
            conv = await s.agent.open_conversation(f"c{n}", title=f"Deploy {n}")
            await raise_asks(conv, f"a{n}")
        await eventually(lambda: len(s.svc.apns.requests) >= 3, within=10)
        await asyncio.sleep(1.0)  # nothing more comes
        assert sorted(s.pushed()) == ["a0", "a1", "a2"]
        sent = [e["ask"] for e in await s.log(2) if e["outcome"] == "sent"]
        assert sorted(sent) == ["a0", "a1", "a2"]


async def test_P1_three_workers_push_no_more_than_one_worker_would(pg_url: str) -> None:
    """Six asks in one pane within a minute: P1 lets three through (one worker's count),
    whichever of the three workers decides each."""
    async with desk_scene(pg_url) as s:
        conv = await s.agent.open_conversation("c1", title="Deploy")
        await raise_asks(conv, *(f"a{n}" for n in range(6)))

        async def decided() -> bool:
            final = {e["ask"] for e in await s.log(1) if e["outcome"] in ("sent", "rate_limited")}
            return len(final) == 6

        await eventually(decided, within=15)
        await asyncio.sleep(1.0)  # nothing more comes
        pushed = s.pushed()
        assert len(pushed) == len(set(pushed)) == 3  # the workers' order, not a0 to a2
        limited = [e for e in await s.log(2) if e["outcome"] == "rate_limited"]
        assert {e["ask"] for e in limited} == {f"a{n}" for n in range(6)} - set(pushed)
        assert {e["reason"] for e in limited} == {"pane_minute"}


async def claim_holder(url: str) -> int | None:
    """The OS process id of the worker holding a push claim (its connection's name)."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted"
            " AND a.datname = current_database()"  # the server is shared with other tests
            " AND a.application_name LIKE 'collie-gateway %%'"
        )
        rows = await cur.fetchall()
    return int(str(rows[0][0]).split()[1]) if rows else None


async def test_P3_a_push_owed_by_a_worker_killed_while_sending_is_sent_by_another(
    pg_url: str,
) -> None:
    """The worker sending an ask's push waits out APNs's Retry-After: 20 and is killed -9;
    another worker's round (COLLIE_RESEND_INTERVAL) finds the push owed and unclaimed and
    sends it: one delivery."""
    answering = False

    def apns(seen: ApnsSeen) -> Reply:
        if answering:
            return Reply(200)
        return Reply(503, {"reason": "ServiceUnavailable"}, (("retry-after", "20"),))

    async with desk_scene(pg_url, env={"COLLIE_RESEND_INTERVAL": "0.3"}) as s:
        s.svc.apns.script = apns
        conv = await s.agent.open_conversation("c1", title="Deploy")
        await raise_asks(conv, "a1")
        await eventually(lambda: len(s.svc.apns.requests) == 1, within=10)
        holder = await claim_holder(pg_url)
        [owner] = [w for w in s.workers if w.proc is not None and w.proc.pid == holder]
        await asyncio.sleep(1.0)  # rounds of the others: the claim is held, nothing is sent
        assert len(s.svc.apns.requests) == 1
        answering = True
        await owner.kill()

        async def sent() -> bool:
            log = await s.log(0 if owner is not s.workers[0] else 1)
            return any(e["ask"] == "a1" and e["outcome"] == "sent" for e in log)

        await eventually(sent, within=10)
        await asyncio.sleep(1.0)  # nothing more comes
        assert [r.json["collie"]["ask"] for r in s.svc.apns.requests] == ["a1", "a1"]  # type: ignore[index]
        assert s.svc.apns.requests[1].apns_id == s.svc.apns.requests[0].apns_id


async def frames(resp: aiohttp.ClientResponse, count: int) -> list[tuple[str, str]]:
    """The next ``count`` events of a live stream: (id, type); pings skipped."""
    got: list[tuple[str, str]] = []
    while len(got) < count:
        block = (await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 10)).decode()
        fields = dict(line.split(": ", 1) for line in block.strip().splitlines() if ": " in line)
        if "event" in fields:
            got.append((fields.get("id", ""), fields["event"]))
    return got


async def events_until_quiet(
    resp: aiohttp.ClientResponse, quiet: float = 1.5
) -> list[tuple[str, str]]:
    """A live stream's events (id, type) until none comes for ``quiet`` seconds."""
    got: list[tuple[str, str]] = []
    while True:
        try:
            block = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), quiet)
        except TimeoutError:
            return got
        lines = block.decode().strip().splitlines()
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        if "event" in fields:
            got.append((fields.get("id", ""), fields["event"]))


async def test_a_phone_resuming_on_another_worker_misses_nothing_and_gets_nothing_twice(
    pg_url: str,
) -> None:
    """The worker under a phone's stream is killed -9; the phone resumes on another with
    ``Last-Event-ID``: the events after it are replayed, then live ones follow — the same
    ids, in the same order, as a stream on a third worker that never broke. An id of
    another store gets ``reset``."""
    lease = {"COLLIE_LEASE_SECONDS": "1.5"}
    async with desk_scene(pg_url, False, lease) as s, aiohttp.ClientSession() as http:
        first, other, third = s.workers
        witness = await http.get(third.base + "/api/v1/events")
        resp = await http.get(first.base + "/api/v1/events")
        assert (await frames(resp, 1))[0][1] == "stream"
        assert (await frames(witness, 1))[0][1] == "stream"
        await s.agent.open_conversation("c1", title="Deploy")
        seen = await frames(resp, 1)
        await first.kill()
        await s.agent.open_conversation("c2", title="Build")  # while the phone is away
        headers = {"Last-Event-ID": seen[-1][0]}
        again = await http.get(other.base + "/api/v1/events", headers=headers)
        assert (await frames(again, 1))[0][1] == "stream"
        await s.agent.open_conversation("c3", title="Ship")

        async def listed() -> bool:
            rows = (await other.get("/api/v1/agents/desk/conversations?poll=true"))["rows"]
            return sorted(r["conversation_id"] for r in rows) == ["c1", "c2", "c3"]

        await eventually(listed, within=10)  # the first worker perhaps followed the agent
        whole = await events_until_quiet(witness)
        resumed = seen + await events_until_quiet(again)
        assert [i for i, _ in resumed] == [i for i, _ in whole]
        assert len(set(resumed)) == len(resumed)
        assert len(resumed) > len(seen)  # events came after the kill, and none was lost
        foreign = await http.get(
            other.base + "/api/v1/events", headers={"Last-Event-ID": "0a1b2c3d4e5f-1"}
        )
        assert [kind for _, kind in await frames(foreign, 2)] == ["stream", "reset"]
        for stream in (witness, resp, again, foreign):
            stream.close()


async def call(
    worker: GatewayProcess, method: str, path: str, token: str | None, body: object = None
) -> tuple[int, Any]:
    """One request to ``worker``: (status, JSON body or None)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, worker.base + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.json() if r.content_type == "application/json" else None


async def test_a_phone_paired_on_one_worker_is_known_to_all_and_revoked_on_all(
    pg_url: str,
) -> None:
    """Issue 21 on PostgreSQL: a code made on worker 0 pairs on worker 1, the token opens
    worker 2, and a revocation on worker 2 is refused by the others at once and ends the
    phone's stream on worker 0 within seconds."""
    with short_dir() as tmp:
        write_sources(tmp, "nobody", tmp / "nobody.sock")
        gateways = workers(tmp, pg_url, env={"COLLIE_TOKEN": "admin-token"})
        try:
            for gateway in gateways:
                await gateway.start(ready=0)
            one, two, three = gateways
            status, made = await call(one, "POST", "/api/v1/pairings", "admin-token", {})
            assert status == 200
            pair = {"code": made["code"], "name": "Pixel 9"}
            status, paired = await call(two, "POST", "/api/v1/pair", None, pair)
            assert status == 200
            assert (await call(one, "POST", "/api/v1/pair", None, pair))[0] == 400
            token = paired["token"]
            assert (await call(three, "GET", "/api/v1/dashboard", token))[0] == 200
            status, listed = await call(one, "GET", "/api/v1/phones", "admin-token")
            assert [p["name"] for p in listed["phones"]] == ["Pixel 9"]
            async with aiohttp.ClientSession() as http:
                headers = {"Authorization": f"Bearer {token}"}
                stream = await http.get(one.base + "/api/v1/events", headers=headers)
                assert (await stream.content.readuntil(b"\n\n")).startswith(b"event: stream")
                phone_id = paired["phone_id"]
                gone = await call(three, "DELETE", f"/api/v1/phones/{phone_id}", token)
                assert gone == (200, {"revoked": phone_id})
                for gateway in (one, two, three):
                    assert (await call(gateway, "GET", "/api/v1/dashboard", token))[0] == 401
                async with asyncio.timeout(5):  # worker 0 looks at the phones twice a second
                    while await stream.content.readany():
                        pass  # pings until the stream ends
        finally:
            for gateway in gateways:
                await gateway.stop()
