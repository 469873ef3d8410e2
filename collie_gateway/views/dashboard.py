"""The dashboard: the person's spaces and the "Durable agents" section (spec D1–D10). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple, cast
from urllib.parse import quote

import msgspec

from collie_gateway.mirror import AgentMirror, LinkState
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from collie_gateway.views.text import LABEL_LIMIT, clean

_STATE_KEYS = {
    LinkState.STARTING: "state_starting",
    LinkState.UNREACHABLE: "state_unreachable",
    LinkState.VERSION_MISMATCH: "state_version_mismatch",
}


class RightEdge(msgspec.Struct, kw_only=True, omit_defaults=True):
    """D5/D6: counts when ready (``waiting`` null when zero), else a state label."""

    open: int | None = None
    waiting: int | None = None
    waiting_color: Literal["attention"] | None = None
    label: str | None = None


class AgentRow(msgspec.Struct, kw_only=True):
    """One durable agent's row (D2–D6, D10)."""

    agent: str
    line1: str
    badge: str
    line2: str
    state: str
    right: RightEdge
    waiting: bool
    href: str


class Space(msgspec.Struct, kw_only=True):
    """One of the person's spaces (from the gateway's config for now)."""

    name: str


class Section(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A dashboard section: ``spaces`` or ``durable_agents``."""

    kind: str
    title: str | None = None
    spaces: list[Space] | None = None
    rows: list[AgentRow] | None = None


class Dashboard(msgspec.Struct, kw_only=True):
    """``GET /api/v1/dashboard``: sections in the order the phone draws them (D7)."""

    sections: list[Section]
    durable_agents_position: Literal["above", "below"] | None
    pending_only: bool


def agent_row(source: Source, mirror: AgentMirror, catalogue: Catalogue) -> AgentRow:
    """One row, worded as D2–D6 say."""
    said = mirror.hello.runtime if mirror.hello else None
    runtime = clean(said or "", LABEL_LIMIT).text.strip() or catalogue["runtime_default"]
    reach = catalogue["reach_local"] if source.local else catalogue["reach_remote"]
    ready = mirror.state is LinkState.READY
    waiting = mirror.waiting_count if ready else 0
    if ready:
        right = RightEdge(
            open=mirror.open_count,
            waiting=waiting or None,
            waiting_color="attention" if waiting else None,
        )
    else:
        right = RightEdge(label=catalogue[_STATE_KEYS[mirror.state]])
    return AgentRow(
        agent=source.name,
        line1=source.name,
        badge=catalogue["badge_experimental"],
        line2=catalogue.fmt("row_line2", runtime=runtime, reach=reach),
        state=mirror.state.value,
        right=right,
        waiting=waiting > 0,
        href=f"/api/v1/agents/{quote(source.name, safe='')}/conversations",
    )


class EncodedRow(NamedTuple):
    """An :class:`AgentRow` as already encoded for the live stream, and whether it waits."""

    raw: msgspec.Raw
    waiting: bool


def build_dashboard(
    rows: Iterable[AgentRow | EncodedRow],
    spaces: Iterable[str],
    catalogue: Catalogue,
    *,
    pending_only: bool = False,
) -> Dashboard:
    """The dashboard: D7 (above while any waits), D8 (no agents, no section), D9.

    Rows given encoded stay ``msgspec.Raw`` in the result, which is then for encoding only.
    """
    all_rows = list(rows)
    space_section = Section(kind="spaces", spaces=[Space(name=s) for s in spaces])
    if not all_rows:
        return Dashboard(
            sections=[space_section], durable_agents_position=None, pending_only=pending_only
        )
    shown = [r for r in all_rows if r.waiting] if pending_only else all_rows
    any_waiting = any(r.waiting for r in all_rows)
    position: Literal["above", "below"] = "above" if any_waiting else "below"
    if pending_only and not shown:
        # Nothing waits: the filter leaves the section empty, so it is not drawn.
        return Dashboard(
            sections=[space_section], durable_agents_position=None, pending_only=pending_only
        )
    drawn = [r.raw if isinstance(r, EncodedRow) else r for r in shown]
    # Raw rows encode as they are: the JSON of AgentRow, made once per change.
    agents = Section(
        kind="durable_agents",
        title=catalogue["section_durable_agents"],
        rows=cast(list[AgentRow], drawn),
    )
    sections = [agents, space_section] if any_waiting else [space_section, agents]
    return Dashboard(sections=sections, durable_agents_position=position, pending_only=pending_only)
