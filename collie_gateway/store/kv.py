"""Small named values in SQLite (the ``kv`` table): state a service keeps across restarts."""

from __future__ import annotations

import sqlite3

from collie_gateway.store.database import Database


class KvRepo:
    """Bytes under text keys."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, if any."""
        row = await self.db.query(
            lambda conn: conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        )
        return bytes(row[0]) if row is not None else None

    async def put(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key`` (replacing what was there)."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (key, value))

        await self.db.run(write)

    async def with_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every value whose key starts with ``prefix``, by the rest of its key."""

        def read(conn: sqlite3.Connection) -> dict[str, bytes]:
            rows = conn.execute(
                "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
            ).fetchall()
            return {str(k)[len(prefix) :]: bytes(v) for k, v in rows}

        return await self.db.query(read)
