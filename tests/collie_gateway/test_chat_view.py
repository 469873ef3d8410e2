"""A conversation's chat (spec C2–C6, R3, A8), built by the pure view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from collie_gateway.core.answers import CardState, TapOutcome
from collie_gateway.core.notes import Note
from collie_gateway.core.redact import MASK, Redactor
from collie_gateway.strings import Catalogue
from collie_gateway.views.chat import (
    ECHO_WINDOW,
    LINE_LIFETIME,
    Chat,
    ChatContext,
    ChatLine,
    LineState,
    MyLine,
    build_chat,
    item_line,
    match_echo,
    my_line,
)
from wire.messages import FEATURES, Ask, Conversation, Item

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
CAT = Catalogue()
ALL = frozenset(FEATURES)
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


def conv(**fields: Any) -> Conversation:
    base: dict[str, Any] = {
        "id": "c1",
        "title": "Notes",
        "state": "working",
        "updated_at": NOW,
        "turn": 3,
    }
    base.update(fields)
    return Conversation(**base)


def item(iid: str, kind: str = "reply", **fields: Any) -> Item:
    base: dict[str, Any] = {"id": iid, "kind": kind, "text": f"text of {iid}", "at": NOW}
    base.update(fields)
    return Item(**base)


def mine(
    request_id: str = "r1",
    text: str = "Use the blue folder",
    *,
    ago: timedelta = timedelta(0),
    state: LineState = LineState.SENDING,
) -> MyLine:
    return MyLine(request_id=request_id, text=text, sent_at=NOW - ago, state=state)


def chat(
    items: list[Item] | None = None,
    *,
    notes: list[Note] | None = None,
    lines: list[MyLine] | None = None,
    states: Mapping[str, CardState] | None = None,
    redact: Any = None,
    **conv_fields: Any,
) -> Chat:
    ctx = ChatContext(agent="desk", features=ALL, catalogue=CAT, now=NOW, redact=redact)
    return build_chat(conv(**conv_fields), items or [], notes or [], lines or [], states or {}, ctx)


def line(it: Item) -> ChatLine:
    return item_line(it, CAT)


# --- C2: items ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["reply", "thinking", "notice"])
def test_C2_text_items(kind: str) -> None:
    shown = line(item("i1", kind, text="Done.\nTwo lines\u202e."))
    assert (shown.kind, shown.id, shown.text) == (kind, "i1", "Done.\nTwo lines.")
    assert (shown.mine, shown.html, shown.at) == (False, None, NOW)


def test_C2_user_item_is_the_persons_line() -> None:
    shown = line(item("i1", "user", text="Hello", request_id="r1"))
    assert (shown.kind, shown.text, shown.mine, shown.request_id) == ("user", "Hello", True, "r1")
    assert not shown.clock


def test_C2_markdown_is_rendered() -> None:
    text = "# Plan\n\n- *one*\n- **two**\n\n`code` and [docs](https://example.com/a)"
    shown = line(item("i1", "markdown", text=text))
    assert shown.text is None
    assert shown.html is not None
    assert "<h1>Plan</h1>" in shown.html
    assert "<li><em>one</em></li>" in shown.html
    assert "<strong>two</strong>" in shown.html
    assert "<code>code</code>" in shown.html
    assert '<a href="https://example.com/a"' in shown.html


def test_C2_markdown_raw_html_is_text() -> None:
    shown = line(item("i1", "markdown", text='<script>alert(1)</script> <b onclick="x">hi</b>'))
    assert shown.html is not None
    assert "<script>" not in shown.html
    assert "<b" not in shown.html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown.html


def test_C2_markdown_only_https_links() -> None:
    shown = line(item("i1", "markdown", text="[a](http://x.example) [b](javascript:alert(1))"))
    assert shown.html is not None
    assert "<a " not in shown.html


def test_C2_code_with_its_language() -> None:
    shown = line(item("i1", "code", text="print(1)\n\tx = 2", language="python"))
    assert (shown.text, shown.language, shown.html) == ("print(1)\n\tx = 2", "python", None)


def test_C2_code_without_a_language() -> None:
    assert line(item("i1", "code", text="ls")).language is None


def test_C2_link_https() -> None:
    shown = line(item("i1", "link", url="https://Example.com/report", label="The report"))
    assert (shown.url, shown.label) == ("https://example.com/report", "The report")


def test_C2_link_without_label_shows_the_address() -> None:
    shown = line(item("i1", "link", url="https://example.com/report"))
    assert shown.label == "https://example.com/report"


@pytest.mark.parametrize(
    "url",
    ["http://example.com", "javascript:alert(1)", "ftp://example.com", "https://", ""],
)
def test_C2_link_only_https(url: str) -> None:
    shown = line(item("i1", "link", url=url, label="Open"))
    assert shown.url is None
    assert shown.label == "Open"


@pytest.mark.parametrize(
    ("status", "output"),
    [("running", None), ("done", "3 files"), ("failed", "exit 1"), ("denied", None)],
)
def test_C2_tool_statuses(status: str, output: str | None) -> None:
    shown = line(
        item(
            "i1", "tool", text="ls -la", name="Bash", call_id="call-7", status=status, output=output
        )
    )
    assert (shown.kind, shown.tool, shown.status) == ("tool", "Bash", status)
    assert shown.output == output
    assert shown.text == "ls -la"


def test_C2_tool_without_description() -> None:
    assert line(item("i1", "tool", text="", name="Bash", status="running")).text is None


def test_C2_unknown_kind_is_plain_text() -> None:
    shown = line(item("i1", "hologram", text="<b>hi</b>"))
    assert (shown.kind, shown.text, shown.html) == ("hologram", "<b>hi</b>", None)


# --- C3: writing, and "stopped" -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["reply", "thinking", "notice", "markdown"])
def test_C3_cursor_and_no_time_while_writing(kind: str) -> None:
    writing = line(item("i1", kind, final=False))
    assert (writing.cursor, writing.at, writing.final) == (True, None, False)
    done = line(item("i1", kind, final=True))
    assert (done.cursor, done.at, done.final) == (False, NOW, True)


def test_C3_no_cursor_on_other_kinds() -> None:
    shown = line(item("i1", "tool", final=False, status="running"))
    assert (shown.cursor, shown.at) == (False, None)


def test_C3_stopped_note_follows_the_last_item() -> None:
    stopped = Note(kind="stopped", text=CAT["chat_stopped"], at=NOW, after_item="i2")
    lines = chat([item("i1"), item("i2")], notes=[stopped]).lines
    assert [(ln.kind, ln.text) for ln in lines] == [
        ("reply", "text of i1"),
        ("reply", "text of i2"),
        ("stopped", "stopped"),
    ]


# --- C4: the person's line ------------------------------------------------------------------


def test_C4_sending_shows_the_clock() -> None:
    shown = my_line(mine(state=LineState.SENDING), CAT)
    assert (shown.kind, shown.mine, shown.clock, shown.state_label) == ("user", True, True, None)
    assert (shown.text, shown.request_id) == ("Use the blue folder", "r1")


def test_C4_sent_shows_the_clock_and_composer_says_sent() -> None:
    c = chat(lines=[mine(state=LineState.SENT)])
    assert c.lines[-1].clock
    assert c.lines[-1].state_label is None
    assert (c.composer.status, c.composer.text) == ("Sent", None)


def test_C4_sending_composer_says_nothing_yet() -> None:
    c = chat(lines=[mine(state=LineState.SENDING)])
    assert (c.composer.status, c.composer.text) == (None, None)


def test_C4_no_response_reads_sending_not_confirmed() -> None:
    c = chat(lines=[mine(state=LineState.NOT_CONFIRMED)])
    shown = c.lines[-1]
    assert (shown.state_label, shown.clock, shown.state) == (
        "Sending, not confirmed",
        False,
        "not_confirmed",
    )
    # Send again retries with the same request id: the line carries it.
    assert shown.request_id == "r1"
    assert (c.composer.status, c.composer.text) == (None, None)


def test_C4_refused_reads_not_sent_and_text_goes_back() -> None:
    c = chat(lines=[mine(text="Archive it", state=LineState.NOT_SENT)])
    shown = c.lines[-1]
    assert (shown.state_label, shown.clock) == ("Not sent", False)
    assert (c.composer.status, c.composer.text) == (None, "Archive it")


def test_C4_composer_follows_the_newest_line() -> None:
    lines = [
        mine("r1", "first", ago=timedelta(seconds=20), state=LineState.NOT_SENT),
        mine("r2", "second", state=LineState.SENT),
    ]
    c = chat(lines=lines)
    assert [ln.request_id for ln in c.lines] == ["r1", "r2"]
    assert (c.composer.status, c.composer.text) == ("Sent", None)


def test_C4_pending_lines_follow_the_items() -> None:
    c = chat([item("i1"), item("i2")], lines=[mine()])
    assert [ln.id for ln in c.lines] == ["i1", "i2", "pending:r1"]


# --- C5: the agent's echo -------------------------------------------------------------------


def test_C5_echo_by_request_id() -> None:
    lines = [mine("r1", "same"), mine("r2", "same")]
    echo = item("u1", "user", text="anything", request_id="r2", at=NOW + timedelta(hours=1))
    assert match_echo(lines, echo, NOW) == lines[1]


def test_C5_unknown_request_id_does_not_match_by_text() -> None:
    echo = item("u1", "user", text="Use the blue folder", request_id="other")
    assert match_echo([mine()], echo, NOW) is None


@pytest.mark.parametrize(
    ("seconds", "matches"),
    [(0, True), (29, True), (30, True), (31, False), (-29, True), (-31, False)],
)
def test_C5_echo_by_text_within_30_seconds(seconds: int, matches: bool) -> None:
    assert ECHO_WINDOW.total_seconds() == 30
    sent = mine(ago=timedelta(seconds=seconds))
    echo = item("u1", "user", text="Use the blue folder", at=NOW)
    assert (match_echo([sent], echo, NOW) == sent) is matches


def test_C5_echo_by_text_needs_the_same_text() -> None:
    echo = item("u1", "user", text="Use the red folder", at=NOW)
    assert match_echo([mine()], echo, NOW) is None


def test_C5_echo_matches_the_first_line_with_that_text() -> None:
    lines = [mine("r1", "ok", ago=timedelta(seconds=5)), mine("r2", "ok")]
    assert match_echo(lines, item("u1", "user", text="ok", at=NOW), NOW) == lines[0]


def test_C5_echo_with_naive_time_is_utc() -> None:
    sent = mine(ago=timedelta(seconds=29))
    echo = item("u1", "user", text="Use the blue folder", at=NOW.replace(tzinfo=None))
    assert match_echo([sent], echo, NOW) == sent


@pytest.mark.parametrize(
    ("age", "shown"),
    [
        (timedelta(minutes=9, seconds=59), True),
        (timedelta(minutes=10), False),
        (timedelta(minutes=11), False),
    ],
)
def test_C5_unechoed_line_stops_showing_after_10_minutes(age: timedelta, shown: bool) -> None:
    assert LINE_LIFETIME.total_seconds() == 600
    c = chat(lines=[mine(ago=age, state=LineState.NOT_CONFIRMED)])
    assert (len(c.lines) == 1) is shown


def test_C5_hidden_line_leaves_the_composer_alone() -> None:
    c = chat(lines=[mine(ago=timedelta(minutes=12), state=LineState.NOT_SENT)])
    assert (c.lines, c.composer.text) == ([], None)


# --- C6: the dots ---------------------------------------------------------------------------


def test_C6_dots_while_the_persons_line_is_newest() -> None:
    assert chat([item("i1")], lines=[mine()]).dots
    assert chat([item("i1"), item("u1", "user", request_id="r1")]).dots


def test_C6_no_dots_once_the_agent_answers() -> None:
    assert not chat([item("u1", "user"), item("i2", "reply")]).dots


def test_C6_no_dots_for_a_line_not_sent() -> None:
    assert not chat(lines=[mine(state=LineState.NOT_SENT)]).dots


def test_C6_no_dots_in_an_empty_or_closed_chat() -> None:
    assert not chat().dots
    assert not chat([item("u1", "user")], state="closed").dots


def test_C6_no_dots_after_a_stopped_note() -> None:
    stopped = Note(kind="stopped", text="stopped", at=NOW, after_item="u1")
    assert not chat([item("u1", "user")], notes=[stopped]).dots


_ITEMS = {
    "none": [],
    "reply last": [item("u1", "user"), item("i2")],
    "user last": [item("i1"), item("u2", "user")],
}
_NOTES = {
    "none": [],
    "first": [Note(kind="receipt", text="r", at=NOW, after_item=None)],
    "after the last": [Note(kind="stopped", text="", at=NOW, after_item="i2")],
    "after u2": [Note(kind="stopped", text="", at=NOW, after_item="u2")],
    "after a gone item": [Note(kind="receipt", text="r", at=NOW, after_item="gone")],
}
_MINE = {
    "none": [],
    "sending, placed last": [mine()],
    "not sent, placed last": [mine(state=LineState.NOT_SENT)],
    "sent after i1": [replace(mine(state=LineState.SENT), after_item="i1")],
    "sent after u2": [replace(mine(state=LineState.SENT), after_item="u2")],
}


@pytest.mark.parametrize("items", _ITEMS)
@pytest.mark.parametrize("notes", _NOTES)
@pytest.mark.parametrize("lines", _MINE)
def test_C6_dots_follow_the_newest_line_drawn_or_not(items: str, notes: str, lines: str) -> None:
    """A live ``chat.changed`` carries no lines; its dots are the newest drawn line's."""
    ctx = ChatContext(agent="desk", features=ALL, catalogue=CAT, now=NOW)
    states: dict[str, CardState] = {}
    args = (conv(), _ITEMS[items], _NOTES[notes], _MINE[lines], states, ctx)
    drawn = build_chat(*args)
    newest = drawn.lines[-1] if drawn.lines else None
    waits = newest is not None and newest.mine and newest.state in (None, "sending", "sent")
    assert drawn.dots is waits
    assert build_chat(*args, lines=False).dots is waits


