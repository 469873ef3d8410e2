"""The push plan for one raised ask (spec P1–P3), decided from stored facts: pure.

``decide(facts, limiter, showing, now)`` says what to log, what lasting decision to store,
and to which devices the push goes. The limiter is the one object it changes (a push
counts against P1's windows).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from push.limits import PushLimiter, Quiet, Summary
from push.models import Device

SENT: Final = "sent"
ALREADY_PUSHED: Final = "already pushed for this ask (P3)"
NO_DEVICE: Final = "no device registered"
SHOWING: Final = "a phone is showing this chat"


@dataclass(frozen=True, slots=True)
class Facts:
    """What the plan is decided from: the stored state of the ask's once-key, and the ask's
    place (``pane_key``: machine/agent/conversation, P1's pane)."""

    state: str | None  # None (never decided), "owed" or "done"
    reason: str | None  # why a done key was not pushed
    pending: frozenset[str]  # devices an owed push still waits for
    devices: tuple[Device, ...]  # every registered device
    machine: str
    agent: str
    pane_key: str
    quiet: bool  # found in a snapshot: an ask already decided is passed over silently
    member: bool  # a crew member's ask (its member sends its own webhooks)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do for the ask: at most one log line (``outcome``, ``reason``), a lasting
    reason to store (``settle``), whether to mark it done if nothing waits (``finish``),
    webhooks to send, and the devices to push with the limiter's decision."""

    outcome: str | None = None
    reason: str | None = None
    settle: str | None = None
    finish: bool = False
    webhooks: bool = False
    send_to: tuple[Device, ...] = ()
    summary: Summary | None = None
    owed_before: bool = False


def decide(facts: Facts, limiter: PushLimiter, showing: bool, now: datetime) -> Plan:
    """The plan for one raised ask: pushed once (P3), not while a phone shows its chat,
    within the limits (P1); a push owed from an earlier run goes to the devices it is owed to."""
    if facts.state == "done":
        if facts.quiet:
            return Plan()
        why = f"not pushed earlier: {facts.reason}" if facts.reason not in (None, SENT) else None
        return Plan(outcome="suppressed", reason=why or ALREADY_PUSHED)
    owed = facts.state == "owed"  # decided earlier, not delivered everywhere
    # Webhooks (S6) go once, with the first decision; a member sends its own.
    webhooks = not owed and not facts.member
    if showing:
        return Plan("suppressed", SHOWING, settle=SHOWING, webhooks=webhooks)
    if not facts.devices:
        # Lasting: the phone that registers next shows the ask on its dashboard at once,
        # so a push then would only buzz.
        return Plan("suppressed", NO_DEVICE, settle=NO_DEVICE, webhooks=webhooks)
    # Owed: to the devices it went to that have no lasting outcome yet (a phone that
    # registered since is not pushed an older ask).
    todo = tuple(d for d in facts.devices if d.id in facts.pending) if owed else facts.devices
    if not todo:
        return Plan(finish=True, webhooks=webhooks)
    # A push owed from before counts again: the limits hold in every window (P1), at the
    # cost of one slot for a push cut short.
    host = facts.machine
    decision = limiter.decide(facts.pane_key, f"{host}/{facts.agent}", host, now.timestamp())
    if isinstance(decision, Quiet):
        why = f"rate limited ({decision.reason.value})"
        return Plan("rate_limited", decision.reason.value, settle=why, webhooks=webhooks)
    summary = decision if isinstance(decision, Summary) else None
    kind = "summary" if summary is not None else "ask"
    why = f"{kind}, owed from before" if owed else kind
    return Plan(
        "dispatched", why, webhooks=webhooks, send_to=todo, summary=summary, owed_before=owed
    )
