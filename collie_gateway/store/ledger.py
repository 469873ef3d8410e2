"""The answer ledger: each tap's record and each ask's claim (spec T1), on either engine.

The pure decisions (:func:`~collie_gateway.core.answers.on_tap`, ``on_result``) run inside
the transactions here, so a decision and its write are one step. With several workers the
taps of one ask take turns on a lock named by the ask (and one named by the request id), so
two taps of one ask on two workers see each other's claim; a record one worker settled stays
settled (its agent's word came first). On PostgreSQL the taps and settlements waiting at
once are written in one statement, one round trip and one commit (``collie_ledger_many``,
made by the schema, store/schema.py): group commit (store/batches.py). The settlements go
first, then the taps, each in the order it came, each tap decided as it would be alone,
under the same locks, with the same writes; a lone call goes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

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
from collie_gateway.store.batches import Batches
from collie_gateway.store.engine import Db, Row, SharedDb, Tx, postgres_array

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
# PostgreSQL: the settlements and the taps waiting at once, in one call (a row out for each
# tap, by its place among the taps).
_LEDGER_MANY: Final = (
    "SELECT * FROM collie_ledger_many(?::integer[], ?::integer[], ?::text[], ?::text[],"
    " ?::text[], ?::text[], ?::boolean[], ?::text[], ?::text[], ?::text[], ?::text[],"
    " ?::text[], ?::integer[], ?::bytea[], ?::text[], ?::text[])"
)
# A tap or a settlement, with the time it is written at.
Call = tuple[Tap | Settlement, str]


class LedgerRepo:
    """The ledger's records and claims."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self._batches: Batches[Call, Row | None] | None = None
        if isinstance(db, SharedDb):  # one round trip and one commit a batch
            self._batches = Batches(lambda items: _many(db, items), alone=db.unwritten)
            db.on_close(self._batches.drain)

    async def take(self, tap: Tap, now: str) -> tuple[TapDecision, Record | None]:
        """Decide a tap against its record and the ask's claim, and write the decision: the
        record (pending, with the claim) before anything is sent. Also the record as it was."""
        if self._batches is not None:
            row = await self._batches((tap, now))
            assert row is not None  # a tap's row
            existing = _row(row[1:11]) if row[1] is not None else None
            holder = str(row[11]) if row[11] is not None else None
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
        if self._batches is not None:
            await self._batches((settlement, now))
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


async def _many(db: SharedDb, items: Sequence[Call]) -> list[Row | None]:
    """Settlements and taps written in one call, each kind in order: a row for each tap (its
    place first), None for each settlement."""
    settles = [(c, now) for c, now in items if isinstance(c, Settlement)]
    taps = [c for c, _ in items if isinstance(c, Tap)]
    nows = [now for c, now in items if isinstance(c, Tap)]
    settled = [
        (*_update_args(s.record, now), s.release_claim, s.record.tap.agent, s.record.tap.ask_id)
        for s, now in settles
    ]
    columns = list(zip(*settled, strict=True)) if settled else [()] * 9
    args = [postgres_array(column) for column in columns] + [
        postgres_array([t.request_id for t in taps]),
        postgres_array([t.agent for t in taps]),
        postgres_array([t.ask_id for t in taps]),
        postgres_array([t.version for t in taps]),
        postgres_array([t.answer for t in taps]),
        postgres_array([t.phone for t in taps]),
        postgres_array(nows),
    ]
    rows = iter(sorted(await db.once_all(_LEDGER_MANY, args), key=lambda row: int(row[0])))
    return [next(rows) if isinstance(c, Tap) else None for c, _ in items]


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
