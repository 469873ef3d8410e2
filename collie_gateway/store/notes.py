"""Chat notes in SQLite: receipts (R3, R4) and "stopped" lines (C3), once per key."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from collie_gateway.core.notes import Note
from collie_gateway.store.database import Database


class NotesRepo:
    """The gateway's own lines of each conversation."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def save(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Keep a note; a second note under the same key is ignored."""
        row = (agent, conv_id, key, note.kind, note.text, note.at.isoformat(), note.after_item)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO notes(agent, conversation, key, kind, text, at, after_item)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )

        await self.db.run(write)

    async def load(self, agent: str, conv_id: str) -> list[Note]:
        """The notes of one conversation, oldest first."""
        async with self.db.db.execute(
            "SELECT kind, text, at, after_item FROM notes WHERE agent = ? AND conversation = ?"
            " ORDER BY at",
            (agent, conv_id),
        ) as cur:
            rows = await cur.fetchall()
        return [
            Note(kind=str(k), text=str(t), at=datetime.fromisoformat(str(a)), after_item=i)
            for k, t, a, i in rows
        ]
