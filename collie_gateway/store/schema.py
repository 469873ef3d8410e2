"""The schema: one history of numbered steps for both engines, and how a database's version
is read against it.

Each step migrates from version i to i + 1 and is written once, in SQLite's words; the
PostgreSQL engine takes its column types (``engine.postgres_schema``). A step only one
engine takes is in ``ONLY`` (the other counts it and changes nothing). Each engine keeps the
version where it always has (SQLite: ``PRAGMA user_version``; PostgreSQL: the row of
``collie_schema``) and applies each step in one transaction (PostgreSQL's under an advisory
lock, so workers starting together apply each once).

The history is the SQLite file's: a file at any of its versions goes on from there. A
PostgreSQL database kept its own history before (five steps to the same tables): its last
version, 5, is version 8 here (:func:`from_postgres_history`).
"""

from __future__ import annotations

from typing import Final

from collie_gateway.errors import StoreError
from collie_gateway.store.engine import POSTGRESQL, postgres_schema

#: The columns of a once-key's outcome on each device (its push; its withdrawal).
_PER_DEVICE: Final = """(
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;"""

#: The phones, the pairing codes, and the phone of each answer and each push registration.
PHONES: Final = """
    CREATE TABLE phones (
        phone_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_hash TEXT NOT NULL,
        public_key TEXT,
        paired_at TEXT NOT NULL,
        last_seen TEXT,
        last_address TEXT,
        revoked_at TEXT
    );
    CREATE TABLE pairings (
        pairing_id TEXT PRIMARY KEY,
        code_hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        state TEXT NOT NULL,
        phone_id TEXT,
        check_number TEXT
    ) WITHOUT ROWID;
    ALTER TABLE answers ADD COLUMN phone TEXT;
    ALTER TABLE devices ADD COLUMN phone TEXT;
    """

DELTAS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        hello BLOB,
        wire INTEGER,
        last_event_id TEXT
    );
    CREATE TABLE conversations (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY (agent, id)
    ) WITHOUT ROWID;
    """,
    """
    CREATE TABLE answers (
        request_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        answer BLOB NOT NULL,
        attempts INTEGER NOT NULL,
        settled INTEGER NOT NULL,
        outcome TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX answers_pending ON answers(agent) WHERE settled = 0;
    CREATE INDEX answers_ask ON answers(agent, ask_id);
    CREATE TABLE claims (
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        PRIMARY KEY (agent, ask_id)
    ) WITHOUT ROWID;
    CREATE TABLE notes (
        agent TEXT NOT NULL,
        conversation TEXT NOT NULL,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        at TEXT NOT NULL,
        after_item TEXT,
        PRIMARY KEY (agent, conversation, key)
    ) WITHOUT ROWID;
    """,
    """
    CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        token TEXT NOT NULL,
        environment TEXT NOT NULL,
        key BLOB,
        registered_at REAL NOT NULL,
        UNIQUE (provider, token)
    ) WITHOUT ROWID;
    CREATE TABLE push_once (key TEXT PRIMARY KEY NOT NULL, at REAL NOT NULL) WITHOUT ROWID;
    CREATE TABLE push_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        agent TEXT,
        conversation TEXT,
        ask TEXT,
        device TEXT,
        outcome TEXT NOT NULL,
        reason TEXT,
        provider_id TEXT
    );
    """,
    # P3: an ask is pushed once it is delivered, not once it is tried. ``state`` is
    # 'owed' (decided, not yet delivered to every device) or 'done' (delivered, or a lasting
    # decision not to push: ``reason``); rows from before are done.
    """
    ALTER TABLE push_once ADD COLUMN state TEXT NOT NULL DEFAULT 'done';
    ALTER TABLE push_once ADD COLUMN reason TEXT;
    CREATE TABLE push_delivered """
    + _PER_DEVICE
    + """
    """,
    # The language a phone registered its pushes in (a language tag; NULL: the default).
    """
    ALTER TABLE devices ADD COLUMN lang TEXT;
    """,
    PHONES,
    # Web Push devices (their subscription's keys); each ask push's withdrawal (``note``,
    # JSON) and which devices were sent it (once per device); webhooks owed across a stop.
    """
    ALTER TABLE devices ADD COLUMN p256dh BLOB;
    ALTER TABLE devices ADD COLUMN auth BLOB;
    ALTER TABLE push_once ADD COLUMN note BLOB;
    CREATE TABLE push_withdrawn """
    + _PER_DEVICE
    + """
    CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BLOB NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (id, url)
    ) WITHOUT ROWID;
    """,  # The shared store's own tables (several workers on PostgreSQL; nothing on SQLite, see
    # ``ONLY``): each agent's lease (store/pg/leases.py: its holder, its epoch, the fencing
    # token, and its expiry on the database's clock); the phones' events in one sequence
    # (store/pg/events.py: numbered from a counter row in the writing transaction, so sequence
    # order is commit order; an entry written for an agent's link names the agent and the
    # epoch it was written under, and carries its words in each language); the store's id,
    # which starts every phone's event id; the order phones were kept in (SQLite's rowid).
    """
    CREATE TABLE leases (
        agent TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE event_counter (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
    INSERT INTO event_counter(one, seq) VALUES (1, 0);
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        type TEXT NOT NULL,
        data BYTEA NOT NULL,
        agent TEXT,
        epoch BIGINT,
        words BYTEA
    );
    INSERT INTO kv(key, value)
        VALUES ('store_id',
                convert_to(substr(md5(random()::text || clock_timestamp()), 1, 12), 'UTF8'))
        ON CONFLICT (key) DO NOTHING;
    ALTER TABLE phones ADD COLUMN n BIGSERIAL;
    """,
)

#: Steps only one engine takes, by index.
ONLY: Final[dict[int, str]] = {len(DELTAS) - 1: POSTGRESQL}
LATEST: Final = len(DELTAS)
#: The last version of PostgreSQL's history before this one, and its version here.
POSTGRES_HISTORY_LAST: Final = 5
POSTGRES_HISTORY_HERE: Final = 8


def step(engine: str, version: int) -> str:
    """The script of the step from ``version`` to ``version + 1`` on ``engine`` (empty when
    the step is another engine's)."""
    only = ONLY.get(version)
    if only is not None and only != engine:
        return ""
    text = DELTAS[version]
    return postgres_schema(text) if engine == POSTGRESQL else text


def refuse_newer(where: str, version: int, unchanged: str) -> None:
    """Raise StoreError when ``version`` is newer than this gateway's schema.

    Raises:
        StoreError: one line naming the store (``where``) and saying it is ``unchanged``.
    """
    if version > LATEST:
        raise StoreError(
            f"{where}: schema version {version} is newer than this gateway knows "
            f"({LATEST}); update the gateway ({unchanged})"
        )


def from_postgres_history(where: str, version: int) -> int:
    """The version here of a PostgreSQL database kept by the history before this one.

    Raises:
        StoreError: a version of that history before its last (no gateway left it there).
    """
    if version != POSTGRES_HISTORY_LAST:
        raise StoreError(
            f"{where}: schema version {version} of an older gateway's PostgreSQL history;"
            " open it with that gateway first (the database was not changed)"
        )
    return POSTGRES_HISTORY_HERE
