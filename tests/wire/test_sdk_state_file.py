"""An agent's state file as the SDK has written it since schema 1, made here with ``sqlite3``
from the schema and rows spelled out (not from the SDK's own code), opens and reads back:
conversations, items, asks, command records and ``once`` marks. If the SDK's file format
changes, this file must still open (a migration), or this test says it does not."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.wire.conftest import START, AgentFactory
from wire.agent import Answer, Resolution
from wire.messages import (
    Ask,
    CommandResult,
    Conversation,
    ConversationUpdated,
    Item,
    Reply,
    SendMessage,
    decode,
    encode,
)

SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE events (id INTEGER PRIMARY KEY, type TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE conversations (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_us INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE INDEX conversations_closed ON conversations (updated_us, id) WHERE state = 'closed';
CREATE INDEX conversations_open ON conversations (id) WHERE state <> 'closed';
CREATE TABLE items (
    conversation TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (conversation, seq)
) WITHOUT ROWID;
CREATE TABLE asks (
    id TEXT PRIMARY KEY, conversation TEXT NOT NULL, turn INTEGER NOT NULL, data BLOB NOT NULL,
    resolution BLOB
);
CREATE INDEX asks_unresolved ON asks (conversation) WHERE resolution IS NULL;
CREATE TABLE requests (
    request_id TEXT PRIMARY KEY, body BLOB NOT NULL, status INTEGER NOT NULL,
    result BLOB NOT NULL, at_us INTEGER NOT NULL
);
CREATE INDEX requests_at ON requests (at_us);
CREATE TABLE acted (ask TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (ask, key)) WITHOUT ROWID;
"""

EARLIER = START - timedelta(hours=1)
OPEN = Conversation(id="c-open", title="Open", state="working", turn=2, updated_at=EARLIER)
CLOSED = Conversation(id="c-closed", title="Done", state="closed", updated_at=EARLIER)
KEPT = Ask(id="a-kept", version=2, conversation="c-open", kind="text", title="Name?")
DONE = Ask(id="a-done", conversation="c-open", kind="text", title="Colour?")
ANSWERED = Resolution(how="answered", at=EARLIER, answer=Answer(text="red"), request_id="r-a")
RESULT = encode(CommandResult(outcome="accepted", conversation_id="c-open"))


def _us(at: datetime) -> int:
    """Microseconds since the epoch: the file's time columns."""
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _write_schema_1(path: Path) -> None:
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA_1)
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("schema", 1), ("last_event_id", 7), ("pruned_through", 5)],
        )
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?)",
            [
                (n, "conversation.updated", encode(ConversationUpdated(conversation=OPEN)))
                for n in (6, 7)
            ],
        )
        db.executemany(
            "INSERT INTO conversations VALUES (?, ?, ?, ?)",
            [(c.id, c.state, _us(c.updated_at), encode(c)) for c in (OPEN, CLOSED)],
        )
        items = [
            Item(id="i0", kind="user", text="hi", at=EARLIER),
            Item(id="i1", kind="reply", text="half", final=False),
        ]
        db.executemany(
            "INSERT INTO items VALUES (?, ?, ?)",
            [("c-open", seq, encode(item)) for seq, item in enumerate(items)],
        )
        db.executemany(
            "INSERT INTO asks VALUES (?, ?, ?, ?, ?)",
            [
                ("a-kept", "c-open", 2, encode(KEPT), None),
                ("a-done", "c-open", 1, encode(DONE), encode(ANSWERED)),
            ],
        )
        db.execute(
            "INSERT INTO requests VALUES (?, ?, ?, ?, ?)",
            ("r-old", b"key-of-r-old", 200, RESULT, _us(EARLIER)),
        )
        db.execute("INSERT INTO acted VALUES (?, ?)", ("a-done", "action"))
        db.commit()
    finally:
        db.close()


async def test_a_schema_1_state_file_opens_and_reads_back(
    make_agent: AgentFactory, state: Path
) -> None:
    _write_schema_1(state)
    async with make_agent() as agent:
        # After 7: the item left half written made final, and the conversation settled.
        assert agent._store.last_event_id == 9
        [conv] = agent.conversations
        assert (conv.id, conv.state, conv.turn) == ("c-open", "idle", 2)
        assert [(i.id, i.text, i.final) for i in conv.items] == [
            ("i0", "hi", True),
            ("i1", "half", True),
        ]
        # An ask kept open is raised again at its version; an ended one hands back its end.
        kept = await conv.ask(kind="text", id="a-kept", title="Name?")
        assert (kept.open, kept.version) == (True, 2)
        done = await conv.ask(kind="text", id="a-done", title="Colour?")
        assert done.resolution == ANSWERED
        assert not await done.once(lambda _: _noop())
        # A retried command gets its first result; a reply to the ended ask its end.
        message = SendMessage(request_id="r-old", text="hi again")
        assert await agent.command_message(b"key-of-r-old", "c-open", message) == RESULT
        reply = Reply(request_id="r-b", version=1, answer=Answer(text="blue"))
        assert decode(await agent.command_reply(b"k", "a-done", reply), CommandResult) == (
            CommandResult(outcome="answered")
        )
        page, _ = await agent.read_closed(10, None)
        assert [c.id for c in page.conversations] == ["c-closed"]
        closed = await agent.conversation("c-closed")
        assert closed is not None
        assert closed.closed


async def _noop() -> None:
    return None
