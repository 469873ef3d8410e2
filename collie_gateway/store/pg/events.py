"""The workers' shared log on PostgreSQL: phone events and what agents' links read, in one
sequence.

Each entry gets its number in the transaction that writes it, from a counter row: the row's
lock is held to the commit, so a number is never visible before every smaller one is — a
reader that saw ``n`` never later finds one below ``n`` (a bare sequence gives numbers in
call order but commits in any order, and a reader would skip one). The same transaction
sends one ``NOTIFY`` with the last number, a hint: the table is the truth, and a reader that
missed a hint finds the entries on its next read. ``Last-Event-ID`` is ``<store>-<number>``
on any worker; a number older than what is kept, or another store's, gets ``reset``
(:meth:`EventLog.since` returns None).

An entry written for an agent's link names the agent and the lease epoch it was written
under; :func:`append_many` writes it only while that epoch is the live one, in the same
transaction (the fencing token): a worker that lost its lease writes nothing more for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Final

import psycopg

from collie_gateway.store.pg.database import Conn, PgDatabase, PgTx
from collie_gateway.store.pg.leases import live
from collie_gateway.store.values import Appended, StoredEvent
from collie_gateway.store.values import LogRecord as Record

CHANNEL: Final = "collie_events"


async def append_many(conn: Conn, records: Sequence[Record]) -> Appended:
    """Number and keep ``records`` in the caller's transaction, in order; an entry fenced by
    a lease epoch that is not live is dropped (and its agent reported lost)."""
    fenced = {(r.agent, r.epoch) for r in records if r.agent is not None and r.epoch is not None}
    lost = fenced - await live(PgTx(conn), fenced)
    kept = [
        r for r in records if r.agent is None or r.epoch is None or (r.agent, r.epoch) not in lost
    ]
    seqs: list[int | None] = []
    if kept:
        cur = await conn.execute(
            "UPDATE event_counter SET seq = seq + %s WHERE one = 1 RETURNING seq", (len(kept),)
        )
        row = await cur.fetchone()
        assert row is not None  # the counter row is made by the migration
        first = int(row[0]) - len(kept) + 1
        rows = [(first + i, r.type, r.data, r.agent, r.epoch, r.words) for i, r in enumerate(kept)]
        async with conn.cursor() as c:
            await c.executemany(
                "INSERT INTO events(seq, type, data, agent, epoch, words)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                rows,
            )
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(rows[-1][0])))
    numbers = iter(range(first, first + len(kept))) if kept else iter(())
    for r in records:
        dropped = r.agent is not None and r.epoch is not None and (r.agent, r.epoch) in lost
        seqs.append(None if dropped else next(numbers))
    return Appended(seqs, lost)


async def append(conn: Conn, type_: str, data: bytes) -> int:
    """Number and keep one phone event in the caller's transaction; its number."""
    seq = (await append_many(conn, [Record(type_, data)])).seqs[0]
    assert seq is not None  # an unfenced entry is always kept
    return seq


class EventLog:
    """The numbered entries: written in transactions, read after a number, pruned."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def store_id(self) -> str:
        """This store's id (made by the migration): the first part of every event id."""
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT value FROM kv WHERE key = 'store_id'")
            row = await cur.fetchone()
        assert row is not None  # made by the migration
        return bytes(row[0]).decode()

    async def publish(self, type_: str, data: bytes) -> int:
        """One phone event in a transaction of its own; its number."""
        async with self.db.transaction() as conn:
            return await append(conn, type_, data)

    async def write(self, records: Sequence[Record]) -> Appended:
        """``records`` in one transaction, in order (fenced entries checked there)."""
        async with self.db.transaction() as conn:
            return await append_many(conn, records)

    async def bounds(self) -> tuple[int, int]:
        """(the oldest number kept, the last number given); oldest is last + 1 when none
        is kept."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT c.seq, (SELECT min(seq) FROM events) FROM event_counter c WHERE one = 1"
            )
            row = await cur.fetchone()
        assert row is not None  # the counter row is made by the migration
        last = int(row[0])
        return (int(row[1]) if row[1] is not None else last + 1), last

    async def since(self, seq: int, limit: int = 1000) -> list[StoredEvent] | None:
        """The entries after ``seq``, oldest first (at most ``limit``); None when ``seq`` is
        older than what is kept or newer than the last (the phone must reset)."""
        oldest, last = await self.bounds()
        if not oldest - 1 <= seq <= last:  # pruned since, or an id of another store
            return None
        return await self.after(seq, limit)

    async def after(self, seq: int, limit: int = 1000) -> list[StoredEvent]:
        """The entries after ``seq`` still kept, oldest first (at most ``limit``)."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT seq, type, data, agent, epoch, words FROM events WHERE seq > %s"
                " ORDER BY seq LIMIT %s",
                (seq, limit),
            )
            rows = await cur.fetchall()
        return [
            StoredEvent(int(s), str(t), bytes(d), a, None if e is None else int(e), w and bytes(w))
            for s, t, d, a, e, w in rows
        ]

    async def prune(self, keep: int) -> None:
        """Keep only the newest ``keep`` entries."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM events WHERE seq <= (SELECT seq FROM event_counter) - %s", (keep,)
            )

    @contextlib.asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[int]]:
        """The numbers other transactions announced, on a connection of its own (LISTEN);
        a hint may be lost (a reconnect): read :meth:`after` on a timer as well."""
        conn = await psycopg.AsyncConnection.connect(self.db.url, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")

            async def numbers() -> AsyncIterator[int]:
                async for note in conn.notifies():
                    yield int(note.payload)

            yield numbers()
        finally:
            await conn.close()
