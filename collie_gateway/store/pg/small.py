"""Small repositories on PostgreSQL: named values (``kv``) and chat notes (R3, R4, C3)."""

from __future__ import annotations

from datetime import datetime

from collie_gateway.core.notes import NOTE_WORDS, Note
from collie_gateway.store.pg.database import PgDatabase


class PgKvRepo:
    """Bytes under text keys."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, if any."""
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT value FROM kv WHERE key = %s", (key,))
            row = await cur.fetchone()
        return bytes(row[0]) if row is not None else None

    async def put(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key`` (replacing what was there)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO kv(key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    async def with_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every value whose key starts with ``prefix``, by the rest of its key."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT key, value FROM kv WHERE left(key, %s) = %s", (len(prefix), prefix)
            )
            rows = await cur.fetchall()
        return {str(k)[len(prefix) :]: bytes(v) for k, v in rows}


class PgNotesRepo:
    """The gateway's own lines of each conversation."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def save(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Keep a note; a second note under the same key is ignored."""
        kind = note.words or note.kind  # as the SQLite file keeps it (store/notes.py)
        row = (agent, conv_id, key, kind, note.text, note.at.isoformat(), note.after_item)
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO notes(agent, conversation, key, kind, text, at, after_item)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                row,
            )

    async def load(self, agent: str, conv_id: str) -> list[Note]:
        """The notes of one conversation, oldest first."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT kind, text, at, after_item FROM notes"
                " WHERE agent = %s AND conversation = %s ORDER BY at, key",
                (agent, conv_id),
            )
            rows = await cur.fetchall()
        return [
            Note(
                kind=NOTE_WORDS.get(str(k), str(k)),
                text=str(t),
                at=datetime.fromisoformat(str(a)),
                after_item=i,
                words=str(k) if str(k) in NOTE_WORDS else None,
            )
            for k, t, a, i in rows
        ]
