"""The workers' shared log on PostgreSQL: phone events and what agents' links read, in one
sequence.

Each entry gets its number in the transaction that writes it, from a counter row: the row's
lock is held to the commit, so a number is never visible before every smaller one is — a
reader that saw ``n`` never later finds one below ``n`` (a bare sequence gives numbers in
call order but commits in any order, and a reader would skip one). A write is one call of
``collie_append`` (made by the schema, store/schema.py): one statement, one round trip, its
own transaction. It sends one ``NOTIFY`` whose payload carries the entries written, with
their numbers, when they fit (< 8000 bytes) and none was dropped, else the last number only:
a reader after the number just before them applies them without reading the table; the
table is the truth, and a reader that missed one, or heard only a number, reads it.
``Last-Event-ID`` is ``<store>-<number>`` on any worker; a number older than what is kept,
or another store's, gets ``reset`` (:meth:`EventLog.since` returns None).

An entry written for an agent's link names the agent and the lease epoch it was written
under; it is written only while that epoch is the live one (the lease row is held in the
same transaction: the fencing token): a worker that lost its lease writes nothing more for
it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Final

import msgspec
import psycopg

from collie_gateway.store.engine import postgres_array
from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.values import Appended, Heard, StoredEvent
from collie_gateway.store.values import LogRecord as Record

CHANNEL: Final = "collie_events"
BODY_MAX: Final = 7900  # bytes of entries a NOTIFY carries (the server's limit is 8000)
_APPEND: Final = (
    "SELECT collie_append(%s::text[], %s::bytea[], %s::text[], %s::bigint[], %s::bytea[],"
    " %s::text, %s::text)"
)

# (type, data, agent, epoch, words): words without a value are JSON's ``null`` (a union of
# Raw and None would not take an object).
Entry = tuple[str, msgspec.Raw, str | None, int | None, msgspec.Raw]
_NULL: Final = msgspec.Raw(b"null")
_encoder = msgspec.json.Encoder()
_entries = msgspec.json.Decoder(list[Entry])
_payload = msgspec.json.Decoder(tuple[int, list[Entry]])


def body_of(records: Sequence[Record]) -> str | None:
    """The entries as a NOTIFY carries them (JSON, their numbers added by the server); None
    when they do not fit or an entry's data is not JSON."""
    if sum(len(r.data) + len(r.words or b"") for r in records) > BODY_MAX:
        return None
    rows = [
        (r.type, msgspec.Raw(r.data), r.agent, r.epoch, _NULL if r.words is None else
         msgspec.Raw(r.words)) for r in records
    ]  # fmt: skip
    body = _encoder.encode(rows)
    if len(body) > BODY_MAX:
        return None
    try:
        _entries.decode(body)  # each entry's data is JSON: the readers can take it back
        return body.decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def heard(payload: str) -> Heard:
    """What one NOTIFY said: the last number, with the entries when it carried them (a
    payload not understood, e.g. from another version of the gateway: read the log)."""
    try:
        if not payload.startswith("["):
            return Heard(int(payload))
        first, rows = _payload.decode(payload)
    except (ValueError, msgspec.DecodeError):
        return Heard(None)
    entries = [
        StoredEvent(first + i, t, bytes(d), a, e, None if w == _NULL else bytes(w))
        for i, (t, d, a, e, w) in enumerate(rows)
    ]
    return Heard(first + len(rows) - 1, entries)


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
        seq = (await self.write([Record(type_, data)])).seqs[0]
        assert seq is not None  # an unfenced entry is always kept
        return seq

    async def write(self, records: Sequence[Record]) -> Appended:
        """``records`` in one transaction, in order (fenced entries checked there), in one
        round trip; an entry fenced by a lease epoch that is not live is dropped (and its
        agent reported lost)."""
        if not records:
            return Appended([], set())
        args = (
            postgres_array([r.type for r in records]),
            postgres_array([r.data for r in records]),
            postgres_array([r.agent for r in records]),
            postgres_array([r.epoch for r in records]),
            postgres_array([r.words for r in records]),
            body_of(records),
            CHANNEL,
        )
        async with self.db.reading() as conn:  # autocommit: the statement is a transaction
            cur = await conn.execute(_APPEND, args)
            row = await cur.fetchone()
        assert row is not None  # the function returns one array
        seqs: list[int | None] = [None if n is None else int(n) for n in row[0]]
        lost = {
            (r.agent, r.epoch)
            for r, n in zip(records, seqs, strict=True)
            if n is None and r.agent is not None and r.epoch is not None
        }
        return Appended(seqs, lost)

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

    async def last_read(self, agent: str, epoch: int) -> StoredEvent | None:
        """The last entry of what a link of ``agent`` read under ``epoch`` (``~link``,
        ``~snapshot``, ``~event`` or ``~sync``), if one is still kept: the newest entries
        first, on the table's key."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT seq, type, data, agent, epoch, words FROM events WHERE agent = %s"
                " AND epoch = %s AND type IN ('~link', '~snapshot', '~event', '~sync')"
                " ORDER BY seq DESC LIMIT 1",
                (agent, epoch),
            )
            row = await cur.fetchone()
        if row is None:
            return None
        s, t, d, a, e, w = row
        return StoredEvent(int(s), str(t), bytes(d), a, int(e), w and bytes(w))

    async def prune(self, keep: int) -> None:
        """Keep only the newest ``keep`` entries."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "DELETE FROM events WHERE seq <= (SELECT seq FROM event_counter) - %s", (keep,)
            )

    @contextlib.asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Heard]]:
        """What each write announced (its last number, and its entries when the NOTIFY
        carried them), on a connection of its own (LISTEN); one may be lost (a reconnect):
        read :meth:`after` on a timer as well."""
        conn = await psycopg.AsyncConnection.connect(self.db.url, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")

            async def notices() -> AsyncIterator[Heard]:
                async for note in conn.notifies():
                    yield heard(note.payload)

            yield notices()
        finally:
            await conn.close()
