"""Phone events in one sequence across workers on PostgreSQL (issue 23,
``store/pg/events.py``): numbered in the writing transaction, so a reader polling after the
last number it saw never skips one; a ``NOTIFY`` hint per event; an id older than what is
kept, or from another store, means reset. Each worker is its own pool on the test's
database."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg

from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.pg.events import EventLog
from collie_gateway.store.values import Heard, LogRecord

WRITERS = 3  # workers
LANES = 4  # transactions in flight on each
EACH = 40  # events each lane writes


@contextlib.asynccontextmanager
async def worker(url: str) -> AsyncIterator[EventLog]:
    db = await PgDatabase.open(url)
    try:
        yield EventLog(db)
    finally:
        await db.close()


async def test_a_reader_after_its_last_number_sees_every_event_once_in_order(
    pg_url: str,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        logs = [await stack.enter_async_context(worker(pg_url)) for _ in range(WRITERS + 1)]
        reader, writers = logs[0], logs[1:]
        total = WRITERS * LANES * EACH

        async def lane(log: EventLog, name: str) -> None:
            for n in range(EACH):
                await log.publish("chat.delta", f"{name}-{n}".encode())

        writing = asyncio.gather(
            *(lane(w, f"w{i}l{k}") for i, w in enumerate(writers) for k in range(LANES))
        )
        seen: list[int] = []
        try:
            for _ in range(10_000):  # bounded: polls until every event was read
                batch = await reader.since(seen[-1] if seen else 0)
                assert batch is not None
                seen.extend(e.seq for e in batch)
                if len(seen) >= total:
                    break
                await asyncio.sleep(0.005)
        finally:
            await writing
        assert seen == list(range(1, total + 1))  # none skipped, none twice, in order
        everything = await reader.since(0, limit=total)
        assert everything is not None
        payloads = sorted(e.data.decode() for e in everything)
        expected = sorted(
            f"w{i}l{k}-{n}" for i in range(WRITERS) for k in range(LANES) for n in range(EACH)
        )
        assert payloads == expected


async def test_a_notify_carries_each_event_another_worker_wrote(pg_url: str) -> None:
    async with worker(pg_url) as listener, worker(pg_url) as writer:
        async with listener.hints() as notices:
            first = await writer.publish("ask.raised", b'{"a": 1}')
            worded = LogRecord("ask.raised", b'{"b": "\xc3\xa9"}', words=b'{"it": {"b": 2}}')
            second = (await writer.write([worded])).seqs[0]
            heard = [await asyncio.wait_for(anext(notices), 5) for _ in range(2)]
        assert [h.last for h in heard] == [first, second] == [1, 2]
        # The entries themselves, as a read gives them: no read is needed.
        read = await listener.after(0)
        assert [h.entries for h in heard] == [read[:1], read[1:]]
        assert [(e.words) for h in heard for e in h.entries or ()] == [None, b'{"it": {"b": 2}}']


async def test_a_notify_too_big_or_not_json_names_only_the_number(pg_url: str) -> None:
    big = b'"' + b"x" * 9000 + b'"'
    async with worker(pg_url) as listener, worker(pg_url) as writer:
        async with listener.hints() as notices:
            await writer.publish("chat.delta", big)
            await writer.publish("chat.delta", b"not json")
            heard = [await asyncio.wait_for(anext(notices), 5) for _ in range(2)]
        assert [(h.last, h.entries) for h in heard] == [(1, None), (2, None)]
        async with listener.hints() as notices:
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
                await other.execute("SELECT pg_notify('collie_events', '[not, ours')")
            assert await asyncio.wait_for(anext(notices), 5) == Heard(None)  # read the log
        assert [e.data for e in await listener.after(0)] == [big, b"not json"]


async def test_an_id_pruned_or_from_another_store_means_reset(pg_url: str) -> None:
    async with worker(pg_url) as log:
        assert await log.since(0) == []
        for n in range(5):
            await log.publish("list.row", str(n).encode())
        await log.prune(keep=2)
        assert await log.since(0) is None  # 1 to 3 are gone: read the screens again
        kept = await log.since(3)
        assert kept is not None
        assert [(e.seq, e.data) for e in kept] == [(4, b"3"), (5, b"4")]
        assert await log.since(5) == []
        assert await log.since(9) is None  # a number this store never gave
