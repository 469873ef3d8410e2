"""The SQLite file: schema, migrations, and the serialized writer.

Two connections to one WAL file, and one writer lock (``Database._lock``) over both:
- the loop's own ``sqlite3`` connection (``Database.conn``) runs the small transactions and
  indexed reads of the answer path, the push decisions and the notes (``run``, ``query``),
  right on the event loop: each is a few tens of µs of SQLite, where handing it to a thread
  and back cost more than the work (bench/answer_bench.py);
- the aiosqlite connection (``Database.db``) runs what may be long: migrations, big flushes,
  whole-table reads, and the WAL checkpoints (the loop's connection never checkpoints: a
  checkpoint fsyncs).
Every write, on either connection, holds the lock, so the two never contend for SQLite's.
Each domain's SQL is in a repository beside this module (mirrors, ledger, notes, pushes,
crew, kv); every repository takes this one ``Database``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiosqlite

from collie_gateway.errors import StoreError
from collie_gateway.store.phones import MIGRATION as PHONES_MIGRATION

log = logging.getLogger(__name__)

# Each entry migrates from version i to i + 1 (PRAGMA user_version).
MIGRATIONS: tuple[str, ...] = (
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
    CREATE TABLE push_delivered (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;
    """,
    # The language a phone registered its pushes in (a language tag; NULL: the default).
    """
    ALTER TABLE devices ADD COLUMN lang TEXT;
    """,
    PHONES_MIGRATION,
    # Web Push devices (their subscription's keys); each ask push's withdrawal (``note``,
    # JSON) and which devices were sent it (once per device); webhooks owed across a stop.
    """
    ALTER TABLE devices ADD COLUMN p256dh BLOB;
    ALTER TABLE devices ADD COLUMN auth BLOB;
    ALTER TABLE push_once ADD COLUMN note BLOB;
    CREATE TABLE push_withdrawn (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;
    CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BLOB NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (id, url)
    ) WITHOUT ROWID;
    """,
)

T = TypeVar("T")
# Commits on the loop's connection between two checkpoints (run in the thread, under the lock).
CHECKPOINT_EVERY = 500


def _in_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


async def _setup(db: aiosqlite.Connection, path: Path) -> None:
    """WAL, and the schema migrated to this gateway's version (each step one transaction)."""
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.execute("PRAGMA busy_timeout=5000")
    async with db.execute("PRAGMA user_version") as cur:
        row = await cur.fetchone()
    version = int(row[0]) if row else 0
    if version > len(MIGRATIONS):  # made newer since check(), by a newer gateway
        raise StoreError(
            f"{path}: schema version {version} is newer than this gateway knows "
            f"({len(MIGRATIONS)}); update the gateway"
        )
    for index in range(version, len(MIGRATIONS)):
        await db.executescript(
            "BEGIN IMMEDIATE;" + MIGRATIONS[index] + f"PRAGMA user_version={index + 1}; COMMIT;"
        )


class Database:
    """The gateway's SQLite file: its connections, the writer lock and the migrations. Open
    with ``await Database.open(path)``; close with ``close``. The repositories beside this
    module hold the SQL of each domain."""

    def __init__(self, db: aiosqlite.Connection, conn: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.conn = conn  # the loop's own connection: only ever used on the loop's thread
        self.path = path
        self._lock = asyncio.Lock()
        self._commits = 0  # on ``conn`` since the last checkpoint
        self._checkpoint: asyncio.Task[None] | None = None
        self._closing: list[Callable[[], Awaitable[None]]] = []

    @staticmethod
    def check(path: Path) -> None:
        """Refuse a file this gateway cannot use, reading it without writing anything (no
        journal mode set, no -wal or -shm left behind): a file from a newer gateway stays
        as that gateway left it.

        Raises:
            StoreError: one line naming the file and what is wrong with it.
        """
        if not path.is_file() or path.stat().st_size == 0:
            return  # a new store
        # Without a -wal file the main file is the whole database: immutable, nothing is
        # created. With one (a gateway running, or one that crashed) SQLite must read it.
        wal = Path(f"{path}-wal").exists()
        uri = path.resolve().as_uri() + ("?mode=ro" if wal else "?mode=ro&immutable=1")
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: not a gateway database ({exc})") from None
        if version > len(MIGRATIONS):
            raise StoreError(
                f"{path}: schema version {version} is newer than this gateway knows "
                f"({len(MIGRATIONS)}); update the gateway (the file was not changed)"
            )

    @classmethod
    async def open(cls, path: Path) -> Database:
        """Open (creating and migrating as needed) the store at ``path``.

        Raises:
            StoreError: the file is from a newer gateway, or not a database; it is left
                untouched.
        """
        await asyncio.to_thread(cls.check, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created 0600: SQLite gives the -wal and -shm files the mode of the database file.
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        db = await aiosqlite.connect(path, isolation_level=None)
        conn: sqlite3.Connection | None = None
        try:
            await _setup(db, path)
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException:
            if conn is not None:
                conn.close()
            await db.close()
            raise
        return cls(db, conn, path)

    def on_close(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Run ``flush`` when the file closes, before its connections do (a repository's
        writes still pending)."""
        self._closing.append(flush)

    async def close(self) -> None:
        """Flush what the repositories hold and close the file."""
        for flush in self._closing:
            await flush()
        if self._checkpoint is not None:
            await asyncio.gather(self._checkpoint, return_exceptions=True)
        self.conn.close()
        await self.db.close()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction under the writer lock: committed, or rolled back on error."""
        async with self._lock:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            await self.db.execute("COMMIT")

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one write transaction on the loop's own connection, under the writer
        lock: committed (to the WAL: it survives ``kill -9``) when this returns, or rolled
        back if ``fn`` raises.

        ``fn`` must be quick (a few indexed statements: it runs on the event loop) and must
        not touch the event loop. Longer work goes to :meth:`run_threaded`.
        """
        async with self._lock:
            result = _in_transaction(self.conn, fn)
            self._committed()
            return result

    async def run_threaded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """As :meth:`run`, in the aiosqlite thread: for a transaction that may take long."""
        async with self._lock:
            # aiosqlite runs queued functions in its connection thread (``_execute``).
            result: T = await self.db._execute(_in_transaction, self.db._conn, fn)  # type: ignore[no-untyped-call]
            return result

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run the reads of ``fn`` on the loop's own connection, outside the lock (WAL: the
        last committed state). ``fn`` must be quick: indexed reads of a few rows."""
        return fn(self.conn)

    def _committed(self) -> None:
        """Count a commit on the loop's connection; now and then checkpoint in the thread."""
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and self._checkpoint is None:
            self._commits = 0
            self._checkpoint = asyncio.create_task(self._run_checkpoint(), name="checkpoint")

    async def _run_checkpoint(self) -> None:
        try:
            async with self._lock:
                await self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except (aiosqlite.Error, OSError):
            log.exception("WAL checkpoint failed; the next one retries")
        finally:
            self._checkpoint = None
