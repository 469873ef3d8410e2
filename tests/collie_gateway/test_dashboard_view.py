"""The dashboard's "Durable agents" section (spec D1–D10), built by the pure view."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collie_gateway.core.mirror import AgentMirror, LinkState
from collie_gateway.core.redact import Redactor
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from collie_gateway.views.dashboard import AgentRow, Dashboard, agent_row, build_dashboard
from wire.messages import Ask, Conversation, Hello

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
CAT = Catalogue()
LOCAL = Source(name="desk", socket=Path("/run/desk.sock"))
REMOTE = Source(name="pi", url="https://pi.example.net:8711")
SPACES = ["home", "work"]


def conversations(n_open: int, n_waiting: int) -> list[Conversation]:
    convs = []
    for i in range(n_open):
        asks = (
            [Ask(id=f"a{i}", conversation=f"c{i}", kind="text", title="Q?")]
            if i < n_waiting
            else []
        )
        convs.append(Conversation(id=f"c{i}", updated_at=NOW, asks=asks))
    return convs


def mirror(
    name: str = "desk",
    *,
    state: LinkState = LinkState.READY,
    runtime: str | None = None,
    n_open: int = 0,
    n_waiting: int = 0,
) -> AgentMirror:
    m = AgentMirror(name=name, state=state, hello=Hello(wire=1, runtime=runtime))
    m.replace_all(conversations(n_open, n_waiting))
    return m


def row(
    source: Source = LOCAL,
    *,
    state: LinkState = LinkState.READY,
    runtime: str | None = None,
    n_open: int = 0,
    n_waiting: int = 0,
) -> AgentRow:
    m = mirror(source.name, state=state, runtime=runtime, n_open=n_open, n_waiting=n_waiting)
    return agent_row(source, m, CAT)


def kinds(dash: Dashboard) -> list[str]:
    return [s.kind for s in dash.sections]


# --- D1–D4: the row -------------------------------------------------------------------------


def test_D2_name_and_experimental_badge() -> None:
    r = row()
    assert (r.agent, r.line1, r.badge) == ("desk", "desk", "Experimental")


@pytest.mark.parametrize(
    ("source", "runtime", "line2"),
    [
        (LOCAL, None, "durable, local"),
        (LOCAL, "", "durable, local"),
        (REMOTE, None, "durable, remote"),
        (LOCAL, "claude-code", "claude-code, local"),
        (REMOTE, "pi-durable", "pi-durable, remote"),
    ],
)
def test_D3_runtime_then_local_or_remote(source: Source, runtime: str | None, line2: str) -> None:
    assert row(source, runtime=runtime).line2 == line2


def test_D3_no_hello_yet_reads_durable() -> None:
    r = agent_row(LOCAL, AgentMirror(name="desk"), CAT)
    assert r.line2 == "durable, local"


@pytest.mark.parametrize(
    ("runtime", "shown"),
    [("pi\u202edurable", "pidurable"), ("two\nlines", "two lines"), ("\u200b ", "durable")],
)
def test_D3_runtime_is_cleaned(runtime: str, shown: str) -> None:
    assert row(runtime=runtime).line2 == f"{shown}, local"


def test_X1_the_runtime_an_agent_said_is_masked() -> None:
    said = "pi ghp_KBJHFhMpKYolVviUsb6QL4PC6TMF3ctIJnlg"
    m = mirror("desk", runtime=said)
    masked = agent_row(LOCAL, m, CAT, Redactor().mask)
    assert (masked.line2, masked.runtime) == ("pi ghp_••••, local", "pi ghp_••••")


@pytest.mark.parametrize(
    ("source", "reach"),
    [
        (Source(name="a", url="http://127.0.0.1:8700"), "local"),
        (Source(name="a", url="http://localhost:8700/"), "local"),
        (Source(name="a", url="https://localhost:8700"), "remote"),
        (Source(name="a", url="http://10.0.0.2:8700"), "remote"),
        (Source(name="a", socket=Path("/tmp/a.sock")), "local"),
    ],
)
def test_D4_local_or_remote(source: Source, reach: str) -> None:
    assert row(source).line2 == f"durable, {reach}"


def test_D10_row_opens_the_conversation_list() -> None:
    assert row().href == "/api/v1/agents/desk/conversations"
    assert row(Source(name="my desk?", socket=Path("/s"))).href == (
        "/api/v1/agents/my%20desk%3F/conversations"
    )


# --- D5, D6: the right edge -----------------------------------------------------------------


def test_D5_open_and_waiting_counts() -> None:
    r = row(n_open=4, n_waiting=2)
    assert (r.right.open, r.right.waiting, r.right.waiting_color, r.right.label) == (
        4,
        2,
        "attention",
        None,
    )
    assert r.waiting
    assert r.state == "ready"


def test_D5_waiting_count_hidden_when_zero() -> None:
    r = row(n_open=3)
    assert (r.right.open, r.right.waiting, r.right.waiting_color) == (3, None, None)
    assert not r.waiting


def test_D5_no_conversations_reads_zero() -> None:
    assert row().right.open == 0


@pytest.mark.parametrize(
    ("state", "label"),
    [
        (LinkState.STARTING, "Starting"),
        (LinkState.UNREACHABLE, "Unreachable"),
        (LinkState.VERSION_MISMATCH, "Version mismatch"),
    ],
)
def test_D6_not_ready_shows_its_state_and_no_counts(state: LinkState, label: str) -> None:
    r = row(state=state, n_open=3, n_waiting=2)
    assert (r.right.label, r.right.open, r.right.waiting, r.right.waiting_color) == (
        label,
        None,
        None,
        None,
    )
    assert not r.waiting  # a link that is down moves nothing above the spaces
    assert r.state == state.value


# --- D7: position ---------------------------------------------------------------------------


def test_D7_below_the_spaces_while_nothing_waits() -> None:
    dash = build_dashboard([row(n_open=2)], SPACES, CAT)
    assert kinds(dash) == ["spaces", "durable_agents"]
    assert dash.durable_agents_position == "below"
    assert dash.sections[1].title == "Durable agents"
    assert [s.name for s in dash.sections[0].spaces or []] == SPACES


def test_D7_above_the_spaces_while_any_agent_waits() -> None:
    rows = [row(n_open=2), row(REMOTE, n_open=1, n_waiting=1)]
    dash = build_dashboard(rows, SPACES, CAT)
    assert kinds(dash) == ["durable_agents", "spaces"]
    assert dash.durable_agents_position == "above"
    agents = dash.sections[0]
    assert (agents.title, [r.agent for r in agents.rows or []]) == (
        "Durable agents",
        ["desk", "pi"],
    )


def test_D7_back_below_when_the_last_one_is_answered() -> None:
    m = mirror(n_open=1, n_waiting=1)
    assert build_dashboard([agent_row(LOCAL, m, CAT)], SPACES, CAT).durable_agents_position == (
        "above"
    )
    m.replace_all(conversations(1, 0))
    dash = build_dashboard([agent_row(LOCAL, m, CAT)], SPACES, CAT)
    assert (dash.durable_agents_position, kinds(dash)) == ("below", ["spaces", "durable_agents"])


def test_D1_rows_keep_the_sources_order() -> None:
    rows = [row(REMOTE), row(LOCAL)]
    dash = build_dashboard(rows, SPACES, CAT)
    assert [r.agent for r in dash.sections[1].rows or []] == ["pi", "desk"]


# --- D8: no agents --------------------------------------------------------------------------


def test_D8_no_agents_no_section() -> None:
    dash = build_dashboard([], SPACES, CAT)
    assert kinds(dash) == ["spaces"]
    assert dash.durable_agents_position is None


def test_D8_unreachable_agent_keeps_its_row() -> None:
    dash = build_dashboard([row(state=LinkState.UNREACHABLE)], SPACES, CAT)
    assert kinds(dash) == ["spaces", "durable_agents"]
    rows = dash.sections[1].rows or []
    assert [r.right.label for r in rows] == ["Unreachable"]


# --- D9: pending only -----------------------------------------------------------------------


def test_D9_pending_only_lists_only_waiting_agents() -> None:
    rows = [row(n_open=2), row(REMOTE, n_open=1, n_waiting=1)]
    dash = build_dashboard(rows, SPACES, CAT, pending_only=True)
    assert dash.pending_only
    assert kinds(dash) == ["durable_agents", "spaces"]
    assert [r.agent for r in dash.sections[0].rows or []] == ["pi"]


def test_D9_pending_only_with_nothing_waiting_hides_the_section() -> None:
    rows = [row(n_open=2), row(REMOTE, state=LinkState.UNREACHABLE)]
    dash = build_dashboard(rows, SPACES, CAT, pending_only=True)
    assert kinds(dash) == ["spaces"]
    assert (dash.durable_agents_position, dash.pending_only) == (None, True)


def test_D9_setting_off_lists_every_agent() -> None:
    rows = [row(n_open=2), row(REMOTE, n_open=1, n_waiting=1)]
    dash = build_dashboard(rows, SPACES, CAT, pending_only=False)
    assert not dash.pending_only
    assert [r.agent for r in dash.sections[0].rows or []] == ["desk", "pi"]


def test_D9_setting_words() -> None:
    assert CAT["setting_pending_only"] == "Show only panes with pending requests"
