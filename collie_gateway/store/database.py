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
phones, notify, kv), written once for both engines over :class:`~collie_gateway.store.engine.Db`
(``write`` and ``read``); the schema's steps are ``store/schema.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, TypeVar

import aiosqlite

from collie_gateway.errors import StoreError
from collie_gateway.store.engine import SQLITE, Row, Work, drive, sqlite_text
from collie_gateway.store.schema import LATEST, refuse_newer, step

log = logging.getLogger(__name__)


T = TypeVar("T")
UNCHANGED: Final = "the file was not changed"
# Commits on the loop's connection between two checkpoints (run in the thread, under the lock).
CHECKPOINT_EVERY = 500


class SqliteTx:
    """A :class:`~collie_gateway.store.engine.Tx` on one ``sqlite3`` connection: its
    statements run at once (the coroutine never waits)."""

    __slots__ = ("conn",)
    engine = SQLITE
    insert_order = "rowid"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def run(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        return self.conn.execute(sqlite_text(sql), args).rowcount

    async def one(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        """The first row of a statement's result, if any."""
        row: Row | None = self.conn.execute(sqlite_text(sql), args).fetchone()
        return row

    async def all(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """Every row of a statement's result."""
        return self.conn.execute(sqlite_text(sql), args).fetchall()

    async def many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run one statement for each of ``rows``."""
        if rows:
            self.conn.executemany(sqlite_text(sql), rows)

    async def lock(self, *parts: str) -> None:
        """Nothing to take: every write already holds the file's writer lock."""


def _driven(fn: Work[T]) -> Callable[[sqlite3.Connection], T]:
    """``fn`` as a function of a ``sqlite3`` connection, run to its end in one call."""
    return lambda conn: drive(fn(SqliteTx(conn)))


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
    refuse_newer(str(path), version, UNCHANGED)  # made newer since check(), by a newer gateway
    for index in range(version, LATEST):
        await db.executescript(
            f"BEGIN IMMEDIATE;{step(SQLITE, index)};PRAGMA user_version={index + 1}; COMMIT;"
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
        refuse_newer(str(path), version, UNCHANGED)

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

    @property
    def shared(self) -> bool:
        """One process owns the file."""
        return False

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a statement that failed raises (on either connection)."""
        return (sqlite3.Error,)

    async def write(self, fn: Work[T], *, long: bool = False) -> T:
        """Run ``fn`` in one write transaction (:meth:`run`; ``long``: :meth:`run_threaded`)."""
        return await (self.run_threaded if long else self.run)(_driven(fn))

    async def read(self, fn: Work[T], *, long: bool = False) -> T:
        """Run the reads of ``fn`` outside the lock: quick ones on the loop's connection
        (:meth:`query`), ``long`` ones (whole tables) in the aiosqlite thread."""
        if not long:
            return await self.query(_driven(fn))
        # aiosqlite runs queued functions in its connection thread (``_execute``).
        result: T = await self.db._execute(_driven(fn), self.db._conn)  # type: ignore[no-untyped-call]
        return result

    async def try_hold(self, name: str) -> bool:
        """One process owns the file: nothing is held elsewhere."""
        return True

    async def let_go(self, name: str) -> None:
        """Nothing is held in the file."""

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
