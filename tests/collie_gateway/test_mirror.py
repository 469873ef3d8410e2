"""The mirror of an agent's open conversations: every wire event (spec D5, L5)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.core.mirror import AgentMirror, Change, LinkState, apply_event, is_waiting
from wire.messages import (
    AgentEvent,
    Ask,
    AskChanged,
    AskRaised,
    AskResolved,
    Conversation,
    ConversationClosed,
    ConversationOpened,
    ConversationUpdated,
    Item,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    Reset,
    TurnStopped,
)

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def conv(cid: str = "c1", **fields: Any) -> Conversation:
    base: dict[str, Any] = {"id": cid, "title": f"Title {cid}", "updated_at": NOW}
    base.update(fields)
    return Conversation(**base)


def ask(aid: str = "a1", cid: str = "c1", **fields: Any) -> Ask:
    base: dict[str, Any] = {"id": aid, "conversation": cid, "kind": "text", "title": "Q?"}
    base.update(fields)
    return Ask(**base)


def mirror(*convs: Conversation) -> AgentMirror:
    m = AgentMirror(name="desk")
    m.replace_all(list(convs))
    return m


def counts(m: AgentMirror) -> tuple[int, int]:
    return m.open_count, m.waiting_count


def test_new_mirror_is_starting_and_empty() -> None:
    m = AgentMirror(name="desk")
    assert (m.state, counts(m), m.waiting) == (LinkState.STARTING, (0, 0), set())


# --- conversations --------------------------------------------------------------------------


def test_conversation_opened_counts() -> None:
    m = mirror()
    change = apply_event(m, ConversationOpened(conversation=conv("c1")))
    assert change == Change("c1", counts_changed=True)
    assert counts(m) == (1, 0)
    assert m.waiting == set()


def test_conversation_opened_waiting_counts_as_waiting() -> None:
    m = mirror()
    change = apply_event(m, ConversationOpened(conversation=conv("c1", asks=[ask()])))
    assert change.counts_changed
    assert counts(m) == (1, 1)
    assert m.waiting == {"c1"}


def test_conversation_opened_drops_its_items() -> None:
    m = mirror()
    apply_event(m, ConversationOpened(conversation=conv(items=[Item(id="i1", kind="reply")])))
    assert m.conversations["c1"].items is None


def test_conversation_updated_to_waiting_and_back() -> None:
    m = mirror(conv("c1"), conv("c2"))
    change = apply_event(m, ConversationUpdated(conversation=conv("c1", state="waiting")))
    assert change == Change("c1", counts_changed=True)
    assert (counts(m), m.waiting) == ((2, 1), {"c1"})
    change = apply_event(m, ConversationUpdated(conversation=conv("c1", title="Renamed")))
    assert change == Change("c1", counts_changed=True)
    assert (counts(m), m.waiting) == ((2, 0), set())
    assert m.conversations["c1"].title == "Renamed"


def test_conversation_updated_without_count_change() -> None:
    m = mirror(conv("c1"))
    change = apply_event(m, ConversationUpdated(conversation=conv("c1", title="New")))
    assert change == Change("c1")


def test_conversation_updated_to_closed_removes_it() -> None:
    m = mirror(conv("c1", asks=[ask()]))
    change = apply_event(m, ConversationUpdated(conversation=conv("c1", state="closed")))
    assert change == Change("c1", closed=True, counts_changed=True)
    assert (counts(m), m.waiting, m.conversations) == ((0, 0), set(), {})


def test_conversation_updated_for_unknown_conversation_adds_it() -> None:
    m = mirror()
    apply_event(m, ConversationUpdated(conversation=conv("c9", state="working")))
    assert list(m.conversations) == ["c9"]


def test_conversation_closed() -> None:
    m = mirror(conv("c1", state="waiting"), conv("c2"))
    change = apply_event(m, ConversationClosed(conversation_id="c1", at=NOW))
    assert change == Change("c1", closed=True, counts_changed=True)
    assert (counts(m), m.waiting, list(m.conversations)) == ((1, 0), set(), ["c2"])


def test_conversation_closed_twice_changes_nothing() -> None:
    m = mirror(conv("c2"))
    change = apply_event(m, ConversationClosed(conversation_id="c1", at=NOW))
    assert change == Change("c1", closed=True, counts_changed=False)
    assert counts(m) == (1, 0)


# --- asks -----------------------------------------------------------------------------------


def test_ask_raised_makes_the_conversation_wait() -> None:
    m = mirror(conv("c1"))
    change = apply_event(m, AskRaised(ask=ask("a1")))
    assert change == Change("c1", counts_changed=True)
    assert [a.id for a in m.conversations["c1"].asks] == ["a1"]
    assert m.waiting == {"c1"}


def test_second_ask_appends_without_count_change() -> None:
    m = mirror(conv("c1", asks=[ask("a1")]))
    change = apply_event(m, AskRaised(ask=ask("a2")))
    assert change == Change("c1")
    assert [a.id for a in m.conversations["c1"].asks] == ["a1", "a2"]


def test_ask_raised_again_replaces_it_in_place() -> None:
    m = mirror(conv("c1", asks=[ask("a1"), ask("a2"), ask("a3")]))
    apply_event(m, AskRaised(ask=ask("a2", title="Raised again")))
    assert [(a.id, a.title) for a in m.conversations["c1"].asks] == [
        ("a1", "Q?"),
        ("a2", "Raised again"),
        ("a3", "Q?"),
    ]


def test_ask_changed_replaces_it_in_place() -> None:
    m = mirror(conv("c1", asks=[ask("a1"), ask("a2")]))
    change = apply_event(m, AskChanged(ask=ask("a1", version=2, title="Changed")))
    assert change == Change("c1")
    asks = m.conversations["c1"].asks
    assert [(a.id, a.version, a.title) for a in asks] == [("a1", 2, "Changed"), ("a2", 1, "Q?")]


def test_ask_for_unknown_conversation_is_ignored() -> None:
    m = mirror(conv("c1"))
    change = apply_event(m, AskRaised(ask=ask("a1", cid="c9")))
    assert change == Change("c9")
    assert (counts(m), list(m.conversations)) == ((1, 0), ["c1"])


def test_ask_resolved_returns_the_ask_as_it_was() -> None:
    original = ask("a1", title="Deploy?")
    m = mirror(conv("c1", asks=[original, ask("a2")]))
    event = AskResolved(ask_id="a1", conversation_id="c1", how="expired", at=NOW)
    change = apply_event(m, event)
    assert change == Change("c1", resolved=original)
    assert [a.id for a in m.conversations["c1"].asks] == ["a2"]
    assert m.waiting == {"c1"}


def test_last_ask_resolved_stops_waiting() -> None:
    m = mirror(conv("c1", asks=[ask("a1")]))
    event = AskResolved(ask_id="a1", conversation_id="c1", how="answered", at=NOW)
    change = apply_event(m, event)
    assert change.counts_changed
    assert change.resolved == ask("a1")
    assert (counts(m), m.waiting) == ((1, 0), set())


def test_last_ask_resolved_keeps_waiting_when_the_agent_says_so() -> None:
    m = mirror(conv("c1", state="waiting", asks=[ask("a1")]))
    apply_event(m, AskResolved(ask_id="a1", conversation_id="c1", how="decided", at=NOW))
    assert m.waiting == {"c1"}


@pytest.mark.parametrize(("cid", "aid"), [("c1", "a9"), ("c9", "a1")])
def test_unknown_ask_resolved_returns_nothing(cid: str, aid: str) -> None:
    m = mirror(conv("c1", asks=[ask("a1")]))
    change = apply_event(m, AskResolved(ask_id=aid, conversation_id=cid, how="answered", at=NOW))
    assert change == Change(cid)
    assert [a.id for a in m.conversations["c1"].asks] == ["a1"]


# --- items, turns, reset --------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        ItemAppended(conversation_id="c1", item=Item(id="i1", kind="reply", final=False)),
        ItemDelta(conversation_id="c1", item_id="i1", text="more"),
        ItemUpdated(conversation_id="c1", item=Item(id="i1", kind="reply")),
        TurnStopped(conversation_id="c1", turn=4),
    ],
)
def test_item_and_turn_events_change_no_row(event: AgentEvent) -> None:
    m = mirror(conv("c1", asks=[ask()]))
    before = dict(m.conversations)
    assert apply_event(m, event) == Change("c1")
    assert m.conversations == before
    assert counts(m) == (1, 1)


def test_reset_asks_for_snapshots_and_keeps_the_mirror() -> None:
    m = mirror(conv("c1"))
    assert apply_event(m, Reset()) == Change(None, reset=True)
    assert list(m.conversations) == ["c1"]


def test_replace_all_takes_a_fresh_snapshot() -> None:
    m = mirror(conv("c1", state="waiting"), conv("c2"))
    m.replace_all([conv("c3", asks=[ask(cid="c3")]), conv("c4", state="closed")])
    assert (sorted(m.conversations), m.waiting) == (["c3"], {"c3"})


# --- the counts are always what a full count gives ------------------------------------------

ids = st.sampled_from(["c1", "c2", "c3"])
ask_ids = st.sampled_from(["a1", "a2"])
states = st.sampled_from(["idle", "working", "waiting", "closed"])
events = st.one_of(
    st.builds(
        lambda cid, state: ConversationOpened(conversation=conv(cid, state=state)), ids, states
    ),
    st.builds(
        lambda cid, state: ConversationUpdated(conversation=conv(cid, state=state)), ids, states
    ),
    st.builds(lambda cid: ConversationClosed(conversation_id=cid, at=NOW), ids),
    st.builds(lambda aid, cid: AskRaised(ask=ask(aid, cid)), ask_ids, ids),
    st.builds(lambda aid, cid: AskChanged(ask=ask(aid, cid, version=2)), ask_ids, ids),
    st.builds(
        lambda aid, cid: AskResolved(ask_id=aid, conversation_id=cid, how="answered", at=NOW),
        ask_ids,
        ids,
    ),
    st.builds(lambda cid: TurnStopped(conversation_id=cid, turn=1), ids),
)


@given(st.lists(events, max_size=40))
def test_D5_counts_match_a_full_count(stream: list[AgentEvent]) -> None:
    m = AgentMirror(name="desk")
    for event in stream:
        before = counts(m)
        change = apply_event(m, event)
        assert change.counts_changed == (before != counts(m))
        assert m.waiting == {cid for cid, c in m.conversations.items() if is_waiting(c)}
        assert all(c.state != "closed" for c in m.conversations.values())
        for c in m.conversations.values():
            assert len({a.id for a in c.asks}) == len(c.asks)
