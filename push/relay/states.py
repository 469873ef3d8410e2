"""A relay subscription's states, as one table (STYLE: h2's ``(state, input) -> (effect,
next)``): every pair is listed, so the table reads whole. Pure.

A subscription starts unbound (made without a VAPID key) or bound (given one at
registration). The first signed push binds an unbound one to its key; from then on only
that key may push. The app deleting it, or the provider refusing its token, ends it for
good: every later push is answered 410 Gone.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class State(StrEnum):
    """Where a subscription stands."""

    UNBOUND = "unbound"  # no VAPID key yet: the first signed push binds it
    BOUND = "bound"  # pushes only with its VAPID key
    DELETED = "deleted"  # the app deleted it
    REFUSED = "refused"  # APNs or FCM said the token is gone


class Input(StrEnum):
    """What happens to a subscription."""

    PUSH_ITS_KEY = "push_its_key"  # a validly signed push, by the bound key (any if unbound)
    PUSH_OTHER_KEY = "push_other_key"  # a validly signed push by another key
    DELETE = "delete"  # the app deletes it
    PROVIDER_GONE = "provider_gone"  # APNs or FCM answered that the token is gone


class Effect(StrEnum):
    """What the relay does, and answers."""

    BIND_AND_FORWARD = "bind_and_forward"  # record the key, then forward (201)
    FORWARD = "forward"  # forward (201)
    REFUSE = "refuse"  # 403 Forbidden: not the key it was made for
    GONE = "gone"  # 410 Gone
    FORGET = "forget"  # 204: deleted


TABLE: Final[dict[tuple[State, Input], tuple[Effect, State]]] = {
    (State.UNBOUND, Input.PUSH_ITS_KEY): (Effect.BIND_AND_FORWARD, State.BOUND),
    (State.UNBOUND, Input.PUSH_OTHER_KEY): (Effect.BIND_AND_FORWARD, State.BOUND),
    (State.UNBOUND, Input.DELETE): (Effect.FORGET, State.DELETED),
    (State.UNBOUND, Input.PROVIDER_GONE): (Effect.GONE, State.REFUSED),
    (State.BOUND, Input.PUSH_ITS_KEY): (Effect.FORWARD, State.BOUND),
    (State.BOUND, Input.PUSH_OTHER_KEY): (Effect.REFUSE, State.BOUND),
    (State.BOUND, Input.DELETE): (Effect.FORGET, State.DELETED),
    (State.BOUND, Input.PROVIDER_GONE): (Effect.GONE, State.REFUSED),
    (State.DELETED, Input.PUSH_ITS_KEY): (Effect.GONE, State.DELETED),
    (State.DELETED, Input.PUSH_OTHER_KEY): (Effect.GONE, State.DELETED),
    (State.DELETED, Input.DELETE): (Effect.FORGET, State.DELETED),
    (State.DELETED, Input.PROVIDER_GONE): (Effect.GONE, State.DELETED),
    (State.REFUSED, Input.PUSH_ITS_KEY): (Effect.GONE, State.REFUSED),
    (State.REFUSED, Input.PUSH_OTHER_KEY): (Effect.GONE, State.REFUSED),
    (State.REFUSED, Input.DELETE): (Effect.FORGET, State.DELETED),
    (State.REFUSED, Input.PROVIDER_GONE): (Effect.GONE, State.REFUSED),
}


def step(state: State, event: Input) -> tuple[Effect, State]:
    """The effect of ``event`` on a subscription in ``state``, and its next state."""
    return TABLE[(state, event)]


def push_input(bound_key: str | None, signer: str) -> Input:
    """The input a push signed by ``signer`` is, for a subscription bound to ``bound_key``
    (None: unbound, any key is its key)."""
    return Input.PUSH_ITS_KEY if bound_key in (None, signer) else Input.PUSH_OTHER_KEY
