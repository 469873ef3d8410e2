"""The answer ledger in SQLite: each tap's record and each ask's claim (spec T1).

The pure decisions (:func:`~collie_gateway.core.answers.on_tap`, ``on_result``) run inside
the transactions here, so a decision and its write are one step.
"""

from __future__ import annotations

import sqlite3
from typing import Any

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
from collie_gateway.store.database import Database


class LedgerRepo:
    """The ledger's records and claims."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def take(self, tap: Tap, now: str) -> tuple[TapDecision, Record | None]:
        """Decide a tap against its record and the ask's claim, and write the decision: the
        record (pending, with the claim) before anything is sent. Also the record as it was."""

        def decide(conn: sqlite3.Connection) -> tuple[TapDecision, Record | None]:
            existing = _record_sync(conn, tap.request_id)
            holder = _claim_sync(conn, tap.agent, tap.ask_id)
            decision = on_tap(existing, holder, tap)
            if decision.action is Action.REPLY:
                if existing is None:
                    _insert_sync(conn, decision.record, now)
                return decision, existing
            if existing is None:
                _insert_sync(conn, decision.record, now)
            else:
                _update_sync(conn, decision.record, now)
            if decision.claim:
                conn.execute(
                    "INSERT INTO claims(agent, ask_id, request_id) VALUES (?, ?, ?)",
                    (tap.agent, tap.ask_id, tap.request_id),
                )
            return decision, existing

        return await self.db.run(decide)

    async def settle(self, settlement: Settlement, now: str) -> None:
        """Write a send's result, releasing the ask's claim when it says so."""
        rec = settlement.record

        def write(conn: sqlite3.Connection) -> None:
            _update_sync(conn, rec, now)
            if settlement.release_claim:
                conn.execute(
                    "DELETE FROM claims WHERE agent = ? AND ask_id = ? AND request_id = ?",
                    (rec.tap.agent, rec.tap.ask_id, rec.tap.request_id),
                )

        await self.db.run(write)

    async def accept(self, agent: str, ask_id: str, request_id: str, now: str) -> Record | None:
        """Settle an unsettled tap of this ask as accepted (the agent said it was answered
        with it); None when there is no such unsettled tap."""

        def write(conn: sqlite3.Connection) -> Record | None:
            rec = _record_sync(conn, request_id)
            if rec is None or rec.settled or (rec.tap.agent, rec.tap.ask_id) != (agent, ask_id):
                return None
            settled = on_result(rec, "accepted").record
            _update_sync(conn, settled, now)
            return settled

        return await self.db.run(write)

    async def refuse(self, tap: Tap, reason: str, now: str) -> Record:
        """Record a tap refused without a send; the record already kept for its request id
        wins."""

        def write(conn: sqlite3.Connection) -> Record:
            existing = _record_sync(conn, tap.request_id)
            if existing is not None:
                return existing
            rec = Record(tap=tap, settled=True, outcome=Outcome.REFUSED, reason=reason)
            _insert_sync(conn, rec, now)
            return rec

        return await self.db.run(write)

    async def record(self, request_id: str) -> Record | None:
        """The record of a request id."""
        return await self.db.query(lambda conn: _record_sync(conn, request_id))

    async def unsettled(self) -> dict[str, tuple[str, str]]:
        """Every unsettled tap: request id -> (agent, ask id)."""
        sql = "SELECT request_id, agent, ask_id FROM answers WHERE settled = 0"
        rows = await self.db.query(lambda conn: conn.execute(sql).fetchall())
        return {str(r): (str(a), str(k)) for r, a, k in rows}

    async def pending(self, agent: str) -> list[Record]:
        """Unsettled taps of ``agent``, oldest first."""
        sql = f"SELECT {_COLUMNS} FROM answers WHERE agent = ? AND settled = 0 ORDER BY created_at"
        rows = await self.db.query(lambda conn: conn.execute(sql, (agent,)).fetchall())
        return [_row(r) for r in rows]

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask."""
        sql = "SELECT 1 FROM answers WHERE agent = ? AND ask_id = ? LIMIT 1"
        found = await self.db.query(lambda conn: conn.execute(sql, (agent, ask_id)).fetchone())
        return found is not None


_COLUMNS = "request_id, agent, ask_id, version, answer, attempts, settled, outcome, reason, phone"


def _row(row: tuple[Any, ...]) -> Record:
    rid, agent, ask_id, version, answer, attempts, settled, outcome, reason, phone = tuple(row)
    tap = Tap(str(rid), str(agent), str(ask_id), int(version), bytes(answer), phone)
    return Record(
        tap=tap,
        attempts=int(attempts),
        settled=bool(settled),
        outcome=Outcome(str(outcome)) if outcome else None,
        reason=str(reason) if reason is not None else None,
    )


def _record_sync(conn: sqlite3.Connection, request_id: str) -> Record | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM answers WHERE request_id = ?", (request_id,))
    found = row.fetchone()
    return _row(found) if found else None


def _claim_sync(conn: sqlite3.Connection, agent: str, ask_id: str) -> str | None:
    row = conn.execute(
        "SELECT request_id FROM claims WHERE agent = ? AND ask_id = ?", (agent, ask_id)
    ).fetchone()
    return str(row[0]) if row else None


def _insert_sync(conn: sqlite3.Connection, rec: Record, now: str) -> None:
    conn.execute(_INSERT, _insert_args(rec, now))


def _update_sync(conn: sqlite3.Connection, rec: Record, now: str) -> None:
    conn.execute(_UPDATE, _update_args(rec, now))


_INSERT = (
    f"INSERT INTO answers({_COLUMNS}, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE = (
    "UPDATE answers SET attempts = ?, settled = ?, outcome = ?, reason = ?, updated_at = ? "
    "WHERE request_id = ?"
)


def _insert_args(rec: Record, now: str) -> tuple[object, ...]:
    t = rec.tap
    outcome = rec.outcome.value if rec.outcome else None
    return (
        t.request_id,
        t.agent,
        t.ask_id,
        t.version,
        t.answer,
        rec.attempts,
        int(rec.settled),
        outcome,
        rec.reason,
        t.phone,
        now,
        now,
    )


def _update_args(rec: Record, now: str) -> tuple[object, ...]:
    outcome = rec.outcome.value if rec.outcome else None
    return (rec.attempts, int(rec.settled), outcome, rec.reason, now, rec.tap.request_id)
