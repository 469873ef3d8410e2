"""The shared path's transactions on PostgreSQL, one round trip each (T1, D1): a tap's
decision, a settlement, a write to the shared log. The round trips are counted from the
client's own protocol trace (libpq's ``PQtrace``: each ``ReadyForQuery`` the server sends ends
one), so a second statement, a ``BEGIN`` or a ``COMMIT`` added back fails here; taps (and
settlements) in flight at once go in one round trip a batch. What the one statements decide
is the same as the transactions they replace (the store's contract tests run both engines);
here also with two workers racing and a lease lost between two writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from collie_gateway.core.answers import Action, Outcome, Record, Tap, TapDecision, on_result
from collie_gateway.store.ledger import LedgerRepo
from collie_gateway.store.pg.database import Conn, PgDatabase
from collie_gateway.store.pg.events import EventLog
from collie_gateway.store.pg.leases import Leases
from collie_gateway.store.values import Appended, LogRecord

NOW = "2026-12-04T12:00:00+00:00"


class Traced:
    """A worker's database whose one connection traces the protocol to a file."""

    def __init__(self, trace: Path) -> None:
        self.db: PgDatabase | None = None
        self.trace = trace
        self.out = trace.open("w")
        self.conns: list[Conn] = []

    @property
    def database(self) -> PgDatabase:
        assert self.db is not None  # set once the pool is open
        return self.db

    def start(self, conn: Conn) -> None:
        conn.pgconn.trace(self.out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    async def configure(self, conn: Conn) -> None:
        self.conns.append(conn)
        self.start(conn)

    def trips(self) -> int:
        """Round trips so far: the server's ``ReadyForQuery`` messages in the trace."""
        for conn in self.conns:  # libpq buffers the trace: written out when it stops
            conn.pgconn.untrace()
            self.start(conn)
        text = self.trace.read_text()
        return sum(
            1 for line in text.splitlines() if line.startswith("B\t") and "ReadyForQuery" in line
        )

    async def counted(self, work: Awaitable[object]) -> int:
        """Round trips ``work`` took."""
        before = self.trips()
        await work
        return self.trips() - before


@contextlib.asynccontextmanager
async def traced(url: str, trace: Path) -> AsyncIterator[Traced]:
    """A worker's database (migrated) on one connection whose protocol is traced."""
    migrated = await PgDatabase.open(url)
    await migrated.close()
    worker = Traced(trace)
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True},
        configure=worker.configure,
    )  # fmt: skip
    await pool.open(wait=True)
    worker.db = PgDatabase(pool, url)
    try:
        yield worker
    finally:
        await worker.db.close()
        worker.out.close()


def tap(request_id: str, ask: str = "a1", answer: bytes = b'{"option":"allow"}') -> Tap:
    return Tap(request_id, "desk", ask, 1, answer, "p-1")


async def test_T1_a_tap_and_its_settlement_are_one_round_trip_each(
    pg_url: str, tmp_path: Path
) -> None:
    async with traced(pg_url, tmp_path / "trace") as worker:
        ledger = LedgerRepo(worker.database)
        await ledger.take(tap("warm", ask="a0"), NOW)  # the pool's connection made and traced
        taken: list[tuple[TapDecision, Record | None]] = []

        async def take(t: Tap) -> None:
            taken.append(await ledger.take(t, NOW))

        assert await worker.counted(take(tap("r1"))) == 1
        decision, existing = taken[-1]
        assert (decision.action, decision.claim, existing) == (Action.SEND, True, None)
        settle = ledger.settle(on_result(decision.record, "expired"), NOW)
        assert await worker.counted(settle) == 1
        assert await worker.counted(take(tap("r2"))) == 1  # the claim was released
        assert await worker.counted(take(tap("r2"))) == 1  # sent again, unsettled
        decision, existing = taken[-1]
        assert existing is not None
        assert (decision.action, decision.record.attempts, existing.attempts) == (Action.SEND, 2, 1)
        settled = await ledger.record("r1")
        assert settled is not None
        assert settled.outcome is Outcome.EXPIRED
        assert settled.tap.phone == "p-1"


