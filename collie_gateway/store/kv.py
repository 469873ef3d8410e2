"""Small named values (the ``kv`` table): state a service keeps across restarts."""

from __future__ import annotations

from typing import Final

from collie_gateway.store.engine import Db, Tx

PUT: Final = (
    "INSERT INTO kv(key, value) VALUES (?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
GET: Final = "SELECT value FROM kv WHERE key = ?"


class KvRepo:
    """Bytes under text keys."""

    def __init__(self, db: Db) -> None:
        self.db = db

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, if any."""
        row = await self.db.read(lambda tx: tx.one(GET, (key,)))
        return bytes(row[0]) if row is not None else None

    async def put(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key`` (replacing what was there)."""
        await self.db.write(lambda tx: tx.run(PUT, (key, value)))

    async def with_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every value whose key starts with ``prefix``, by the rest of its key."""

        async def read(tx: Tx) -> dict[str, bytes]:
            rows = await tx.all(
                "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
            )
            return {str(k)[len(prefix) :]: bytes(v) for k, v in rows}

        return await self.db.read(read)
