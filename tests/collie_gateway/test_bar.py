"""The header, the bottom bar and the pane menu (spec H1–H3, B1–B3, G1, G2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.strings import Catalogue
from collie_gateway.views.bar import Control, build_bar, build_header, build_menu
from wire.messages import FEATURES, Button, Conversation, Progress, Step

CAT = Catalogue()
ALL = frozenset(FEATURES)
ICON_NAMES = (
    "play",
    "pause",
    "check",
    "x",
    "refresh",
    "archive",
    "flag",
    "star",
    "send",
    "note",
    "search",
    "more",
)
STEPS = [
    Step(label="Read the notes", state="done"),
    Step(label="Save a note", state="running"),
    Step(label="Tidy up"),
]


def conv(**fields: Any) -> Conversation:
    base: dict[str, Any] = {
        "id": "c1",
        "title": "Notes",
        "state": "working",
        "updated_at": datetime(2025, 5, 1, tzinfo=UTC),
        "turn": 7,
    }
    base.update(fields)
    return Conversation(**base)


# --- H --------------------------------------------------------------------------------------


def test_H1_title_and_badge() -> None:
    header = build_header(conv(), ALL, CAT)
    assert (header.title, header.badge) == ("Notes", "Experimental")


@pytest.mark.parametrize("title", [None, "", " \u200b "])
def test_H1_untitled(title: str | None) -> None:
    assert build_header(conv(title=title), ALL, CAT).title == "Untitled conversation"


def test_H1_title_cleaned_and_redacted() -> None:
    header = build_header(
        conv(title="Deploy\u202e key=abc"), ALL, CAT, redact=lambda s: s.replace("abc", "••••")
    )
    assert header.title == "Deploy key=••••"


def test_H2_step() -> None:
    header = build_header(conv(progress=Progress(steps=STEPS)), ALL, CAT)
    assert header.line2 == "Step 2 of 3: Save a note"
    assert header.line2_kind == "step"


def test_H2_first_running_step_counts() -> None:
    steps = [Step(label="A", state="running"), Step(label="B", state="running")]
    assert build_header(conv(progress=Progress(steps=steps)), ALL, CAT).line2 == "Step 1 of 2: A"


@pytest.mark.parametrize(
    ("percent", "shown"),
    [(42, "42"), (42.0, "42"), (42.5, "42.5"), (33.333, "33.3"), (99.96, "99.9"), (0, "0")],
)
def test_H2_percent(percent: float, shown: str) -> None:
    header = build_header(conv(progress=Progress(percent=percent, label="loading")), ALL, CAT)
    assert header.line2 == f"{shown}%: loading"
    assert header.line2_kind == "percent"
    assert header.percent == percent


def test_H2_percent_out_of_range_is_clamped() -> None:
    header = build_header(conv(progress=Progress(percent=140, label="loading")), ALL, CAT)
    assert header.line2 == "100%: loading"


@pytest.mark.parametrize("percent", [None, float("nan"), float("inf")])
def test_H2_percent_not_a_number_falls_through(percent: float | None) -> None:
    header = build_header(
        conv(subtitle="Keeps notes", progress=Progress(percent=percent, label="x")), ALL, CAT
    )
    assert header.line2 == "Keeps notes"


def test_H2_percent_without_label_falls_through() -> None:
    header = build_header(conv(subtitle="Keeps notes", progress=Progress(percent=42)), ALL, CAT)
    assert (header.line2, header.line2_kind) == ("Keeps notes", "subtitle")


def test_H2_subtitle_when_no_progress() -> None:
    header = build_header(conv(subtitle="Keeps notes", workspace="~/notes"), ALL, CAT)
    assert (header.line2, header.line2_kind) == ("Keeps notes", "subtitle")


def test_H2_subtitle_when_all_steps_done() -> None:
    done = [Step(label="A", state="done"), Step(label="B", state="done")]
    header = build_header(conv(subtitle="Keeps notes", progress=Progress(steps=done)), ALL, CAT)
    assert header.line2 == "Keeps notes"


def test_H2_workspace_when_nothing_else() -> None:
    header = build_header(conv(workspace="~/notes"), ALL, CAT)
    assert (header.line2, header.line2_kind) == ("~/notes", "workspace")


def test_H2_no_line2_at_all() -> None:
    header = build_header(conv(), ALL, CAT)
    assert (header.line2, header.line2_kind) == (None, None)


@pytest.mark.parametrize(
    ("state", "line2"),
    [
        ("working", "Step 2 of 3: Save a note"),
        ("waiting", "Step 2 of 3: Save a note"),
        ("idle", "Keeps notes"),
        ("closed", "Keeps notes"),
    ],
)
def test_H3_progress_only_while_working(state: str, line2: str) -> None:
    c = conv(state=state, subtitle="Keeps notes", progress=Progress(steps=STEPS))
    assert build_header(c, ALL, CAT).line2 == line2


def test_H3_labels_cleaned_never_translated() -> None:
    steps = [Step(label="Salva\u202e una nota", state="running")]
    cat = Catalogue({"progress_step": "Passaggio {n} di {total}: {label}"})
    header = build_header(conv(progress=Progress(steps=steps)), ALL, cat)
    assert header.line2 == "Passaggio 1 di 1: Salva una nota"


def test_G1_progress_needs_feature() -> None:
    c = conv(subtitle="Keeps notes", progress=Progress(steps=STEPS))
    assert build_header(c, ALL - {"progress"}, CAT).line2 == "Keeps notes"


# --- B --------------------------------------------------------------------------------------


def kinds(controls: list[Control]) -> list[str]:
    return [c.button_id or c.kind for c in controls]


def test_B1_steer_stop_then_agent_buttons() -> None:
    bar = build_bar(conv(buttons=[Button(id="save", label="Save")]), ALL, CAT)
    assert kinds(bar.controls) == ["steer", "stop", "save"]
    assert [c.label for c in bar.controls] == ["Steer", "Stop", "Save"]
    assert all(c.tappable and not c.dimmed for c in bar.controls)


@pytest.mark.parametrize("state", ["idle", "closed", "unknown"])
def test_B1_dimmed_in_place(state: str) -> None:
    buttons = [Button(id="save", label="Save")]
    live = build_bar(conv(buttons=buttons), ALL, CAT)
    still = build_bar(conv(state=state, buttons=buttons), ALL, CAT)
    assert kinds(still.controls) == kinds(live.controls)  # nothing shifts
    steer, stop = still.controls[:2]
    assert (steer.dimmed, steer.tappable, stop.dimmed, stop.tappable) == (True, False, True, False)


def test_B1_waiting_is_live() -> None:
    bar = build_bar(conv(state="waiting"), ALL, CAT)
    assert all(c.tappable for c in bar.controls)


def test_B1_agent_button_usable_while_idle() -> None:
    save = build_bar(conv(state="idle", buttons=[Button(id="save", label="Save")]), ALL, CAT)
    assert save.controls[-1].tappable


def test_B1_closed_conversation_dims_agent_buttons() -> None:
    bar = build_bar(conv(state="closed", buttons=[Button(id="save", label="Save")]), ALL, CAT)
    assert (bar.controls[-1].dimmed, bar.controls[-1].tappable) == (True, False)


def test_B1_at_most_four_agent_buttons() -> None:
    buttons = [Button(id=f"b{i}", label=f"B{i}") for i in range(6)]
    bar = build_bar(conv(buttons=buttons), ALL, CAT)
    assert kinds(bar.controls) == ["steer", "stop", "b0", "b1", "b2", "b3"]


def test_B2_label_at_most_16() -> None:
    bar = build_bar(
        conv(
            buttons=[Button(id="d", label="Deploy to production"), Button(id="e", label="x" * 16)]
        ),
        ALL,
        CAT,
    )
    labels = [c.label for c in bar.controls[2:]]
    assert labels == ["Deploy to produ…", "x" * 16]
    assert all(len(label) <= 16 for label in labels)


def test_B2_label_cleaned() -> None:
    bar = build_bar(conv(buttons=[Button(id="d", label="Sa\u202eve\nnow")]), ALL, CAT)
    assert bar.controls[-1].label == "Save now"


@pytest.mark.parametrize("icon", ICON_NAMES)
def test_B2_icons(icon: str) -> None:
    bar = build_bar(conv(buttons=[Button(id="b", label="B", icon=icon)]), ALL, CAT)
    assert bar.controls[-1].icon == icon


@pytest.mark.parametrize("icon", [None, "rocket", "Play", "", "play "])
def test_B2_other_icons_show_none(icon: str | None) -> None:
    bar = build_bar(conv(buttons=[Button(id="b", label="B", icon=icon)]), ALL, CAT)
    assert bar.controls[-1].icon is None


def test_B2_busy_spinner_no_tap() -> None:
    bar = build_bar(conv(buttons=[Button(id="b", label="B", busy=True)]), ALL, CAT)
    b = bar.controls[-1]
    assert (b.busy, b.tappable, b.dimmed) == (True, False, False)


def test_B2_disabled_dimmed_no_tap() -> None:
    bar = build_bar(conv(buttons=[Button(id="b", label="B", disabled=True)]), ALL, CAT)
    b = bar.controls[-1]
    assert (b.busy, b.tappable, b.dimmed) == (False, False, True)


def test_B3_every_control_carries_turn() -> None:
    bar = build_bar(conv(turn=42, buttons=[Button(id="b", label="B")]), ALL, CAT)
    assert [c.turn for c in bar.controls] == [42, 42, 42]


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        (set(), []),
        ({"steer"}, ["steer"]),
        ({"stop"}, ["stop"]),
        ({"buttons"}, ["b"]),
        ({"steer", "stop", "buttons"}, ["steer", "stop", "b"]),
    ],
)
def test_G1_controls_need_features(features: set[str], expected: list[str]) -> None:
    bar = build_bar(conv(buttons=[Button(id="b", label="B")]), features, CAT)
    assert kinds(bar.controls) == expected


def test_bar_encodes_as_json() -> None:
    data = msgspec.json.decode(msgspec.json.encode(build_bar(conv(), ALL, CAT)))
    assert data["controls"][0] == {
        "kind": "steer",
        "label": "Steer",
        "turn": 7,
        "tappable": True,
        "dimmed": False,
        "busy": False,
        "icon": None,
        "button_id": None,
    }


# --- G2 -------------------------------------------------------------------------------------


def test_G2_menu() -> None:
    menu = build_menu(conv(), ALL, CAT)
    assert [(i.action, i.label) for i in menu.items] == [("close", "Close conversation")]
    assert menu.reopen is None


def test_G2_menu_without_close() -> None:
    assert build_menu(conv(), ALL - {"close"}, CAT).items == []


def test_L4_closed_view_reopen() -> None:
    menu = build_menu(conv(state="closed"), ALL, CAT)
    assert menu.items == []
    assert menu.reopen is not None
    assert (menu.reopen.action, menu.reopen.label) == ("reopen", "Reopen")


def test_L4_no_reopen_without_feature() -> None:
    assert build_menu(conv(state="closed"), ALL - {"reopen"}, CAT).reopen is None


# --- any conversation -----------------------------------------------------------------------

labels = st.text(max_size=40)
any_conv = st.builds(
    conv,
    title=st.none() | labels,
    subtitle=st.none() | labels,
    workspace=st.none() | labels,
    state=st.sampled_from(["idle", "working", "waiting", "closed", "odd"]),
    turn=st.integers(0, 10**6),
    progress=st.none()
    | st.builds(
        Progress,
        steps=st.none()
        | st.lists(
            st.builds(Step, label=labels, state=st.sampled_from(["pending", "running", "done"])),
            max_size=5,
        ),
        percent=st.none() | st.floats(allow_nan=True),
        label=st.none() | labels,
    ),
    buttons=st.lists(
        st.builds(
            Button,
            id=st.text(min_size=1, max_size=4),
            label=labels,
            icon=st.none() | st.sampled_from([*ICON_NAMES, "rocket"]),
            busy=st.booleans(),
            disabled=st.booleans(),
        ),
        max_size=7,
    ),
)


@given(c=any_conv, features=st.sets(st.sampled_from(FEATURES)))
def test_any_conversation_draws(c: Conversation, features: set[str]) -> None:
    header = build_header(c, features, CAT)
    bar = build_bar(c, features, CAT)
    msgspec.json.encode((header, bar, build_menu(c, features, CAT)))
    assert header.title.strip()
    assert len(bar.controls) <= 6
    assert all(ctl.turn == c.turn and len(ctl.label) <= 16 for ctl in bar.controls)
    assert all(not (ctl.tappable and (ctl.dimmed or ctl.busy)) for ctl in bar.controls)
    if header.line2_kind in ("step", "percent"):
        assert "progress" in features
        assert c.state in ("working", "waiting")
