"""A lease that changes hands with an ask's push decision in flight on the old holder, and a
lease that runs out under a worker whose mirror is the log's (two workers in the test's
process on one PostgreSQL, a lease of 0.6 s).

The old holder is held at the exact point, by a hook on its push store: before the decision
claims the ask (P3's claim), or inside the limiter's turn with the claim held. Whatever the
old holder does then (finishes its decision before it gives the lease back, or never does:
it stops, or it dies), the ask is decided once, and pushed once. A lease that ran out (its
holder died, or paused past it) is resumed by a worker whose screens' mirror is the log's
after what the log holds, with no snapshot: no phone is told ``list.reset``. A worker that
joins and takes a lease handed over before the holder read its hello resumes on the state
the holder wrote as it gave the lease back: no ``list.reset`` either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from collie_gateway import workers as workers_module
from collie_gateway.core.mirror import LinkState
from collie_gateway.gateway import Gateway
from collie_gateway.services import worklog
from collie_gateway.services.links import AgentLink
from collie_gateway.services.pushing import DeviceIn
from collie_gateway.settings import Settings
from collie_gateway.sources import Source
from collie_gateway.store.values import Appended, StoredEvent
from collie_gateway.store.values import LogRecord as Record
from fixtures.agents.harness import short_dir
from push import Provider
from tests.collie_gateway.conftest import eventually
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_shutdown import apns_token, raise_asks
from tests.collie_gateway.test_workers_startup import vanish
from wire.agent import Agent, ConversationHandle
from wire.messages import NoticePush

pytestmark = pytest.mark.xdist_group("pg_workers")

LEASE = 0.6
WORK_WAIT = 1.0  # seconds the old holder waits for its decisions here (10 s in production)


@dataclass
class Pair:
    """An agent ``d0``, its conversation, and the workers opened on it (and on the agents
    added)."""

    tmp: Path
    url: str
    svc: Services
    agent: Agent
    conv: ConversationHandle
    monkeypatch: pytest.MonkeyPatch
    workers: list[Gateway] = field(default_factory=list)
    others: dict[str, Agent] = field(default_factory=dict)

    async def add(self, name: str) -> ConversationHandle:
        """Another agent, ``name``, followed by the workers opened from now on: its pane."""
        agent = Agent(runtime="desk", state_path=self.tmp / f"{name}.db", ping_interval=0.2)
        self.others[name] = agent
        await agent.serve_unix(self.tmp / f"{name}.sock")
        return await agent.open_conversation("p0", title="Pane")

    async def open(self, name: str) -> Gateway:
        """A worker named ``name``."""
        self.monkeypatch.setattr(workers_module, "worker_name", lambda: name)
        names = ["d0", *self.others]
        settings = Settings(
            sources=[Source(n, socket=self.tmp / f"{n}.sock") for n in names],
            db_path=self.tmp / "unused.db",
            database_url=self.url,
            lease_seconds=LEASE,
            push_targets=self.svc.targets,
        )
        gw = await asyncio.wait_for(Gateway.open(settings), 20)
        self.workers.append(gw)
        return gw

    async def close(self, gw: Gateway) -> None:
        self.workers.remove(gw)
        await asyncio.wait_for(gw.close(), 30)

    async def decisions(self) -> list[tuple[str, str]]:
        """(outcome, reason) of every push log entry of an ask, oldest first."""
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            cur = await conn.execute(
                "SELECT outcome, coalesce(reason, '') FROM push_log"
                " WHERE ask IS NOT NULL AND device IS NULL ORDER BY id"
            )
            return [(str(o), str(r)) for o, r in await cur.fetchall()]

    def pushed(self) -> list[str]:
        """The ask of every push the fake APNs took."""
        return [str(cast(dict[str, Any], r.json["collie"])["ask"]) for r in self.svc.apns.requests]

    def notices(self) -> list[str]:
        """The item of every notice's push the fake APNs took."""
        bodies = [cast(dict[str, Any], r.json["collie"]) for r in self.svc.apns.requests]
        return [str(b["item"]) for b in bodies if b.get("type") == "notice"]


