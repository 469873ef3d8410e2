"""The PostgreSQL engine: its connection pool, its transactions and its migrations.

Several gateway processes (workers) may open the same database. Each repository's write is
one transaction on a connection from the pool (``PgDatabase.transaction``); what the SQLite
backend serializes with its writer lock, PostgreSQL serializes with row locks, unique keys
and transaction-scoped advisory locks (``lock``).

The repositories are the SQLite file's (``store/*.py``), written once over
:class:`~collie_gateway.store.engine.Db`; :class:`PgTx` runs their statements here.
Migrations (``store/schema.py``) run one transaction each, under one advisory lock, so
workers starting together (or starting while others run) apply each step once; a database
newer than this gateway is refused without a change.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final, TypeVar

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from collie_gateway.errors import StoreError
from collie_gateway.store.engine import POSTGRESQL, Row, Tx, Work, postgres_text
from collie_gateway.store.schema import (
    LATEST,
    POSTGRES_HISTORY_HERE,
    from_postgres_history,
    refuse_newer,
    step,
)

POOL_MAX: Final = 8  # ours: connections one worker keeps
CONNECT_TIMEOUT: Final = 10.0  # ours: seconds to reach the server at start
MIGRATION_LOCK: Final = 0x636F6C6C6965  # advisory lock key of the migrations ("collie")


_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS collie_schema (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL
);
INSERT INTO collie_schema(one, version) VALUES (1, 0) ON CONFLICT (one) DO NOTHING;
"""
UNCHANGED: Final = "the database was not changed"
_TRY_LOCK: Final = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK: Final = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
T = TypeVar("T")


