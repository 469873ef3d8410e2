"""Agent leases on PostgreSQL: one worker holds each agent, with an epoch as fencing token.

A lease is a row (agent, holder, epoch, expires_at). Expiry is decided by the database's
clock (``clock_timestamp()``), never a worker's. Taking a free or expired lease raises its
epoch; a holder renews before it expires and, when a renewal fails, must drop the agent at
once; a write made for the agent checks in the same transaction that the epoch is still the
live one (:meth:`Leases.fenced`, and the shared log's ``append_many``), so a worker that lost
its lease (paused, cut off) cannot write as its holder. ``services/following.py`` uses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from collie_gateway.errors import StoreError
from collie_gateway.store.engine import Tx
from collie_gateway.store.pg.database import Conn, PgDatabase, PgTx
from collie_gateway.store.values import Lease

_TAKE = (
    "INSERT INTO leases(agent, holder, epoch, expires_at)"
    " VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))"
    " ON CONFLICT (agent) DO UPDATE SET holder = excluded.holder, epoch = leases.epoch + 1,"
    " expires_at = excluded.expires_at WHERE leases.expires_at <= clock_timestamp()"
    " RETURNING epoch"
)
_LIVE = (
    "SELECT agent, epoch FROM leases WHERE (agent, epoch) IN (SELECT * FROM unnest(?::text[],"
    " ?::bigint[])) AND expires_at > clock_timestamp() FOR SHARE"
)


async def live(tx: Tx, held: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    """Which of these (agent, epoch) leases are live now, in the caller's transaction; their
    rows are held to its end, so none of them can be taken before it commits."""
    pairs = list(held)
    if not pairs:
        return set()
    rows = await tx.all(_LIVE, ([a for a, _ in pairs], [e for _, e in pairs]))
    return {(str(a), int(e)) for a, e in rows}


class StaleEpoch(StoreError):
    """A write for an agent whose lease this epoch no longer holds: nothing was written."""


class Leases:
    """Take, renew, give back and fence agents' leases."""

    def __init__(self, db: PgDatabase, holder: str, seconds: float) -> None:
        self.db = db
        self.holder = holder  # this worker's name
        self.seconds = seconds  # a lease's time, renewed before it runs out

    async def take(self, agent: str) -> Lease | None:
        """The agent's lease with a new epoch, if it is free or expired; else None."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(_TAKE, (agent, self.holder, self.seconds))
            row = await cur.fetchone()
        return Lease(agent, self.holder, int(row[0])) if row else None

    async def renew(self, lease: Lease) -> bool:
        """Extend a lease still held; False: it expired or was taken (drop the agent now)."""
        return lease.agent in await self.renew_all([lease])

    async def renew_all(self, leases: list[Lease]) -> set[str]:
        """Extend every lease still held, in one statement; the agents whose lease was."""
        if not leases:
            return set()
        async with self.db.transaction() as conn:
            cur = await conn.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE holder = %s AND (agent, epoch) IN (SELECT * FROM unnest(%s::text[],"
                " %s::bigint[])) AND expires_at > clock_timestamp() RETURNING agent",
                (self.seconds, self.holder, [x.agent for x in leases], [x.epoch for x in leases]),
            )
            return {str(row[0]) for row in await cur.fetchall()}

    async def held_elsewhere(self, agents: list[str]) -> set[str]:
        """Which of ``agents`` have a live lease now (held by anyone)."""
        if not agents:
            return set()
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT agent FROM leases WHERE agent = ANY(%s) AND expires_at > clock_timestamp()",
                (agents,),
            )
            return {str(row[0]) for row in await cur.fetchall()}

    async def give_back(self, lease: Lease) -> None:
        """Free a lease at once (a worker stopping), for another worker to take."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE leases SET expires_at = '-infinity'"
                " WHERE agent = %s AND holder = %s AND epoch = %s",
                (lease.agent, lease.holder, lease.epoch),
            )

    @contextlib.asynccontextmanager
    async def fenced(self, lease: Lease) -> AsyncIterator[Conn]:
        """A transaction for a write made as the agent's holder: it checks first that the
        lease's epoch is live, and holds the lease row so it cannot be taken meanwhile.

        Raises:
            StaleEpoch: the lease expired or another worker took it; nothing is written.
        """
        async with self.db.transaction() as conn:
            if not await live(PgTx(conn), [(lease.agent, lease.epoch)]):
                raise StaleEpoch(f"agent {lease.agent}: epoch {lease.epoch} no longer holds")
            yield conn