async def test_T1_taps_and_settlements_in_flight_together_are_one_round_trip_a_batch(
    pg_url: str, tmp_path: Path
) -> None:
    async with traced(pg_url, tmp_path / "trace") as worker:
        ledger = LedgerRepo(worker.database)
        warm = {f"warm{i}" for i in range(6)}
        for request_id in sorted(warm):  # psycopg prepares the statement on its 6th run
            await ledger.take(tap(request_id, ask=request_id), NOW)
        taps = [tap(f"r{i}", ask=f"b{i}") for i in range(6)]
        taken: list[tuple[TapDecision, Record | None]] = []

        async def take_all() -> None:
            taken.extend(await asyncio.gather(*(ledger.take(t, NOW) for t in taps)))

        # The first goes at once, alone; the five that came meanwhile, in one statement.
        assert await worker.counted(take_all()) == 2
        assert [(d.action, d.claim) for d, _ in taken] == [(Action.SEND, True)] * 6
        settle_all = asyncio.gather(
            *(ledger.settle(on_result(d.record, "accepted"), NOW) for d, _ in taken[:3])
        )
        assert await worker.counted(settle_all) == 2
        # Settlements and taps waiting at once: one statement.
        mixed = asyncio.gather(
            *(ledger.settle(on_result(d.record, "accepted"), NOW) for d, _ in taken[3:]),
            *(ledger.take(tap(f"r{i}", ask=f"b{i}"), NOW) for i in range(6, 9)),
        )
        assert await worker.counted(mixed) == 2
        assert set(await ledger.unsettled()) == {*warm, "r6", "r7", "r8"}


