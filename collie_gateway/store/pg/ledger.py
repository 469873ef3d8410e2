"""The answer ledger on PostgreSQL: each tap's record and each ask's claim (spec T1).

As in the SQLite ledger, the pure decision (``on_tap``, ``on_result``) runs inside the
transaction that writes it. Workers deciding taps of one ask take turns on an advisory lock
named by the ask (and one named by the request id), so two taps of one ask on two workers
see each other's claim.
"""

from __future__ import annotations

from collie_gateway.core.answers import (
    Action,
    Outcome,
    Record,
    Settlement,
    Tap,
    TapDecision,
    on_result,
    on_tap,
)
from collie_gateway.store.ledger import _COLUMNS, _INSERT, _UPDATE, _insert_args, _row, _update_args
from collie_gateway.store.pg.database import Conn, PgDatabase, lock, pg


async def _record(conn: Conn, request_id: str) -> Record | None:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM answers WHERE request_id = %s FOR UPDATE", (request_id,)
    )
    found = await cur.fetchone()
    return _row(found) if found else None


async def _claim(conn: Conn, agent: str, ask_id: str) -> str | None:
    cur = await conn.execute(
        "SELECT request_id FROM claims WHERE agent = %s AND ask_id = %s", (agent, ask_id)
    )
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def _insert(conn: Conn, rec: Record, now: str) -> None:
    await conn.execute(pg(_INSERT), _insert_args(rec, now))


async def _update(conn: Conn, rec: Record, now: str) -> None:
    # A record another worker settled stays settled (its agent's word came first).
    await conn.execute(pg(_UPDATE) + " AND settled = 0", _update_args(rec, now))


class PgLedgerRepo:
    """The ledger's records and claims, shared by every worker."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    async def take(self, tap: Tap, now: str) -> tuple[TapDecision, Record | None]:
        """Decide a tap against its record and the ask's claim, and write the decision: the
        record (pending, with the claim) before anything is sent. Also the record as it was."""
        async with self.db.transaction() as conn:
            await lock(conn, "ask", tap.agent, tap.ask_id)
            await lock(conn, "request", tap.request_id)
            existing = await _record(conn, tap.request_id)
            holder = await _claim(conn, tap.agent, tap.ask_id)
            decision = on_tap(existing, holder, tap)
            if existing is None:
                await _insert(conn, decision.record, now)
            elif decision.action is not Action.REPLY:
                await _update(conn, decision.record, now)
            if decision.action is not Action.REPLY and decision.claim:
                await conn.execute(
                    "INSERT INTO claims(agent, ask_id, request_id) VALUES (%s, %s, %s)",
                    (tap.agent, tap.ask_id, tap.request_id),
                )
            return decision, existing

    async def settle(self, settlement: Settlement, now: str) -> None:
        """Write a send's result, releasing the ask's claim when it says so."""
        rec = settlement.record
        async with self.db.transaction() as conn:
            await _update(conn, rec, now)
            if settlement.release_claim:
                await conn.execute(
                    "DELETE FROM claims WHERE agent = %s AND ask_id = %s AND request_id = %s",
                    (rec.tap.agent, rec.tap.ask_id, rec.tap.request_id),
                )

    async def accept(self, agent: str, ask_id: str, request_id: str, now: str) -> Record | None:
        """Settle an unsettled tap of this ask as accepted (the agent said it was answered
        with it); None when there is no such unsettled tap."""
        async with self.db.transaction() as conn:
            rec = await _record(conn, request_id)
            if rec is None or rec.settled or (rec.tap.agent, rec.tap.ask_id) != (agent, ask_id):
                return None
            settled = on_result(rec, "accepted").record
            await _update(conn, settled, now)
            return settled

    async def refuse(self, tap: Tap, reason: str, now: str) -> Record:
        """Record a tap refused without a send; the record already kept for its request id
        wins."""
        async with self.db.transaction() as conn:
            await lock(conn, "request", tap.request_id)
            existing = await _record(conn, tap.request_id)
            if existing is not None:
                return existing
            rec = Record(tap=tap, settled=True, outcome=Outcome.REFUSED, reason=reason)
            await _insert(conn, rec, now)
            return rec

    async def record(self, request_id: str) -> Record | None:
        """The record of a request id."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM answers WHERE request_id = %s", (request_id,)
            )
            found = await cur.fetchone()
        return _row(found) if found else None

    async def unsettled(self) -> dict[str, tuple[str, str]]:
        """Every unsettled tap: request id -> (agent, ask id)."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT request_id, agent, ask_id FROM answers WHERE settled = 0"
            )
            rows = await cur.fetchall()
        return {str(r): (str(a), str(k)) for r, a, k in rows}

    async def pending(self, agent: str) -> list[Record]:
        """Unsettled taps of ``agent``, oldest first."""
        sql = (
            f"SELECT {_COLUMNS} FROM answers WHERE agent = %s AND settled = 0"
            " ORDER BY created_at, request_id"
        )
        async with self.db.reading() as conn:
            cur = await conn.execute(sql, (agent,))
            rows = await cur.fetchall()
        return [_row(r) for r in rows]

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask."""
        async with self.db.reading() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM answers WHERE agent = %s AND ask_id = %s LIMIT 1", (agent, ask_id)
            )
            return await cur.fetchone() is not None