@contextlib.asynccontextmanager
async def pair(url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pair]:
    monkeypatch.setattr(workers_module, "WORK_WAIT", WORK_WAIT)
    with short_dir() as tmp:
        async with services(tmp, time.time) as svc:
            agent = Agent(runtime="desk", state_path=tmp / "d0.db", ping_interval=0.2)
            await agent.serve_unix(tmp / "d0.sock")
            conv = await agent.open_conversation("p0", title="Pane")
            scene = Pair(tmp, url, svc, agent, conv, monkeypatch)
            try:
                yield scene
            finally:
                for gw in list(scene.workers):
                    await scene.close(gw)
                for one in (agent, *scene.others.values()):
                    await one.close()


def holds(gw: Gateway, agent: str = "d0") -> bool:
    """Whether ``gw`` follows ``agent`` and its link is ready."""
    following = gw.workers.following if gw.workers else None
    assert following is not None
    return following.holds(agent) and gw.mirrors[agent].state is LinkState.READY


async def holder(p: Pair) -> Gateway:
    """The first worker, holding ``d0``, with a phone registered."""
    first = await p.open("w:1")
    await eventually(lambda: holds(first), within=10)
    await first.pushing.register(DeviceIn(provider=Provider.APNS, token=apns_token(1)))
    return first


async def holder_and_follower(p: Pair) -> tuple[Gateway, Gateway]:
    """The first worker, holding ``d0``, and a second whose mirror of it is the log's."""
    first = await holder(p)
    second = await p.open("w:2")
    following = second.workers.following if second.workers else None
    assert following is not None
    await eventually(lambda: "d0" in following.current, within=10)
    return first, second