async def test_T1_a_tap_refused_in_a_batch_fails_alone_and_the_others_are_decided(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = await PgDatabase.open(pg_url)
    try:
        ledger = LedgerRepo(db)
        nul = tap("r\x00", ask="a3")  # PostgreSQL's text takes no NUL: refused before sending
        first, one, bad, two = await asyncio.gather(
            ledger.take(tap("first", ask="a0"), NOW),
            ledger.take(tap("r1"), NOW),
            ledger.take(nul, NOW),
            ledger.take(tap("r2", ask="a2"), NOW),
            return_exceptions=True,
        )
        assert isinstance(bad, psycopg.DataError)
        said = [r.getMessage() for r in caplog.records if r.name == "collie_gateway.store.batches"]
        assert len(said) == 1
        assert said[0].startswith("a batch of 3 refused (")
        for result in (first, one, two):
            assert not isinstance(result, BaseException)
            assert result[0].action is Action.SEND
        assert set(await ledger.unsettled()) == {"first", "r1", "r2"}
    finally:
        await db.close()


async def test_a_write_to_the_shared_log_is_one_round_trip(pg_url: str, tmp_path: Path) -> None:
    async with traced(pg_url, tmp_path / "trace") as worker:
        log = EventLog(worker.database)
        await log.publish("warm", b"{}")
        assert await worker.counted(log.publish("ask.raised", b"{}")) == 1
        leases = Leases(worker.database, "w1", 30.0)
        lease = await leases.take("desk")
        assert lease is not None
        records = [
            LogRecord("~event", b"{}", "desk", lease.epoch),
            LogRecord("list.row", b"{}", None, None, b'{"it": {}}'),
        ]
        written: list[Appended] = []

        async def write() -> None:
            written.append(await log.write(records))

        assert await worker.counted(write()) == 1
        assert written[-1].seqs == [3, 4]


async def test_a_fenced_entry_of_a_lost_lease_is_dropped_in_the_same_call(
    pg_url: str, tmp_path: Path
) -> None:
    async with traced(pg_url, tmp_path / "trace") as worker:
        log = EventLog(worker.database)
        one, two = Leases(worker.database, "w1", 30.0), Leases(worker.database, "w2", 30.0)
        lease = await one.take("desk")
        assert lease is not None
        await one.give_back(lease)
        newer = await two.take("desk")
        assert newer is not None
        assert newer.epoch == lease.epoch + 1
        done = await log.write(
            [
                LogRecord("~event", b"1", "desk", lease.epoch),
                LogRecord("ask.raised", b"2"),
                LogRecord("~event", b"3", "desk", newer.epoch),
            ]
        )
        assert done.seqs == [None, 1, 2]
        assert done.lost == {("desk", lease.epoch)}
        assert [e.data for e in await log.after(0)] == [b"2", b"3"]


async def test_T1_racing_taps_of_one_ask_on_two_workers_send_exactly_one(pg_url: str) -> None:
    one, two = await PgDatabase.open(pg_url), await PgDatabase.open(pg_url)
    try:
        ledgers = (LedgerRepo(one), LedgerRepo(two))
        for ask in range(20):  # twenty asks, eight taps each, half on each worker
            taps = [tap(f"a{ask}-r{i}", ask=f"a{ask}") for i in range(8)]
            results = await asyncio.gather(
                *(ledgers[i % 2].take(t, NOW) for i, t in enumerate(taps))
            )
            sent = [d for d, _ in results if d.action is Action.SEND]
            assert len(sent) == 1
            others = [d.record for d, _ in results if d.action is Action.REPLY]
            assert {(r.settled, r.outcome) for r in others} == {(True, Outcome.ANSWERED)}
            assert await ledgers[0].unsettled() == {
                sent[0].record.tap.request_id: ("desk", f"a{ask}")
            }
            await ledgers[1].settle(on_result(sent[0].record, "accepted"), NOW)
    finally:
        await one.close()
        await two.close()


async def test_T1_batches_of_two_workers_over_the_same_asks_in_opposite_orders(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    one, two = await PgDatabase.open(pg_url), await PgDatabase.open(pg_url)
    try:
        ledgers = (LedgerRepo(one), LedgerRepo(two))
        for n in range(15):  # each worker: one tap alone, then five asks in one batch
            asks = [f"k{n}-{i}" for i in range(5)]
            calls = [
                ledgers[0].take(tap(f"1-{n}", ask=f"z{n}-1"), NOW),
                *(ledgers[0].take(tap(f"1-{a}", ask=a), NOW) for a in asks),
                ledgers[1].take(tap(f"2-{n}", ask=f"z{n}-2"), NOW),
                *(ledgers[1].take(tap(f"2-{a}", ask=a), NOW) for a in reversed(asks)),
            ]
            results = await asyncio.gather(*calls)
            sent = {d.record.tap.ask_id for d, _ in results if d.action is Action.SEND}
            assert sent == {*asks, f"z{n}-1", f"z{n}-2"}
            assert sum(d.action is Action.SEND for d, _ in results) == len(asks) + 2
        # No batch waited on another in a circle (the server would refuse one: said here).
        assert not [r for r in caplog.records if r.name == "collie_gateway.store.batches"]
    finally:
        await one.close()
        await two.close()


async def test_T1_a_taps_words_and_bytes_come_back_as_given(pg_url: str) -> None:
    db = await PgDatabase.open(pg_url)
    try:
        ledger = LedgerRepo(db)
        odd = Tap('r "1", {NULL} \\ é', "NULL", 'a,{}"\\', 3, bytes(range(256)), "")
        (_, _), (decision, before) = await asyncio.gather(
            ledger.take(tap("first", ask="a0"), NOW), ledger.take(odd, NOW)
        )
        assert (decision.action, before) == (Action.SEND, None)
        reason = 'no "way" \\ {x}, NULL'
        await ledger.settle(on_result(decision.record, "refused", reason), NOW)
        kept = await ledger.record(odd.request_id)
        assert kept is not None
        assert (kept.tap, kept.tap.phone, kept.reason) == (odd, "", reason)
        again, seen = await ledger.take(odd, NOW)
        assert (again.action, again.record.outcome, seen) == (Action.REPLY, Outcome.REFUSED, kept)
    finally:
        await db.close()


async def test_D1_entries_of_the_shared_log_come_back_as_written(pg_url: str) -> None:
    db = await PgDatabase.open(pg_url)
    try:
        log = EventLog(db)
        records = [
            LogRecord('ask."raised", {x}', bytes(range(256)), None, None, b'{"en": "\\\\ \\""}'),
            LogRecord("NULL", b"", None, None, None),
        ]
        assert (await log.write(records)).seqs == [1, 2]
        back = [(e.type, e.data, e.agent, e.epoch, e.words) for e in await log.after(0)]
        assert back == [(r.type, r.data, r.agent, r.epoch, r.words) for r in records]
    finally:
        await db.close()


async def test_a_workers_first_push_claim_waits_for_no_new_connection(pg_url: str) -> None:
    """The connection that holds a worker's named locks (push claims, P3) is made when its
    store opens, so the first ask's claim does not wait for a backend to start."""
    name = f"collie-gateway {os.getpid()}"
    query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
    db = await PgDatabase.open(pg_url)
    try:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as look:
            opened = await (await look.execute(query, (name,))).fetchall()
            assert len(opened) == 1  # made at start
            assert await db.try_hold("push\x1fask-1")
            assert await (await look.execute(query, (name,))).fetchall() == opened
    finally:
        await db.close()
