"""The dashboard's rows: each agent's row encoded once per change and published (D1–D6),
and the dashboard built from them with every crew member's section (W1)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from collie_gateway.core.mirror import AgentMirror
from collie_gateway.services.phonebus import Publish
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue, Catalogues
from collie_gateway.views.dashboard import (
    Dashboard,
    EncodedRow,
    Section,
    agent_row,
    build_dashboard,
)

_encoder = msgspec.json.Encoder()


class Rows:
    """This machine's section of the dashboard, in each language: the default language's rows
    are kept at each change (and published); another language's row is encoded once per
    change of the default's, on its first read, so a read costs the same in any language."""

    def __init__(
        self,
        sources: Sequence[Source],
        mirror: Callable[[str], AgentMirror],
        languages: Catalogues,
        spaces: Sequence[str],
        publish: Publish,
        members: Callable[[], list[Section]],
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.sources = list(sources)
        self._by_name = {s.name: s for s in sources}
        self.mirror = mirror
        self.languages = languages
        self.catalogue = languages.default
        self.spaces = tuple(spaces)
        self.publish = publish
        self.members = members
        self.redact = redact  # the agents' runtimes (X1); None: shown as said
        self._rows: dict[str, EncodedRow] = {}  # each agent's row, as last encoded
        # Each agent's row in another language: (the default's row it follows, the row).
        self._worded: dict[tuple[str, str], tuple[EncodedRow, EncodedRow]] = {}
        # The dashboard's JSON per (language, pending_only), as (rows' version, the members'
        # sections it was built with, body): a read with nothing changed sends it again, so
        # its cost does not grow with the agents whose rows did not change.
        self._version = 0  # counts every change of a kept row
        self._bodies: dict[tuple[str, bool], tuple[int, list[Section], bytes]] = {}

    def changed(self, mirror: AgentMirror) -> None:
        """Tell the phones of a row that changed, and only then (in each language in use)."""
        name = mirror.name
        encoded = self._encode(name, self.catalogue)
        kept = self._rows.get(name)
        if kept is None or kept.raw != encoded.raw:
            self._rows[name] = encoded
            self._version += 1
            worded = self.languages.get
            self.publish("dashboard.row", encoded.raw, lambda t: self.row(name, worded(t)).raw)

    def tell(self, mirror: AgentMirror) -> None:
        """Tell the phones the agent's row as it is, changed or not (another worker may not
        have told it)."""
        self._rows.pop(mirror.name, None)
        self.changed(mirror)

    def _encode(self, name: str, catalogue: Catalogue) -> EncodedRow:
        row = agent_row(self._by_name[name], self.mirror(name), catalogue, self.redact)
        return EncodedRow(msgspec.Raw(_encoder.encode(row)), row.waiting)

    def row(self, name: str, catalogue: Catalogue | None = None) -> EncodedRow:
        """The agent's row as last encoded, in ``catalogue``'s language (default: the
        default's; every change of it is published, and kept)."""
        kept = self._rows.get(name)
        if kept is None:
            kept = self._rows[name] = self._encode(name, self.catalogue)
            self._version += 1
        if catalogue is None or catalogue is self.catalogue:
            return kept
        worded = self._worded.get((catalogue.lang, name))
        if worded is None or worded[0] is not kept:
            worded = self._worded[catalogue.lang, name] = (kept, self._encode(name, catalogue))
        return worded[1]

    def dashboard(
        self, *, pending_only: bool = False, catalogue: Catalogue | None = None
    ) -> Dashboard:
        """The dashboard as the phone draws it now, in ``catalogue``'s language (default: the
        default's): this machine's section, from the rows encoded for the live stream (for
        encoding only: its rows are ``msgspec.Raw``), then each crew member's (W1)."""
        return self._build(catalogue or self.catalogue, pending_only, self.members())

    def _build(self, cat: Catalogue, pending_only: bool, members: list[Section]) -> Dashboard:
        rows = [self.row(s.name, cat) for s in self.sources]
        return build_dashboard(rows, self.spaces, cat, pending_only=pending_only, members=members)

    def dashboard_json(
        self, *, pending_only: bool = False, catalogue: Catalogue | None = None
    ) -> bytes:
        """:meth:`dashboard` encoded, built again only when a row or a member's section
        changed since the last read in that language."""
        cat = catalogue or self.catalogue
        key = (cat.lang, pending_only)
        members = self.members()
        kept = self._bodies.get(key)
        if kept is not None and kept[0] == self._version and _same(kept[1], members):
            return kept[2]
        body = _encoder.encode(self._build(cat, pending_only, members))
        self._bodies[key] = (self._version, members, body)
        return body


def _same(kept: list[Section], now: list[Section]) -> bool:
    """Whether the members' sections are the very ones (each is replaced when it changes)."""
    return len(kept) == len(now) and all(a is b for a, b in zip(kept, now, strict=True))
