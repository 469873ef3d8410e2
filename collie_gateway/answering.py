"""The answer path's shell: the ledger in SQLite, the claim, the send, the settlement.

Each tap is written (pending, with the ask's claim) in one transaction before it is sent;
its outcome is written with the claim's release in another. After a crash or a lost link,
pending taps are sent again with the same request id (``resend_pending``).

The ledger stays in SQLite; memory holds only an index of its unsettled taps (request id ->
agent and ask), read from the file at start (``load``) and changed after each commit that
changes it. It spares the two reads every resolved ask made (``settle_accepted``,
``pending``) when, as almost always, no tap of it is unsettled (bench/answer_bench.py).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from collie_gateway.answers import (
    Action,
    Outcome,
    Record,
    Tap,
    TapDecision,
    on_result,
    on_tap,
)
from collie_gateway.errors import AgentRejected, AgentUnreachable
from collie_gateway.store import Store
from wire.errors import RemoteWireError

log = logging.getLogger(__name__)

#: Sends one tap to its agent: returns the agent's outcome and reason, or raises.
Sender = Callable[[Tap], Awaitable[tuple[str, str | None]]]


@dataclass(frozen=True, slots=True)
class Result:
    """What the phone is told: the outcome, a reason for ``refused``, and the record."""

    outcome: Outcome
    reason: str | None
    request_id: str
    conflict: bool = False
    record: Record | None = None  # the ledger's record, as written


class Answering:
    """Runs taps through the ledger; one in-flight send per request id."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock
        self._inflight: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # The ledger's unsettled taps: request id -> (agent, ask id). Only an index: the
        # records are in SQLite, and this is rebuilt from them at start.
        self._unsettled: dict[str, tuple[str, str]] = {}

    async def load(self) -> None:
        """Read the index of unsettled taps from the ledger (at start)."""
        sql = "SELECT request_id, agent, ask_id FROM answers WHERE settled = 0"
        rows = await self.store.query(lambda conn: conn.execute(sql).fetchall())
        self._unsettled = {str(r): (str(a), str(k)) for r, a, k in rows}

    def _index(self, record: Record) -> None:
        """Keep the index in step with a record just committed."""
        tap = record.tap
        if record.settled:
            self._unsettled.pop(tap.request_id, None)
        else:
            self._unsettled[tap.request_id] = (tap.agent, tap.ask_id)

    def may_settle(self, agent: str, ask_id: str, request_id: str | None) -> bool:
        """Whether an ``ask.resolved`` of this ask has a tap to settle or send again: the
        request id it names is unsettled or being sent, or another tap on the ask is."""
        if request_id is not None and self.in_flight(request_id):
            return True
        return self.unsettled(agent, ask_id)

    def unsettled(self, agent: str, ask_id: str | None = None) -> bool:
        """Whether the ledger holds an unsettled tap of ``agent`` (on ``ask_id``, if given)."""
        return any(
            a == agent and (ask_id is None or k == ask_id) for a, k in self._unsettled.values()
        )

    async def tap(self, tap: Tap, send: Sender) -> Result:
        """Record, claim, send and settle one tap; safe to call again with the same tap."""
        lock = self._inflight.get(tap.request_id)
        if lock is None:
            lock = self._inflight[tap.request_id] = asyncio.Lock()
        async with lock:
            return await self._tap(tap, send)

    async def _tap(self, tap: Tap, send: Sender) -> Result:
        now = self.clock().isoformat()

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

        decision, existing = await self.store.run(decide)
        if decision.action is Action.SEND:
            self._index(decision.record)
        if decision.action is Action.REPLY:
            rec = decision.record
            outcome = rec.outcome or Outcome.REFUSED
            kept = existing if existing is not None else rec
            return Result(outcome, rec.reason, tap.request_id, decision.conflict, kept)
        return await self._send(decision.record, send)

    async def _send(self, record: Record, send: Sender) -> Result:
        agent_outcome: str | None
        reason: str | None = None
        try:
            agent_outcome, reason = await send(record.tap)
        except AgentUnreachable as exc:
            log.info("answer %s: not sure it arrived: %s", record.tap.request_id, exc)
            agent_outcome = None
        except AgentRejected as exc:
            if exc.status >= 500:
                agent_outcome = None
            else:
                # The agent's own sentence (an error body) is shown; a bare status is not:
                # the card then reads the catalogue's "The answer was refused." (issue 9.12).
                log.info("answer %s: refused by the agent: %s", record.tap.request_id, exc)
                agent_outcome, reason = "refused", ((str(exc) or None) if exc.code else None)
        except RemoteWireError as exc:
            log.warning("answer %s: the agent's answer was not wire v1: %s", record.tap, exc)
            agent_outcome = None
        settlement = on_result(record, agent_outcome, reason)
        rec = settlement.record
        now = self.clock().isoformat()

        def settle(conn: sqlite3.Connection) -> None:
            _update_sync(conn, rec, now)
            if settlement.release_claim:
                conn.execute(
                    "DELETE FROM claims WHERE agent = ? AND ask_id = ? AND request_id = ?",
                    (rec.tap.agent, rec.tap.ask_id, rec.tap.request_id),
                )

        await self.store.run(settle)
        self._index(rec)
        return Result(rec.outcome or Outcome.UNCERTAIN, rec.reason, rec.tap.request_id, False, rec)

    async def settle_accepted(self, agent: str, ask_id: str, request_id: str) -> Result | None:
        """The agent's ``ask.resolved`` (``answered``) names this request id: a tap of it not
        yet settled is accepted (T1), without another send. None when the ledger holds no
        such unsettled tap. Waits for a send of it under way, so the two never race."""
        if self._unsettled.get(request_id) != (agent, ask_id) and not self.in_flight(request_id):
            return None  # no such tap unsettled, none being sent: nothing to read or write
        lock = self._inflight.get(request_id)
        if lock is None:
            lock = self._inflight[request_id] = asyncio.Lock()
        async with lock:
            if self._unsettled.get(request_id) != (agent, ask_id):
                return None
            now = self.clock().isoformat()

            def settle(conn: sqlite3.Connection) -> Record | None:
                rec = _record_sync(conn, request_id)
                if rec is None or rec.settled or (rec.tap.agent, rec.tap.ask_id) != (agent, ask_id):
                    return None
                settled = on_result(rec, "accepted").record
                _update_sync(conn, settled, now)
                return settled

            rec = await self.store.run(settle)
            if rec is not None:
                self._index(rec)
        if rec is None:
            return None
        return Result(Outcome.ACCEPTED, None, request_id, False, rec)

    async def refuse(self, tap: Tap, reason: str) -> Result:
        """Record a tap Collie refuses without sending (e.g. the agent's wire version)."""
        now = self.clock().isoformat()

        def record(conn: sqlite3.Connection) -> Record:
            existing = _record_sync(conn, tap.request_id)
            if existing is not None:
                return existing
            rec = Record(tap=tap, settled=True, outcome=Outcome.REFUSED, reason=reason)
            _insert_sync(conn, rec, now)
            return rec

        rec = await self.store.run(record)
        if rec.tap != tap:
            return Result(Outcome.REFUSED, reason, tap.request_id, True, rec)
        return Result(rec.outcome or Outcome.REFUSED, rec.reason, tap.request_id, False, rec)

    def in_flight(self, request_id: str) -> bool:
        """Whether a send of this request id is under way now."""
        lock = self._inflight.get(request_id)
        return lock is not None and lock.locked()

    async def lookup(self, request_id: str) -> Record | None:
        """The ledger's record of a request id."""
        return await self.store.query(lambda conn: _record_sync(conn, request_id))

    async def pending(self, agent: str) -> list[Record]:
        """Taps of ``agent`` sent but not settled, oldest first."""
        if not self.unsettled(agent):
            return []  # the index says none: no read
        sql = f"SELECT {_COLUMNS} FROM answers WHERE agent = ? AND settled = 0 ORDER BY created_at"
        rows = await self.store.query(lambda conn: conn.execute(sql, (agent,)).fetchall())
        return [_row(r) for r in rows]

    async def resend_pending(
        self, agent: str, send: Sender, ask_id: str | None = None
    ) -> list[Result]:
        """Send pending taps of ``agent`` (of one ask, if given) again, same request ids."""
        if not self.unsettled(agent, ask_id):
            return []
        results = []
        for record in await self.pending(agent):
            if ask_id is not None and record.tap.ask_id != ask_id:
                continue
            if self.in_flight(record.tap.request_id):
                continue  # its send is under way; it settles itself
            results.append(await self.tap(record.tap, send))
        return results

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask (receipts R3/R4 need it)."""
        sql = "SELECT 1 FROM answers WHERE agent = ? AND ask_id = ? LIMIT 1"
        found = await self.store.query(lambda conn: conn.execute(sql, (agent, ask_id)).fetchone())
        return found is not None


_COLUMNS = "request_id, agent, ask_id, version, answer, attempts, settled, outcome, reason"


def _row(row: aiosqlite.Row | tuple[Any, ...]) -> Record:
    rid, agent, ask_id, version, answer, attempts, settled, outcome, reason = tuple(row)
    tap = Tap(str(rid), str(agent), str(ask_id), int(version), bytes(answer))
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
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
        now,
        now,
    )


def _update_args(rec: Record, now: str) -> tuple[object, ...]:
    outcome = rec.outcome.value if rec.outcome else None
    return (rec.attempts, int(rec.settled), outcome, rec.reason, now, rec.tap.request_id)
