"""What a bridge says in the chat beside the peer's own words (notice items), and its clock."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from wire.agent import ConversationHandle
from wire.errors import LocalWireError
from wire.messages import NoticePush, Words


async def notice(
    conv: ConversationHandle,
    text: str,
    *,
    id: str | None = None,
    words: Words | None = None,
    push: NoticePush | None = None,
) -> None:
    """Append a ``notice`` item to ``conv`` (``id``: once under that id; ``words``: its text
    as a key of the gateway's catalogue, shown in the phone's language; ``push``: the gateway
    pushes it, wire §7.11); a conversation closed meanwhile, or a text the wire refuses, drops
    it: a notice never fails its caller."""
    with contextlib.suppress(LocalWireError):
        await conv.append(kind="notice", text=text, id=id, words=words, push=push)


def utc() -> datetime:
    """Now, in UTC (a bridge's default clock)."""
    return datetime.now(UTC)
