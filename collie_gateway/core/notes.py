"""The gateway's own lines in a chat: receipts (R3, R4) and the "stopped" note (C3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from collie_gateway.strings import Catalogue
from collie_gateway.views.text import TITLE_LIMIT, clean
from wire.messages import Ask

#: R3, R4: an ask that closed without the person's tap gets a receipt in its chat.
RECEIPTS: Final = {"expired": "receipt_expired", "decided": "receipt_decided"}


@dataclass(frozen=True, slots=True)
class Note:
    """A line the gateway adds: a receipt (R3) or the "stopped" note (C3)."""

    kind: str  # "receipt" | "stopped"
    text: str
    at: datetime
    after_item: str | None  # the item it follows (None: before every item)


def receipt_text(
    how: str, ask: Ask, tapped: bool, catalogue: Catalogue, redact: Callable[[str], str]
) -> str | None:
    """The receipt line for an ask that closed ``how`` (R3, R4), or None: only an ask that
    expired or was decided in the agent without any tap of the person's gets one."""
    key = RECEIPTS.get(how)
    if key is None or tapped:
        return None
    title = clean(ask.title or ask.text, TITLE_LIMIT, redact=redact).text
    return f"{catalogue[key]} {title}"


def note_json(note: Note) -> dict[str, object]:
    """A note as the phone's live stream carries it."""
    return {"kind": note.kind, "text": note.text, "at": note.at, "after_item": note.after_item}
