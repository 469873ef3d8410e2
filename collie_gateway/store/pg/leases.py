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
from collie_gateway.store.values import WORKER_ROW, Holding, Lease, Taken

# The row before the statement (``old``) says whether the lease was given back (its expiry
# '-infinity') and by whom.
_TAKE = (
    "WITH old AS (SELECT holder FROM leases WHERE agent = %s AND expires_at = '-infinity')"
    " INSERT INTO leases(agent, holder, epoch, expires_at)"
    " VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))"
    " ON CONFLICT (agent) DO UPDATE SET holder = excluded.holder, epoch = leases.epoch + 1,"
    " expires_at = excluded.expires_at WHERE leases.expires_at <= clock_timestamp()"
    " RETURNING epoch, (SELECT holder FROM old)"
)
# A worker's heartbeat is a row of its own; one that stopped long ago is swept.
_BEAT = (
    "INSERT INTO leases(agent, holder, epoch, expires_at)"
    " VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))"
    " ON CONFLICT (agent) DO UPDATE SET holder = excluded.holder,"
    " expires_at = excluded.expires_at"
)
_SWEEP = (
    "DELETE FROM leases WHERE agent LIKE '~worker/%%'"
    " AND expires_at < clock_timestamp() - interval '1 hour'"
)
_SURVEY = (
    "SELECT agent, holder, epoch, extract(epoch FROM expires_at) FROM leases"
    " WHERE expires_at > clock_timestamp()"
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
        taken = await self.take_over(agent)
        return None if taken is None else taken.lease

    async def take_over(self, agent: str) -> Taken | None:
        """As :meth:`take`, saying which worker gave the lease back, if one did."""
        async with self.db.transaction() as conn:
            cur = await conn.execute(_TAKE, (agent, agent, self.holder, self.seconds))
            row = await cur.fetchone()
        if row is None:
            return None
        return Taken(
            Lease(agent, self.holder, int(row[0])), None if row[1] is None else str(row[1])
        )

    async def heartbeat(self) -> None:
        """Say this worker is live for another lease's time (its row ``~worker/<name>``)."""
        async with self.db.transaction() as conn:
            await conn.execute(_BEAT, (WORKER_ROW + self.holder, self.holder, self.seconds))
            await conn.execute(_SWEEP)

    async def survey(self) -> list[Holding]:
        """Every live lease and heartbeat, now."""
        async with self.db.reading() as conn:
            cur = await conn.execute(_SURVEY)
            rows = await cur.fetchall()
        return [Holding(str(n), str(h), int(e), float(x)) for n, h, e, x in rows]

    async def quit(self) -> None:
        """This worker stops: its heartbeat ends now."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE leases SET expires_at = '-infinity' WHERE agent = %s",
                (WORKER_ROW + self.holder,),
            )

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
