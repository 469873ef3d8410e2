"""The mirror of open conversations on PostgreSQL: the same batches as the SQLite file's
(``store/mirrors.py`` ``MirrorBatches``), each flush one transaction."""

from __future__ import annotations

from typing import Any

import psycopg

from collie_gateway.store.mirrors import (
    DELETE_CONVERSATION,
    UPSERT_AGENT,
    WIPE_CONVERSATIONS,
    MirrorBatch,
    MirrorBatches,
)
from collie_gateway.store.pg.database import PgDatabase, pg

_PUT = (
    "INSERT INTO conversations(agent, id, body) VALUES (%s, %s, %s)"
    " ON CONFLICT (agent, id) DO UPDATE SET body = excluded.body"
)


class PgMirrorsRepo(MirrorBatches):
    """Agents and their open conversations, as last mirrored, in PostgreSQL."""

    _errors = (psycopg.Error, OSError)

    def __init__(self, db: PgDatabase) -> None:
        super().__init__()
        self.db = db
        db.on_close(self.close)

    async def _read(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        async with self.db.reading() as conn:
            cur = await conn.execute("SELECT name, hello, wire, last_event_id FROM agents")
            agents = await cur.fetchall()
            cur = await conn.execute("SELECT agent, body FROM conversations")
            conversations = await cur.fetchall()
        return agents, conversations

    async def _write(self, batch: MirrorBatch) -> None:
        async with self.db.transaction() as conn, conn.cursor() as cur:
            if batch.agents:
                await cur.executemany(pg(UPSERT_AGENT), batch.agents)
            if batch.wipe:
                await cur.executemany(pg(WIPE_CONVERSATIONS), [(n,) for n in batch.wipe])
            if batch.deletes:
                await cur.executemany(pg(DELETE_CONVERSATION), batch.deletes)
            if batch.puts:
                await cur.executemany(_PUT, batch.puts)
