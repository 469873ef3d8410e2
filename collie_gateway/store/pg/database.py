"""The PostgreSQL store: its connection pool and its migrations.

Several gateway processes (workers) may open the same database. Each repository's write is
one transaction on a connection from the pool (``PgDatabase.transaction``); what the SQLite
backend serializes with its writer lock, PostgreSQL serializes with row locks, unique keys
and transaction-scoped advisory locks (``lock``).

Migrations run one transaction each, under one advisory lock, so workers starting together
(or starting while others run) apply each step once; a database newer than this gateway is
refused without a change.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from collie_gateway.errors import StoreError

POOL_MAX: Final = 8  # ours: connections one worker keeps
CONNECT_TIMEOUT: Final = 10.0  # ours: seconds to reach the server at start
MIGRATION_LOCK: Final = 0x636F6C6C6965  # advisory lock key of the migrations ("collie")

# Each entry migrates from version i to i + 1 (the row of ``collie_schema``). The tables
# match the SQLite file's (store/database.py) column for column.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        hello BYTEA,
        wire INTEGER,
        last_event_id TEXT
    );
    CREATE TABLE conversations (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        body BYTEA NOT NULL,
        PRIMARY KEY (agent, id)
    );
    CREATE TABLE answers (
        request_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        answer BYTEA NOT NULL,
        attempts INTEGER NOT NULL,
        settled INTEGER NOT NULL,
        outcome TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX answers_pending ON answers(agent) WHERE settled = 0;
    CREATE INDEX answers_ask ON answers(agent, ask_id);
    CREATE TABLE claims (
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        PRIMARY KEY (agent, ask_id)
    );
    CREATE TABLE notes (
        agent TEXT NOT NULL,
        conversation TEXT NOT NULL,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        at TEXT NOT NULL,
        after_item TEXT,
        PRIMARY KEY (agent, conversation, key)
    );
    CREATE TABLE kv (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
    CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        token TEXT NOT NULL,
        environment TEXT NOT NULL,
        key BYTEA,
        registered_at DOUBLE PRECISION NOT NULL,
        UNIQUE (provider, token)
    );
    CREATE TABLE push_once (
        key TEXT PRIMARY KEY,
        at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL DEFAULT 'done',
        reason TEXT
    );
    CREATE TABLE push_log (
        id BIGSERIAL PRIMARY KEY,
        at TEXT NOT NULL,
        agent TEXT,
        conversation TEXT,
        ask TEXT,
        device TEXT,
        outcome TEXT NOT NULL,
        reason TEXT,
        provider_id TEXT
    );
    CREATE TABLE push_delivered (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, device)
    );
    """,
    # One follower per agent (store/pg/leases.py): the lease, its epoch (the fencing token)
    # and its expiry, on the database's clock.
    """
    CREATE TABLE leases (
        agent TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    """,
    # The phones' events in one sequence (store/pg/events.py): numbered from a counter row
    # in the writing transaction, so sequence order is commit order.
    """
    CREATE TABLE event_counter (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
    INSERT INTO event_counter(one, seq) VALUES (1, 0);
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        type TEXT NOT NULL,
        data BYTEA NOT NULL
    );
    """,
    # What the SQLite file gained since (store/database.py): a device's language, phone and
    # Web Push keys; the phone of each answer; each ask push's withdrawal; the phones and
    # pairing codes; withdrawals per device and webhooks owed.
    """
    ALTER TABLE devices ADD COLUMN lang TEXT;
    ALTER TABLE devices ADD COLUMN phone TEXT;
    ALTER TABLE devices ADD COLUMN p256dh BYTEA;
    ALTER TABLE devices ADD COLUMN auth BYTEA;
    ALTER TABLE answers ADD COLUMN phone TEXT;
    ALTER TABLE push_once ADD COLUMN note BYTEA;
    CREATE TABLE phones (
        phone_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_hash TEXT NOT NULL,
        public_key TEXT,
        paired_at TEXT NOT NULL,
        last_seen TEXT,
        last_address TEXT,
        revoked_at TEXT,
        n BIGSERIAL  -- the order phones were kept in (SQLite's rowid)
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
    );
    CREATE TABLE push_withdrawn (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, device)
    );
    CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BYTEA NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (id, url)
    );
    """,
    # Workers share one log (services/worklog.py): an event written for an agent's link
    # names the agent and the lease epoch it was written under (fenced at the write), and
    # carries its words in each language; the store's id starts every phone's event id.
    """
    ALTER TABLE events ADD COLUMN agent TEXT;
    ALTER TABLE events ADD COLUMN epoch BIGINT;
    ALTER TABLE events ADD COLUMN words BYTEA;
    INSERT INTO kv(key, value)
        VALUES ('store_id',
                convert_to(substr(md5(random()::text || clock_timestamp()), 1, 12), 'UTF8'))
        ON CONFLICT (key) DO NOTHING;
    """,
)

