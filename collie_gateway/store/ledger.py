"""The answer ledger: each tap's record and each ask's claim (spec T1), on either engine.

The pure decisions (:func:`~collie_gateway.core.answers.on_tap`, ``on_result``) run inside
the transactions here, so a decision and its write are one step. With several workers the
taps of one ask take turns on a lock named by the ask (and one named by the request id), so
two taps of one ask on two workers see each other's claim; a record one worker settled stays
settled (its agent's word came first). On PostgreSQL a tap's decision and a settlement are
one statement each, one round trip (``collie_take``, made by the schema, store/schema.py;
a settlement's update and claim release in one statement): the same locks, the same writes.
"""

from __future__ import annotations

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
from collie_gateway.store.engine import Db, SharedDb, Tx

_COLUMNS = "request_id, agent, ask_id, version, answer, attempts, settled, outcome, reason, phone"
_INSERT = (
    f"INSERT INTO answers({_COLUMNS}, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE = (
    "UPDATE answers SET attempts = ?, settled = ?, outcome = ?, reason = ?, updated_at = ? "
    "WHERE request_id = ? AND settled = 0"
)
_CLAIM = (
    "INSERT INTO claims(agent, ask_id, request_id) VALUES (?, ?, ?)"
    " ON CONFLICT (agent, ask_id) DO NOTHING"
)
_RELEASE = "DELETE FROM claims WHERE agent = ? AND ask_id = ? AND request_id = ?"
# PostgreSQL: a tap decided in one call; a settlement (its update, the claim released when
# ``?`` is true) in one statement.
_TAKE_ONCE = (
    "SELECT * FROM collie_take(?::text, ?::text, ?::text, ?::integer, ?::bytea, ?::text, ?::text)"
)
_SETTLE_ONCE = (
    f"WITH settled AS ({_UPDATE} RETURNING 1) "
    "DELETE FROM claims WHERE ?::boolean AND agent = ? AND ask_id = ? AND request_id = ?"
)


class LedgerRepo:
    """The ledger's records and claims."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self._once = db if isinstance(db, SharedDb) else None  # one round trip a call

    async def take(self, tap: Tap, now: str) -> tuple[TapDecision, Record | None]:
        """Decide a tap against its record and the ask's claim, and write the decision: the
        record (pending, with the claim) before anything is sent. Also the record as it was."""
        if self._once is not None:
            t = tap
            args = (t.request_id, t.agent, t.ask_id, t.version, t.answer, t.phone, now)
            row = await self._once.once(_TAKE_ONCE, args)
            assert row is not None  # the function returns one row
            existing = _row(row[:10]) if row[0] is not None else None
            holder = str(row[10]) if row[10] is not None else None
            return on_tap(existing, holder, tap), existing

        async def decide(tx: Tx) -> tuple[TapDecision, Record | None]:
            await tx.lock("ask", tap.agent, tap.ask_id)
            await tx.lock("request", tap.request_id)
            existing = await _record(tx, tap.request_id)
            holder = await tx.one(
                "SELECT request_id FROM claims WHERE agent = ? AND ask_id = ?",
                (tap.agent, tap.ask_id),
            )
            decision = on_tap(existing, str(holder[0]) if holder else None, tap)
            if existing is None:
                await tx.run(_INSERT, _insert_args(decision.record, now))
            elif decision.action is not Action.REPLY:
                await _update(tx, decision.record, now)
            if decision.action is not Action.REPLY and decision.claim:
                await tx.run(_CLAIM, (tap.agent, tap.ask_id, tap.request_id))
            return decision, existing

        return await self.db.write(decide)

    async def settle(self, settlement: Settlement, now: str) -> None:
        """Write a send's result, releasing the ask's claim when it says so."""
        rec = settlement.record
        key = (rec.tap.agent, rec.tap.ask_id, rec.tap.request_id)
        if self._once is not None:
            args = (*_update_args(rec, now), settlement.release_claim, *key)
            await self._once.once(_SETTLE_ONCE, args)
            return

        async def write(tx: Tx) -> None:
            await _update(tx, rec, now)
            if settlement.release_claim:
                await tx.run(_RELEASE, key)

        await self.db.write(write)

    async def accept(self, agent: str, ask_id: str, request_id: str, now: str) -> Record | None:
        """Settle an unsettled tap of this ask as accepted (the agent said it was answered
        with it); None when there is no such unsettled tap."""

        async def write(tx: Tx) -> Record | None:
            rec = await _record(tx, request_id)
            if rec is None or rec.settled or (rec.tap.agent, rec.tap.ask_id) != (agent, ask_id):
                return None
            settled = on_result(rec, "accepted").record
            await _update(tx, settled, now)
            return settled

        return await self.db.write(write)

    async def refuse(self, tap: Tap, reason: str, now: str) -> Record:
        """Record a tap refused without a send; the record already kept for its request id
        wins."""

        async def write(tx: Tx) -> Record:
            await tx.lock("request", tap.request_id)
            existing = await _record(tx, tap.request_id)
            if existing is not None:
                return existing
            rec = Record(tap=tap, settled=True, outcome=Outcome.REFUSED, reason=reason)
            await tx.run(_INSERT, _insert_args(rec, now))
            return rec

        return await self.db.write(write)

    async def record(self, request_id: str) -> Record | None:
        """The record of a request id."""
        return await self.db.read(lambda tx: _record(tx, request_id, lock=""))

    async def unsettled(self) -> dict[str, tuple[str, str]]:
        """Every unsettled tap: request id -> (agent, ask id)."""
        sql = "SELECT request_id, agent, ask_id FROM answers WHERE settled = 0"
        rows = await self.db.read(lambda tx: tx.all(sql))
        return {str(r): (str(a), str(k)) for r, a, k in rows}

    async def pending(self, agent: str) -> list[Record]:
        """Unsettled taps of ``agent``, oldest first."""
        sql = (
            f"SELECT {_COLUMNS} FROM answers WHERE agent = ? AND settled = 0"
            " ORDER BY created_at, request_id"
        )
        rows = await self.db.read(lambda tx: tx.all(sql, (agent,)))
        return [_row(r) for r in rows]

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask."""
        sql = "SELECT 1 FROM answers WHERE agent = ? AND ask_id = ? LIMIT 1"
        return await self.db.read(lambda tx: tx.one(sql, (agent, ask_id))) is not None


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


async def _record(tx: Tx, request_id: str, lock: str = " FOR UPDATE") -> Record | None:
    """The record of a request id (its row held to the transaction's end, unless ``lock``
    is empty)."""
    sql = f"SELECT {_COLUMNS} FROM answers WHERE request_id = ?{lock}"
    found = await tx.one(sql, (request_id,))
    return _row(found) if found else None


async def _update(tx: Tx, rec: Record, now: str) -> None:
    await tx.run(_UPDATE, _update_args(rec, now))


def _update_args(rec: Record, now: str) -> tuple[object, ...]:
    outcome = rec.outcome.value if rec.outcome else None
    return (rec.attempts, int(rec.settled), outcome, rec.reason, now, rec.tap.request_id)


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
