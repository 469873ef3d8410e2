"""The agent's SQLite file (WAL): schema, the one writer, the event log, and every statement
of the SDK (conversations, items, asks, command records, ``once`` marks): no other module of
``wire/agent`` holds SQL.

Every access to the connection holds :attr:`Store.lock`, so one coroutine's transaction never
interleaves with another's. Reads and a transaction's statements run on the event loop (a few
µs of SQLite each, less than a trip to a thread and back); only its ``COMMIT``, which waits for
the disk (``synchronous=FULL``: on disk before it is visible), runs in the store's writer
thread (:class:`Writer`) — one hand-off a commit, so the writer rarely waits for the loop to
give it the GIL. A transaction built while nothing else holds the lock runs in its caller's
task (no task of its own, no shield).

Group commit: a transaction built with ``defer=True`` (an item's delta, a bridge's tool line)
is applied in memory and queued; the queue is committed in one SQLite transaction with the next
transaction that is not deferred, or a few milliseconds later, when it grows past
:data:`BATCH`, or before a read (a reader's lock, or a read inside a transaction) — so every
reader and writer sees only committed state. Its events reach no reader before that commit
(wire/SPEC.md §10: an event the agent has sent is in its log).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sqlite3
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import SimpleQueue
from typing import Any, Final, Generic, TypeVar, cast

from wire.agent._rules import Resolution, us
from wire.errors import LocalWireError
from wire.messages import MAX_EVENT, AgentEvent, Ask, Conversation, Item, decode, encode

log = logging.getLogger(__name__)
T = TypeVar("T")
Params = Sequence[Any] | Callable[[], Sequence[Any]]
Runs = list[tuple[str, list[Sequence[Any]]]]  # a commit's statements, each with its rows

SCHEMA_VERSION: Final = 1
RING: Final = 4096  # events kept in memory for live readers; older ones are read from disk
BATCH: Final = 512  # deferred transactions queued before the writer waits for their commit
COMMIT_INTERVAL: Final = 0.002  # seconds a deferred transaction waits for others to join it

# An item's row replaced (its params a function: a group commit encodes only the last of a
# run of deltas to one item, see Tx.execute); run by ``State.put_item``, the hot path.
UPDATE_ITEM: Final = "UPDATE items SET data = ? WHERE conversation = ? AND seq = ?"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema', 1), ('last_event_id', 0), ('pruned_through', 0);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, type TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_us INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_closed
    ON conversations (updated_us, id) WHERE state = 'closed';
CREATE INDEX IF NOT EXISTS conversations_open ON conversations (id) WHERE state <> 'closed';
CREATE TABLE IF NOT EXISTS items (
    conversation TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (conversation, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS asks (
    id TEXT PRIMARY KEY,
    conversation TEXT NOT NULL,
    turn INTEGER NOT NULL,
    data BLOB NOT NULL,
    resolution BLOB
);
CREATE INDEX IF NOT EXISTS asks_unresolved ON asks (conversation) WHERE resolution IS NULL;
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    status INTEGER NOT NULL,
    result BLOB NOT NULL,
    at_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_at ON requests (at_us);
CREATE TABLE IF NOT EXISTS acted (
    ask TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (ask, key)
) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class Frame:
    """One logged event, ready to send: its id and its server-sent-event bytes."""

    id: int
    sse: bytes


def frame(event_id: int, type_: str, data: bytes) -> Frame:
    """The frame of one event: its JSON holds no line break, nor does its tag (no
    :func:`wire.sse.encode_event` checks needed)."""
    return Frame(event_id, b"id: %d\nevent: %s\ndata: %s\n\n" % (event_id, type_.encode(), data))


@dataclass(frozen=True, slots=True)
class KeptAsk:
    """An ask as the state file keeps it: its conversation, the turn it was raised in, its
    content, and how it ended (``None`` while open)."""

    conversation: str
    turn: int
    ask: Ask
    resolution: Resolution | None


@dataclass(slots=True)
class Tx:
    """One transaction being built: statements, events, and what to do on commit or failure.

    Memory is changed while the transaction is built, with an undo for each change; readers
    hold the store's lock, so they never see a change that is not committed.
    """

    first_event_id: int
    sql: list[tuple[str, Params]] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    undo: list[Callable[[], object]] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)
    touched: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    keys: dict[int, object] = field(default_factory=dict)
    records: bool = False  # writes asks, command records or once marks: never queued

    def execute(self, sql: str, params: Params = (), *, key: object = None) -> None:
        """Add a statement. A statement with a ``key`` replaces a whole row: when a group
        commit holds several with the same key, only the last one runs (its ``params`` may
        then be a function, called only for the one that runs)."""
        if key is not None:
            self.keys[len(self.sql)] = key
        self.sql.append((sql, params))

    def emit(self, event: AgentEvent) -> int:
        """Log ``event``; returns its id.

        Raises:
            LocalWireError: the event is over the wire's 1 MiB (an item's text too long).
        """
        event_id = self.first_event_id + len(self.frames)
        type_ = str(type(event).__struct_config__.tag)
        try:
            data = encode(event)
        except UnicodeEncodeError:
            raise LocalWireError(f"a {type_} event holds a lone surrogate") from None
        if len(data) > MAX_EVENT:
            raise LocalWireError(f"a {type_} event of {len(data)} bytes is over {MAX_EVENT}")
        self.frames.append(frame(event_id, type_, data))
        self.execute(
            "INSERT INTO events (id, type, data) VALUES (?, ?, ?)", (event_id, type_, data)
        )
        return event_id

    def on_undo(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` if the transaction fails (in reverse order of registration)."""
        self.undo.append(fn)

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the transaction committed."""
        self.after.append(fn)

    # --- the rows of the agent's state -------------------------------------------------

    def put_conversation(self, info: Conversation) -> None:
        """Write a conversation's row (without its items)."""
        self.execute(
            "INSERT INTO conversations (id, state, updated_us, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
            "updated_us = excluded.updated_us, data = excluded.data",
            (info.id, info.state, us(info.updated_at), encode(info)),
        )

    def add_item(self, conversation_id: str, seq: int, item: Item) -> None:
        """Write a new item of a conversation at ``seq``."""
        self.execute(
            "INSERT INTO items (conversation, seq, data) VALUES (?, ?, ?)",
            (conversation_id, seq, encode(item)),
        )

    def put_ask(self, ask: Ask, turn: int) -> None:
        """Write an open ask (raised, raised again, or changed)."""
        self.execute(
            "INSERT INTO asks (id, conversation, turn, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET turn = excluded.turn, data = excluded.data",
            (ask.id, ask.conversation, turn, encode(ask)),
        )
        self.records = True

    def resolve_ask(self, ask_id: str, resolution: Resolution) -> None:
        """Write how an ask ended."""
        self.execute("UPDATE asks SET resolution = ? WHERE id = ?", (encode(resolution), ask_id))
        self.records = True

    def record(self, request_id: str, key: bytes, result: bytes, at_us: int) -> None:
        """Keep a command's first result under its request id and canonical key."""
        self.execute(
            "INSERT INTO requests (request_id, body, status, result, at_us) VALUES (?, ?, ?, ?, ?)",
            (request_id, key, 200, result, at_us),
        )
        self.records = True

    def mark_acted(self, ask_id: str, key: str) -> None:
        """Keep the mark of an ask's action run once (``AskHandle.once``)."""
        self.execute("INSERT INTO acted (ask, key) VALUES (?, ?)", (ask_id, key))
        self.records = True


