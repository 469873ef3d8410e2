"""The dashboard's rows: each agent's row encoded once per change and published (D1–D6),
and the dashboard built from them with every crew member's section (W1)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from collie_gateway.core.mirror import AgentMirror
from collie_gateway.services.phonebus import Publish
from collie_gateway.sources import Source
from collie_gateway.strings import Catalogue
from collie_gateway.views.dashboard import (
    Dashboard,
    EncodedRow,
    Section,
    agent_row,
    build_dashboard,
)

_encoder = msgspec.json.Encoder()


class Rows:
    """This machine's section of the dashboard."""

    def __init__(
        self,
        sources: Sequence[Source],
        mirror: Callable[[str], AgentMirror],
        catalogue: Catalogue,
        spaces: Sequence[str],
        publish: Publish,
        members: Callable[[], list[Section]],
    ) -> None:
        self.sources = list(sources)
        self._by_name = {s.name: s for s in sources}
        self.mirror = mirror
        self.catalogue = catalogue
        self.spaces = tuple(spaces)
        self.publish = publish
        self.members = members
        self._rows: dict[str, EncodedRow] = {}  # each agent's row, as last encoded

    def changed(self, mirror: AgentMirror) -> None:
        """Tell the phones of a row that changed, and only then."""
        encoded = self._encode(mirror.name)
        kept = self._rows.get(mirror.name)
        if kept is None or kept.raw != encoded.raw:
            self._rows[mirror.name] = encoded
            self.publish("dashboard.row", encoded.raw)

    def _encode(self, name: str) -> EncodedRow:
        row = agent_row(self._by_name[name], self.mirror(name), self.catalogue)
        return EncodedRow(msgspec.Raw(_encoder.encode(row)), row.waiting)

    def row(self, name: str) -> EncodedRow:
        """The agent's row as last encoded (every change of it is published, and kept)."""
        kept = self._rows.get(name)
        if kept is None:
            kept = self._rows[name] = self._encode(name)
        return kept

    def dashboard(self, *, pending_only: bool = False) -> Dashboard:
        """The dashboard as the phone draws it now: this machine's section, from the rows
        encoded for the live stream (for encoding only: its rows are ``msgspec.Raw``), then
        each crew member's (W1)."""
        rows = [self.row(s.name) for s in self.sources]
        return build_dashboard(
            rows, self.spaces, self.catalogue, pending_only=pending_only, members=self.members()
        )
