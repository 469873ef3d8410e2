"""The phones' events in one sequence across workers, on PostgreSQL.

Each event gets its number in the transaction that writes it, from a counter row: the row's
lock is held to the commit, so a number is never visible before every smaller one is — a
reader that saw ``n`` never later finds one below ``n`` (a bare sequence gives numbers in
call order but commits in any order, and a reader would skip one). The same transaction
sends a ``NOTIFY`` with the number, a hint: the table is the truth, and a reader that missed
a hint finds the events on its next read. ``Last-Event-ID`` is that number on any worker; an
id older than what is kept gets ``reset`` (:meth:`EventLog.since` returns None).

Built and tested here; the phone stream does not use it yet (README: "Several workers on
PostgreSQL", not done).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import psycopg

from collie_gateway.store.pg.database import Conn, PgDatabase

CHANNEL: Final = "collie_events"


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One phone event as every worker reads it."""

    seq: int
    type: str
    data: bytes


async def append(conn: Conn, type_: str, data: bytes) -> int:
    """Number and keep one event in the caller's transaction; its number."""
    cur = await conn.execute("UPDATE event_counter SET seq = seq + 1 WHERE one = 1 RETURNING seq")
    row = await cur.fetchone()
    assert row is not None  # the counter row is made by the migration
    seq = int(row[0])
    await conn.execute(
        "INSERT INTO events(seq, type, data) VALUES (%s, %s, %s)", (seq, type_, data)
    )
    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(seq)))
    return seq


class EventLog:
    """The numbered events: written in transactions, read after a number, pruned."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def publish(self, type_: str, data: bytes) -> int:
        """One event in a transaction of its own; its number."""
        async with self.db.transaction() as conn:
            return await append(conn, type_, data)

    async def since(self, seq: int, limit: int = 1000) -> list[StoredEvent] | None:
        """The events after ``seq``, oldest first (at most ``limit``); None when ``seq`` is
        older than what is kept (the phone must reset)."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT c.seq, (SELECT min(seq) FROM events) FROM event_counter c WHERE one = 1"
            )
            row = await cur.fetchone()
            assert row is not None  # the counter row is made by the migration
            last = int(row[0])
            oldest = int(row[1]) if row[1] is not None else last + 1
            if not oldest - 1 <= seq <= last:  # pruned since, or an id of another store
                return None
            cur = await conn.execute(
                "SELECT seq, type, data FROM events WHERE seq > %s ORDER BY seq LIMIT %s",
                (seq, limit),
            )
            rows = await cur.fetchall()
        return [StoredEvent(int(s), str(t), bytes(d)) for s, t, d in rows]

    async def prune(self, keep: int) -> None:
        """Keep only the newest ``keep`` events."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM events WHERE seq <= (SELECT seq FROM event_counter) - %s", (keep,)
            )

    @contextlib.asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[int]]:
        """The numbers other transactions announced, on a connection of its own (LISTEN);
        a hint may be lost (a reconnect): read :meth:`since` on a timer as well."""
        conn = await psycopg.AsyncConnection.connect(self.db.url, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")

            async def numbers() -> AsyncIterator[int]:
                async for note in conn.notifies():
                    yield int(note.payload)

            yield numbers()
        finally:
            await conn.close()
