"""The answer path's shell: the ledger in SQLite, the claim, the send, the settlement.

Each tap is written (pending, with the ask's claim) in one transaction before it is sent;
its outcome is written with the claim's release in another. After a crash or a lost link,
pending taps are sent again with the same request id (``resend_pending``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import aiosqlite

from collie_gateway.answers import (
    Action,
    Outcome,
    Record,
    Tap,
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


class Answering:
    """Runs taps through the ledger; one in-flight send per request id."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock
        self._inflight: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
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
        async with self.store.transaction() as db:
            existing = await _record(db, tap.request_id)
            holder = await _claim(db, tap.agent, tap.ask_id)
            decision = on_tap(existing, holder, tap)
            if decision.action is Action.REPLY:
                if existing is None:
                    await _insert(db, decision.record, now)
                rec = decision.record
                outcome = rec.outcome or Outcome.REFUSED
                return Result(outcome, rec.reason, tap.request_id, conflict=decision.conflict)
            if existing is None:
                await _insert(db, decision.record, now)
            else:
                await _update(db, decision.record, now)
            if decision.claim:
                await db.execute(
                    "INSERT INTO claims(agent, ask_id, request_id) VALUES (?, ?, ?)",
                    (tap.agent, tap.ask_id, tap.request_id),
                )
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
                agent_outcome, reason = "refused", (str(exc) or None)
        except RemoteWireError as exc:
            log.warning("answer %s: the agent's answer was not wire v1: %s", record.tap, exc)
            agent_outcome = None
        settlement = on_result(record, agent_outcome, reason)
        rec = settlement.record
        async with self.store.transaction() as db:
            await _update(db, rec, self.clock().isoformat())
            if settlement.release_claim:
                await db.execute(
                    "DELETE FROM claims WHERE agent = ? AND ask_id = ? AND request_id = ?",
                    (rec.tap.agent, rec.tap.ask_id, rec.tap.request_id),
                )
        return Result(rec.outcome or Outcome.UNCERTAIN, rec.reason, rec.tap.request_id)

    async def refuse(self, tap: Tap, reason: str) -> Result:
        """Record a tap Collie refuses without sending (e.g. the agent's wire version)."""
        async with self.store.transaction() as db:
            existing = await _record(db, tap.request_id)
            if existing is not None and existing.tap == tap and existing.settled:
                return Result(existing.outcome or Outcome.REFUSED, existing.reason, tap.request_id)
            if existing is None:
                rec = Record(tap=tap, settled=True, outcome=Outcome.REFUSED, reason=reason)
                await _insert(db, rec, self.clock().isoformat())
        return Result(Outcome.REFUSED, reason, tap.request_id)

    async def lookup(self, request_id: str) -> Record | None:
        """The ledger's record of a request id."""
        return await _record(self.store.db, request_id)

    async def pending(self, agent: str) -> list[Record]:
        """Taps of ``agent`` sent but not settled, oldest first."""
        async with self.store.db.execute(
            f"SELECT {_COLUMNS} FROM answers WHERE agent = ? AND settled = 0 ORDER BY created_at",
            (agent,),
        ) as cur:
            return [_row(r) for r in await cur.fetchall()]

    async def resend_pending(
        self, agent: str, send: Sender, ask_id: str | None = None
    ) -> list[Result]:
        """Send pending taps of ``agent`` (of one ask, if given) again, same request ids."""
        results = []
        for record in await self.pending(agent):
            if ask_id is None or record.tap.ask_id == ask_id:
                results.append(await self.tap(record.tap, send))
        return results

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask (receipts R3/R4 need it)."""
        async with self.store.db.execute(
            "SELECT 1 FROM answers WHERE agent = ? AND ask_id = ? LIMIT 1", (agent, ask_id)
        ) as cur:
            return await cur.fetchone() is not None


_COLUMNS = "request_id, agent, ask_id, version, answer, attempts, settled, outcome, reason"


def _row(row: aiosqlite.Row) -> Record:
    rid, agent, ask_id, version, answer, attempts, settled, outcome, reason = tuple(row)
    tap = Tap(str(rid), str(agent), str(ask_id), int(version), bytes(answer))
    return Record(
        tap=tap,
        attempts=int(attempts),
        settled=bool(settled),
        outcome=Outcome(str(outcome)) if outcome else None,
        reason=str(reason) if reason is not None else None,
    )


async def _record(db: aiosqlite.Connection, request_id: str) -> Record | None:
    async with db.execute(
        f"SELECT {_COLUMNS} FROM answers WHERE request_id = ?", (request_id,)
    ) as cur:
        row = await cur.fetchone()
    return _row(row) if row else None


async def _claim(db: aiosqlite.Connection, agent: str, ask_id: str) -> str | None:
    async with db.execute(
        "SELECT request_id FROM claims WHERE agent = ? AND ask_id = ?", (agent, ask_id)
    ) as cur:
        row = await cur.fetchone()
    return str(row[0]) if row else None


async def _insert(db: aiosqlite.Connection, rec: Record, now: str) -> None:
    t = rec.tap
    await db.execute(
        f"INSERT INTO answers({_COLUMNS}, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            t.request_id,
            t.agent,
            t.ask_id,
            t.version,
            t.answer,
            rec.attempts,
            int(rec.settled),
            rec.outcome.value if rec.outcome else None,
            rec.reason,
            now,
            now,
        ),
    )


async def _update(db: aiosqlite.Connection, rec: Record, now: str) -> None:
    await db.execute(
        "UPDATE answers SET attempts = ?, settled = ?, outcome = ?, reason = ?, updated_at = ? "
        "WHERE request_id = ?",
        (
            rec.attempts,
            int(rec.settled),
            rec.outcome.value if rec.outcome else None,
            rec.reason,
            now,
            rec.tap.request_id,
        ),
    )