# --- R3: receipts ---------------------------------------------------------------------------


def test_R3_receipts_are_placed_after_their_item() -> None:
    notes = [
        Note(kind="receipt", text="Timed out before an answer: Deploy?", at=NOW, after_item="i1"),
        Note(kind="receipt", text="Decided in the durable agent: Merge?", at=NOW, after_item="i1"),
        Note(kind="receipt", text="before all", at=NOW, after_item=None),
        Note(kind="receipt", text="after a gone item", at=NOW, after_item="i-gone"),
    ]
    lines = chat([item("i1"), item("i2")], notes=notes).lines
    assert [(ln.kind, ln.text) for ln in lines] == [
        ("receipt", "before all"),
        ("reply", "text of i1"),
        ("receipt", "Timed out before an answer: Deploy?"),
        ("receipt", "Decided in the durable agent: Merge?"),
        ("reply", "text of i2"),
        ("receipt", "after a gone item"),
    ]
    receipts = [ln for ln in lines if ln.kind == "receipt"]
    assert len({ln.id for ln in receipts}) == len(receipts)
    assert all(ln.at == NOW for ln in receipts)


# --- A8, read-only, header ------------------------------------------------------------------


def asks(n: int) -> list[Ask]:
    return [Ask(id=f"a{i}", conversation="c1", kind="text", title=f"Q{i}") for i in range(n)]


