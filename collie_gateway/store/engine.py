"""The thin layer under every repository: one SQL text per statement, on either engine.

A repository writes each statement once, in the words both SQLite and PostgreSQL take
(``?`` placeholders, ``INSERT … ON CONFLICT … DO UPDATE``/``DO NOTHING``, ``RETURNING``),
and each transaction once, as an ``async`` function of a :class:`Tx`. The engine hides what
differs: PostgreSQL's ``%s`` placeholders; row locks (``… FOR UPDATE``/``FOR SHARE``, which
SQLite drops: its writer lock already serializes every write) and named locks
(:meth:`Tx.lock`: an advisory lock on PostgreSQL, nothing on SQLite); the insertion order
of rows (:attr:`Tx.insert_order`); the column types of the schema (``store/schema.py``).

On SQLite a transaction's statements never wait, so its function runs to its end in one
step (:func:`drive`), on the event loop or in the database's thread, under the writer lock,
as the hand-written transactions before it did.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
Row = tuple[Any, ...]

SQLITE: Final = "sqlite"
POSTGRESQL: Final = "postgresql"


class Tx(Protocol):
    """One transaction (or one run of reads) on a connection of either engine."""

    engine: str  # SQLITE or POSTGRESQL
    insert_order: str  # the column that orders a table's rows as they were inserted

    async def run(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def one(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        """The first row of a statement's result, if any."""
        ...

    async def all(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """Every row of a statement's result."""
        ...

    async def many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run one statement for each of ``rows`` (nothing when there are none)."""
        ...

    async def lock(self, *parts: str) -> None:
        """Hold the lock named by ``parts`` until the transaction ends (every writer taking
        the same name waits its turn)."""
        ...


#: A transaction (or a run of reads) written once: an ``async`` function of a :class:`Tx`.
Work = Callable[[Tx], Coroutine[Any, Any, T]]


class Db(Protocol):
    """What a repository needs of a database, on either engine."""

    @property
    def shared(self) -> bool:
        """Whether other processes write the same database at the same time."""
        ...

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a statement that failed raises."""
        ...

    async def write(self, fn: Work[T], *, long: bool = False) -> T:
        """Run ``fn`` in one write transaction: committed when this returns, rolled back if
        it raises. ``long``: it may take long (kept off the event loop where that matters)."""
        ...

    async def read(self, fn: Work[T], *, long: bool = False) -> T:
        """Run the reads of ``fn`` on the last committed state."""
        ...

    def on_close(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Run ``flush`` when the database closes, before its connections do."""
        ...

    async def close(self) -> None:
        """Flush what the repositories hold and close the connections."""
        ...

    async def try_hold(self, name: str) -> bool:
        """Take the lock ``name`` for this process until :meth:`let_go` (or its end); False
        while another process holds it."""
        ...

    async def let_go(self, name: str) -> None:
        """Give back the lock ``name``."""
        ...


@runtime_checkable
class SharedDb(Db, Protocol):
    """A database several processes write at once (PostgreSQL)."""

    def turn(self, *parts: str) -> contextlib.AbstractAsyncContextManager[Tx]:
        """A transaction holding the lock named by ``parts`` while the caller works in it
        (its own awaits included): one process at a time."""
        ...

    async def once(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        """Run one statement as a transaction of its own, in one round trip to the server;
        its first row, if it returns rows."""
        ...

    async def once_all(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """Run one statement that returns rows as a transaction of its own, in one round
        trip to the server; every row."""
        ...

    def unwritten(self, exc: Exception) -> bool:
        """Whether a statement that raised ``exc`` surely wrote nothing: the server refused
        it, or it was refused before it was sent (not a connection lost on the way)."""
        ...


def drive(step: Coroutine[Any, Any, T]) -> T:
    """Run a transaction's coroutine whose awaits never wait (SQLite's statements) to its
    end, in this call.

    Raises:
        RuntimeError: the coroutine waited on something else (a bug: it would hold SQLite's
            writer lock across the wait).
    """
    try:
        step.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    step.close()
    raise RuntimeError("a SQLite transaction waited on something other than its statements")


_ROW_LOCK = re.compile(r"\s+FOR\s+(UPDATE|SHARE)\s*$")
_sqlite_texts: dict[str, str] = {}
_postgres_texts: dict[str, str] = {}


def sqlite_text(sql: str) -> str:
    """A statement in SQLite's words: its row locks dropped."""
    text = _sqlite_texts.get(sql)
    if text is None:
        text = _sqlite_texts[sql] = _ROW_LOCK.sub("", sql)
    return text


def postgres_text(sql: str) -> str:
    """A statement in psycopg's words: ``%s`` placeholders (and ``%`` doubled)."""
    text = _postgres_texts.get(sql)
    if text is None:
        text = _postgres_texts[sql] = sql.replace("%", "%%").replace("?", "%s")
    return text


def postgres_array(values: Iterable[str | int | bytes | None]) -> str:
    """``values`` in PostgreSQL's text form of an array, for a parameter the statement casts
    (``?::text[]``, ``?::bytea[]``…): made in one pass, where psycopg's own adaptation of a
    list looks at every element to find its type, several times the cost."""
    return "{" + ",".join(map(_element, values)) + "}"


def _element(value: str | int | bytes | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return '"\\\\x' + value.hex() + '"'  # bytea's hex form, its backslash escaped
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The schema's column types, written as SQLite's, as PostgreSQL takes them.
_POSTGRES_TYPES: Final = (
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGSERIAL PRIMARY KEY"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\)\s*WITHOUT ROWID"), ")"),
)


def postgres_schema(sql: str) -> str:
    """A schema step written in SQLite's words, in PostgreSQL's (types, no ``WITHOUT
    ROWID``)."""
    for pattern, words in _POSTGRES_TYPES:
        sql = pattern.sub(words, sql)
    return sql