class _Call(Generic[T]):
    """One call handed to the thread, and the future of the loop that waits for it."""

    __slots__ = ("args", "ended", "error", "fn", "result", "waiter")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], waiter: asyncio.Future[None]):
        self.fn = fn
        self.args = args
        self.waiter = waiter
        self.result: T | None = None
        self.error: BaseException | None = None
        self.ended = False

    def done(self) -> None:
        """On the loop: the call ended; wake its waiter (if not cancelled meanwhile)."""
        self.ended = True
        if not self.waiter.done():
            self.waiter.set_result(None)


class Writer:
    """The store's writer thread: calls that wait for the disk (opening the file, ``COMMIT``,
    closing it) run one after another off the loop. Lighter than a one-thread
    ``ThreadPoolExecutor``: a call is one queue put, its outcome one ``call_soon_threadsafe``
    (no ``concurrent.futures.Future`` chained to a future of the loop, no shield). A daemon
    thread: a call in flight when the process ends still reaches the disk (SQLite's
    ``COMMIT`` runs without the GIL)."""

    def __init__(self, name: str) -> None:
        self._calls: SimpleQueue[_Call[Any] | None] = SimpleQueue()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call.result = call.fn(*call.args)
            except BaseException as exc:  # handed to the waiter, re-raised there
                call.error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                self._loop.call_soon_threadsafe(call.done)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the thread; its result or error. It cannot be called back once
        handed over, so a cancelled caller still waits for it and is cancelled at its next
        wait once it is known."""
        call: _Call[T] = _Call(fn, args, self._loop.create_future())
        self._calls.put(call)
        cancelled = False
        while not call.ended:
            try:
                await call.waiter
            except asyncio.CancelledError:
                cancelled = True
                if not call.ended:
                    call.waiter = self._loop.create_future()
        if cancelled:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        if call.error is not None:
            raise call.error
        return cast(T, call.result)

    def stop(self) -> None:
        """End the thread once the calls given before are run."""
        self._calls.put(None)


class Store:
    """One SQLite file, one connection, one writer at a time."""

    def __init__(self, path: Path, *, keep_events: int) -> None:
        if keep_events < 1:
            raise ValueError("keep_events must be at least 1")
        self.path = path
        self.keep_events = keep_events
        self.lock = asyncio.Lock()
        self.last_event_id = 0
        self.pruned_through = 0
        self.ring: deque[Frame] = deque(maxlen=min(keep_events, RING))
        self._db: sqlite3.Connection | None = None
        self._writer: Writer | None = None
        self._wake = asyncio.Event()
        self._pending: set[asyncio.Task[Any]] = set()
        self._queued: list[Tx] = []
        self._flusher: asyncio.TimerHandle | None = None
        self._failed: BaseException | None = None

    @property
    def db(self) -> sqlite3.Connection:
        """The connection; only while open and while holding :attr:`lock`."""
        if self._db is None:
            raise RuntimeError("the agent's store is not open")
        return self._db

    async def open(self) -> None:
        """Open (or create, mode 0600) the file, WAL, and read where the event log stands."""
        # SQLite gives the -wal and -shm files the mode of the database file.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        writer = Writer("wire-agent-store")
        try:
            db, meta = await writer.run(_connect, self.path)
        except BaseException:
            writer.stop()
            raise
        if meta["schema"] != SCHEMA_VERSION:
            await writer.run(db.close)
            writer.stop()
            raise RuntimeError(f"{self.path}: unknown schema version {meta['schema']}")
        self._db, self._writer = db, writer
        self.last_event_id = int(meta["last_event_id"])
        self.pruned_through = int(meta["pruned_through"])

    async def close(self) -> None:
        """Let running transactions finish, then close the connection."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._db is not None:
            async with self.locked():  # a transaction run in its caller's task ends first
                pass
        if self._db is not None and self._writer is not None:
            db, self._db = self._db, None
            writer, self._writer = self._writer, None
            await writer.run(db.close)
            writer.stop()
        self.wake()

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of a query, read on the loop once the queued transactions are committed; the
        caller holds :attr:`lock` (taken by :meth:`locked`, or a transaction's)."""
        if self._queued:  # inside a transaction's build: its event ids follow the queue's
            await self._flush(strict=True)
        return self._read(sql, params)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of a query as committed, the queue left as it is: for the tables a queued
        transaction never writes (asks, command records, once marks: see ``Tx.records``)."""
        return self.db.execute(sql, params).fetchall()

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold :attr:`lock` with every queued transaction committed first."""
        async with self.lock:
            await self._flush()
            yield

    async def transact(self, build: Callable[[Tx], Awaitable[T]], *, defer: bool = False) -> T:
        """Build a transaction under the lock and commit it; returns what ``build`` returned.

        A started write always ends, committed and applied, or rolled back and undone: with
        the lock free it runs in the caller's task (a cancellation reaching ``build`` undoes
        it; one reaching the commit waits for it, then cancels the caller), else in a task of
        its own that the caller's cancellation does not reach.

        With ``defer``, ``build`` must not read the file: the transaction is queued and this
        returns once it is applied in memory (it waits for the commit only when :data:`BATCH`
        are queued); the queue is committed with the next transaction, or on its own a few
        milliseconds later. A group commit that fails undoes its transactions, and the next
        deferred transaction raises its error.
        """
        if defer and self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if not self.lock.locked():  # no task, no shield: fewer turns of the loop a write
            if defer and len(self._queued) < BATCH:
                return await self._queue(build)
            return await self._transact(build, defer)
        task = asyncio.ensure_future(self._transact(build, defer))
        self._pending.add(task)
        task.add_done_callback(self._done)
        return await asyncio.shield(task)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("transaction failed", exc_info=task.exception())

    async def _queue(self, build: Callable[[Tx], Awaitable[T]]) -> T:
        # The lock is free, so nothing else is between build and commit: no task is needed.
        async with self.lock:
            tx = self._next_tx()
            try:
                result = await build(tx)
            except BaseException:
                for undo in reversed(tx.undo):
                    undo()
                raise
            if tx.records:
                await self._flush(tx)
            else:
                self._enqueue(tx)
            return result

    def _next_tx(self) -> Tx:
        last = self._queued[-1] if self._queued else None
        first = last.first_event_id + len(last.frames) if last else self.last_event_id + 1
        return Tx(first_event_id=first)

    def _enqueue(self, tx: Tx) -> None:
        if not tx.sql:
            self._applied(tx)
            return
        self._queued.append(tx)
        if self._flusher is None:
            loop = asyncio.get_running_loop()
            self._flusher = loop.call_later(COMMIT_INTERVAL, self._flush_soon)

    def _flush_soon(self) -> None:
        self._flusher = None
        if self._queued:
            task = asyncio.ensure_future(self._flush_locked())
            self._pending.add(task)
            task.add_done_callback(self._done)

    async def _flush_locked(self) -> None:
        async with self.lock:
            await self._flush()

    async def _flush(self, tx: Tx | None = None, *, strict: bool = False) -> None:
        """Commit the queued transactions, and ``tx`` after them, in one; the caller holds the
        lock. A failure undoes them all; ``tx``'s caller (or with ``strict`` this one: a
        transaction being built, numbered after the queue) gets the error, and so does the next
        deferred transaction when queued ones were undone."""
        queued, self._queued = self._queued, []
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        batch = [*queued, tx] if tx is not None else queued
        if not batch:
            return
        try:
            if any(t.sql for t in batch):
                await self._commit(batch)
        except BaseException as exc:
            for undone in reversed(batch):
                for undo in reversed(undone.undo):
                    undo()
            if queued:
                log.error("a group commit failed; its %d transactions are undone", len(queued))
                self._failed = exc
            if tx is not None or strict or not isinstance(exc, Exception):
                raise
            return
        for done in batch:
            self._applied(done, wake=False)
        if any(t.frames for t in batch):
            self.wake()

    async def _transact(self, build: Callable[[Tx], Awaitable[T]], defer: bool) -> T:
        # The queued transactions are committed with this one (a read in ``build`` commits
        # them first: see fetch), so a deferred write costs no commit of its own.
        async with self.lock:
            tx = self._next_tx()
            try:
                result = await build(tx)
            except BaseException:
                for undo in reversed(tx.undo):
                    undo()
                raise
            if defer and not tx.records and len(self._queued) < BATCH:
                self._enqueue(tx)
            else:
                await self._flush(tx)
            return result

    def _applied(self, tx: Tx, *, wake: bool = True) -> None:
        """Publish a committed transaction: its events to readers, its callbacks run."""
        if tx.frames:
            self.last_event_id = tx.frames[-1].id
            self.ring.extend(tx.frames)
        for fn in tx.after:
            fn()
        if tx.frames and wake:
            self.wake()

    async def _commit(self, txs: list[Tx]) -> None:
        last = self.last_event_id
        for tx in txs:
            if tx.frames:
                last = tx.frames[-1].id
        statements = [stmt for tx in txs for stmt in tx.sql]
        # A keyed statement is dropped when a later one of the batch has the same key.
        starts = itertools.accumulate((len(t.sql) for t in txs), initial=0)
        keyed = [
            (base + index, key)
            for tx, base in zip(txs, starts, strict=False)
            for index, key in tx.keys.items()
        ]
        last_of = {key: index for index, key in keyed}
        dropped = {index for index, key in keyed if last_of[key] != index}
        if last != self.last_event_id:
            statements.append(("UPDATE meta SET value = ? WHERE key = 'last_event_id'", (last,)))
            if last - self.pruned_through > self.keep_events:
                pruned = last - self.keep_events
                statements.append(("DELETE FROM events WHERE id <= ?", (pruned,)))
                statements.append(
                    ("UPDATE meta SET value = ? WHERE key = 'pruned_through'", (pruned,))
                )
                txs[-1].on_commit(lambda: setattr(self, "pruned_through", pruned))
        # Runs of one statement go in one executemany.
        runs: Runs = []
        for index, (sql, params) in enumerate(statements):
            if index in dropped:
                continue
            if not runs or runs[-1][0] != sql:
                runs.append((sql, []))
            runs[-1][1].append(params() if callable(params) else params)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            for sql, rows in runs:
                db.executemany(sql, rows)
        except BaseException:
            with contextlib.suppress(Exception):
                db.execute("ROLLBACK")
            raise
        await self._write()

    async def _write(self) -> None:
        """``COMMIT`` in the writer thread; a cancelled caller still waits for it (holding the
        lock: nothing else uses the connection meanwhile), see :meth:`Writer.run`."""
        assert self._writer is not None
        await self._writer.run(_commit_now, self.db)

    # --- reads of the agent's state (the caller holds the lock) ------------------------

    async def open_conversations(self) -> list[Conversation]:
        """The conversations not closed, least recently updated first (without items)."""
        rows = await self.fetch(
            "SELECT data FROM conversations WHERE state <> 'closed' ORDER BY updated_us"
        )
        return [decode(bytes(data), Conversation) for (data,) in rows]

    async def conversation(self, conversation_id: str) -> Conversation | None:
        """One conversation (without items), or ``None``."""
        rows = await self.fetch("SELECT data FROM conversations WHERE id = ?", (conversation_id,))
        return decode(bytes(rows[0][0]), Conversation) if rows else None

    async def closed_page(
        self, limit: int, cursor: tuple[int, str] | None
    ) -> list[tuple[int, str, Conversation]]:
        """Up to ``limit`` closed conversations after ``cursor`` (``updated_us``, id), newest
        first, each with its ``updated_us`` and id."""
        sql = "SELECT updated_us, id, data FROM conversations WHERE state = 'closed'"
        params: tuple[Any, ...] = ()
        if cursor is not None:
            sql += " AND (updated_us, id) < (?, ?)"
            params = cursor
        sql += " ORDER BY updated_us DESC, id DESC LIMIT ?"
        rows = await self.fetch(sql, (*params, limit))
        return [(int(r[0]), str(r[1]), decode(bytes(r[2]), Conversation)) for r in rows]

    async def items(self, conversation_id: str) -> list[Item]:
        """A conversation's items, in order."""
        rows = await self.fetch(
            "SELECT data FROM items WHERE conversation = ? ORDER BY seq", (conversation_id,)
        )
        return [decode(bytes(data), Item) for (data,) in rows]

    async def ask(self, ask_id: str) -> KeptAsk | None:
        """The ask kept under ``ask_id``, or ``None``."""
        rows = self._read(
            "SELECT conversation, turn, data, resolution FROM asks WHERE id = ?", (ask_id,)
        )
        if not rows:
            return None
        conversation, turn, data, resolution = rows[0]
        done = decode(bytes(resolution), Resolution) if resolution is not None else None
        return KeptAsk(str(conversation), int(turn), decode(bytes(data), Ask), done)

    async def resolution(self, ask_id: str) -> Resolution | None:
        """How the ask ``ask_id`` ended; ``None`` when it is open or unknown."""
        rows = self._read("SELECT resolution FROM asks WHERE id = ?", (ask_id,))
        if not rows or rows[0][0] is None:
            return None
        return decode(bytes(rows[0][0]), Resolution)

    async def unresolved_asks(self, conversation_id: str) -> list[str]:
        """The ids of a conversation's asks kept open."""
        rows = self._read(
            "SELECT id FROM asks WHERE conversation = ? AND resolution IS NULL",
            (conversation_id,),
        )
        return [str(ask_id) for (ask_id,) in rows]

    async def prior(self, request_id: str) -> tuple[bytes, bytes] | None:
        """The canonical key and first result recorded under ``request_id``."""
        rows = self._read("SELECT body, result FROM requests WHERE request_id = ?", (request_id,))
        return (bytes(rows[0][0]), bytes(rows[0][1])) if rows else None

    async def acted(self, ask_id: str, key: str) -> bool:
        """Whether an ask's action under ``key`` ran in a run before."""
        rows = self._read("SELECT 1 FROM acted WHERE ask = ? AND key = ?", (ask_id, key))
        return bool(rows)

    async def forget_requests(self, before_us: int) -> None:
        """Forget the commands recorded before ``before_us``."""
        await self.fetch("DELETE FROM requests WHERE at_us < ?", (before_us,))

    def wake(self) -> None:
        """Wake every reader waiting in :meth:`waiter`."""
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def waiter(self) -> asyncio.Event:
        """An event set at the next commit of events (or :meth:`wake`); take it before reading."""
        return self._wake

    async def frames_after(self, after: int, limit: int = 1000) -> list[Frame] | None:
        """Logged events after id ``after``, oldest first; ``None`` when some were dropped."""
        if after < self.pruned_through:
            return None
        if after >= self.last_event_id:
            return []
        ring = self.ring
        if ring and ring[0].id <= after + 1:
            start = after + 1 - ring[0].id
            return list(itertools.islice(ring, start, start + limit))
        async with self.locked():
            if after < self.pruned_through:
                return None
            rows = await self.fetch(
                "SELECT id, type, data FROM events WHERE id > ? ORDER BY id LIMIT ?",
                (after, limit),
            )
        return [frame(int(r[0]), str(r[1]), bytes(r[2])) for r in rows]


def _connect(path: Path) -> tuple[sqlite3.Connection, dict[str, int]]:
    """Open the file (in the writer thread): WAL, each commit on disk before it returns, the
    schema; and the ``meta`` table's values."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(_SCHEMA)
        rows = db.execute("SELECT key, value FROM meta").fetchall()
    except BaseException:
        db.close()
        raise
    return db, {str(r[0]): int(r[1]) for r in rows}


def _commit_now(db: sqlite3.Connection) -> None:
    """Commit the open transaction (in the writer thread); rolled back if that fails."""
    try:
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            db.execute("ROLLBACK")
        raise
