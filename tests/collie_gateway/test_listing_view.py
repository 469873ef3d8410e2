"""An agent's conversation list (spec L1–L8, X1, R5), built by the pure view."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.core.cleaning import Redact
from collie_gateway.core.redact import MASK, Redactor
from collie_gateway.strings import Catalogue
from collie_gateway.views.listing import (
    ClosedRead,
    ConversationList,
    Footer,
    ListContext,
    ReadStatus,
    build_list,
    footer_for,
    list_row,
    order_open,
)
from wire.messages import Ask, Conversation

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
CAT = Catalogue()
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
VERSION_WARNING = CAT.fmt("version_mismatch", theirs=2, ours=1)


def conv(cid: str, *, ago: int = 0, **fields: Any) -> Conversation:
    """A conversation whose last activity was ``ago`` minutes before NOW."""
    base: dict[str, Any] = {
        "id": cid,
        "title": f"Title {cid}",
        "state": "idle",
        "updated_at": NOW - timedelta(minutes=ago),
    }
    base.update(fields)
    return Conversation(**base)


def ask(aid: str, cid: str, *, title: str = "", text: str = "") -> Ask:
    return Ask(id=aid, conversation=cid, kind="text", title=title, text=text)


def ctx(
    *,
    agent: str = "desk",
    features: Collection[str] = ("history",),
    subtitle: str | None = None,
    redact: Redact | None = None,
) -> ListContext:
    return ListContext(
        agent=agent,
        agent_subtitle=subtitle,
        features=features,
        catalogue=CAT,
        now=NOW,
        redact=redact,
    )


def footer(listed: ConversationList) -> Footer:
    assert listed.footer is not None
    return listed.footer


# --- L2: order ------------------------------------------------------------------------------


def test_L2_waiting_first_then_open_newest_first_then_closed() -> None:
    open_convs = [
        conv("idle-old", ago=50),
        conv("waits-by-ask", ago=40, asks=[ask("a1", "waits-by-ask", title="Deploy?")]),
        conv("idle-new", ago=1),
        conv("waits-by-state", ago=5, state="waiting"),
        conv("working", ago=10, state="working"),
    ]
    closed = ClosedRead(rows=[conv("done", ago=3, state="closed")], drawn=True)
    listed = build_list(open_convs, closed, ctx())
    assert [r.conversation_id for r in listed.rows] == [
        "waits-by-state",
        "waits-by-ask",
        "idle-new",
        "working",
        "idle-old",
    ]
    assert [r.waiting for r in listed.rows] == [True, True, False, False, False]
    assert listed.closed_label == "Closed"
    assert listed.closed is not None
    assert [r.conversation_id for r in listed.closed] == ["done"]
    assert listed.closed[0].closed


def test_L2_same_time_ties_break_by_id() -> None:
    convs = [conv("b"), conv("a"), conv("c")]
    assert [c.id for c in order_open(convs)] == ["a", "b", "c"]


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.booleans()),
        max_size=12,
    )
)
def test_L2_order_is_waiting_then_newest(specs: list[tuple[int, bool]]) -> None:
    convs = [
        conv(f"c{n}", ago=ago, state="waiting" if waits else "idle")
        for n, (ago, waits) in enumerate(specs)
    ]
    ordered = order_open(convs)
    keys = [(c.state != "waiting", NOW - c.updated_at) for c in ordered]
    assert keys == sorted(keys)
    assert sorted(c.id for c in ordered) == sorted(c.id for c in convs)


# --- L3: a row ------------------------------------------------------------------------------


def test_L3_row_title_status_time_and_subtitle() -> None:
    row = list_row(conv("c1", ago=5, subtitle="Notes for today", state="working"), ctx())
    assert (row.title, row.status, row.time_label) == ("Title c1", "working", "5 min")
    assert row.updated_at == NOW - timedelta(minutes=5)
    assert row.line == "Notes for today"
    assert (row.waiting, row.open_asks, row.closed) == (False, None, False)
    assert row.href == "/api/v1/agents/desk/conversations/c1"


@pytest.mark.parametrize(
    ("ago", "label"),
    [(0, "now"), (59, "now"), (60, "1 min"), (3599, "59 min"), (3600, "1 h"), (86400, "1 d")],
)
def test_L3_time_of_last_activity(ago: int, label: str) -> None:
    row = list_row(conv("c1", updated_at=NOW - timedelta(seconds=ago)), ctx())
    assert row.time_label == label


def test_L3_waiting_row_shows_its_question_and_counts_its_asks() -> None:
    asks = [
        ask("a1", "c1", title="Run the migration?", text="It drops a column."),
        ask("a2", "c1", title="Which branch?"),
    ]
    row = list_row(conv("c1", subtitle="Ignored while waiting", asks=asks), ctx())
    assert row.line == "Run the migration?"
    assert (row.waiting, row.open_asks) == (True, 2)


def test_L3_question_without_title_is_its_text() -> None:
    row = list_row(conv("c1", asks=[ask("a1", "c1", text="Pick a\nfolder")]), ctx())
    assert row.line == "Pick a folder"


def test_L3_waiting_by_state_counts_no_asks() -> None:
    row = list_row(conv("c1", state="waiting", subtitle="Waiting on you"), ctx())
    assert (row.waiting, row.open_asks, row.line) == (True, None, "Waiting on you")


def test_L3_line_falls_back_to_the_agents_subtitle() -> None:
    assert list_row(conv("c1"), ctx(subtitle="Desk agent")).line == "Desk agent"
    assert list_row(conv("c1", subtitle="Own"), ctx(subtitle="Desk agent")).line == "Own"
    assert list_row(conv("c1"), ctx()).line is None


@pytest.mark.parametrize("title", [None, "", "   ", "\u200b"])
def test_L3_untitled_conversation(title: str | None) -> None:
    assert list_row(conv("c1", title=title), ctx()).title == "Untitled conversation"


def test_L3_agent_text_is_cleaned() -> None:
    row = list_row(conv("c1", title="Pay\u202eroll", subtitle="a\nb"), ctx())
    assert (row.title, row.line) == ("Payroll", "a b")


def test_L3_closed_row_is_not_waiting_and_shows_no_question() -> None:
    closed = conv("c1", state="closed", subtitle="Done", asks=[ask("a1", "c1", title="Q?")])
    row = list_row(closed, ctx())
    assert (row.closed, row.waiting, row.open_asks, row.line) == (True, False, None, "Done")


def test_L3_hrefs_are_url_encoded() -> None:
    row = list_row(conv("c/1?x#y"), ctx(agent="my desk"))
    assert row.href == "/api/v1/agents/my%20desk/conversations/c%2F1%3Fx%23y"
    assert unquote(row.href.rsplit("/", 1)[1]) == "c/1?x#y"
    listed = build_list([], None, ctx(agent="my desk", features=("starters",)))
    assert listed.new == "/api/v1/agents/my%20desk/new"


# --- L4: Reopen -----------------------------------------------------------------------------


def test_L4_reopen_only_with_the_feature() -> None:
    closed = conv("c1", state="closed")
    assert list_row(closed, ctx(features=("history", "reopen"))).reopen == "Reopen"
    assert list_row(closed, ctx(features=("history",))).reopen is None


def test_L4_open_rows_have_no_reopen() -> None:
    assert list_row(conv("c1"), ctx(features=("history", "reopen"))).reopen is None


# --- L6: the footer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (ReadStatus.NO_LIST, "This durable agent doesn't keep a list of its conversations."),
        (ReadStatus.NO_ANSWER, "The durable agent didn't answer. Try again in a moment."),
        (ReadStatus.FAILED, "Couldn't load conversations. Try again."),
    ],
)
def test_L6_footers(status: ReadStatus, text: str) -> None:
    listed = build_list([conv("c1")], ClosedRead(status=status), ctx())
    assert (footer(listed).kind, footer(listed).text, footer(listed).href) == (
        status.value,
        text,
        None,
    )
    assert listed.closed is None
    assert listed.closed_label is None


def test_L6_no_footer_when_everything_is_shown() -> None:
    read = ClosedRead(rows=[conv("c9", state="closed")], drawn=True)
    assert build_list([], read, ctx()).footer is None


def test_L6_load_more_reads_the_next_page() -> None:
    read = ClosedRead(rows=[conv("c9", state="closed")], next_cursor="p2", drawn=True)
    more = footer(build_list([], read, ctx()))
    assert (more.kind, more.text) == ("load_more", "Load more")
    assert more.href == "/api/v1/agents/desk/closed?cursor=p2"


def test_L6_load_more_cursor_is_url_encoded() -> None:
    cursor = "a&b=c+d/e?f#g h"
    read = ClosedRead(next_cursor=cursor, drawn=True)
    more = footer_for(read, ctx(agent="my desk"))
    assert more is not None
    assert more.href is not None
    parts = urlsplit(more.href)
    assert parts.path == "/api/v1/agents/my%20desk/closed"
    assert parse_qs(parts.query) == {"cursor": [cursor]}
    assert parts.fragment == ""


def test_L6_version_footer_is_R5s_message() -> None:
    read = ClosedRead(rows=[conv("c9", state="closed")], drawn=True, status=ReadStatus.VERSION)
    listed = build_list([conv("c1")], read, ctx(), version_warning=VERSION_WARNING)
    assert footer(listed).kind == "version"
    assert footer(listed).text == (
        "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    )


def test_L6_version_status_without_a_warning_has_no_footer() -> None:
    # Only the caller knows the versions to name; a bare VERSION status shows nothing.
    assert footer_for(ClosedRead(status=ReadStatus.VERSION), ctx()) is None


# --- R5: the version warning ----------------------------------------------------------------


def test_R5_warning_box_and_no_new_conversation() -> None:
    listed = build_list([conv("c1")], None, ctx(), version_warning=VERSION_WARNING)
    assert listed.warning == VERSION_WARNING
    assert listed.new is None
    assert [r.conversation_id for r in listed.rows] == ["c1"]
    assert listed.closed is None
    assert footer(listed).text == VERSION_WARNING


def test_R5_no_warning_offers_new_conversation() -> None:
    listed = build_list([conv("c1")], None, ctx(features=("starters",)))
    assert listed.warning is None
    assert listed.new == "/api/v1/agents/desk/new"
    assert build_list([conv("c1")], None, ctx()).new is None  # G1: starters not declared


# --- L7: no history -------------------------------------------------------------------------


def test_L7_agent_never_asked_has_no_closed_group_and_no_footer() -> None:
    listed = build_list([conv("c2", ago=1), conv("c1", ago=9)], None, ctx(features=()))
    assert [r.conversation_id for r in listed.rows] == ["c2", "c1"]
    assert (listed.closed_label, listed.closed, listed.footer) == (None, None, None)


def test_L7_empty_closed_page_has_no_closed_label() -> None:
    listed = build_list([conv("c1")], ClosedRead(drawn=True), ctx())
    assert (listed.closed_label, listed.closed, listed.footer) == (None, None, None)


# --- L8: a drawn list stays -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (ReadStatus.FAILED, "Couldn't load conversations. Try again."),
        (ReadStatus.NO_ANSWER, "The durable agent didn't answer. Try again in a moment."),
    ],
)
def test_L8_failed_read_keeps_the_drawn_rows(status: ReadStatus, text: str) -> None:
    read = ClosedRead(
        rows=[conv("c8", state="closed"), conv("c9", state="closed")],
        next_cursor="p2",
        drawn=True,
    )
    before = build_list([conv("c1")], read, ctx())
    assert footer(before).kind == "load_more"
    read.status = status  # what Chats.read_closed does when a later read fails
    after = build_list([conv("c1")], read, ctx())
    assert after.closed_label == "Closed"
    assert after.closed is not None
    assert [r.conversation_id for r in after.closed] == ["c8", "c9"]
    assert (footer(after).kind, footer(after).text) == (status.value, text)


def test_L8_never_drawn_read_shows_no_rows() -> None:
    read = ClosedRead(rows=[conv("c8", state="closed")], status=ReadStatus.FAILED)
    listed = build_list([], read, ctx())
    assert listed.closed is None
    assert footer(listed).text == "Couldn't load conversations. Try again."


# --- X1: redaction --------------------------------------------------------------------------


def test_X1_titles_and_subtitles_are_masked() -> None:
    redact = Redactor().mask
    convs = [conv("c1", title=f"Deploy with {TOKEN}", subtitle=f"token {TOKEN}")]
    closed = ClosedRead(rows=[conv("c2", state="closed", title=TOKEN)], drawn=True)
    listed = build_list(convs, closed, ctx(redact=redact))
    row = listed.rows[0]
    assert row.title == f"Deploy with ghp_{MASK}"
    assert row.line == f"token ghp_{MASK}"
    assert listed.closed is not None
    assert listed.closed[0].title == f"ghp_{MASK}"
    assert TOKEN not in repr(listed)


def test_X1_agents_subtitle_is_masked() -> None:
    row = list_row(conv("c1"), ctx(subtitle=f"key {TOKEN}", redact=Redactor().mask))
    assert row.line == f"key ghp_{MASK}"


def test_X1_waiting_question_is_masked() -> None:
    # The card masks the ask's title; the row showing the same question must too.
    waiting = conv("c1", asks=[ask("a1", "c1", title=f"Use {TOKEN}?")])
    row = list_row(waiting, ctx(redact=Redactor().mask))
    assert row.line == f"Use ghp_{MASK}?"


def test_X1_redaction_off_shows_the_text() -> None:
    row = list_row(conv("c1", title=TOKEN), ctx(redact=Redactor(enabled=False).mask))
    assert row.title == TOKEN


def test_X1_any_redact_function() -> None:
    def hide_secret(text: str) -> str:
        return text.replace("hunter2", "****")

    row = list_row(conv("c1", title="pw hunter2", subtitle="hunter2"), ctx(redact=hide_secret))
    assert (row.title, row.line) == ("pw ****", "****")
