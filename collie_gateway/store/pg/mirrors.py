"""The mirror of open conversations on PostgreSQL: the same batches as the SQLite file's
(``store/mirrors.py`` ``MirrorBatches``), each flush one transaction.

With several workers the holder of an agent's lease flushes its mirror, and the flush is
fenced as the link's other writes: :attr:`PgMirrorsRepo.fence` gives the epoch this worker
holds each agent under, and the rows of an agent whose epoch is not live are not written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from collie_gateway.store.mirrors import (
    DELETE_CONVERSATION,
    UPSERT_AGENT,
    WIPE_CONVERSATIONS,
    MirrorBatch,
    MirrorBatches,
)
from collie_gateway.store.pg.database import Conn, PgDatabase, pg
from collie_gateway.store.pg.leases import live as live_leases

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
        #: The lease epoch this worker holds an agent under (None: not held); None: no fence.
        self.fence: Callable[[str], int | None] | None = None
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
            if self.fence is not None:
                batch = await self._fenced(conn, batch, self.fence)
            if batch.agents:
                await cur.executemany(pg(UPSERT_AGENT), batch.agents)
            if batch.wipe:
                await cur.executemany(pg(WIPE_CONVERSATIONS), [(n,) for n in batch.wipe])
            if batch.deletes:
                await cur.executemany(pg(DELETE_CONVERSATION), batch.deletes)
            if batch.puts:
                await cur.executemany(_PUT, batch.puts)

    async def _fenced(
        self, conn: Conn, batch: MirrorBatch, fence: Callable[[str], int | None]
    ) -> MirrorBatch:
        """The batch without the rows of agents whose lease this worker does not hold now
        (checked in the flush's transaction; the lease rows held to its end)."""
        names = {str(row[0]) for row in batch.agents} | set(batch.wipe)
        names |= {agent for agent, _ in batch.deletes} | {agent for agent, _, _ in batch.puts}
        epochs = {name: fence(name) for name in names}
        held = [(name, epoch) for name, epoch in epochs.items() if epoch is not None]
        live = {name for name, _ in await live_leases(conn, held)}
        return MirrorBatch(
            [row for row in batch.agents if row[0] in live],
            [name for name in batch.wipe if name in live],
            [put for put in batch.puts if put[0] in live],
            [gone for gone in batch.deletes if gone[0] in live],
        )
