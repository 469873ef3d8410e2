"""Chat notes: receipts (R3, R4) and "stopped" lines (C3), once per key."""

from __future__ import annotations

from datetime import datetime

from collie_gateway.core.notes import NOTE_WORDS, Note
from collie_gateway.store.engine import Db


class NotesRepo:
    """The gateway's own lines of each conversation."""

    def __init__(self, db: Db) -> None:
        self.db = db

    async def save(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Keep a note; a second note under the same key is ignored."""
        # A note with words keeps their catalogue key as its kind (read back as that kind's
        # note), so it reads in each phone's language; its stored text is the agent's title.
        kind = note.words or note.kind
        row = (agent, conv_id, key, kind, note.text, note.at.isoformat(), note.after_item)
        sql = (
            "INSERT INTO notes(agent, conversation, key, kind, text, at, after_item)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        await self.db.write(lambda tx: tx.run(sql, row))

    async def load(self, agent: str, conv_id: str) -> list[Note]:
        """The notes of one conversation, oldest first."""
        sql = (
            "SELECT kind, text, at, after_item FROM notes"
            " WHERE agent = ? AND conversation = ? ORDER BY at, key"
        )
        rows = await self.db.read(lambda tx: tx.all(sql, (agent, conv_id)), long=True)
        return [
            Note(
                kind=NOTE_WORDS.get(str(k), str(k)),
                text=str(t),
                at=datetime.fromisoformat(str(a)),
                after_item=i,
                words=str(k) if str(k) in NOTE_WORDS else None,
            )
            for k, t, a, i in rows
        ]
