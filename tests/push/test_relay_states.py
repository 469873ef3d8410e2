"""Issue 22: the relay subscription's state table — every pair listed, and what must hold
whatever order things happen in (hypothesis walks the pairs and sequences of them)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from push.relay.states import TABLE, Effect, Input, State, push_input, step

FORWARDS = {Effect.FORWARD, Effect.BIND_AND_FORWARD}


def test_the_table_lists_every_pair() -> None:
    assert set(TABLE) == set(itertools.product(State, Input))


@given(st.sampled_from(State), st.lists(st.sampled_from(Input), max_size=30))
def test_what_holds_in_every_walk(start: State, inputs: list[Input]) -> None:
    state = start
    ended = start in (State.DELETED, State.REFUSED)
    for event in inputs:
        effect, after = step(state, event)
        if ended:
            # Deleted or refused is for good: never forwarded again, never active again.
            assert effect not in FORWARDS
            assert after in (State.DELETED, State.REFUSED)
        if state is State.BOUND:
            assert after is not State.UNBOUND  # a bound key is never given up
            assert effect is not Effect.BIND_AND_FORWARD
        if event is Input.PUSH_OTHER_KEY and state is State.BOUND:
            assert effect is Effect.REFUSE
        if event is Input.DELETE:
            assert (effect, after) == (Effect.FORGET, State.DELETED)
        ended = ended or after in (State.DELETED, State.REFUSED)
        state = after


def test_an_unbound_subscription_takes_any_key_once() -> None:
    assert push_input(None, "k1") is Input.PUSH_ITS_KEY
    assert push_input("k1", "k1") is Input.PUSH_ITS_KEY
    assert push_input("k1", "k2") is Input.PUSH_OTHER_KEY