def shown(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def one_line(exc: BaseException) -> str:
    """The server's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split())


Conn = psycopg.AsyncConnection[TupleRow]


class PgTx:
    """A :class:`~collie_gateway.store.engine.Tx` on one pooled connection."""

    __slots__ = ("conn",)
    engine = POSTGRESQL
    insert_order = "n"  # the serial column of the tables whose order of insertion is read

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def run(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        cur = await self.conn.execute(postgres_text(sql), args)
        return cur.rowcount

    async def one(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        """The first row of a statement's result, if any."""
        cur = await self.conn.execute(postgres_text(sql), args)
        return await cur.fetchone()

    async def all(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """Every row of a statement's result."""
        cur = await self.conn.execute(postgres_text(sql), args)
        return await cur.fetchall()

    async def many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run one statement for each of ``rows``."""
        if rows:
            async with self.conn.cursor() as cur:
                await cur.executemany(postgres_text(sql), rows)

    async def lock(self, *parts: str) -> None:
        """Hold the advisory lock named by ``parts`` until the transaction ends."""
        await lock(self.conn, *parts)


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
        refuse_newer(shown(url), version, UNCHANGED)
        if version < POSTGRES_HISTORY_HERE and await _kept_by_history_before(conn):
            version = from_postgres_history(shown(url), version)
        elif version == LATEST:
            return False
        else:
            await conn.execute(step(POSTGRESQL, version))
            version += 1
        await conn.execute("UPDATE collie_schema SET version = %s WHERE one = 1", (version,))
        return True


async def _kept_by_history_before(conn: Conn) -> bool:
    """Whether the database was kept by PostgreSQL's own history before the one history:
    it has the shared store's tables at a version below the step that makes them here."""
    cur = await conn.execute("SELECT to_regclass('leases') IS NOT NULL")
    row = await cur.fetchone()
    return bool(row and row[0])


class PgDatabase:
    """A gateway's PostgreSQL database: its pool and its migrations. Open with
    ``await PgDatabase.open(url)``; close with ``close``."""

    def __init__(self, pool: AsyncConnectionPool[Conn], url: str) -> None:
        self.pool = pool
        self.url = url
        self._closing: list[Callable[[], Awaitable[None]]] = [self._close_holds]
        self._holds: Conn | None = None  # the connection holding this worker's named locks
        self._holds_lock = asyncio.Lock()

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
        db = cls(pool, url)
        # Made now: the first ask's push claim (``try_hold``) does not wait for it to open.
        with contextlib.suppress(psycopg.Error):
            await db._holds_conn()
        return db

    def on_close(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Run ``flush`` when the store closes, before its pool does."""
        self._closing.append(flush)

    async def close(self) -> None:
        """Flush what the repositories hold and close the pool."""
        for flush in self._closing:
            await flush()
        await self.pool.close()

    @property
    def shared(self) -> bool:
        """Other workers write the same database."""
        return True

    async def write(self, fn: Work[T], *, long: bool = False) -> T:
        """Run ``fn`` in one transaction on a pooled connection."""
        async with self.transaction() as conn:
            return await fn(PgTx(conn))

    async def read(self, fn: Work[T], *, long: bool = False) -> T:
        """Run the reads of ``fn`` on a pooled connection (each statement sees the last
        committed state)."""
        async with self.reading() as conn:
            return await fn(PgTx(conn))

    async def _holds_conn(self) -> Conn:
        if self._holds is None or self._holds.closed:
            # Named by the process, so pg_locks says which worker holds which lock.
            name = f"collie-gateway {os.getpid()}"
            self._holds = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, application_name=name
            )
        return self._holds

    async def try_hold(self, name: str) -> bool:
        """Take the session advisory lock ``name`` on this worker's own connection; False
        while another worker holds it. A lost connection is made again once (its locks
        went with it)."""
        async with self._holds_lock:
            for attempt in (1, 2):
                conn = await self._holds_conn()
                try:
                    cur = await conn.execute(_TRY_LOCK, (name,))
                    row = await cur.fetchone()
                    return bool(row and row[0])
                except psycopg.OperationalError:
                    await conn.close()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    async def let_go(self, name: str) -> None:
        """Give back the lock ``name`` (gone anyway if its connection was lost)."""
        async with self._holds_lock:
            if self._holds is None or self._holds.closed:
                return
            try:
                await self._holds.execute(_UNLOCK, (name,))
            except psycopg.OperationalError:
                await self._holds.close()  # the server dropped it: its locks are gone

    async def _close_holds(self) -> None:
        # The server frees a closed session's locks only when its backend has ended, which
        # may be after the close returns: give them back first, so another worker's next
        # try takes them.
        if self._holds is not None:
            with contextlib.suppress(psycopg.Error):
                if not self._holds.closed:
                    await self._holds.execute("SELECT pg_advisory_unlock_all()")
            await self._holds.close()
            self._holds = None

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a statement that failed raises."""
        return (psycopg.Error,)

    async def once(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        """Run one statement as a transaction of its own (autocommit: no ``BEGIN``, no
        ``COMMIT``), in one round trip; its first row, if it returns rows."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(postgres_text(sql), args)
            return await cur.fetchone() if cur.description is not None else None

    async def once_all(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """Run one statement that returns rows as a transaction of its own (autocommit), in
        one round trip; every row."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(postgres_text(sql), args)
            return await cur.fetchall()

    def unwritten(self, exc: Exception) -> bool:
        """Whether a statement that raised ``exc`` surely wrote nothing: the server refused
        it (its error has a SQLSTATE), or psycopg did before sending it; a connection lost
        on the way may have committed it."""
        if not isinstance(exc, psycopg.Error):
            return False
        return exc.sqlstate is not None or not isinstance(exc, psycopg.OperationalError)

    @contextlib.asynccontextmanager
    async def turn(self, *parts: str) -> AsyncIterator[Tx]:
        """A transaction holding the advisory lock named by ``parts`` while the caller works
        in it: one worker at a time."""
        async with self.transaction() as conn:
            await lock(conn, *parts)
            yield PgTx(conn)

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
    refuse_newer(shown(url), int(row[0]) if row else 0, UNCHANGED)
