"""A crew member's last known rows (W1): its section shows them after a restart until it
answers."""

from __future__ import annotations

from typing import Final

from collie_gateway.store.protocols import KvStore

CREW_ROWS: Final = "crew.rows:"  # kv key prefix of a member's last known rows


class CrewRepo:
    """Each member's last rows, by machine."""

    def __init__(self, kv: KvStore) -> None:
        self.kv = kv

    async def saved_rows(self) -> dict[str, bytes]:
        """Every member's last rows, by machine."""
        return await self.kv.with_prefix(CREW_ROWS)

    async def save_rows(self, machine: str, rows: bytes) -> None:
        """Keep a member's rows as last read."""
        await self.kv.put(CREW_ROWS + machine, rows)
