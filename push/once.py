"""Once per ask (spec P3): the key, and a store that says whether a key is new.

``once_key`` is pure; ``SqliteOnce`` does I/O through the gateway's aiosqlite connection.
"""

from __future__ import annotations

import json
import re
import time
from typing import Final, Protocol

import aiosqlite

_TABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}", re.ASCII)


def once_key(machine: str, agent: str, *, tool_call: str | None, ask: str) -> str:
    """The key an ask pushes once under: machine, durable agent and tool call id, or the
    ask's id when it names no tool (ask ids are stable across an agent's restarts).

    The key is a JSON array, so no choice of ids can make two keys collide.
    """
    tail = ["tool", tool_call] if tool_call else ["ask", ask]
    return json.dumps([machine, agent, *tail], separators=(",", ":"), ensure_ascii=False)


class OnceStore(Protocol):
    """Remembers which keys were seen."""

    async def first_time(self, key: str) -> bool:
        """True the first time ``key`` is given, False ever after (atomically)."""
        ...


class SqliteOnce:
    """A ``OnceStore`` in a table of the gateway's SQLite database. It commits on the
    connection it is given: give it its own, or call it between your transactions.

    Usage::

        once = await SqliteOnce.create(db)          # creates the table if missing
        if await once.first_time(key): ...          # push
    """

    def __init__(self, db: aiosqlite.Connection, table: str = "push_once") -> None:
        if not _TABLE.fullmatch(table):
            raise ValueError(f"not a table name: {table!r}")
        self._db = db
        self._table = table

    @classmethod
    async def create(cls, db: aiosqlite.Connection, table: str = "push_once") -> SqliteOnce:
        """The store, with its table created if missing."""
        store = cls(db, table)
        await db.execute(
            f"CREATE TABLE IF NOT EXISTS {store._table} "
            "(key TEXT PRIMARY KEY NOT NULL, at REAL NOT NULL) WITHOUT ROWID"
        )
        await db.commit()
        return store

    async def first_time(self, key: str, now: float | None = None) -> bool:
        """True the first time ``key`` is given: one INSERT OR IGNORE, so two callers
        racing on the same key get True once."""
        at = time.time() if now is None else now
        cursor = await self._db.execute(
            f"INSERT OR IGNORE INTO {self._table} (key, at) VALUES (?, ?)", (key, at)
        )
        inserted = cursor.rowcount == 1
        await cursor.close()
        await self._db.commit()
        return inserted

    async def forget_before(self, cutoff: float) -> int:
        """Drop keys first seen before ``cutoff`` (unix seconds); the count dropped."""
        cursor = await self._db.execute(f"DELETE FROM {self._table} WHERE at < ?", (cutoff,))
        count = cursor.rowcount
        await cursor.close()
        await self._db.commit()
        return count
