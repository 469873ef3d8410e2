"""The answer state machine (pure): what a tap does, and what an agent's answer settles.

A tap is recorded (pending) and claims its ask before anything is sent; the claim decides
races between phones (people-in-the-loop S5). The same request id with the same answer gets
the settled outcome again, or is sent again with the same id while unsettled; with another
answer it is refused and nothing is applied. The store runs these decisions in transactions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from enum import StrEnum

from msgspec import Struct

__all__ = [
    "AGENT_OUTCOMES",
    "Action",
    "CardState",
    "Outcome",
    "Record",
    "Settlement",
    "Tap",
    "TapDecision",
    "TapOutcome",
    "card_state",
    "on_result",
    "on_tap",
    "tap_state",
]


class TapOutcome(StrEnum):
    """How a tap's answer ended (spec T1). The first six are the wire's reply outcomes."""

    ACCEPTED = "accepted"
    DECIDED = "decided"
    EXPIRED = "expired"
    ANSWERED = "answered"
    NOT_OPEN = "not_open"
    CHANGED = "changed"
    UNCERTAIN = "uncertain"  # no answer from the agent: the reply may not have arrived
    REFUSED = "refused"  # Collie refused the answer
    OLDER_COLLIE = "older_collie"  # the agent's machine cannot take answers given here


class CardState(Struct, frozen=True, kw_only=True):
    """The last tap on a card: its outcome, its request id, whether it was a Retry, the
    reason given with a ``refused`` or ``not_open`` outcome, and the ask version it answered
    (None: not known)."""

    outcome: TapOutcome
    request_id: str
    retry: bool = False
    reason: str | None = None
    version: int | None = None


Outcome = TapOutcome  # the name the ledger's code uses

#: The agent's reply outcomes (wire/SPEC.md) the gateway understands.
AGENT_OUTCOMES = frozenset({"accepted", "decided", "expired", "answered", "not_open", "changed"})


@dataclass(frozen=True, slots=True)
class Tap:
    """One answer as the phone sent it."""

    request_id: str
    agent: str
    ask_id: str
    version: int
    answer: bytes  # the canonical JSON of the answer


@dataclass(frozen=True, slots=True)
class Record:
    """A tap as the ledger keeps it; ``settled`` once an outcome is final."""

    tap: Tap
    attempts: int = 0
    settled: bool = False
    outcome: Outcome | None = None
    reason: str | None = None


class Action(enum.Enum):
    """What to do with a tap."""

    SEND = "send"  # record (or keep) pending, claim, send to the agent
    REPLY = "reply"  # answer the phone from the ledger; nothing is sent


@dataclass(frozen=True, slots=True)
class TapDecision:
    """The decision for one tap: the record to write, and whether to send."""

    action: Action
    record: Record
    claim: bool = False  # take the ask's claim in the same transaction
    conflict: bool = False  # the request id was used for another answer: nothing is sent


def on_tap(existing: Record | None, claim_holder: str | None, tap: Tap) -> TapDecision:
    """Decide a tap, given its ledger record (if any) and who holds the ask's claim."""
    if existing is not None:
        if existing.tap != tap:
            refused = Record(
                tap=existing.tap,
                attempts=existing.attempts,
                settled=existing.settled,
                outcome=Outcome.REFUSED,
            )
            return TapDecision(Action.REPLY, refused, conflict=True)
        if existing.settled:
            return TapDecision(Action.REPLY, existing)
        return TapDecision(Action.SEND, replace(existing, attempts=existing.attempts + 1))
    if claim_holder is not None and claim_holder != tap.request_id:
        lost = Record(tap=tap, settled=True, outcome=Outcome.ANSWERED)
        return TapDecision(Action.REPLY, lost)
    return TapDecision(Action.SEND, Record(tap=tap, attempts=1), claim=True)


@dataclass(frozen=True, slots=True)
class Settlement:
    """What an attempt's result writes: the record, and whether the ask's claim is released."""

    record: Record
    release_claim: bool


def on_result(record: Record, agent_outcome: str | None, reason: str | None = None) -> Settlement:
    """Settle (or not) a sent tap.

    ``agent_outcome`` is the agent's outcome, ``"refused"`` when it rejected the answer
    (``reason`` its sentence), or ``None`` when no answer came back (timeout, broken link):
    then the record stays pending and the claim stays, since the agent may have acted.
    An outcome this Collie does not know is "not accepted" (wire §12.1): the card shows the
    agent's reason, else "The answer was refused.". ``reason`` is kept with ``not_open`` too,
    the one known outcome whose card shows it (T1: "… and the agent gave no reason").
    """
    if agent_outcome is None:
        return Settlement(replace(record, outcome=Outcome.UNCERTAIN), release_claim=False)
    if agent_outcome == "refused" or agent_outcome not in AGENT_OUTCOMES:
        settled = replace(record, settled=True, outcome=Outcome.REFUSED, reason=reason)
        return Settlement(settled, release_claim=True)
    outcome = Outcome(agent_outcome)
    kept = reason if outcome is Outcome.NOT_OPEN else None
    settled = replace(record, settled=True, outcome=outcome, reason=kept)
    return Settlement(settled, release_claim=outcome is not Outcome.ACCEPTED)


def tap_state(
    outcome: Outcome, request_id: str, reason: str | None, record: Record | None = None
) -> CardState:
    """What a card shows for a tap's outcome as told to the phone (a tap the ledger sent more
    than once is a retry, T1)."""
    retry = record is not None and record.attempts > 1
    return CardState(outcome=outcome, request_id=request_id, retry=retry, reason=reason)


def card_state(record: Record) -> CardState | None:
    """What the card shows for a recorded tap (a tap sent more than once is a retry, T1)."""
    if record.outcome is None:
        return None
    return CardState(
        outcome=record.outcome,
        request_id=record.tap.request_id,
        retry=record.attempts > 1,
        reason=record.reason,
        version=record.tap.version,
    )