def test_A8_first_five_asks_as_cards_then_show_more() -> None:
    c = chat(asks=asks(7))
    assert [card.ask_id for card in c.cards.cards] == ["a0", "a1", "a2", "a3", "a4"]
    assert c.cards.more is not None
    assert (c.cards.more.label, c.cards.more.count) == ("Show 2 more", 2)


def test_A8_answered_ask_leaves_room_for_the_next() -> None:
    states = {"a0": CardState(outcome=TapOutcome.ACCEPTED, request_id="r")}
    c = chat(asks=asks(6), states=states)
    assert [card.ask_id for card in c.cards.cards] == ["a1", "a2", "a3", "a4", "a5"]
    assert c.cards.more is None


def test_C1_closed_conversation_is_read_only() -> None:
    c = chat([item("i1")], state="closed", asks=asks(2))
    assert c.read_only
    assert (c.cards.cards, c.bar) == ([], None)
    assert c.menu is not None
    assert c.menu.reopen is not None
    assert c.menu.reopen.label == "Reopen"


def test_C1_open_conversation_has_header_bar_and_turn() -> None:
    c = chat([item("i1")])
    assert not c.read_only
    assert (c.header.title, c.header.badge) == ("Notes", "Experimental")
    assert c.bar is not None
    assert [ctl.label for ctl in c.bar.controls] == ["Steer", "Stop"]
    assert (c.turn, c.agent, c.conversation_id) == (3, "desk", "c1")


def test_X1_chat_header_masks_the_title_as_the_list_does() -> None:
    c = chat(title=f"Deploy {TOKEN}", subtitle=f"with {TOKEN}", redact=Redactor().mask)
    assert c.header.title == f"Deploy ghp_{MASK}"
    assert c.header.line2 == f"with ghp_{MASK}"
