"""Ask cards (spec A1–A8, T1, R1, R2) and the clock under them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collie_gateway.core.answers import CardState, TapOutcome
from collie_gateway.strings import Catalogue
from collie_gateway.views.cards import (
    Card,
    ChoiceBody,
    FormBody,
    PermissionBody,
    TextBody,
    build_card,
    build_cards,
)
from collie_gateway.views.clock import expires_label, relative_time
from wire.messages import Ask, FormField, Option, ToolRef

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
CAT = Catalogue()
BASH = ToolRef(call_id="call-7", name="Bash")
ROLES = ("allow", "always", "deny", "cancel")


def make_ask(**fields: Any) -> Ask:
    base: dict[str, Any] = {
        "id": "ask-1",
        "conversation": "conv-1",
        "kind": "permission",
        "title": "Run a command?",
        "text": "ls -la",
    }
    base.update(fields)
    return Ask(**base)


def options(*roles: str | None) -> list[Option]:
    return [Option(id=f"o{i}", label=f"Agent says {i}", role=role) for i, role in enumerate(roles)]


def card(ask: Ask, **kw: Any) -> Card:
    return build_card(ask, agent_name="desk", now=NOW, catalogue=CAT, **kw)


def permission(c: Card) -> PermissionBody:
    assert isinstance(c.body, PermissionBody)
    return c.body


def assert_unanswerable(c: Card) -> None:
    assert c.body is None
    assert not c.answerable
    assert c.notices[-1] == "This ask cannot be answered from the phone."


# --- A1, A2 ---------------------------------------------------------------------------------


def test_A1_card_carries_its_tool_call() -> None:
    assert card(make_ask(tool=BASH, options=options("allow"))).tool_call_id == "call-7"
    assert card(make_ask(options=options("allow"))).tool_call_id is None


def test_A2_caption() -> None:
    assert card(make_ask(options=options("allow"))).caption == "Needs your answer · desk"


def test_A2_caption_agent_name_cleaned() -> None:
    c = build_card(
        make_ask(options=options("allow")), agent_name="de\u202esk", now=NOW, catalogue=CAT
    )
    assert c.caption == "Needs your answer · desk"
    assert c.notices == []


# --- A3, R1: the clock ----------------------------------------------------------------------


def expires_after(seconds: float) -> str:
    return expires_label(NOW + timedelta(seconds=seconds), NOW, CAT)


def test_A3_expires_in_minutes() -> None:
    assert expires_after(4 * 60) == "Expires in 4 min"
    assert expires_after(4 * 60 + 10) == "Expires in 4 min"  # rounded down, never overstated
    assert expires_after(4 * 60 + 59.9) == "Expires in 4 min"


def test_A3_expires_in_seconds() -> None:
    assert expires_after(40) == "Expires in 40 s"


@pytest.mark.parametrize(
    ("seconds", "label"),
    [
        (3600, "Expires in 60 min"),
        (119, "Expires in 1 min"),
        (60, "Expires in 1 min"),
        (59.9, "Expires in 59 s"),
        (59, "Expires in 59 s"),
        (1, "Expires in 1 s"),
        (0.2, "Expires in 1 s"),  # not expired yet: never "0 s"
        (0, "Expired"),
        (-30, "Expired"),
    ],
)
def test_A3_expires_edges(seconds: float, label: str) -> None:
    assert expires_after(seconds) == label


def test_A3_naive_deadline_is_utc() -> None:
    assert expires_label(datetime(2025, 5, 1, 12, 2), NOW, CAT) == "Expires in 2 min"


def test_A3_expired_buttons_stay() -> None:
    c = card(make_ask(options=options("allow", "deny"), deadline=NOW - timedelta(seconds=5)))
    assert c.deadline_label == "Expired"
    assert c.answerable
    assert len(permission(c).buttons) == 2


def test_R1_deadline_under_title() -> None:
    c = card(make_ask(options=options("allow"), deadline=NOW + timedelta(minutes=4, seconds=1)))
    assert c.deadline_label == "Expires in 4 min"
    assert c.deadline == NOW + timedelta(minutes=4, seconds=1)
    none = card(make_ask(options=options("allow")))
    assert (none.deadline, none.deadline_label) == (None, None)


@pytest.mark.parametrize(
    ("ago", "label"),
    [
        (timedelta(seconds=-30), "now"),
        (timedelta(seconds=59), "now"),
        (timedelta(minutes=5, seconds=30), "5 min"),
        (timedelta(minutes=59, seconds=59), "59 min"),
        (timedelta(hours=3, minutes=59), "3 h"),
        (timedelta(hours=23, minutes=59), "23 h"),
        (timedelta(days=2, hours=5), "2 d"),
    ],
)
def test_L3_relative_time(ago: timedelta, label: str) -> None:
    assert relative_time(NOW - ago, NOW, CAT) == label


# --- A4: permission -------------------------------------------------------------------------


def test_A4_permission_wording_by_role() -> None:
    c = card(make_ask(tool=BASH, options=options(*ROLES)))
    buttons = permission(c).buttons
    assert [b.label for b in buttons] == ["Allow", "Always allow", "Deny", "Cancel"]
    assert [b.secondary for b in buttons] == [f"Agent says {i}" for i in range(4)]
    assert [b.option_id for b in buttons] == ["o0", "o1", "o2", "o3"]
    assert c.answerable
    assert c.notices == []


def test_A4_permission_blank_agent_label_has_no_second_line() -> None:
    c = card(make_ask(options=[Option(id="y", label=" ", role="allow")]))
    assert permission(c).buttons[0].secondary is None


def test_A4_permission_six_options() -> None:
    c = card(
        make_ask(tool=BASH, options=options("allow", "always", "deny", "cancel", "allow", "deny"))
    )
    assert len(permission(c).buttons) == 6
    assert c.answerable


def test_A4_permission_seventh_option_unanswerable() -> None:
    c = card(make_ask(tool=BASH, options=options(*ROLES, "allow", "deny", "cancel")))
    assert_unanswerable(c)
    assert (c.title, c.text) == ("Run a command?", "ls -la")


@pytest.mark.parametrize("role", [None, "maybe", "Allow"])
def test_A4_permission_unknown_role_unanswerable(role: str | None) -> None:
    assert_unanswerable(card(make_ask(options=options("allow", role, "deny"))))


def test_A4_permission_without_options_unanswerable() -> None:
    assert_unanswerable(card(make_ask(options=[])))


def test_A4_duplicate_option_ids_unanswerable() -> None:
    twice = [Option(id="x", label="Yes", role="allow"), Option(id="x", label="No", role="deny")]
    assert_unanswerable(card(make_ask(options=twice)))


# --- A4: choice -----------------------------------------------------------------------------


def choice_options(n: int) -> list[Option]:
    return [Option(id=f"c{i}", label=f"Choice {i}") for i in range(n)]


def test_A4_choice_single_tap_sends() -> None:
    c = card(make_ask(kind="choice", options=choice_options(3)))
    assert isinstance(c.body, ChoiceBody)
    assert [(r.option_id, r.label) for r in c.body.rows] == [
        ("c0", "Choice 0"),
        ("c1", "Choice 1"),
        ("c2", "Choice 2"),
    ]
    assert (c.body.multiple, c.body.hint, c.body.send) == (False, None, None)


def test_A4_choice_multiple() -> None:
    c = card(make_ask(kind="choice", multiple=True, options=choice_options(2)))
    assert isinstance(c.body, ChoiceBody)
    assert (c.body.multiple, c.body.hint, c.body.send) == (True, "Pick any number", "Send")


def test_A4_choice_eight_options() -> None:
    c = card(make_ask(kind="choice", options=choice_options(8)))
    assert isinstance(c.body, ChoiceBody)
    assert len(c.body.rows) == 8


def test_A4_choice_ninth_option_unanswerable() -> None:
    assert_unanswerable(card(make_ask(kind="choice", options=choice_options(9))))


def test_A4_choice_blank_row_unanswerable() -> None:
    blank = [Option(id="a", label="A"), Option(id="b", label="\u200b")]
    assert_unanswerable(card(make_ask(kind="choice", options=blank)))


# --- A4: text -------------------------------------------------------------------------------


def test_A4_text_counter_default() -> None:
    c = card(make_ask(kind="text"))
    assert isinstance(c.body, TextBody)
    assert c.body.input.limit == 500
    assert c.body.input.counter == "0 of 500"
    assert c.body.input.counter_template.format(n=12) == "12 of 500"
    assert c.body.send == "Send"


@pytest.mark.parametrize(("agent", "limit"), [(120, 120), (2000, 2000), (5000, 2000)])
def test_A4_text_agent_limit_up_to_2000(agent: int, limit: int) -> None:
    c = card(make_ask(kind="text", max_length=agent))
    assert isinstance(c.body, TextBody)
    assert c.body.input.limit == limit
    assert c.body.input.counter == f"0 of {limit}"


# --- A4: form -------------------------------------------------------------------------------


def form_fields(n: int) -> list[FormField]:
    return [FormField(id=f"f{i}", kind="switch", label=f"Field {i}") for i in range(n)]


def test_A4_form_fields_under_one_send() -> None:
    fields = [
        FormField(id="name", kind="text", label="Name", required=True, max_length=40),
        FormField(
            id="colour",
            kind="select",
            label="Colour",
            options=[Option(id="r", label="Red"), Option(id="g", label="Green")],
        ),
        FormField(id="notify", kind="switch", label="Notify me"),
    ]
    c = card(make_ask(kind="form", fields=fields))
    assert isinstance(c.body, FormBody)
    assert c.body.send == "Send"
    name, colour, notify = c.body.fields
    assert (name.kind, name.label, name.required_label) == ("text", "Name", "Required")
    assert name.input is not None
    assert name.input.counter == "0 of 40"
    assert colour.required_label is None
    assert [(o.option_id, o.label) for o in colour.options] == [("r", "Red"), ("g", "Green")]
    assert (notify.kind, notify.input, notify.options) == ("switch", None, [])


def test_A4_form_six_fields() -> None:
    c = card(make_ask(kind="form", fields=form_fields(6)))
    assert isinstance(c.body, FormBody)
    assert len(c.body.fields) == 6


def test_A4_form_seventh_field_unanswerable() -> None:
    assert_unanswerable(card(make_ask(kind="form", fields=form_fields(7))))


def test_A4_form_select_options_capped_at_20() -> None:
    def select(n: int) -> list[FormField]:
        return [FormField(id="s", kind="select", label="Pick", options=choice_options(n))]

    assert card(make_ask(kind="form", fields=select(20))).answerable
    assert_unanswerable(card(make_ask(kind="form", fields=select(21))))
    assert_unanswerable(card(make_ask(kind="form", fields=select(0))))


@pytest.mark.parametrize(
    "fields",
    [
        [FormField(id="d", kind="date", label="When")],
        [FormField(id="a", kind="switch", label="A"), FormField(id="a", kind="text", label="B")],
        [FormField(id="a", kind="switch", label="")],
        [],
    ],
    ids=["unknown field kind", "duplicate field ids", "blank label", "no fields"],
)
def test_A4_form_that_cannot_be_shown_whole_is_unanswerable(fields: list[FormField]) -> None:
    assert_unanswerable(card(make_ask(kind="form", fields=fields)))


# --- A5, A6 ---------------------------------------------------------------------------------


def test_A5_always_allow_two_taps() -> None:
    always = permission(card(make_ask(tool=BASH, options=options("allow", "always")))).buttons[1]
    assert always.role == "always"
    assert always.label == "Always allow"
    assert always.confirm_label == "Tap again to always allow"
    assert always.tool_name == "Bash"


def test_A5_only_always_carries_confirmation() -> None:
    allow = permission(card(make_ask(tool=BASH, options=options("allow", "always")))).buttons[0]
    assert (allow.confirm_label, allow.tool_name) == (None, None)


@pytest.mark.parametrize("tool", [None, ToolRef(call_id="call-7", name=" ")])
def test_A5_no_always_without_tool(tool: ToolRef | None) -> None:
    c = card(make_ask(tool=tool, options=options("allow", "always", "deny")))
    assert [b.role for b in permission(c).buttons] == ["allow", "deny"]
    assert c.answerable


def test_A5_only_always_without_tool_unanswerable() -> None:
    assert_unanswerable(card(make_ask(options=options("always"))))


@pytest.mark.parametrize(
    "change",
    [
        {"text": "x" * 2001},
        {"text": "rm -rf /\u202e"},
        {"title": "T" * 201},
        {"title": "Run\x1b[2J"},
        {"options": [Option(id="o0", label="L" * 81, role="allow")]},
        {"tool": ToolRef(call_id="call-7", name="Ba\u200bsh")},
    ],
    ids=["long text", "bidi in text", "long title", "escape in title", "long label", "tool name"],
)
def test_A6_text_shortened_no_always(change: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"tool": BASH, "options": options("allow", "always")}
    fields.update(change)
    if "options" in change:
        fields["options"] = [*change["options"], Option(id="o9", label="ok", role="always")]
    c = card(make_ask(**fields))
    assert c.notices == ["Text shortened"]
    assert "always" not in [b.role for b in permission(c).buttons]
    assert c.answerable


def test_A6_redaction_counts_as_shortened() -> None:
    c = card(
        make_ask(tool=BASH, text="export TOKEN=s3cret", options=options("allow", "always")),
        redact=lambda s: s.replace("s3cret", "••••"),
    )
    assert c.text == "export TOKEN=••••"
    assert c.notices == ["Text shortened"]
    assert [b.role for b in permission(c).buttons] == ["allow"]


def test_A6_multi_line_text_is_not_shortened() -> None:
    c = card(make_ask(tool=BASH, text="line 1\r\nline 2", options=options("allow", "always")))
    assert c.text == "line 1\nline 2"
    assert c.notices == []
    assert [b.role for b in permission(c).buttons] == ["allow", "always"]


# --- A7 -------------------------------------------------------------------------------------


def test_A7_unknown_kind() -> None:
    c = card(make_ask(kind="poll", title="Vote", text="Which one?", tool=BASH))
    assert_unanswerable(c)
    assert (c.kind, c.title, c.text) == ("poll", "Vote", "Which one?")
    assert c.notices == ["This ask cannot be answered from the phone."]
    assert c.tool_call_id == "call-7"


def test_A7_unknown_kind_text_cleaned() -> None:
    c = card(make_ask(kind="poll", title="Vo\u202ete", text="Which\x00 one?"))
    assert (c.title, c.text) == ("Vote", "Which one?")
    assert c.notices == ["Text shortened", "This ask cannot be answered from the phone."]


def test_A7_hidden_labels_do_not_count_as_shortened() -> None:
    c = card(make_ask(options=[Option(id="a", label="L" * 500, role="later")]))
    assert c.notices == ["This ask cannot be answered from the phone."]


# --- A8 -------------------------------------------------------------------------------------


def asks(n: int) -> list[Ask]:
    return [make_ask(id=f"a{i}", kind="text") for i in range(n)]


def test_A8_show_more() -> None:
    listed = build_cards(asks(8), agent_name="desk", now=NOW, catalogue=CAT)
    assert [c.ask_id for c in listed.cards] == ["a0", "a1", "a2", "a3", "a4"]
    assert listed.more is not None
    assert (listed.more.label, listed.more.count) == ("Show 3 more", 3)


def test_A8_show_all() -> None:
    listed = build_cards(asks(8), agent_name="desk", now=NOW, catalogue=CAT, show_all=True)
    assert len(listed.cards) == 8
    assert listed.more is None


def test_A8_five_asks_have_no_more_row() -> None:
    listed = build_cards(asks(5), agent_name="desk", now=NOW, catalogue=CAT)
    assert len(listed.cards) == 5
    assert listed.more is None


def test_A8_closed_cards_do_not_count() -> None:
    accepted = CardState(outcome=TapOutcome.ACCEPTED, request_id="r")
    decided = CardState(outcome=TapOutcome.DECIDED, request_id="r")
    listed = build_cards(
        asks(7),
        agent_name="desk",
        now=NOW,
        catalogue=CAT,
        states={"a0": accepted, "a1": decided},
    )
    assert [c.ask_id for c in listed.cards] == ["a1", "a2", "a3", "a4", "a5"]
    assert listed.cards[0].outcome is not None
    assert listed.more is not None
    assert listed.more.label == "Show 1 more"


# --- T1, R2: after a tap --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "line", "frozen"),
    [
        (TapOutcome.DECIDED, "Decided in the durable agent.", True),
        (TapOutcome.EXPIRED, "Timed out before an answer.", True),
        (
            TapOutcome.ANSWERED,
            "Already answered. This card goes away on the next refresh.",
            True,
        ),
        (TapOutcome.NOT_OPEN, "Not accepted. This ask may come back shortly.", True),
        (TapOutcome.CHANGED, "This ask changed. Read it again, then tap an answer.", False),
        (TapOutcome.REFUSED, "The answer was refused.", False),
        (
            TapOutcome.OLDER_COLLIE,
            "This machine runs an older Collie and can't take answers here. "
            "Update it, or answer in the durable agent.",
            True,
        ),
    ],
)
def test_T1_outcome_lines(outcome: TapOutcome, line: str, frozen: bool) -> None:
    c = card(make_ask(kind="text"), answer_state=CardState(outcome=outcome, request_id="r1"))
    assert c.outcome is not None
    assert (c.outcome.line, c.outcome.frozen, c.outcome.closed) == (line, frozen, False)
    assert c.outcome.retry_label is None
    assert c.answerable is not frozen


def test_T1_accepted_closes_the_card() -> None:
    state = CardState(outcome=TapOutcome.ACCEPTED, request_id="r1")
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert (c.outcome.closed, c.outcome.line) == (True, None)
    assert not c.answerable


def test_T1_uncertain_offers_retry_with_same_request_id() -> None:
    state = CardState(outcome=TapOutcome.UNCERTAIN, request_id="r1")
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert c.outcome.line == "Not sure the answer arrived. Retry sends it once more."
    assert (c.outcome.retry_label, c.outcome.request_id) == ("Retry", "r1")
    assert not c.answerable


@pytest.mark.parametrize(
    "outcome",
    [
        TapOutcome.DECIDED,
        TapOutcome.EXPIRED,
        TapOutcome.ANSWERED,
        TapOutcome.NOT_OPEN,
        TapOutcome.CHANGED,
    ],
)
def test_T1_retry_found_closed_or_changed(outcome: TapOutcome) -> None:
    state = CardState(outcome=outcome, request_id="r1", retry=True)
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert c.outcome.line == "Your answer may already have been applied. Check the chat."
    assert c.outcome.frozen


def test_T1_retry_uncertain_again_offers_retry() -> None:
    state = CardState(outcome=TapOutcome.UNCERTAIN, request_id="r1", retry=True)
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert c.outcome.retry_label == "Retry"


def test_T1_refused_shows_collies_reason() -> None:
    state = CardState(outcome=TapOutcome.REFUSED, request_id="r1", reason="Too\x07 long")
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert c.outcome.line == "Too long"


def test_T1_not_open_with_a_reason_shows_it() -> None:
    state = CardState(outcome=TapOutcome.NOT_OPEN, request_id="r1", reason="restarting")
    c = card(make_ask(kind="text"), answer_state=state)
    assert c.outcome is not None
    assert c.outcome.line == "restarting"


@pytest.mark.parametrize(
    ("outcome", "line"),
    [
        (TapOutcome.DECIDED, "Decided in the durable agent."),
        (TapOutcome.EXPIRED, "Timed out before an answer."),
    ],
)
def test_R2_late_tap_freezes_card(outcome: TapOutcome, line: str) -> None:
    c = card(
        make_ask(options=options("allow", "deny")),
        answer_state=CardState(outcome=outcome, request_id="r1"),
    )
    assert c.outcome is not None
    assert c.outcome.line == line
    assert not c.answerable
    assert len(permission(c).buttons) == 2  # frozen in place, not removed


def test_T1_outcome_lines_come_from_the_catalogue() -> None:
    cat = Catalogue({"t_decided": "Deciso nell'agente durevole."})
    c = build_card(
        make_ask(kind="text"),
        agent_name="desk",
        now=NOW,
        catalogue=cat,
        answer_state=CardState(outcome=TapOutcome.DECIDED, request_id="r1"),
    )
    assert c.outcome is not None
    assert c.outcome.line == "Deciso nell'agente durevole."


def test_card_encodes_as_json() -> None:
    c = card(make_ask(tool=BASH, options=options("allow"), deadline=NOW))
    data = msgspec.json.decode(msgspec.json.encode(c))
    assert data["body"]["kind"] == "permission"
    assert data["body"]["buttons"][0]["label"] == "Allow"
    assert data["caption"] == "Needs your answer · desk"
    assert data["tool_call_id"] == "call-7"


# --- any ask --------------------------------------------------------------------------------

ids = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"])
texts = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", " ", "ok", "x" * 2100, "rm\u202e -rf", "a\u200db", "L" * 90]),
)
roles = st.sampled_from([*ROLES, None, "maybe"])
option_lists = st.lists(st.builds(Option, id=ids, label=texts, role=roles), max_size=10)
field_lists = st.lists(
    st.builds(
        FormField,
        id=ids,
        kind=st.sampled_from(["text", "select", "switch", "date"]),
        label=texts,
        required=st.booleans(),
        options=st.lists(
            st.builds(Option, id=st.text(min_size=1, max_size=3), label=texts), max_size=22
        ),
        max_length=st.none() | st.integers(1, 5000),
    ),
    max_size=8,
)
any_ask = st.builds(
    Ask,
    id=ids,
    version=st.integers(0, 9),
    conversation=st.just("conv-1"),
    kind=st.sampled_from(["permission", "choice", "text", "form", "poll", ""]),
    title=texts,
    text=texts,
    tool=st.none() | st.builds(ToolRef, call_id=ids, name=texts),
    deadline=st.none() | st.datetimes(timezones=st.none() | st.just(UTC)),
    options=option_lists,
    multiple=st.booleans(),
    max_length=st.none() | st.integers(1, 5000),
    fields=field_lists,
)
any_state = st.none() | st.builds(
    CardState,
    outcome=st.sampled_from(TapOutcome),
    request_id=ids,
    retry=st.booleans(),
    reason=st.none() | texts,
)


@settings(max_examples=300)
@given(ask=any_ask, state=any_state)
def test_any_ask_is_shown_whole_or_not_answerable(ask: Ask, state: CardState | None) -> None:
    c = card(ask, answer_state=state)
    msgspec.json.encode(c)
    shortened = "Text shortened" in c.notices
    tool_named = ask.tool is not None and ask.tool.name.strip() != ""
    if c.body is None:
        assert_unanswerable(c)
        return
    assert "This ask cannot be answered from the phone." not in c.notices
    assert c.answerable is (state is None or not (c.outcome and c.outcome.frozen))
    match c.body:
        case PermissionBody(buttons=buttons):
            offered = [b.role for b in buttons]
            assert "always" not in offered or (tool_named and not shortened)
            always_ok = tool_named and not shortened
            assert [b.option_id for b in buttons] == [
                o.id for o in ask.options if o.role != "always" or always_ok
            ]
            assert len(buttons) <= 6
        case ChoiceBody(rows=rows):
            assert [r.option_id for r in rows] == [o.id for o in ask.options]
            assert len(rows) <= 8
        case FormBody(fields=shown):
            assert [f.field_id for f in shown] == [f.id for f in ask.fields]
            assert len(shown) <= 6
            for view, field in zip(shown, ask.fields, strict=True):
                assert [o.option_id for o in view.options] == (
                    [o.id for o in field.options] if field.kind == "select" else []
                )
        case TextBody(input=line):
            assert line.limit == min(ask.max_length or 500, 2000)


def test_a_card_shows_the_ask_it_is_given_whatever_was_drawn_before() -> None:
    # Cards are drawn once per ask version; an equal copy (each event of the conversation
    # brings one) shows the same card, and other words under the same id and version (another
    # agent's ask, or an agent that did not bump the version) show their own.
    first = make_ask(kind="choice", options=options(None, None), title="Merge main?")
    assert card(msgspec.json.decode(msgspec.json.encode(first), type=Ask)) == card(first)
    other = make_ask(kind="choice", options=options(None, None), title="Merge next?")
    assert card(other).title == "Merge next?"
    assert card(first).title == "Merge main?"
    tower = build_card(other, agent_name="tower", now=NOW, catalogue=CAT)
    assert (tower.caption, card(other).caption) == (
        "Needs your answer · tower",
        "Needs your answer · desk",
    )
