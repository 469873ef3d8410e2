"""The dashboard: the person's spaces and the "Durable agents" section (spec D1–D10). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple, cast
from urllib.parse import quote

import msgspec

from collie_gateway.core.cleaning import LABEL_LIMIT, Redact, clean
from collie_gateway.core.mirror import AgentMirror, LinkState
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue

_STATE_KEYS = {
    LinkState.STARTING: "state_starting",
    LinkState.UNREACHABLE: "state_unreachable",
    LinkState.VERSION_MISMATCH: "state_version_mismatch",
}


class RightEdge(msgspec.Struct, kw_only=True, omit_defaults=True):
    """D5/D6: counts when ready (``waiting`` null when zero), else a state label.

    Attributes:
        open: When ready: how many conversations are open (D5); absent otherwise.
        waiting: When ready: how many wait for the person; absent (not 0) when none does, since D5
            hides that count.
        waiting_color: `attention` with a waiting count.
        label: When not ready: "Starting", "Unreachable" or "Version mismatch" (D6).
    """

    open: int | None = None
    waiting: int | None = None
    waiting_color: Literal["attention"] | None = None
    label: str | None = None


class AgentRow(msgspec.Struct, kw_only=True):
    """One durable agent's row (D2–D6, D10).

    Attributes:
        agent: The agent's name in sources.json.
        line1: Line 1: the name (D2).
        badge: The badge after it ("Experimental").
        line2: Line 2: runtime, then local or remote (D3, D4).
        state: The link's state: `starting`, `ready`, `unreachable`, `version_mismatch`.
        right: The right edge (D5, D6).
        waiting: Whether any of its conversations waits for the person.
        href: The path of its conversation list (D10).
        runtime: Line 2's runtime part, so a lead can add the member's name (W2); empty when
            not known.
        reach: Line 2's local-or-remote part (W2); empty when not known.
        machine: The crew member the agent runs on (W1); absent for this gateway's own.
    """

    agent: str
    line1: str
    badge: str
    line2: str
    state: str
    right: RightEdge
    waiting: bool
    href: str
    runtime: str = ""
    reach: str = ""
    machine: str | None = None


class Space(msgspec.Struct, kw_only=True):
    """One of the person's spaces (from the gateway's config for now).

    Attributes:
        name: The space's name.
    """

    name: str


class Section(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A dashboard section: ``spaces`` or ``durable_agents``.

    Attributes:
        kind: `spaces` or `durable_agents`.
        title: The section's title ("Durable agents"); absent for spaces.
        spaces: The person's spaces (kind `spaces`).
        rows: One row per agent in sources.json order (kind `durable_agents`).
        machine: The crew member's machine name, in a member's section on the lead (W1);
            absent otherwise.
        state: The state of the lead's link to that member (W1); absent otherwise.
        note: Why the member is not ready (W1); absent when it is ready or not a member.
    """

    kind: str
    title: str | None = None
    spaces: list[Space] | None = None
    rows: list[AgentRow] | None = None
    machine: str | None = None
    state: str | None = None
    note: str | None = None


class Dashboard(msgspec.Struct, kw_only=True):
    """``GET /api/v1/dashboard``: sections in the order the phone draws them (D7).

    Attributes:
        sections: The sections in drawing order (D7).
        durable_agents_position: Where the Durable agents section is drawn relative to the spaces:
            `above` while any agent waits for the person, else `below` (D7); null when the section
            is not drawn (no agents, D8, or none waiting with `pending_only`, D9).
        pending_only: Whether the answer lists only agents waiting for the person (D9).
    """

    sections: list[Section]
    durable_agents_position: Literal["above", "below"] | None
    pending_only: bool


def agent_row(
    source: Source, mirror: AgentMirror, catalogue: Catalogue, redact: Redact | None = None
) -> AgentRow:
    """One row, worded as D2–D6 say; the runtime the agent said is masked (X1)."""
    said = mirror.hello.runtime if mirror.hello else None
    runtime = clean(said or "", LABEL_LIMIT, redact=redact).text.strip()
    runtime = runtime or catalogue["runtime_default"]
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
        runtime=runtime,
        reach=reach,
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
    members: Sequence[Section] = (),
) -> Dashboard:
    """The dashboard: D7 (above while any waits), D8 (no agents, no section), D9.

    With a crew (W1–W3): this machine's section first, naming no machine, then each
    member's ``members`` section in crew order; each machine's section is above the spaces
    while one of its agents waits, and ``pending_only`` keeps, across machines, only the
    waiting rows. ``durable_agents_position`` is this machine's section's place.

    Rows given encoded stay ``msgspec.Raw`` in the result, which is then for encoding only.
    """
    own_rows = list(rows)
    space_section = Section(kind="spaces", spaces=[Space(name=s) for s in spaces])
    above: list[Section] = []
    below: list[Section] = []
    position: Literal["above", "below"] | None = None
    machines: list[Section] = list(members)
    if own_rows:  # D8: no agents of its own, no section of its own
        title = catalogue["section_durable_agents"]
        # (EncodedRow has ``waiting`` as AgentRow does; made Raw below)
        own = Section(kind="durable_agents", title=title, rows=cast(list[AgentRow], own_rows))
        machines.insert(0, own)
    for section in machines:
        section_rows = section.rows or []
        waiting = any(r.waiting for r in section_rows)
        if pending_only:
            shown = [r for r in section_rows if r.waiting]
            if not shown:
                continue  # nothing waits there: the filter leaves it empty, so it is not drawn
            section = msgspec.structs.replace(section, rows=shown)
        (above if waiting else below).append(_encoded(section))
        if section.machine is None:
            position = "above" if waiting else "below"
    return Dashboard(
        sections=[*above, space_section, *below],
        durable_agents_position=position,
        pending_only=pending_only,
    )


def _encoded(section: Section) -> Section:
    """``section`` with its encoded rows as ``msgspec.Raw``: the JSON of AgentRow, made once
    per change, encodes as it is."""
    rows = cast(list[object], section.rows or [])
    if not any(isinstance(r, EncodedRow) for r in rows):
        return section
    raw = [r.raw if isinstance(r, EncodedRow) else r for r in rows]
    return msgspec.structs.replace(section, rows=cast(list[AgentRow], raw))
