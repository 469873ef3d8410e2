"""What only the PostgreSQL store has, for several workers on it: the shared log and the
leases (``protocols.SharedStore``)."""

from __future__ import annotations

from dataclasses import dataclass

from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.pg.events import EventLog
from collie_gateway.store.pg.leases import Leases


@dataclass(frozen=True, slots=True)
class PgShared:
    """The shared log and the leases on one PostgreSQL database."""

    db: PgDatabase

    @classmethod
    async def open(cls, url: str) -> PgShared:
        """Connect to ``url`` and migrate it (``PgDatabase.open``)."""
        return cls(await PgDatabase.open(url))

    def event_log(self) -> EventLog:
        """The shared log."""
        return EventLog(self.db)

    def leases(self, holder: str, seconds: float) -> Leases:
        """The leases, taken as ``holder`` for ``seconds`` at a time."""
        return Leases(self.db, holder, seconds)
