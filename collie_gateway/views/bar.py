"""A conversation's header, bottom bar and pane menu (spec H1–H3, B1–B3, G1, G2).

Pure: built from a wire ``Conversation``, the features the agent declared in its hello, and
the catalogue. The agent's labels are shown as it sent them, cleaned, never translated (H3).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from decimal import ROUND_FLOOR, Decimal
from typing import Final, Literal

from msgspec import Struct

from collie_gateway.core.cleaning import LABEL_LIMIT, TITLE_LIMIT, Redact, clean
from collie_gateway.strings import Catalogue
from wire.messages import Conversation, Progress

MAX_AGENT_BUTTONS: Final = 4  # spec B1; ours: past 4, the first 4 in the agent's order
BUTTON_LABEL_LIMIT: Final = 16  # spec B2
ICONS: Final = frozenset(  # spec B2
    {"play", "pause", "check", "x", "refresh", "archive"}
    | {"flag", "star", "send", "note", "search", "more"}
)
LIVE_STATES: Final = frozenset(("working", "waiting"))  # H3, B1: a turn is running

Line2Kind = Literal["step", "percent", "subtitle", "workspace"]
_TURN_CONTROLS: Final[tuple[tuple[Literal["steer", "stop"], str], ...]] = (
    ("steer", "bar_steer"),
    ("stop", "bar_stop"),
)


class Header(Struct, frozen=True, kw_only=True):
    """Two lines (H1, H2). ``line2_kind`` says which row of H2's table ``line2`` comes from;
    ``percent`` is set with a percent line, for a progress bar.

    Attributes:
        title: The conversation's title ("Untitled conversation" when it has none).
        badge: The badge after the title ("Experimental").
        line2: The second line: progress, the agent's subtitle or state (H2); null: no line.
        line2_kind: Which row of H2's table `line2` comes from.
        percent: 0–100 with a percent line, for a progress bar; else null.
    """

    title: str
    badge: str
    line2: str | None = None
    line2_kind: Line2Kind | None = None
    percent: float | None = None


class Control(Struct, frozen=True, kw_only=True):
    """One control of the bottom bar. ``kind`` is ``steer``, ``stop`` or ``button`` (then
    ``button_id`` names it). A control that can't be used now stays in place, ``dimmed``
    (B1); ``busy`` shows a spinner. Every tap sends ``turn``, the newest the phone saw (B3).

    Attributes:
        kind: `steer`, `stop` or `button`.
        label: The control's words.
        turn: The newest turn the phone saw: send it with the tap (B3).
        tappable: Whether a tap does anything now.
        dimmed: Shown but not usable now (B1).
        busy: Show a spinner (the agent says the button is busy).
        icon: The agent's icon name for a button; null: no icon.
        button_id: The button's id for `POST …/buttons/{button}`; null for steer and stop.
    """

    kind: Literal["steer", "stop", "button"]
    label: str
    turn: int
    tappable: bool
    dimmed: bool = False
    busy: bool = False
    icon: str | None = None
    button_id: str | None = None


class Bar(Struct, frozen=True, kw_only=True):
    """The bottom bar: Steer, Stop, then the agent's buttons, in drawing order (B1).

    Attributes:
        controls: The controls, in drawing order.
    """

    controls: list[Control]


class MenuItem(Struct, frozen=True, kw_only=True):
    """One action of the pane menu or of the closed view: ``close`` or ``reopen``.

    Attributes:
        action: `close` or `reopen`: the command the item sends.
        label: Its words.
    """

    action: Literal["close", "reopen"]
    label: str


class Menu(Struct, frozen=True, kw_only=True):
    """The pane menu of an open conversation (G2) and the Reopen button of a closed one (L4).

    Attributes:
        items: The pane menu's items (G2).
        reopen: The Reopen button of a closed conversation (L4); null when open or when the agent
            cannot reopen.
    """

    items: list[MenuItem]
    reopen: MenuItem | None = None


def build_header(
    conv: Conversation,
    features: Collection[str],
    catalogue: Catalogue,
    *,
    redact: Redact | None = None,
    agent_subtitle: str | None = None,
) -> Header:
    """The header: title and "Experimental" (H1); line 2 from the first row of H2 that holds.

    Progress counts only with the ``progress`` feature (G1) and while the conversation is
    working or waiting (H3). Steps count when one is running (the first running one is
    "Step n"); a percent counts when it has a label. Otherwise the conversation's subtitle,
    else its workspace, else the subtitle of the agent's hello (as the list row, L3), else no
    line 2.
    """
    title = clean(conv.title or "", TITLE_LIMIT, redact=redact).text.strip()
    header = Header(
        title=title or catalogue["list_untitled"], badge=catalogue["badge_experimental"]
    )
    progress = conv.progress
    if progress is not None and "progress" in features and conv.state in LIVE_STATES:
        line = _step_line(progress, catalogue, redact)
        if line is not None:
            return _with_line2(header, line, "step")
        percent = _percent(progress.percent)
        label = _label(progress.label, redact)
        if percent is not None and label:
            text = catalogue.fmt("progress_percent", percent=_percent_text(percent), label=label)
            return _with_line2(header, text, "percent", percent)
    subtitle = clean(conv.subtitle or "", TITLE_LIMIT, redact=redact).text.strip()
    if subtitle:
        return _with_line2(header, subtitle, "subtitle")
    workspace = clean(conv.workspace or "", TITLE_LIMIT, redact=redact).text.strip()
    if workspace:
        return _with_line2(header, workspace, "workspace")
    fallback = clean(agent_subtitle or "", TITLE_LIMIT, redact=redact).text.strip()
    if fallback:
        return _with_line2(header, fallback, "subtitle")
    return header


def build_bar(
    conv: Conversation,
    features: Collection[str],
    catalogue: Catalogue,
    *,
    redact: Redact | None = None,
) -> Bar:
    """The bottom bar (B1, B2): only declared controls (G1), each carrying ``conv.turn`` (B3).
    An agent button's label is masked (X1) before it is cut.

    Steer and Stop are usable only while a turn runs (working or waiting). An agent button
    with ``busy`` shows a spinner, one with ``disabled`` is dimmed; neither taps. In a closed
    conversation, read-only, every control is dimmed.
    """
    live = conv.state in LIVE_STATES
    closed = conv.state == "closed"
    controls: list[Control] = []
    for kind, key in _TURN_CONTROLS:
        if kind in features:
            controls.append(
                Control(
                    kind=kind,
                    label=catalogue[key],
                    turn=conv.turn,
                    tappable=live,
                    dimmed=not live,
                )
            )
    if "buttons" in features:
        for button in conv.buttons[:MAX_AGENT_BUTTONS]:
            dimmed = button.disabled or closed
            controls.append(
                Control(
                    kind="button",
                    button_id=button.id,
                    label=clean(button.label, BUTTON_LABEL_LIMIT, redact=redact).text,
                    icon=button.icon if button.icon in ICONS else None,
                    turn=conv.turn,
                    tappable=not (dimmed or button.busy),
                    dimmed=dimmed,
                    busy=button.busy,
                )
            )
    return Bar(controls=controls)


def build_menu(conv: Conversation, features: Collection[str], catalogue: Catalogue) -> Menu:
    """The pane menu (G2): only "Close conversation", when ``close`` is declared; no History,
    Pane settings or Pin to top row. A closed conversation instead gets "Reopen" when
    ``reopen`` is declared (L4)."""
    if conv.state == "closed":
        reopen = MenuItem(action="reopen", label=catalogue["list_reopen"])
        return Menu(items=[], reopen=reopen if "reopen" in features else None)
    close = MenuItem(action="close", label=catalogue["menu_close"])
    return Menu(items=[close] if "close" in features else [])


def _with_line2(header: Header, line: str, kind: Line2Kind, percent: float | None = None) -> Header:
    return Header(
        title=header.title, badge=header.badge, line2=line, line2_kind=kind, percent=percent
    )


def _step_line(progress: Progress, catalogue: Catalogue, redact: Redact | None) -> str | None:
    steps = progress.steps or []
    for n, step in enumerate(steps, start=1):
        if step.state == "running":
            label = clean(step.label, LABEL_LIMIT, redact=redact).text
            return catalogue.fmt("progress_step", n=n, total=len(steps), label=label)
    return None


def _label(label: str | None, redact: Redact | None) -> str:
    return clean(label or "", LABEL_LIMIT, redact=redact).text.strip()


def _percent(percent: float | None) -> float | None:
    """The percent clamped to 0–100; None when absent or not a number."""
    if percent is None or not math.isfinite(percent):
        return None
    return min(100.0, max(0.0, float(percent)))


def _percent_text(percent: float) -> str:
    """Rounded down to one decimal so it never shows done early: 42.0 → "42", 99.96 → "99.9"."""
    shown = Decimal(repr(percent)).quantize(Decimal("0.1"), rounding=ROUND_FLOOR)
    return str(shown.to_integral_value()) if shown == shown.to_integral_value() else str(shown)
