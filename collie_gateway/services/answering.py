"""The answer path's shell: the ledger in SQLite, the claim, the send, the settlement.

Each tap is written (pending, with the ask's claim) in one transaction before it is sent;
its outcome is written with the claim's release in another. After a crash or a lost link,
pending taps are sent again with the same request id (``resend_pending``).

The ledger stays in SQLite (``store/ledger.py``); memory holds only an index of its
unsettled taps (request id -> agent and ask), read from the file at start (``load``) and
changed after each commit that changes it. It spares the two reads every resolved ask
made (``settle_accepted``, ``pending``) when, as almost always, no tap of it is unsettled
(bench/answer_bench.py).

With several workers (PostgreSQL) only the worker holding the agent's lease sends: another
worker records and claims the tap, hands it over (:class:`Handover`: a ``~want`` entry in the
shared log) and waits a while for the ledger to show it settled; the phone is told the
outcome, or "not sure yet" (its retry reads the ledger).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime

from collie_gateway.core.answers import Action, Outcome, Record, Settlement, Tap, on_result
from collie_gateway.errors import AgentRejected, AgentUnreachable
from collie_gateway.store.protocols import LedgerStore
from wire.errors import RemoteWireError

log = logging.getLogger(__name__)

#: Sends one tap to its agent: returns the agent's outcome and reason, or raises.
Sender = Callable[[Tap], Awaitable[tuple[str, str | None]]]


@dataclass(frozen=True, slots=True)
class Handover:
    """How a worker that does not follow an agent gets a tap sent by the one that does."""

    holds: Callable[[str], bool]  # whether this worker follows the agent now
    hint: Callable[[str, str], None]  # (agent, ask id): tell the holder
    wait: float  # seconds the phone's request waits for the outcome
    poll: float = 0.05  # seconds between two reads of the ledger meanwhile


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

    def __init__(
        self, ledger: LedgerStore, clock: Callable[[], datetime], *, shared: bool = False
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.shared = shared  # other workers write the same ledger (PostgreSQL)
        self.handover: Handover | None = None  # set with several workers
        self._inflight: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # The ledger's unsettled taps: request id -> (agent, ask id). Only an index: the
        # records are in SQLite, and this is rebuilt from them at start.
        self._unsettled: dict[str, tuple[str, str]] = {}

    async def load(self) -> None:
        """Read the index of unsettled taps from the ledger (at start)."""
        self._unsettled = await self.ledger.unsettled()

    async def refresh(self) -> None:
        """On a shared ledger, read the index again: taps other workers took (a worker that
        died with one unsettled leaves it to the others)."""
        if self.shared:
            await self.load()

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
        if request_id is not None and (self.shared or self.in_flight(request_id)):
            return True  # shared: perhaps a tap another worker took (settle_accepted reads it)
        return self.unsettled(agent, ask_id)

    def unsettled(self, agent: str, ask_id: str | None = None) -> bool:
        """Whether the ledger holds an unsettled tap of ``agent`` (on ``ask_id``, if given)."""
        return any(
            a == agent and (ask_id is None or k == ask_id) for a, k in self._unsettled.values()
        )

    def may_have_pending(self, agent: str) -> bool:
        """Whether :meth:`resend_pending` may find a tap of ``agent`` to send again: one
        unsettled here, or, on a shared ledger, one another worker may have taken."""
        return self.shared or self.unsettled(agent)

    async def tap(self, tap: Tap, send: Sender) -> Result:
        """Record, claim, send and settle one tap; safe to call again with the same tap."""
        lock = self._inflight.get(tap.request_id)
        if lock is None:
            lock = self._inflight[tap.request_id] = asyncio.Lock()
        async with lock:
            return await self._tap(tap, send)

    async def _tap(self, tap: Tap, send: Sender) -> Result:
        decision, existing = await self.ledger.take(tap, self.clock().isoformat())
        if decision.action is Action.SEND:
            self._index(decision.record)
        if decision.action is Action.REPLY:
            rec = decision.record
            outcome = rec.outcome or Outcome.REFUSED
            kept = existing if existing is not None else rec
            return Result(outcome, rec.reason, tap.request_id, decision.conflict, kept)
        if self.handover is not None and not self.handover.holds(tap.agent):
            return await self._hand_over(decision.record, self.handover)
        return await self._send(decision.record, send)

    async def _hand_over(self, record: Record, handover: Handover) -> Result:
        """Another worker follows the agent: it sends; wait a while for its outcome."""
        tap = record.tap
        if record.attempts > 0:  # counted as sent by take; the holder counts its own send
            record = replace(record, attempts=record.attempts - 1)
            await self.ledger.settle(Settlement(record, False), self.clock().isoformat())
        handover.hint(tap.agent, tap.ask_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + handover.wait
        while loop.time() < deadline:
            await asyncio.sleep(handover.poll)
            found = await self.ledger.record(tap.request_id)
            if found is not None and found.settled:
                self._index(found)
                outcome = found.outcome or Outcome.REFUSED
                return Result(outcome, found.reason, tap.request_id, False, found)
        log.info("answer %s: handed over, not settled yet", tap.request_id)
        return Result(Outcome.UNCERTAIN, None, tap.request_id, False, record)

    async def learn(self, agent: str) -> None:
        """On a shared ledger, index the agent's unsettled taps other workers took."""
        if self.shared:
            for record in await self.ledger.pending(agent):
                self._index(record)

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
                # the card then reads the catalogue's "The answer was refused.".
                log.info("answer %s: refused by the agent: %s", record.tap.request_id, exc)
                agent_outcome, reason = "refused", ((str(exc) or None) if exc.code else None)
        except RemoteWireError as exc:
            log.warning("answer %s: the agent's answer was not wire v1: %s", record.tap, exc)
            agent_outcome = None
        settlement = on_result(record, agent_outcome, reason)
        rec = settlement.record
        await self.ledger.settle(settlement, self.clock().isoformat())
        self._index(rec)
        return Result(rec.outcome or Outcome.UNCERTAIN, rec.reason, rec.tap.request_id, False, rec)

    async def settle_accepted(self, agent: str, ask_id: str, request_id: str) -> Result | None:
        """The agent's ``ask.resolved`` (``answered``) names this request id: a tap of it not
        yet settled is accepted (T1), without another send. None when the ledger holds no
        such unsettled tap. Waits for a send of it under way, so the two never race."""
        if self.shared and request_id not in self._unsettled:
            # Perhaps a tap another worker took: the ledger, not this worker, knows.
            found = await self.ledger.record(request_id)
            if found is not None and not found.settled:
                self._index(found)
        if self._unsettled.get(request_id) != (agent, ask_id) and not self.in_flight(request_id):
            return None  # no such tap unsettled, none being sent: nothing to read or write
        lock = self._inflight.get(request_id)
        if lock is None:
            lock = self._inflight[request_id] = asyncio.Lock()
        async with lock:
            if self._unsettled.get(request_id) != (agent, ask_id):
                return None
            now = self.clock().isoformat()
            rec = await self.ledger.accept(agent, ask_id, request_id, now)
            if rec is not None:
                self._index(rec)
        if rec is None:
            return None
        return Result(Outcome.ACCEPTED, None, request_id, False, rec)

    async def refuse(self, tap: Tap, reason: str) -> Result:
        """Record a tap Collie refuses without sending (e.g. the agent's wire version)."""
        rec = await self.ledger.refuse(tap, reason, self.clock().isoformat())
        if rec.tap != tap:
            return Result(Outcome.REFUSED, reason, tap.request_id, True, rec)
        return Result(rec.outcome or Outcome.REFUSED, rec.reason, tap.request_id, False, rec)

    def in_flight(self, request_id: str) -> bool:
        """Whether a send of this request id is under way now."""
        lock = self._inflight.get(request_id)
        return lock is not None and lock.locked()

    async def lookup(self, request_id: str) -> Record | None:
        """The ledger's record of a request id."""
        return await self.ledger.record(request_id)

    async def pending(self, agent: str) -> list[Record]:
        """Taps of ``agent`` sent but not settled, oldest first."""
        if not self.unsettled(agent):
            return []  # the index says none: no read
        return await self.ledger.pending(agent)

    async def resend_pending(
        self, agent: str, send: Sender, ask_id: str | None = None
    ) -> list[Result]:
        """Send pending taps of ``agent`` (of one ask, if given) again, same request ids."""
        await self.learn(agent)
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
        return await self.ledger.tapped(agent, ask_id)