def hold(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch, method: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold ``gw``'s push decisions at its push store's ``method`` (``claim``: before the
    ask is claimed; ``decide``: claimed, in the limiter's turn): (entered, let go)."""
    repo: Any = gw.pushing.repo
    entered, go = asyncio.Event(), asyncio.Event()
    real: Callable[..., Awaitable[Any]] = getattr(repo, method)

    async def held(*args: Any) -> Any:
        entered.set()
        await go.wait()
        return await real(*args)

    monkeypatch.setattr(repo, method, held)
    return entered, go


async def decided_once(p: Pair, ask: str) -> None:
    """The ask got one decision (pushed), and one push, and nothing more was logged."""
    await eventually(lambda: p.pushed() == [ask], within=15)
    assert await p.decisions() == [("dispatched", "ask")]


@pytest.mark.parametrize("point", ["claim", "decide"])
async def test_a_decision_the_old_holder_never_makes_is_made_once_by_the_new(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """The old holder stops with the decision held (before its claim, or claimed inside the
    limiter's turn) for good: it waits its bound, gives the lease back, and its decision is
    cancelled as it closes; the new holder decides the ask (a claim held by the old one is
    waited out), once."""
    async with pair(pg_url, monkeypatch) as p:
        first = await holder(p)
        entered, _never = hold(first, monkeypatch, point)
        await raise_asks(p.conv, "k1")
        await eventually(entered.is_set, within=10)  # the decision is in flight, held
        second = await p.open("w:2")
        await p.close(first)  # its bound passes; the held decision is cancelled
        await eventually(lambda: holds(second), within=10)
        await decided_once(p, "k1")


async def test_a_lease_handed_over_to_a_worker_the_state_never_reached_is_snapshotted(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new holder's mirror of the agent is the stored one, from before the ask (flushed
    late), and no state of the old holder's reached it (neither an answer to its hello nor
    the state written as the lease is given back): it takes the lease given back with a
    snapshot, not resuming after the stale mirror, and decides the ask the old holder never
    did, once."""
    async with pair(pg_url, monkeypatch) as p:
        first = await holder(p)
        await first.mirrors_repo.flush()
        following = first.workers.following if first.workers else None
        assert following is not None
        monkeypatch.setattr(first.mirrors_repo, "flush", no_flush)
        monkeypatch.setattr(following, "_sync", lambda agents: None)
        entered, _never = hold(first, monkeypatch, "decide")
        await raise_asks(p.conv, "k1")
        await eventually(entered.is_set, within=10)
        second = await p.open("w:2")
        assert [a.id for a in second.mirrors["d0"].conversations["p0"].asks] == []
        await p.close(first)
        await eventually(lambda: holds(second), within=10)
        await decided_once(p, "k1")


def late_hellos(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Hold back ``gw``'s reading of every ``~hello`` (a worker's reader behind the log, or
    the hello not yet written when it surveys): what reads them at last."""
    following = gw.workers.following if gw.workers else None
    assert following is not None
    real = following.apply
    held: list[StoredEvent] = []

    def apply(entry: StoredEvent) -> None:
        (held.append if entry.type == "~hello" else real)(entry)

    def release() -> None:
        monkeypatch.setattr(following, "apply", real)
        for entry in held:
            real(entry)

    monkeypatch.setattr(following, "apply", apply)
    return release


async def no_flush() -> None:
    """A mirror store's flush that writes nothing (the worker's flusher is behind)."""


async def test_a_decision_in_flight_is_made_by_the_old_holder_before_it_gives_the_lease_back(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The old holder stops while its decision waits inside the limiter's turn: the lease
    goes only once the decision is made, by it; the new holder finds nothing to decide."""
    caplog.set_level(logging.INFO)
    async with pair(pg_url, monkeypatch) as p:
        first = await holder(p)
        entered, go = hold(first, monkeypatch, "decide")
        await raise_asks(p.conv, "k1")
        await eventually(entered.is_set, within=10)
        second = await p.open("w:2")
        following = first.workers.following if first.workers else None
        assert following is not None
        closing = asyncio.create_task(p.close(first))
        # Its link stopped (the hand-over began), the lease stays its own while it decides.
        await eventually(lambda: "d0" not in first.agents.links, within=10)
        assert following.holds("d0")
        go.set()
        await closing
        await eventually(lambda: holds(second), within=10)
        await decided_once(p, "k1")
        assert "still running" not in caplog.text


async def list_resets(url: str, after: int) -> list[int]:
    """The numbers of the ``list.reset`` phone events the log holds after ``after``."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT seq FROM events WHERE type = 'list.reset' AND seq > %s", (after,)
        )
        return [int(r[0]) for r in await cur.fetchall()]


async def log_last(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT seq FROM event_counter")
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_lease_that_ran_out_is_resumed_without_a_reset_and_its_asks_decided(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder dies (as kill -9 leaves things: nothing given back) with an ask's decision
    held: the other worker, whose mirror of the agent is the log's, takes the lease when it
    runs out and resumes after the log's last event (no snapshot, no ``list.reset``), decides
    the ask once, and follows what the agent says next."""
    async with pair(pg_url, monkeypatch) as p:
        first, second = await holder_and_follower(p)
        entered, _never = hold(first, monkeypatch, "claim")
        await raise_asks(p.conv, "k1")
        await eventually(entered.is_set, within=10)
        mark = await log_last(pg_url)
        p.workers.remove(first)
        await asyncio.wait_for(vanish(first, monkeypatch), 30)
        await eventually(lambda: holds(second), within=10)
        await decided_once(p, "k1")
        await raise_asks(p.conv, "k2")  # read by the new holder's resumed stream
        await eventually(lambda: sorted(p.pushed()) == ["k1", "k2"], within=15)
        assert await list_resets(pg_url, mark) == []


async def test_a_worker_that_joins_resumes_what_it_takes_with_no_reset(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker joins while the holder of both agents has not read its hello: the holder
    hands ``d1`` over (its share is one), and the newcomer, whose stored mirror of ``d1``
    lags (the ask open there is not in it), resumes on the state the holder wrote as it gave
    the lease back: no phone is told ``list.reset``, the open ask is on its screens and not
    pushed again, and the next ask is pushed once."""
    async with pair(pg_url, monkeypatch) as p:
        pane = await p.add("d1")
        first = await holder(p)
        await eventually(lambda: holds(first, "d1"), within=10)
        await first.mirrors_repo.flush()
        monkeypatch.setattr(first.mirrors_repo, "flush", no_flush)  # the store lags from now
        await raise_asks(pane, "k1")
        await eventually(lambda: p.pushed() == ["k1"], within=15)
        release = late_hellos(first, monkeypatch)
        mark = await log_last(pg_url)
        second = await p.open("w:2")
        assert second.mirrors["d1"].conversations["p0"].asks == []  # stale, and never synced
        await eventually(lambda: holds(second, "d1"), within=10)
        assert holds(first, "d0")
        assert [a.id for a in second.mirrors["d1"].conversations["p0"].asks] == ["k1"]
        release()
        await raise_asks(pane, "k2")  # read by the newcomer's resumed stream
        await eventually(lambda: sorted(p.pushed()) == ["k1", "k2"], within=15)
        assert await p.decisions() == [("dispatched", "ask")] * 2
        assert await list_resets(pg_url, mark) == []


async def test_a_notice_the_dead_holder_never_decided_is_pushed_once_by_the_new(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder dies (kill -9) after it wrote the agent's notice (``Item.push``) to the log
    and before it claimed its push: the other worker, which saw the notice go by, resumes the
    lease with no snapshot and pushes the notice, once."""
    async with pair(pg_url, monkeypatch) as p:
        first, second = await holder_and_follower(p)
        entered, _never = hold(first, monkeypatch, "claim")
        await p.conv.append("notice", "Build done", id="n1", push=NoticePush(title="Done"))
        await eventually(entered.is_set, within=10)
        mark = await log_last(pg_url)
        p.workers.remove(first)
        await asyncio.wait_for(vanish(first, monkeypatch), 30)
        await eventually(lambda: holds(second), within=10)
        await eventually(lambda: p.notices() == ["n1"], within=15)
        await asyncio.sleep(LEASE)
        assert p.notices() == ["n1"]
        assert await list_resets(pg_url, mark) == []


async def test_a_worker_started_after_a_hand_over_resumes_on_the_state_left_in_the_log(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder stops (its state written, the lease given back) before the other worker
    starts, the stored mirror behind it (the open ask is not in it): the worker that starts
    takes the lease and resumes on the state read back from the log, with no snapshot: no
    ``list.reset``, the open ask on its screens and not pushed again, the next pushed once."""
    async with pair(pg_url, monkeypatch) as p:
        first = await holder(p)
        await first.mirrors_repo.flush()
        monkeypatch.setattr(first.mirrors_repo, "flush", no_flush)  # the store lags from now
        await raise_asks(p.conv, "k1")
        await eventually(lambda: p.pushed() == ["k1"], within=15)
        mark = await log_last(pg_url)
        await p.close(first)
        second = await p.open("w:2")
        await eventually(lambda: holds(second), within=10)
        assert [a.id for a in second.mirrors["d0"].conversations["p0"].asks] == ["k1"]
        await raise_asks(p.conv, "k2")  # read by its resumed stream
        await eventually(lambda: sorted(p.pushed()) == ["k1", "k2"], within=15)
        assert await p.decisions() == [("dispatched", "ask")] * 2
        assert await list_resets(pg_url, mark) == []


def dies_after_write(gw: Gateway, monkeypatch: pytest.MonkeyPatch, marker: bytes) -> asyncio.Event:
    """``gw`` applies nothing from the write of an entry whose data holds ``marker`` on (as a
    kill -9 right after that commit leaves it: what its link read is in the log, what that
    tells the phones is not): set then."""
    log = gw.workers.log if gw.workers else None
    assert log is not None
    real = log._apply
    died = asyncio.Event()

    def apply(entries: Sequence[StoredEvent]) -> None:
        if died.is_set() or any(marker in e.data for e in entries):
            died.set()
            return
        real(entries)

    monkeypatch.setattr(log, "_apply", apply)
    return died


async def told(url: str, after: int, kind: str) -> list[dict[str, Any]]:
    """The phone events of ``kind`` the log holds after ``after``, decoded."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT data FROM events WHERE type = %s AND seq > %s ORDER BY seq", (kind, after)
        )
        return [json.loads(bytes(r[0])) for r in await cur.fetchall()]


async def test_a_row_the_dead_holder_never_told_is_told_by_the_next(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder dies right after it wrote what its link read (a conversation opened) and
    before it wrote what that tells the phones (the conversation's row, the agent's row):
    the other worker resumes the lease when it runs out, with no snapshot, and tells both
    rows then; no phone is told ``list.reset``."""
    async with pair(pg_url, monkeypatch) as p:
        first, second = await holder_and_follower(p)
        died = dies_after_write(first, monkeypatch, b'"x1"')
        mark = await log_last(pg_url)
        await p.agent.open_conversation("x1", title="Told late")
        await eventually(died.is_set, within=10)
        p.workers.remove(first)
        await asyncio.wait_for(vanish(first, monkeypatch), 30)
        await eventually(lambda: holds(second), within=10)

        async def row_told() -> bool:
            rows = await told(pg_url, mark, "list.row")
            return [r["row"]["conversation_id"] for r in rows] == ["x1"]

        await eventually(row_told, within=10)
        dashboards = await told(pg_url, mark, "dashboard.row")
        assert dashboards, "the agent's row never told"
        assert dashboards[-1]["right"]["open"] == 2
        assert await list_resets(pg_url, mark) == []


async def test_a_holder_whose_link_read_no_snapshot_yet_sends_no_state(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder whose link has not read the agent's open conversations yet (its own mirror is
    the stored one, which may lag) answers no hello with it and hands the lease over without
    it: as a ``~sync`` it would become every other worker's mirror, and the next holder would
    resume on it. The next holder takes a snapshot of its own."""
    async with pair(pg_url, monkeypatch) as p:
        gate = asyncio.Event()
        real = AgentLink._snapshot

        async def held(link: AgentLink) -> None:
            await gate.wait()
            await real(link)

        monkeypatch.setattr(AgentLink, "_snapshot", held)
        first = await p.open("w:1")
        following = first.workers.following if first.workers else None
        assert following is not None
        await eventually(lambda: following.holds("d0"), within=10)
        second = await p.open("w:2")  # its hello: the first has nothing known to send
        await p.close(first)
        gate.set()
        await eventually(lambda: holds(second), within=10)
        assert await told(pg_url, 0, "~sync") == []
        assert list(second.mirrors["d0"].conversations) == ["p0"]


def stream(gw: Gateway) -> Callable[[], list[tuple[str, dict[str, Any]]]]:
    """A phone's live stream on ``gw``, opened now: what it was sent so far, as
    (type, payload)."""
    sub, _ = gw.bus.subscribe(None)
    seen: list[tuple[str, dict[str, Any]]] = []

    def read() -> list[tuple[str, dict[str, Any]]]:
        for frame in sub.take(100_000):
            fields = dict(line.split(": ", 1) for line in frame.decode().strip().split("\n"))
            seen.append((fields["event"], json.loads(fields["data"])))
        return seen

    return read


def sent(events: list[tuple[str, dict[str, Any]]], kind: str) -> list[str]:
    """The ids of the chat lines (``chat.item``) or asks (``ask.raised``) a stream was sent."""
    if kind == "chat.item":
        return [str(data["item"]["id"]) for t, data in events if t == kind]
    return [str(data["ask"]["id"]) for t, data in events if t == kind]


@pytest.mark.parametrize("dies_at", ["line", "ask"])
async def test_a_chat_line_and_an_ask_the_dead_holder_never_told_are_told_once_by_the_next(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, dies_at: str
) -> None:
    """The holder's link reads a chat line, then an ask raised; the holder dies right after
    it wrote what its link read and before it wrote what that told the phones (at the line:
    neither was told; at the ask: the line was, the ask not). The other worker resumes the
    lease when it runs out (no snapshot): a phone's stream on it is sent the line and the
    ask raised once each, and no ``list.reset``."""
    async with pair(pg_url, monkeypatch) as p:
        first, second = await holder_and_follower(p)
        phone = stream(second)
        mark = await log_last(pg_url)
        died = dies_after_write(first, monkeypatch, b'"k1"' if dies_at == "ask" else b'"l1"')
        await p.conv.append("reply", "Line one", id="l1")
        if dies_at == "ask":  # the line told by the holder, before the ask is raised
            await eventually(lambda: sent(phone(), "chat.item") == ["l1"], within=10)
        await raise_asks(p.conv, "k1")
        await eventually(died.is_set, within=10)
        mirror = second.mirrors["d0"]  # the ask is in the log
        await eventually(lambda: [a.id for a in mirror.conversations["p0"].asks] == ["k1"])
        p.workers.remove(first)
        await asyncio.wait_for(vanish(first, monkeypatch), 30)
        await eventually(lambda: holds(second), within=10)
        await eventually(lambda: sent(phone(), "ask.raised") == ["k1"], within=10)
        await raise_asks(p.conv, "k2")  # read by the new holder's resumed stream
        await eventually(lambda: sent(phone(), "ask.raised") == ["k1", "k2"], within=10)
        assert sent(phone(), "chat.item") == ["l1"]
        assert [r["item"]["id"] for r in await told(pg_url, mark, "chat.item")] == ["l1"]
        assert [r["ask"]["id"] for r in await told(pg_url, mark, "ask.raised")] == ["k1", "k2"]
        assert await list_resets(pg_url, mark) == []


def stops_after_write(gw: Gateway, monkeypatch: pytest.MonkeyPatch, kind: str) -> asyncio.Event:
    """``gw`` writes nothing after the write that holds a phone event of ``kind`` (as a
    kill -9 right after that commit leaves it): set then."""
    log = gw.workers.log if gw.workers else None
    assert log is not None
    real = log.events.write
    stopped = asyncio.Event()

    async def write(records: Sequence[Record]) -> Appended:
        if stopped.is_set():
            await asyncio.Event().wait()  # never: the worker is gone
        done = await real(records)
        if any(r.type == kind for r in records):
            stopped.set()
        return done

    monkeypatch.setattr(log.events, "write", write)
    return stopped


async def test_a_chat_line_the_dead_holder_told_is_not_told_again_whatever_its_writes_held(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's writes hold one entry each but what one run of entries told: the holder
    dies right after the write that told a chat line; the other worker takes the lease when
    it runs out and does not tell the line again (that write said it was told): a phone's
    stream on it is sent the line once."""
    monkeypatch.setattr(worklog, "BATCH", 1)
    async with pair(pg_url, monkeypatch) as p:
        first, second = await holder_and_follower(p)
        phone = stream(second)
        stopped = stops_after_write(first, monkeypatch, "chat.item")
        await p.conv.append("reply", "Line one", id="l1")
        await eventually(stopped.is_set, within=10)
        await eventually(lambda: sent(phone(), "chat.item") == ["l1"], within=10)
        p.workers.remove(first)
        await asyncio.wait_for(vanish(first, monkeypatch), 30)
        await eventually(lambda: holds(second), within=10)
        await raise_asks(p.conv, "k1")  # read by the new holder's resumed stream
        await eventually(lambda: sent(phone(), "ask.raised") == ["k1"], within=10)
        assert sent(phone(), "chat.item") == ["l1"]
