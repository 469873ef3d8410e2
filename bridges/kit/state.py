"""A bridge's own tables in SQLite: declared in Python as a row type, read and written one
short transaction a call. The only SQL in ``bridges/``; the SDK keeps its own tables."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import (
    Any,
    Final,
    Generic,
    NamedTuple,
    ParamSpec,
    TypeVar,
    get_args,
    get_type_hints,
)

R = TypeVar("R", bound=tuple[Any, ...])
T = TypeVar("T")
P = ParamSpec("P")

_SQL_TYPES = {str: "TEXT", int: "INTEGER", bytes: "BLOB", float: "REAL"}
BUSY_TIMEOUT = 10.0  # seconds a write waits for another writer of the file (the SDK's)


@dataclass(frozen=True)
class Table(Generic[R]):
    """A table whose rows are ``row`` (a ``NamedTuple``: its fields are the columns, ``str``,
    ``int``, ``bytes`` or ``float``, ``X | None`` nullable, a default a ``DEFAULT``); the first
    field is the key. ``create=False`` declares a table another part of the file owns.

    Usage::

        class Position(NamedTuple):
            thread: str
            last: int

        POSITIONS = Table("positions", Position)
        state = State(path, POSITIONS)
        state.put(POSITIONS, Position("t1", 7))
        state.get(POSITIONS, "t1")          # Position(thread='t1', last=7)
    """

    name: str
    row: type[R]
    create: bool = True

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns, the key first."""
        fields: tuple[str, ...] = getattr(self.row, "_fields")  # noqa: B009  (NamedTuple)
        return fields

    @property
    def key(self) -> str:
        """The key column."""
        return self.columns[0]

    def column(self, name: str) -> str:
        """``name``, checked to be a column (only declared names reach the SQL).

        Raises:
            KeyError: no such column.
        """
        if name not in self.columns:
            raise KeyError(f"{self.name} has no column {name!r}")
        return name

    def schema(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for the row type."""
        hints = get_type_hints(self.row)
        defaults: dict[str, object] = getattr(self.row, "_field_defaults")  # noqa: B009
        parts = []
        for n, name in enumerate(self.columns):
            hint = hints[name]
            args = get_args(hint) if isinstance(hint, UnionType) else (hint,)
            sql = _SQL_TYPES[next(a for a in args if a is not NoneType)]
            if n == 0:
                sql += " PRIMARY KEY"
            elif NoneType not in args:
                sql += " NOT NULL"
            if name in defaults and defaults[name] is not None:
                sql += f" DEFAULT {_literal(defaults[name])}"
            parts.append(f"{name} {sql}")
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(parts)})"


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


class SdkAsk(NamedTuple):
    """An ask as the SDK keeps it in the same file (read only: every ask the bridge raised;
    ``data`` and ``resolution`` are its JSON)."""

    id: str
    conversation: str
    data: bytes
    resolution: bytes | None


SDK_ASKS: Final = Table("asks", SdkAsk, create=False)
"""The SDK's ``asks`` table, declared for reading beside a bridge's own."""


class State:
    """One SQLite file (WAL, synchronous writes) of a bridge's tables.

    Each call is one transaction and returns when it is on disk (``put(durable=False)``: in
    the file's log, not waiting for the disk). A bridge alone on its file
    calls it directly; one whose tables sit in the SDK's file (whose writer holds the lock
    across its awaits) calls it through :meth:`off_loop`, so the event loop never waits on it,
    or, for a ``put(durable=False)``, on the loop inside ``Agent.between_commits()`` (no
    thread hop: the SDK's writer holds no lock then, and with ``shared`` this connection
    never checkpoints the file, the SDK's writer does, so nothing waits for the disk).
    """

    def __init__(self, path: Path, *tables: Table[Any], shared: bool = False) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            path, isolation_level=None, timeout=BUSY_TIMEOUT, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if shared:
            self._db.execute("PRAGMA wal_autocheckpoint=0")
        for table in tables:
            if table.create:
                self._db.execute(table.schema())

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()

    async def off_loop(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run one of this state's calls in a worker thread: ``await state.off_loop(state.get,
        TABLE, key)``."""
        return await asyncio.to_thread(call, *args, **kwargs)

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if not durable:
                self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            finally:
                if not durable:
                    self._db.execute("PRAGMA synchronous=FULL")

    def _select(self, table: Table[R], where: str, params: tuple[object, ...]) -> list[R]:
        sql = f"SELECT {', '.join(table.columns)} FROM {table.name}{where}"
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [table.row(*row) for row in rows]

    def get(self, table: Table[R], key: object) -> R | None:
        """The row under ``key``, if any."""
        found = self._select(table, f" WHERE {table.key} = ?", (key,))
        return found[0] if found else None

    def find(
        self,
        table: Table[R],
        *,
        order: str | None = None,
        limit: int | None = None,
        **equal: object,
    ) -> list[R]:
        """The rows whose columns equal ``equal`` (all rows without it), by ``order``."""
        where = " AND ".join(f"{table.column(c)} = ?" for c in equal)
        sql = f" WHERE {where}" if where else ""
        if order is not None:
            sql += f" ORDER BY {table.column(order)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._select(table, sql, tuple(equal.values()))

    def without(self, table: Table[R], other: Table[Any]) -> list[R]:
        """The rows of ``table`` whose key is no key of ``other``."""
        return self._select(
            table, f" WHERE {table.key} NOT IN (SELECT {other.key} FROM {other.name})", ()
        )

    def put(self, table: Table[R], row: R, *, durable: bool = True) -> None:
        """Write ``row`` whole, over the row of its key if there is one.

        ``durable=False``: returns once the row is in the file's log, before it is on disk (no
        wait for the disk): a crash of the process keeps it, a power cut may lose it — for a
        record whose loss costs no more than a notice."""
        cols = table.columns
        sets = ", ".join(f"{c} = excluded.{c}" for c in cols[1:])
        with self._tx(durable) as db:
            db.execute(
                f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES "
                f"({', '.join('?' * len(cols))}) ON CONFLICT ({table.key}) DO UPDATE SET {sets}",
                tuple(row),
            )

    def add(self, table: Table[R], row: R) -> bool:
        """Write ``row`` unless its key has one; whether it was written."""
        cols = table.columns
        with self._tx() as db:
            cur = db.execute(
                f"INSERT OR IGNORE INTO {table.name} ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' * len(cols))})",
                tuple(row),
            )
            return cur.rowcount == 1

    def set(self, table: Table[Any], key: object, **values: object) -> None:
        """Change some columns of the row under ``key`` (no row: nothing)."""
        sets = ", ".join(f"{table.column(c)} = ?" for c in values)
        with self._tx() as db:
            db.execute(
                f"UPDATE {table.name} SET {sets} WHERE {table.key} = ?", (*values.values(), key)
            )

    def drop_below(self, table: Table[Any], column: str, bound: object) -> None:
        """Delete the rows whose ``column`` is below ``bound``."""
        with self._tx() as db:
            db.execute(f"DELETE FROM {table.name} WHERE {table.column(column)} < ?", (bound,))

    def next(self, table: Table[Any], column: str) -> int:
        """One more than the largest ``column`` (1 in an empty table)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT COALESCE(MAX({table.column(column)}), 0) + 1 FROM {table.name}"
            ).fetchone()
        return int(row[0])
