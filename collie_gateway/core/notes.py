"""The gateway's own lines in a chat: receipts (R3, R4) and the "stopped" note (C3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from collie_gateway.core.cleaning import TITLE_LIMIT, clean
from collie_gateway.strings import Catalogue
from wire.messages import Ask

#: R3, R4: an ask that closed without the person's tap gets a receipt in its chat.
RECEIPTS: Final = {"expired": "receipt_expired", "decided": "receipt_decided"}


#: The catalogue keys a note's words may be, and the kind of note each makes.
NOTE_WORDS: Final = {
    "receipt_expired": "receipt",
    "receipt_decided": "receipt",
    "chat_stopped": "stopped",
}


@dataclass(frozen=True, slots=True)
class Note:
    """A line the gateway adds: a receipt (R3) or the "stopped" note (C3).

    ``words``, when set, is the catalogue key of the gateway's words, drawn in the phone's
    language before ``text`` (then only the ask's title, or empty); a note without it (stored
    by an older gateway) reads ``text`` as it is.
    """

    kind: str  # "receipt" | "stopped"
    text: str
    at: datetime
    after_item: str | None  # the item it follows (None: before every item)
    words: str | None = None

    def shown(self, catalogue: Catalogue) -> str:
        """The note's text in ``catalogue``'s language."""
        if self.words is None:
            return self.text
        return f"{catalogue[self.words]} {self.text}".strip()


def receipt_note(
    how: str,
    ask: Ask,
    tapped: bool,
    redact: Callable[[str], str],
    at: datetime,
    after_item: str | None,
) -> Note | None:
    """The receipt for an ask that closed ``how`` (R3, R4), or None: only an ask that
    expired or was decided in the agent without any tap of the person's gets one. Its words
    are drawn in each phone's language; its text is the ask's title."""
    key = RECEIPTS.get(how)
    if key is None or tapped:
        return None
    title = clean(ask.title or ask.text, TITLE_LIMIT, redact=redact).text
    return Note(kind="receipt", text=title, at=at, after_item=after_item, words=key)


def note_json(note: Note, catalogue: Catalogue) -> dict[str, object]:
    """A note as the phone's live stream carries it, in ``catalogue``'s language."""
    text = note.shown(catalogue)
    return {"kind": note.kind, "text": text, "at": note.at, "after_item": note.after_item}
