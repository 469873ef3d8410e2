"""Collie's own reasons to refuse a tap without sending it (A5–A7, wire §8): pure.

An ask the phone cannot answer (an unknown kind, or over a card's limits), an "Always allow"
without its second tap or where the card may not offer it, or an answer that does not fit
the ask. Only for an ask Collie mirrors at the version the person saw: otherwise the agent
judges (it answers ``changed``, ``expired`` …).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from collie_gateway.strings import Catalogue
from wire.answers import misfit
from wire.messages import Answer, Ask


class CardFacts(NamedTuple):
    """What the card shows of an ask, as far as a tap's refusal depends on it."""

    answerable: bool  # the card has a body: every option and field fits (A7)
    shortened: bool  # a text of it was cut, cleaned or masked (X1): no "Always allow" (A6)


def refusal(
    ask: Ask | None, version: int, answer: Answer, catalogue: Catalogue, card: CardFacts | None
) -> str | None:
    """The catalogue's reason to refuse the tap without sending it, else None.

    ``card`` is the card's facts for ``ask`` (None when ``ask`` is None)."""
    if ask is None or card is None or ask.version != version:
        # Not mirrored, or not the version the person saw (the agent answers "changed"):
        # nothing Collie can judge; the agent validates it.
        return None
    if not card.answerable:
        return catalogue["cannot_answer"]
    if ask.kind != "permission":
        return None
    chosen = [answer.option] if answer.option is not None else list(answer.options or [])
    always = {o.id for o in ask.options if o.role == "always"}
    if not always.intersection(chosen):
        return None
    if not answer.confirmed:
        return catalogue["refused_always"]
    if card.shortened or ask.tool is None:
        return catalogue["refused_always_hidden"]
    return None


def misfit_reason(
    ask: Ask | None, version: int, answer: Answer, catalogue: Catalogue, now: datetime
) -> str | None:
    """Wire §8's table against the mirrored ask, as the agent would apply it: the
    catalogue's sentence when the answer does not fit, else None. Only for an ask Collie
    holds, at the version the person saw, before its deadline (past it, or on another
    version, the agent answers ``expired`` or ``changed`` itself)."""
    if ask is None or ask.version != version:
        return None
    if ask.deadline is not None and now >= ask.deadline:
        return None
    found = misfit(ask, answer)
    if found is None:
        return None
    return catalogue.fmt("answer_" + found.code, **found.values)
