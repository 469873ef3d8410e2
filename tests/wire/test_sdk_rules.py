"""The SDK's pure decisions (``wire.agent._rules``): every branch, no agent, no file, no loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wire.agent import _rules as rules
from wire.agent._rules import Resolution
from wire.errors import LocalWireError
from wire.messages import (
    MAX_BODY,
    MAX_ID,
    Answer,
    Ask,
    AskResolved,
    Button,
    CommandResult,
    Conversation,
    Item,
    Reply,
    ReplyResult,
    Starter,
    encode,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
YES = Answer(text="yes")


def _ask(**kw: object) -> Ask:
    fields: dict[str, object] = {"id": "a1", "conversation": "c1", "kind": "text", "title": "?"}
    fields.update(kw)
    return Ask(**fields)  # type: ignore[arg-type]


def _reply(version: int = 1, text: str = "yes") -> Reply:
    return Reply(request_id="r1", version=version, answer=Answer(text=text))


# --- values ----------------------------------------------------------------------------------


def test_aware_takes_a_naive_time_as_utc_and_keeps_a_zoned_one() -> None:
    naive = datetime(2030, 1, 1, 12, 0)
    assert rules.aware(naive) == NOW
    zoned = datetime(2030, 1, 1, 13, 0, tzinfo=UTC)
    assert rules.aware(zoned) is zoned


def test_us_counts_microseconds_since_the_epoch_naive_or_not() -> None:
    assert rules.us(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert rules.us(datetime(1970, 1, 1, 0, 0, 1, 5)) == 1_000_005
    assert rules.requests_cutoff(NOW) == rules.us(NOW - timedelta(days=30))


def test_checked_passes_what_a_decoder_takes_and_refuses_the_rest() -> None:
    ask = _ask()
    assert rules.checked(ask) is ask
    with pytest.raises(LocalWireError, match="Ask breaks the wire's limits"):
        rules.checked(_ask(id="x" * (MAX_ID + 1)))
    with pytest.raises(LocalWireError):
        rules.checked(_ask(title="\ud800"))  # a lone surrogate cannot be UTF-8


def test_derived_id_is_base_colon_key_or_a_digest_when_too_long() -> None:
    assert rules.derived_id("a1", "follow-up") == "a1:follow-up"
    long = rules.derived_id("a" * MAX_ID, "k")
    assert long.startswith("f-")
    assert len(long) <= MAX_ID
    assert long == rules.derived_id("a" * MAX_ID, "k") != rules.derived_id("a" * MAX_ID, "j")


# --- asks ------------------------------------------------------------------------------------


def test_an_ask_raised_again_in_the_run_changes_only_when_its_content_does() -> None:
    existing = _ask(version=3, raised_at=NOW)
    assert rules.changed_in_run(existing, _ask(raised_at=NOW + timedelta(hours=1))) is None
    new = rules.changed_in_run(existing, _ask(title="other", raised_at=NOW + timedelta(hours=1)))
    assert new is not None
    assert (new.version, new.title, new.raised_at) == (4, "other", NOW)


def test_an_ask_kept_from_a_run_before_keeps_its_version_unless_its_content_changed() -> None:
    stored = _ask(version=2, raised_at=NOW)
    later = NOW + timedelta(days=1)
    same = rules.reraised(stored, _ask(raised_at=later))
    assert (same.version, same.raised_at) == (2, NOW)
    other = rules.reraised(stored, _ask(text="more", raised_at=later))
    assert (other.version, other.raised_at, other.text) == (3, NOW, "more")


def test_an_ask_is_due_once_its_deadline_is_reached() -> None:
    assert not rules.is_due(_ask(), NOW)
    assert rules.is_due(_ask(deadline=NOW), NOW)
    assert not rules.is_due(_ask(deadline=NOW + timedelta(seconds=1)), NOW)
    assert rules.is_due(_ask(deadline=datetime(2030, 1, 1, 11, 0)), NOW)  # naive: UTC


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("answered", ReplyResult(outcome="answered")),
        ("decided", ReplyResult(outcome="decided")),
        ("expired", ReplyResult(outcome="expired")),
        ("stopped", ReplyResult(outcome="not_open", reason="stopped")),
        ("superseded", ReplyResult(outcome="not_open", reason="superseded")),
    ],
)
def test_a_reply_to_an_ended_ask_gets_how_it_ended(how: str, expected: ReplyResult) -> None:
    assert rules.not_open(Resolution(how=how, at=NOW)) == expected


def test_a_reply_to_an_unknown_ask_is_not_open() -> None:
    assert rules.not_open(None) == ReplyResult(outcome="not_open")


def test_a_reply_past_the_deadline_is_expired_before_anything_else() -> None:
    ask = _ask(deadline=NOW, version=2)
    assert rules.judge_reply(ask, _reply(version=1), NOW, None) == ReplyResult(outcome="expired")


def test_a_reply_to_another_version_is_changed() -> None:
    assert rules.judge_reply(_ask(version=2), _reply(1), NOW, None) == ReplyResult(
        outcome="changed"
    )


def test_an_answer_that_does_not_fit_is_refused_with_the_wire_sentence() -> None:
    refusal = rules.judge_reply(_ask(max_length=2), _reply(text="too long"), NOW, None)
    assert isinstance(refusal, str)
    assert "2" in refusal


def test_the_agents_own_check_runs_only_on_an_answer_the_wire_takes() -> None:
    seen: list[Answer] = []

    def own(ask: Ask, answer: Answer) -> str | None:
        seen.append(answer)
        return None if answer.text == "yes" else "Say yes."

    assert rules.judge_reply(_ask(), _reply(text="yes"), NOW, own) is None
    assert rules.judge_reply(_ask(), _reply(text="no"), NOW, own) == "Say yes."
    assert isinstance(rules.judge_reply(_ask(max_length=1), _reply(text="no"), NOW, own), str)
    assert [a.text for a in seen] == ["yes", "no"]


def test_a_fitting_reply_answers_the_ask_with_its_answer_and_request_id() -> None:
    reply = _reply()
    assert rules.answered(reply, NOW) == Resolution(
        how="answered", at=NOW, answer=reply.answer, request_id="r1"
    )


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (
            "accepted",
            Resolution(how="answered", at=NOW, answer=Answer(text="yes"), request_id="r1"),
        ),
        ("answered", Resolution(how="answered", at=NOW)),
        ("decided", Resolution(how="decided", at=NOW)),
        ("expired", Resolution(how="expired", at=NOW)),
        ("changed", None),
        ("not_open", None),
        ("refused", None),
    ],
)
def test_what_an_on_reply_outcome_does_to_the_open_ask(
    outcome: str, expected: Resolution | None
) -> None:
    assert rules.forwarded(ReplyResult(outcome=outcome), _reply(), NOW) == expected


def test_ask_resolved_carries_the_resolution() -> None:
    resolution = Resolution(how="answered", at=NOW, request_id="r9")
    assert rules.ask_resolved("a1", "c1", resolution) == AskResolved(
        ask_id="a1", conversation_id="c1", how="answered", request_id="r9", at=NOW
    )


# --- conversations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asks_open", "explicit", "running", "expected"),
    [
        (True, None, False, "waiting"),
        (True, "busy", True, "waiting"),
        (False, "busy", True, "busy"),
        (False, "busy", False, "busy"),
        (False, None, True, "working"),
        (False, None, False, "idle"),
    ],
)
def test_a_conversations_state(
    asks_open: bool, explicit: str | None, running: bool, expected: str
) -> None:
    assert rules.derived_state(asks_open=asks_open, explicit=explicit, running=running) == expected


def test_a_new_item_id_skips_the_ids_taken() -> None:
    assert rules.next_item_id(0, set()) == "i0"
    assert rules.next_item_id(2, {"i2", "i3", "i5"}) == "i4"


def test_finished_makes_final_only_the_items_still_written_keeping_their_time() -> None:
    earlier = NOW - timedelta(minutes=1)
    items = [
        Item(id="i0", kind="reply", text="done", at=earlier),
        Item(id="i1", kind="reply", text="half", final=False),
        Item(id="i2", kind="reply", text="half", final=False, at=earlier),
    ]
    assert rules.finished(items, NOW) == [
        (1, Item(id="i1", kind="reply", text="half", at=NOW)),
        (2, Item(id="i2", kind="reply", text="half", at=earlier)),
    ]


def test_a_conversation_that_fits_is_sent_whole() -> None:
    conv = Conversation(id="c1", updated_at=NOW, items=[Item(id="i0", kind="reply", text="hi")])
    assert rules.fit(conv) is conv


def test_a_conversation_over_8_mib_loses_its_oldest_items_and_says_so() -> None:
    text = "x" * (1024 * 1024 - 100)
    items = [Item(id=f"i{n}", kind="reply", text=text) for n in range(10)]
    items[0] = Item(id="left-out-0", kind="reply", text=text)  # the notice's first id is taken
    fitted = rules.fit(Conversation(id="c1", updated_at=NOW, items=items))
    assert fitted.items is not None
    notice, *kept = fitted.items
    assert (notice.id, notice.kind, notice.text) == ("left-out-1", "notice", rules.LEFT_OUT)
    assert [i.id for i in kept] == [i.id for i in items[-len(kept) :]]
    assert 0 < len(kept) < len(items)
    assert len(encode(fitted)) <= MAX_BODY


def test_open_conversations_are_listed_newest_first_then_by_id() -> None:
    convs = [
        Conversation(id="a", updated_at=NOW),
        Conversation(id="b", updated_at=NOW),
        Conversation(id="c", updated_at=datetime(2030, 1, 1, 13, 0)),  # naive: UTC, newest
        Conversation(id="d", updated_at=NOW - timedelta(hours=1)),
    ]
    assert [c.id for c in rules.newest_first(convs)] == ["c", "b", "a", "d"]


def test_the_next_cursor_names_the_last_row_of_a_full_page() -> None:
    rows = [(30, "c3"), (20, "c2"), (10, "c1")]
    assert rules.next_cursor(rows, 3) is None
    assert rules.next_cursor(rows[:2], 2) is None
    assert rules.next_cursor(rows, 2) == "20:c2"


# --- commands --------------------------------------------------------------------------------


def test_accepted_and_refused() -> None:
    assert rules.accepted("c1") == CommandResult(outcome="accepted", conversation_id="c1")
    assert rules.refused("closed") == CommandResult(outcome="refused", reason="closed")


def test_a_stop_or_a_tap_needs_the_feature_then_the_current_turn() -> None:
    unsupported = CommandResult(outcome="refused", reason="unsupported")
    assert rules.turn_refusal(supported=False, turn=1, current=2) == unsupported
    assert rules.turn_refusal(supported=True, turn=1, current=2) == rules.MOVED_ON
    assert rules.turn_refusal(supported=True, turn=2, current=2) is None


def test_a_tap_on_a_button_missing_busy_or_disabled_is_refused() -> None:
    assert rules.button_refusal(None) == CommandResult(outcome="not_found", reason="button")
    both = Button(id="b", label="Go", busy=True, disabled=True)
    assert rules.button_refusal(both) == rules.refused("busy")
    disabled = Button(id="b", label="Go", disabled=True)
    assert rules.button_refusal(disabled) == rules.refused("disabled")
    assert rules.button_refusal(Button(id="b", label="Go")) is None


def test_a_steering_message_needs_the_feature_and_the_running_turn() -> None:
    def steer(supported: bool, running: bool, turn: int | None) -> CommandResult | None:
        return rules.steer_refusal(supported=supported, running=running, turn=turn, current=3)

    assert steer(False, True, 3) == rules.refused("unsupported")
    assert steer(True, False, None) == rules.MOVED_ON
    assert steer(True, True, 2) == rules.MOVED_ON
    assert steer(True, True, 3) is None
    assert steer(True, True, None) is None


def test_a_start_needs_the_feature_and_a_known_starter() -> None:
    starters = [Starter(id="s1", label="Plan")]
    assert rules.start_refusal(supported=False, starters=starters, starter_id="s1") == (
        rules.refused("unsupported")
    )
    assert rules.start_refusal(supported=True, starters=starters, starter_id="s2") == (
        CommandResult(outcome="not_found", reason="starter")
    )
    assert rules.start_refusal(supported=True, starters=starters, starter_id="s1") is None