_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS collie_schema (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL
);
INSERT INTO collie_schema(one, version) VALUES (1, 0) ON CONFLICT (one) DO NOTHING;
"""


def pg(sql: str) -> str:
    """A statement written with SQLite's ``?`` placeholders, in psycopg's ``%s``."""
    return sql.replace("?", "%s")


def shown(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def one_line(exc: BaseException) -> str:
    """The server's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split())


Conn = psycopg.AsyncConnection[TupleRow]


async def _migrate_step(conn: Conn, url: str) -> bool:
    """Apply the next migration in one transaction; whether there was one to apply.

    Raises:
        StoreError: the database is newer than this gateway.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(_SCHEMA_TABLE)
        cur = await conn.execute("SELECT version FROM collie_schema WHERE one = 1")
        row = await cur.fetchone()
        version = int(row[0]) if row else 0
        _refuse_newer(url, version)
        if version == len(MIGRATIONS):
            return False
        await conn.execute(MIGRATIONS[version])
        await conn.execute("UPDATE collie_schema SET version = %s WHERE one = 1", (version + 1,))
        return True


class PgDatabase:
    """A gateway's PostgreSQL database: its pool and its migrations. Open with
    ``await PgDatabase.open(url)``; close with ``close``."""

    def __init__(self, pool: AsyncConnectionPool[Conn], url: str) -> None:
        self.pool = pool
        self.url = url
        self._closing: list[Callable[[], Awaitable[None]]] = []

    @classmethod
    async def open(cls, url: str) -> PgDatabase:
        """Connect to ``url`` and migrate its schema to this gateway's version.

        Raises:
            StoreError: the server cannot be reached in time, or its schema is newer.
        """
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url, min_size=1, max_size=POOL_MAX, open=False, kwargs={"autocommit": True}
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
            async with pool.connection() as conn:
                while await _migrate_step(conn, url):
                    pass
        except (PoolTimeout, psycopg.Error) as exc:
            await pool.close()
            raise StoreError(f"{shown(url)}: cannot use the database ({one_line(exc)})") from None
        except BaseException:
            await pool.close()
            raise
        return cls(pool, url)

    def on_close(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Run ``flush`` when the store closes, before its pool does."""
        self._closing.append(flush)

    async def close(self) -> None:
        """Flush what the repositories hold and close the pool."""
        for flush in self._closing:
            await flush()
        await self.pool.close()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """One transaction on a pooled connection: committed, or rolled back on error."""
        async with self.pool.connection() as conn, conn.transaction():
            yield conn

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[Conn]:
        """A pooled connection for reads (each statement sees the last committed state)."""
        async with self.pool.connection() as conn:
            yield conn


async def lock(conn: Conn, *parts: str) -> None:
    """Hold, until the transaction ends, the advisory lock named by ``parts`` (every worker
    taking the same name waits its turn)."""
    name = "\x1f".join(parts)
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))


async def check(url: str) -> None:
    """Refuse a database this gateway cannot use, without changing it: a server that cannot
    be reached, or a schema newer than this gateway's.

    Raises:
        StoreError: one line naming the database (no password) and what is wrong.
    """
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=int(CONNECT_TIMEOUT))
    except psycopg.Error as exc:
        raise StoreError(f"{shown(url)}: cannot reach the database ({one_line(exc)})") from None
    async with conn:
        cur = await conn.execute("SELECT to_regclass('collie_schema') IS NOT NULL")
        row = await cur.fetchone()
        if not (row and row[0]):
            return  # a new database
        cur = await conn.execute("SELECT version FROM collie_schema WHERE one = 1")
        row = await cur.fetchone()
    _refuse_newer(url, int(row[0]) if row else 0)


def _refuse_newer(url: str, version: int) -> None:
    """Raise StoreError when the schema at ``version`` is newer than this gateway's."""
    if version > len(MIGRATIONS):
        raise StoreError(
            f"{shown(url)}: schema version {version} is newer than this gateway knows "
            f"({len(MIGRATIONS)}); update the gateway (the database was not changed)"
        )
