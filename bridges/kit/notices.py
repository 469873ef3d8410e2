"""What a bridge says in the chat beside the peer's own words (notice items), and its clock."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from wire.agent import ConversationHandle
from wire.errors import LocalWireError


async def notice(conv: ConversationHandle, text: str, *, id: str | None = None) -> None:
    """Append a ``notice`` item to ``conv`` (``id``: once under that id); a conversation closed
    meanwhile, or a text the wire refuses, drops it: a notice never fails its caller."""
    with contextlib.suppress(LocalWireError):
        await conv.append(kind="notice", text=text, id=id)


def utc() -> datetime:
    """Now, in UTC (a bridge's default clock)."""
    return datetime.now(UTC)
