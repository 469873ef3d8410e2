"""The workers' shared log and its phone bus (issue 23, ``services/worklog.py``): two workers,
each its own pool on the test's database, as two gateway processes would be. An event
published on one reaches the phones of both under one id; ``Last-Event-ID`` from one replays
on the other; an id of another store, or older than the ring, means reset; an id a worker
has not applied yet is skipped, not replayed twice; a worker applying another's link entries
(``QUIET``) publishes nothing; an entry fenced by a lease that is gone is not written; entries
applied from their NOTIFYs while a read of the log is in flight are told once each, in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from collie_gateway.services.phonebus import QUIET, Subscription
from collie_gateway.services.worklog import SharedBus, SharedLog
from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.pg.events import EventLog
from collie_gateway.store.pg.leases import Leases
from collie_gateway.store.values import Heard, StoredEvent
from collie_gateway.store.values import LogRecord as Record
from tests.collie_gateway.conftest import eventually


@dataclass
class Worker:
    log: SharedLog
    bus: SharedBus
    db: PgDatabase
    records: list[StoredEvent] = field(default_factory=list)
    lost: list[set[tuple[str, int]]] = field(default_factory=list)


class HeldRead(EventLog):
    """An event log whose first read, once :attr:`armed`, that finds entries is held after
    the database answered (:attr:`reading` set) until :attr:`release` is set; and whose
    hints wait while :attr:`hearing` is clear."""

    def __init__(self, db: PgDatabase) -> None:
        super().__init__(db)
        self.armed = False
        self.reading = asyncio.Event()
        self.release = asyncio.Event()
        self.hearing = asyncio.Event()
        self.hearing.set()

    async def after(self, seq: int, limit: int = 1000) -> list[StoredEvent]:
        rows = await super().after(seq, limit)
        if self.armed and rows:
            self.armed = False
            self.reading.set()
            await self.release.wait()
        return rows

    @contextlib.asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Heard]]:
        async with super().hints() as notices:

            async def held() -> AsyncIterator[Heard]:
                async for heard in notices:
                    await self.hearing.wait()
                    yield heard

            yield held()


@contextlib.asynccontextmanager
async def worker(url: str, ring: int = 100, held: bool = False) -> AsyncIterator[Worker]:
    db = await PgDatabase.open(url)
    records: list[StoredEvent] = []
    lost: list[set[tuple[str, int]]] = []
    events = HeldRead(db) if held else EventLog(db)
    log = SharedLog(events, ring, records.append, lost.append)
    bus = await log.open_bus(0.0, ["it"])
    log.start()
    try:
        yield Worker(log, bus, db, records, lost)
    finally:
        await log.drain()
        await log.close()
        await db.close()


def ids(sub: Subscription) -> list[str]:
    """The ids of the frames queued on a stream."""
    return [f.split(b"\n", 1)[0].decode().removeprefix("id: ") for f in sub.take(1000)]


async def test_an_event_published_on_one_worker_reaches_both_under_one_id(pg_url: str) -> None:
    async with worker(pg_url) as a, worker(pg_url) as b:
        sub_a, _ = a.bus.subscribe(None)
        sub_b, _ = b.bus.subscribe(None, "it")
        a.bus.publish("list.row", {"n": 1}, lambda lang: {"n": 1, "lang": lang})
        b.bus.publish("list.row", {"n": 2})
        await eventually(lambda: sub_a.pending == 2 and sub_b.pending == 2, within=5)
        frames_b = sub_b.take(10)
        [worded] = [f for f in frames_b if b'"n":1' in f]
        assert b'"lang":"it"' in worded  # worded on a for the phone's language on b
        first = [f.split(b"\n", 1)[0] for f in frames_b]
        assert ids(sub_a) == [line.decode().removeprefix("id: ") for line in first]
        assert a.bus.boot == b.bus.boot  # the store's id, not a process's


async def test_last_event_id_from_one_worker_replays_on_the_other(pg_url: str) -> None:
    async with worker(pg_url) as a, worker(pg_url) as b:
        sub_a, _ = a.bus.subscribe(None)
        for n in range(5):
            a.bus.publish("chat.item", {"n": n})
        await eventually(lambda: sub_a.pending == 5, within=5)
        seen = ids(sub_a)
        await eventually(lambda: b.bus.last_id == a.bus.last_id, within=5)
        _, replay = await b.bus.open(seen[1])
        assert replay is not None
        assert [e.id for e in replay] == seen[2:]
        _, none = await b.bus.open(seen[-1])
        assert none == []


async def test_an_id_of_another_store_or_older_than_the_ring_means_reset(pg_url: str) -> None:
    async with worker(pg_url, ring=3) as a:
        sub, _ = a.bus.subscribe(None)
        seen: list[str] = []
        for n in range(6):  # one at a time: a stream holds at most a ring's worth
            a.bus.publish("chat.item", {"n": n})
            await eventually(lambda: sub.pending == 1, within=5)
            seen += ids(sub)
        assert (await a.bus.open("0a1b2c3d4e5f-" + seen[-1].split("-")[1]))[1] is None
        assert (await a.bus.open(seen[0]))[1] is None  # fell out of the ring of 3
        replay = (await a.bus.open(seen[2]))[1]
        assert replay is not None
        assert [e.id for e in replay] == seen[3:]
        assert (await a.bus.open(a.bus.boot + "-99999"))[1] is None  # never written
        # What a foreign phone may send: nothing a worker could number, each a reset.
        boot = a.bus.boot
        for wrong in ("garbage", boot, boot + "-", boot + "--3", boot + "-3\x00", boot + "-３",
                      boot + "-" + "9" * 40, boot + "-3-3", "-3"):  # fmt: skip
            assert (await a.bus.open(wrong))[1] is None, repr(wrong)


async def test_a_phone_ahead_of_this_worker_skips_what_it_saw(pg_url: str) -> None:
    async with worker(pg_url) as a, worker(pg_url) as b:
        sub_a, _ = a.bus.subscribe(None)
        a.bus.publish("chat.item", {"n": 1})
        await eventually(lambda: sub_a.pending == 1, within=5)
        [seen] = ids(sub_a)
        b.bus._seq = 0  # b has not applied it yet (its reader is behind)
        sub_b, replay = await b.bus.open(seen)
        assert replay == []
        assert sub_b.after == int(seen.split("-")[1])
        a.bus.publish("chat.item", {"n": 2})
        await eventually(lambda: sub_b.pending >= 1, within=5)
        await asyncio.sleep(0.2)
        later = ids(sub_b)
        assert seen not in later
        assert len(later) == 1


async def test_quiet_publishes_nothing_and_a_lost_lease_writes_nothing(pg_url: str) -> None:
    async with worker(pg_url) as a:
        sub, _ = a.bus.subscribe(None)
        token = QUIET.set(True)
        try:
            a.bus.publish("list.row", {"quiet": True})
        finally:
            QUIET.reset(token)
        leases = Leases(a.db, "w1", 5.0)
        lease = await leases.take("desk")
        assert lease is not None
        a.log.write(Record("~event", b"{}", "desk", lease.epoch))
        await eventually(lambda: len(a.records) == 1, within=5)
        await leases.give_back(lease)
        a.log.write(Record("~event", b"{}", "desk", lease.epoch))  # its epoch is gone
        a.bus.publish("list.row", {"told": True})
        await eventually(lambda: sub.pending == 1, within=5)
        await a.log.drain()
        await asyncio.sleep(0.3)
        assert len(a.records) == 1
        assert a.lost == [{("desk", lease.epoch)}]
        assert b'"told":true' in sub.take(10)[0]


async def test_entries_heard_while_a_stale_read_is_held_reach_the_phone_once_in_order(
    pg_url: str,
) -> None:
    async with worker(pg_url, held=True) as a, worker(pg_url) as b:
        assert isinstance(a.log.events, HeldRead)
        held = a.log.events
        sub_a, _ = a.bus.subscribe(None)
        sub_b, _ = b.bus.subscribe(None)
        b.bus.publish("chat.item", {"n": 1})
        await eventually(lambda: a.bus._seq == b.bus._seq == 1, within=5)
        held.hearing.clear()  # a hears nothing for now
        held.armed = True  # a's next read that finds 2 is held once answered
        b.bus.publish("chat.item", {"n": 2})
        await eventually(lambda: b.bus._seq == 2, within=5)
        reading = asyncio.create_task(a.log.catch_up())
        await held.reading.wait()
        held.hearing.set()  # 2 heard, then 3 and 4, each from its NOTIFY's entries
        for n in (3, 4):
            b.bus.publish("chat.item", {"n": n})
        await eventually(lambda: a.bus._seq == 4, within=5)
        held.release.set()  # the read's stale answer (2) comes now
        await reading
        a.bus.publish("chat.item", {"n": 5})
        await eventually(lambda: sub_a.pending == sub_b.pending == 5, within=5)
        told = ids(sub_a)
        assert told == ids(sub_b)
        assert [int(i.rsplit("-", 1)[1]) for i in told] == [1, 2, 3, 4, 5]
