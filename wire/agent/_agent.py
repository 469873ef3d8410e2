"""The agent: conversations, items, asks and turns, kept in its SQLite file, and the commands
of wire/SPEC.md applied to them exactly once per request id.

The top of the SDK: it builds its handles (``_handles``) and its HTTP face (``_server``),
which know it only through the protocols they declare (``Host``, ``ServedAgent``)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import secrets
import signal
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
from msgspec.structs import replace

from wire.agent._handles import (
    AskHandle,
    ConversationHandle,
    ItemHandle,
    Resolution,
    Turn,
    aware,
    checked,
)
from wire.agent._server import AgentRunner, RequestError, build_app, serve_tcp, serve_unix
from wire.agent._store import Store, Tx
from wire.answers import check_answer
from wire.messages import (
    MAX_BODY,
    WIRE_VERSION,
    Answer,
    Ask,
    AskChanged,
    AskRaised,
    AskResolved,
    Button,
    CommandResult,
    Conversation,
    ConversationClosed,
    ConversationOpened,
    ConversationPage,
    ConversationUpdated,
    Hello,
    Item,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    PlainCommand,
    Progress,
    Reply,
    ReplyResult,
    SendMessage,
    StartConversation,
    Starter,
    TurnCommand,
    TurnStopped,
    decode,
    encode,
)

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Middleware

log = logging.getLogger(__name__)
S = TypeVar("S")

MessageHandler = Callable[["ConversationHandle", SendMessage], Awaitable[None]]
StartHandler = Callable[[str], Awaitable["ConversationHandle"]]
ButtonHandler = Callable[["ConversationHandle", str], Awaitable[None]]
ReplyHandler = Callable[["AskHandle", Reply], Awaitable[ReplyResult]]
CloseHandler = Callable[["ConversationHandle"], Awaitable[None]]

KEEP_EVENTS: Final = 10_000
PING_INTERVAL: Final = 15.0  # wire/SPEC.md, Events: a ping at least every 15 s
KEEP_REQUESTS: Final = timedelta(days=30)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US: Final = timedelta(microseconds=1)


_OUTCOME_OF: Final = {"answered": "answered", "decided": "decided", "expired": "expired"}


def _us(at: datetime) -> int:
    return (at - _EPOCH) // _US


@dataclass(eq=False)
class _PendingStart:
    request_id: str
    key: bytes
    result: bytes | None = None
    closed: bool = False


_PENDING_START: contextvars.ContextVar[_PendingStart | None] = contextvars.ContextVar(
    "wire_agent_pending_start", default=None
)


class Agent:
    """A durable agent speaking wire v1: declare it, add handlers, serve it.

    Usage::

        agent = Agent(runtime="desk", features=["history", "stop"], state_path=Path("desk.db"))

        @agent.on_message
        async def reply(conv: ConversationHandle, msg: SendMessage) -> None:
            item = await conv.append(kind="reply", final=False)
            await item.delta("Hello")
            await item.finish()

        async with agent:
            runner = await agent.serve_unix(Path("desk.sock"))
            ...
            await runner.close()

    Everything the phone can see (conversations, items, asks, the event log) and every
    command's result is kept in ``state_path`` (SQLite, WAL), so a restarted agent answers a
    retried command with its first result and replays events by id. One process per file.

    Options: ``runtime``, ``subtitle``, ``features``, ``wire_version`` make the hello;
    ``starters`` are listed by ``GET /starters``; ``keeps_list=False`` answers the closed read
    with ``{"keeps_list": false}``; ``token`` requires ``Authorization: Bearer``; ``now`` is
    the clock (deadlines, timestamps); ``ping_interval`` spaces the stream's ``: ping``;
    ``keep_events`` is how many events the log keeps for replay; ``expiry_interval`` is how
    often deadlines are checked; ``echo_request_id=False`` leaves the request id off the
    ``user`` item (spec C5); ``middlewares`` are aiohttp middlewares run before the agent's
    handlers (after the error mapping); ``answer_check`` is the agent's own check of an answer
    that fits its ask by the wire's rules: a sentence refuses it with ``400 bad_request``
    (wire/SPEC.md §8, "as the agent decides"), ``None`` takes it.
    """

    def __init__(
        self,
        *,
        state_path: Path,
        runtime: str | None = None,
        subtitle: str | None = None,
        features: Iterable[str] = (),
        starters: Iterable[Starter] = (),
        wire_version: int = WIRE_VERSION,
        keeps_list: bool = True,
        token: str | None = None,
        now: Callable[[], datetime] | None = None,
        ping_interval: float = PING_INTERVAL,
        keep_events: int = KEEP_EVENTS,
        expiry_interval: float = 1.0,
        echo_request_id: bool = True,
        middlewares: Sequence[Middleware] = (),
        answer_check: Callable[[Ask, Answer], str | None] | None = None,
    ) -> None:
        if ping_interval <= 0 or expiry_interval <= 0:
            raise ValueError("ping_interval and expiry_interval must be positive")
        self.state_path = state_path
        self.hello = Hello(
            wire=wire_version, runtime=runtime, subtitle=subtitle, features=list(features)
        )
        self.starters = list(starters)
        self.keeps_list = keeps_list
        self.token = token
        self.ping_interval = ping_interval
        self.expiry_interval = expiry_interval
        self.echo_request_id = echo_request_id
        self.middlewares = tuple(middlewares)
        self.answer_check = answer_check
        self._clock = now or (lambda: datetime.now(UTC))
        self._store = Store(state_path, keep_events=keep_events)
        self._on_message: MessageHandler | None = None
        self._on_start: StartHandler | None = None
        self._on_button: ButtonHandler | None = None
        self._on_reply: ReplyHandler | None = None
        self._reply_locks: dict[str, asyncio.Lock] = {}
        self._on_close: CloseHandler | None = None
        self._open: dict[str, ConversationHandle] = {}
        self._handles: weakref.WeakValueDictionary[str, ConversationHandle] = (
            weakref.WeakValueDictionary()
        )
        self._open_asks: dict[str, AskHandle] = {}
        self._acted: set[tuple[str, str]] = set()  # AskHandle.once marks of this run
        self._served = False  # an app was built: answers can arrive
        self._inflight: dict[str, tuple[bytes, asyncio.Future[bytes]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runners: list[AgentRunner] = []
        self._started = False
        self._closing = False
        self._start_lock = asyncio.Lock()

    # --- handlers ----------------------------------------------------------------------

    def on_message(self, fn: MessageHandler) -> MessageHandler:
        """Register the turn: ``async (conv, SendMessage) -> None``. A steering message does
        not call it; it goes to ``conv.steered``."""
        self._on_message = fn
        return fn

    def on_start(self, fn: StartHandler) -> StartHandler:
        """Register ``async (starter_id) -> ConversationHandle`` for ``POST /conversations``;
        without it a starter opens a conversation titled with the starter's label."""
        self._on_start = fn
        return fn

    def on_button(self, fn: ButtonHandler) -> ButtonHandler:
        """Register ``async (conv, button_id) -> None`` for a tap on one of the agent's buttons."""
        self._on_button = fn
        return fn

    def on_reply(self, fn: ReplyHandler) -> ReplyHandler:
        """Register ``async (ask, Reply) -> ReplyResult``: a reply that fits an open ask is
        handed to it before anything is recorded, and its outcome is the reply's (a bridge
        forwards the answer and reports what the far end said). ``accepted`` resolves the ask
        ``answered`` with the reply's request id; ``answered``, ``decided`` and ``expired``
        resolve it so (another answer won); any other outcome leaves it open. If it raises,
        the reply is answered ``502`` and nothing is recorded, so a retry calls it again.
        Replies to one ask reach it one at a time."""
        self._on_reply = fn
        return fn

    def on_close(self, fn: CloseHandler) -> CloseHandler:
        """Register ``async (conv) -> None``, run after ``POST …/close`` closed a conversation
        (an agent's own :meth:`ConversationHandle.close` does not call it)."""
        self._on_close = fn
        return fn

    # --- life ----------------------------------------------------------------------------

    def now(self) -> datetime:
        """The agent's clock (UTC)."""
        return aware(self._clock())

    def has(self, feature: str) -> bool:
        """Whether the hello declares ``feature``."""
        return self.hello.has(feature)

    async def start(self) -> None:
        """Open the state file and load the open conversations (done by the first use)."""
        async with self._start_lock:
            if self._started:
                return
            if self._closing:
                raise RuntimeError("the agent is closed")
            await self._store.open()
            try:
                await self._load()
            except BaseException:
                await self._store.close()
                raise
            self._started = True
            self._spawn(self._expiry_loop())

    async def close(self) -> None:
        """Stop serving, cancel running turns and handlers, close the state file."""
        if self._closing:
            return
        self._closing = True
        for runner in list(self._runners):
            await runner.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._started:
            await self._store.close()

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def serve_unix(self, path: Path) -> AgentRunner:
        """Serve on a Unix socket at ``path``, created mode 0600."""
        await self.start()
        self._served = True
        runner = await serve_unix(self, path, on_close=self._forget_runner)
        self._runners.append(runner)
        return runner

    async def serve_tcp(self, host: str, port: int) -> AgentRunner:
        """Serve on ``host``:``port`` (0 picks a free port; see ``runner.url``)."""
        await self.start()
        self._served = True
        runner = await serve_tcp(self, host, port, on_close=self._forget_runner)
        self._runners.append(runner)
        return runner

    def _forget_runner(self, runner: AgentRunner) -> None:
        with contextlib.suppress(ValueError):
            self._runners.remove(runner)

    async def serve_forever(
        self,
        *,
        socket: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        setup: Callable[[Agent], Awaitable[None]] | None = None,
        ready: Callable[[AgentRunner], None] | None = None,
    ) -> None:
        """Start, serve on ``socket`` (else TCP ``host``:``port``), run ``setup``, call
        ``ready``, and serve until SIGINT or SIGTERM; then close.

        The agent listens before ``setup`` runs, so a ``setup`` that waits for an answer
        (``await ask.wait()``) can be answered; ``ready`` is called once ``setup`` returns.
        """
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        async with self:
            if socket is not None:
                runner = await self.serve_unix(socket)
            else:
                runner = await self.serve_tcp(host, port)
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            try:
                if setup is not None and not await _unless_stopped(setup(self), stop):
                    return
                if ready is not None:
                    ready(runner)
                await stop.wait()
            finally:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(signum)

    def run(
        self,
        *,
        socket: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        setup: Callable[[Agent], Awaitable[None]] | None = None,
        ready: Callable[[AgentRunner], None] | None = None,
    ) -> None:
        """:meth:`serve_forever` in a new event loop (blocks)."""
        asyncio.run(
            self.serve_forever(socket=socket, host=host, port=port, setup=setup, ready=ready)
        )

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task of the agent: cancelled when the agent closes, its failure
        logged."""
        self._spawn(coro)

    def app(self) -> web.Application:
        """An aiohttp application serving this agent (after :meth:`start`)."""
        self._served = True
        return build_app(self)

    async def _load(self) -> None:
        store = self._store
        async with store.locked():
            rows = await store.fetch(
                "SELECT data FROM conversations WHERE state <> 'closed' ORDER BY updated_us"
            )
            for (data,) in rows:
                info = decode(bytes(data), Conversation)
                items = await self._load_items(info.id)
                conv = ConversationHandle(self, info, items)
                self._open[info.id] = conv
                self._handles[info.id] = conv
            await store.fetch(
                "DELETE FROM requests WHERE at_us < ?", (_us(self.now() - KEEP_REQUESTS),)
            )

        async def settle(tx: Tx) -> None:
            # No turn runs and no ask is raised yet: a state kept from before is not true now,
            # and an item still being written lost its writer.
            for conv in self._open.values():
                self._touch(tx, conv)
                self._finish_items(tx, conv)

        await self._transact(settle)

    async def _load_items(self, conversation_id: str) -> list[Item]:
        rows = await self._store.fetch(
            "SELECT data FROM items WHERE conversation = ? ORDER BY seq", (conversation_id,)
        )
        return [decode(bytes(data), Item) for (data,) in rows]

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._closing:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("agent task failed", exc_info=exc)

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.expiry_interval)
            now = self.now()
            if any(
                a.ask.deadline and aware(a.ask.deadline) <= now for a in self._open_asks.values()
            ):
                await self.expire_due()

    # --- the agent's own API ---------------------------------------------------------------

    @property
    def conversations(self) -> list[ConversationHandle]:
        """The open conversations."""
        return list(self._open.values())

    async def conversation(self, id: str) -> ConversationHandle | None:
        """The conversation ``id``, open or closed; ``None`` when there is none."""
        await self.start()
        async with self._store.locked():
            return await self._find(id)

    async def open_conversation(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        subtitle: str | None = None,
        workspace: str | None = None,
        buttons: Sequence[Button] = (),
        progress: Progress | None = None,
    ) -> ConversationHandle:
        """Open a conversation (``conversation.opened``). With the ``id`` of one that exists,
        open or closed, return it as it is: an agent calls this again after a restart."""
        await self.start()

        async def build(tx: Tx) -> ConversationHandle:
            if id is not None:
                found = await self._find(id)
                if found is not None:
                    return found
            conv_id = id or "c-" + secrets.token_hex(8)
            info = checked(
                Conversation(
                    id=conv_id,
                    title=title,
                    subtitle=subtitle,
                    workspace=workspace,
                    buttons=list(buttons),
                    progress=progress,
                    updated_at=self.now(),
                )
            )
            conv = ConversationHandle(self, info, [])
            self._open[conv_id] = conv
            self._handles[conv_id] = conv
            tx.on_undo(lambda: self._open.pop(conv_id, None))
            self._write_conv(tx, conv)
            tx.emit(ConversationOpened(conversation=conv.snapshot()))
            pending = _PENDING_START.get()
            if pending is not None and not pending.closed and pending.result is None:
                result = encode(CommandResult(outcome="accepted", conversation_id=conv_id))
                self._record(tx, pending.request_id, pending.key, result)
                pending.result = result
                tx.on_undo(lambda: setattr(pending, "result", None))
            return conv

        return await self._transact(build)

    async def expire_due(self) -> int:
        """Resolve as ``expired`` every open ask whose deadline passed; returns how many."""
        await self.start()

        async def build(tx: Tx) -> int:
            now = self.now()
            due = [
                a
                for a in self._open_asks.values()
                if a.ask.deadline is not None and aware(a.ask.deadline) <= now
            ]
            for ask in due:
                self._resolve(tx, ask, Resolution(how="expired", at=now))
            return len(due)

        return await self._transact(build)

    # --- transactions and memory ---------------------------------------------------------

    async def _transact(self, build: Callable[[Tx], Awaitable[S]], *, defer: bool = False) -> S:
        async def inner(tx: Tx) -> S:
            result = await build(tx)
            self._finish(tx)
            return result

        return await self._store.transact(inner, defer=defer)

    async def _find(self, conversation_id: str) -> ConversationHandle | None:
        """The handle of a conversation; the caller holds the store's lock."""
        conv = self._open.get(conversation_id) or self._handles.get(conversation_id)
        if conv is not None:
            return conv
        rows = await self._store.fetch(
            "SELECT data FROM conversations WHERE id = ?", (conversation_id,)
        )
        if not rows:
            return None
        conv = ConversationHandle(self, decode(bytes(rows[0][0]), Conversation), [])
        self._handles[conversation_id] = conv
        return conv

    def _touch(self, tx: Tx, conv: ConversationHandle) -> None:
        if conv.id not in tx.touched:
            tx.touched[conv.id] = (conv, conv.snapshot())

    def _finish(self, tx: Tx) -> None:
        """Emit ``conversation.updated`` once for each conversation the transaction changed."""
        for conv, before in tx.touched.values():
            if conv.closed:
                continue
            state = self._derived_state(conv)
            if state != conv._info.state:
                self._set_info(tx, conv, replace(conv._info, state=state))
            if conv.snapshot() == before:
                continue
            self._set_info(tx, conv, replace(conv._info, updated_at=self.now()))
            self._write_conv(tx, conv)
            tx.emit(ConversationUpdated(conversation=conv.snapshot()))

    @staticmethod
    def _derived_state(conv: ConversationHandle) -> str:
        if conv._open_asks:
            return "waiting"
        if conv._explicit_state is not None:
            return conv._explicit_state
        return "working" if conv.running else "idle"

    def _set_info(self, tx: Tx, conv: ConversationHandle, info: Conversation) -> None:
        old = conv._info
        conv._info = info
        tx.on_undo(lambda: setattr(conv, "_info", old))

    def _write_conv(self, tx: Tx, conv: ConversationHandle) -> None:
        info = conv._info
        tx.execute(
            "INSERT INTO conversations (id, state, updated_us, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
            "updated_us = excluded.updated_us, data = excluded.data",
            (info.id, info.state, _us(aware(info.updated_at)), encode(info)),
        )

    def _add_item(self, tx: Tx, conv: ConversationHandle, item: Item) -> int:
        seq = len(conv._items)
        conv._items.append(item)
        conv._item_ids[item.id] = seq
        tx.on_undo(conv._items.pop)
        tx.on_undo(lambda: conv._item_ids.pop(item.id, None))
        tx.execute(
            "INSERT INTO items (conversation, seq, data) VALUES (?, ?, ?)",
            (conv.id, seq, encode(item)),
        )
        tx.emit(ItemAppended(conversation_id=conv.id, item=item))
        return seq

    def _put_item(
        self, tx: Tx, conv: ConversationHandle, seq: int, item: Item, delta: str | None
    ) -> None:
        old = conv._items[seq]
        conv._items[seq] = item

        def undo() -> None:
            conv._items[seq] = old

        tx.on_undo(undo)
        tx.execute(
            "UPDATE items SET data = ? WHERE conversation = ? AND seq = ?",
            lambda: (encode(item), conv.id, seq),
            key=("item", conv.id, seq),
        )
        if delta is not None:
            tx.emit(ItemDelta(conversation_id=conv.id, item_id=item.id, text=delta))
        else:
            tx.emit(ItemUpdated(conversation_id=conv.id, item=item))

    def _put_ask(self, tx: Tx, handle: AskHandle, ask: Ask, *, changed: bool) -> None:
        conv = handle.conversation
        self._touch(tx, conv)
        old_ask, old_conv_asks, old_asks = handle._ask, dict(conv._open_asks), dict(self._open_asks)
        handle._ask = ask
        conv._open_asks[ask.id] = handle
        self._open_asks[ask.id] = handle

        def undo() -> None:
            handle._ask = old_ask
            conv._open_asks = old_conv_asks
            self._open_asks = old_asks

        tx.on_undo(undo)
        tx.execute(
            "INSERT INTO asks (id, conversation, turn, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET turn = excluded.turn, data = excluded.data",
            (ask.id, conv.id, handle.turn, encode(ask)),
        )
        tx.emit(AskChanged(ask=ask) if changed else AskRaised(ask=ask))

    def _resolve(self, tx: Tx, handle: AskHandle, resolution: Resolution) -> None:
        conv = handle.conversation
        self._touch(tx, conv)
        old_conv_asks, old_asks = dict(conv._open_asks), dict(self._open_asks)
        conv._open_asks.pop(handle.id, None)
        self._open_asks.pop(handle.id, None)

        def undo() -> None:
            conv._open_asks = old_conv_asks
            self._open_asks = old_asks

        tx.on_undo(undo)
        tx.execute("UPDATE asks SET resolution = ? WHERE id = ?", (encode(resolution), handle.id))
        tx.emit(
            AskResolved(
                ask_id=handle.id,
                conversation_id=conv.id,
                how=resolution.how,
                request_id=resolution.request_id,
                at=resolution.at,
            )
        )
        tx.on_commit(lambda: handle._resolved(resolution))

    def _record(self, tx: Tx, request_id: str, key: bytes, result: bytes) -> None:
        tx.execute(
            "INSERT INTO requests (request_id, body, status, result, at_us) VALUES (?, ?, ?, ?, ?)",
            (request_id, key, 200, result, _us(self.now())),
        )

    async def _prior(self, request_id: str, key: bytes) -> bytes | None:
        """The first result of ``request_id``; raises when it came with another body."""
        inflight = self._inflight.get(request_id)
        if inflight is not None and inflight[0] != key:
            raise _reused()
        rows = await self._store.fetch(
            "SELECT body, result FROM requests WHERE request_id = ?", (request_id,)
        )
        if not rows:
            return None
        if bytes(rows[0][0]) != key:
            raise _reused()
        return bytes(rows[0][1])

    # --- turns ---------------------------------------------------------------------------

    def _begin_turn(self, conv: ConversationHandle, turn: Turn, msg: SendMessage) -> None:
        if self._closing:
            return
        earlier = [t.task for t in conv._turns if t is not turn and t.task is not None]
        task = asyncio.ensure_future(self._run_turn(conv, msg, earlier))
        turn.task = task
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        task.add_done_callback(lambda _: self._spawn(self._end_turn(conv, turn)))

    async def _run_turn(
        self, conv: ConversationHandle, msg: SendMessage, earlier: list[asyncio.Task[None]]
    ) -> None:
        if earlier:
            await asyncio.wait(earlier)
        if self._on_message is None:
            return
        try:
            await self._on_message(conv, msg)
        except Exception:
            log.exception("turn %s of %s failed", conv.turn, conv.id)
            if not conv.closed:
                await conv.append(kind="notice", text="This turn failed.")

    async def _end_turn(self, conv: ConversationHandle, turn: Turn) -> None:
        async def build(tx: Tx) -> None:
            if turn not in conv._turns:
                return
            self._touch(tx, conv)
            conv._turns.remove(turn)
            tx.on_undo(lambda: conv._turns.append(turn))
            if not conv.running:
                tx.on_commit(conv._drain_steered)

        await self._transact(build)

    def _stop_turns(self, tx: Tx, conv: ConversationHandle) -> bool:
        """Mark the running turns stopped and emit ``turn.stopped``; False when none ran."""
        running = [t for t in conv._turns if not t.stopped]
        if not running:
            return False
        for t in running:
            t.stopped = True

        def undo() -> None:
            for t in running:
                t.stopped = False

        def cancel() -> None:
            for t in running:
                if t.task is not None:
                    t.task.cancel()
            conv._drain_steered()

        tx.on_undo(undo)
        tx.on_commit(cancel)
        return True

    def _finish_items(self, tx: Tx, conv: ConversationHandle) -> None:
        """Make every item still being written final: its writer stopped (or died)."""
        for seq, item in enumerate(conv._items):
            if not item.final:
                done = replace(item, final=True, at=item.at or self.now())
                self._put_item(tx, conv, seq, done, None)

    async def _close(self, tx: Tx, conv: ConversationHandle) -> None:
        now = self.now()
        stopped = Resolution(how="stopped", at=now)
        if self._stop_turns(tx, conv):
            tx.emit(TurnStopped(conversation_id=conv.id, turn=conv.turn))
        raised = list(conv._open_asks.values())
        for ask in raised:
            self._resolve(tx, ask, stopped)
        self._finish_items(tx, conv)
        # Asks kept from before a restart and not raised again end too.
        rows = await self._store.fetch(
            "SELECT id FROM asks WHERE conversation = ? AND resolution IS NULL", (conv.id,)
        )
        for (ask_id,) in rows:
            if any(a.id == ask_id for a in raised):
                continue
            tx.execute("UPDATE asks SET resolution = ? WHERE id = ?", (encode(stopped), ask_id))
            tx.emit(AskResolved(ask_id=ask_id, conversation_id=conv.id, how="stopped", at=now))
        self._set_info(tx, conv, replace(conv._info, state="closed", updated_at=now))
        old_explicit = conv._explicit_state
        conv._explicit_state = None
        self._open.pop(conv.id, None)

        def undo() -> None:
            conv._explicit_state = old_explicit
            self._open[conv.id] = conv

        tx.on_undo(undo)
        self._write_conv(tx, conv)
        tx.emit(ConversationClosed(conversation_id=conv.id, at=now))

    async def _reopen(self, tx: Tx, conv: ConversationHandle) -> None:
        items = await self._load_items(conv.id)
        old_items, old_ids = conv._items, conv._item_ids
        conv._items = items
        conv._item_ids = {item.id: seq for seq, item in enumerate(items)}
        self._open[conv.id] = conv

        def undo() -> None:
            conv._items, conv._item_ids = old_items, old_ids
            self._open.pop(conv.id, None)

        tx.on_undo(undo)
        self._set_info(tx, conv, replace(conv._info, state="idle", updated_at=self.now()))
        self._write_conv(tx, conv)
        tx.emit(ConversationOpened(conversation=conv.snapshot()))

    # --- commands (called by the HTTP layer with decoded bodies) --------------------------

    async def _command(
        self, request_id: str, key: bytes, decide: Callable[[Tx], Awaitable[msgspec.Struct]]
    ) -> bytes:
        async def build(tx: Tx) -> bytes:
            prior = await self._prior(request_id, key)
            if prior is not None:
                return prior
            result = encode(await decide(tx))
            self._record(tx, request_id, key, result)
            return result

        return await self._transact(build)

    async def _open_target(
        self, conversation_id: str
    ) -> tuple[ConversationHandle | None, CommandResult | None]:
        conv = await self._find(conversation_id)
        if conv is None:
            return None, CommandResult(outcome="not_found", reason="conversation")
        if conv.closed:
            return None, CommandResult(outcome="refused", reason="closed")
        return conv, None

    async def command_message(self, key: bytes, conversation_id: str, msg: SendMessage) -> bytes:
        """``POST /conversations/{id}/messages``."""

        async def decide(tx: Tx) -> CommandResult:
            conv, refusal = await self._open_target(conversation_id)
            if conv is None:
                return refusal or _refused("closed")
            user = Item(
                id=conv._next_item_id(),
                kind="user",
                text=msg.text,
                at=self.now(),
                request_id=msg.request_id if self.echo_request_id else None,
            )
            if msg.steer:
                if not self.has("steer"):
                    return _refused("unsupported")
                if not conv.running or (msg.turn is not None and msg.turn != conv.turn):
                    return CommandResult(outcome="moved_on")
                self._add_item(tx, conv, user)
                tx.on_commit(lambda: conv.steered.put_nowait(msg))
                return CommandResult(outcome="accepted", conversation_id=conv.id)
            turn = Turn(number=conv.turn + 1)
            self._touch(tx, conv)
            conv._turns.append(turn)
            tx.on_undo(lambda: conv._turns.remove(turn))
            self._set_info(tx, conv, replace(conv._info, turn=turn.number))
            self._add_item(tx, conv, user)
            tx.on_commit(lambda: self._begin_turn(conv, turn, msg))
            return CommandResult(outcome="accepted", conversation_id=conv.id)

        return await self._command(msg.request_id, key, decide)

    async def command_stop(self, key: bytes, conversation_id: str, cmd: TurnCommand) -> bytes:
        """``POST /conversations/{id}/stop``."""

        async def decide(tx: Tx) -> CommandResult:
            conv, refusal = await self._open_target(conversation_id)
            if conv is None:
                return refusal or _refused("closed")
            if not self.has("stop"):
                return _refused("unsupported")
            if cmd.turn != conv.turn:
                return CommandResult(outcome="moved_on")
            asks = list(conv._open_asks.values())
            ran = self._stop_turns(tx, conv)
            if ran or asks:
                stopped = Resolution(how="stopped", at=self.now())
                for ask in asks:
                    self._resolve(tx, ask, stopped)
                self._finish_items(tx, conv)
                tx.emit(TurnStopped(conversation_id=conv.id, turn=conv.turn))
                self._touch(tx, conv)
            return CommandResult(outcome="accepted", conversation_id=conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def command_button(
        self, key: bytes, conversation_id: str, button_id: str, cmd: TurnCommand
    ) -> bytes:
        """``POST /conversations/{id}/buttons/{button}``."""

        async def decide(tx: Tx) -> CommandResult:
            conv, refusal = await self._open_target(conversation_id)
            if conv is None:
                return refusal or _refused("closed")
            if not self.has("buttons"):
                return _refused("unsupported")
            if cmd.turn != conv.turn:
                return CommandResult(outcome="moved_on")
            button = next((b for b in conv._info.buttons if b.id == button_id), None)
            if button is None:
                return CommandResult(outcome="not_found", reason="button")
            if button.busy or button.disabled:
                return _refused("busy" if button.busy else "disabled")
            tx.on_commit(lambda: self._spawn(self._run_button(conv, button_id)))
            return CommandResult(outcome="accepted", conversation_id=conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def _run_button(self, conv: ConversationHandle, button_id: str) -> None:
        if self._on_button is None:
            return
        try:
            await self._on_button(conv, button_id)
        except Exception:
            log.exception("button %s of %s failed", button_id, conv.id)

    async def command_close(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/close``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self._find(conversation_id)
            if conv is None:
                return CommandResult(outcome="not_found", reason="conversation")
            if not self.has("close"):
                return _refused("unsupported")
            if not conv.closed:
                await self._close(tx, conv)
                tx.on_commit(lambda: self._spawn(self._run_close(conv)))
            return CommandResult(outcome="accepted", conversation_id=conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def _run_close(self, conv: ConversationHandle) -> None:
        if self._on_close is None:
            return
        try:
            await self._on_close(conv)
        except Exception:
            log.exception("closing %s failed", conv.id)

    async def command_reopen(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/reopen``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self._find(conversation_id)
            if conv is None:
                return CommandResult(outcome="not_found", reason="conversation")
            if not self.has("reopen"):
                return _refused("unsupported")
            if conv.closed:
                await self._reopen(tx, conv)
            return CommandResult(outcome="accepted", conversation_id=conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def command_reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes:
        """``POST /asks/{id}/reply``.

        Raises:
            RequestError: the answer does not fit the ask (400), or the request id came
                before with another body (409).
        """

        if self._on_reply is not None:
            return await self._forward_reply(key, ask_id, reply)

        async def decide(tx: Tx) -> ReplyResult:
            found = await self._reply_check(tx, ask_id, reply)
            if isinstance(found, ReplyResult):
                return found
            resolution = Resolution(
                how="answered", at=self.now(), answer=reply.answer, request_id=reply.request_id
            )
            self._resolve(tx, found, resolution)
            return ReplyResult(outcome="accepted")

        return await self._command(reply.request_id, key, decide)

    async def _reply_check(self, tx: Tx, ask_id: str, reply: Reply) -> ReplyResult | AskHandle:
        """The outcome of a reply that cannot be accepted (§12.1 rows 2–6), or the open ask
        it fits.

        Raises:
            RequestError: the answer does not fit the ask (400).
        """
        handle = self._open_asks.get(ask_id)
        if handle is None:
            rows = await self._store.fetch("SELECT resolution FROM asks WHERE id = ?", (ask_id,))
            if not rows or rows[0][0] is None:
                return ReplyResult(outcome="not_open")
            how = decode(bytes(rows[0][0]), Resolution).how
            if how in _OUTCOME_OF:
                return ReplyResult(outcome=_OUTCOME_OF[how])
            return ReplyResult(outcome="not_open", reason=how)
        now = self.now()
        deadline = handle.ask.deadline
        if deadline is not None and aware(deadline) <= now:
            self._resolve(tx, handle, Resolution(how="expired", at=now))
            return ReplyResult(outcome="expired")
        if reply.version != handle.ask.version:
            return ReplyResult(outcome="changed")
        problem = check_answer(handle.ask, reply.answer)
        if problem is None and self.answer_check is not None:
            problem = self.answer_check(handle.ask, reply.answer)
        if problem is not None:
            raise RequestError(400, "bad_request", problem)
        return handle

    async def _forward_reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes:
        """A reply through ``on_reply``: checked and recorded here, decided by the handler,
        with no transaction held while it runs."""
        assert self._on_reply is not None
        lock = self._reply_locks.setdefault(ask_id, asyncio.Lock())
        async with lock:

            async def check(tx: Tx) -> bytes | AskHandle:
                prior = await self._prior(reply.request_id, key)
                if prior is not None:
                    return prior
                found = await self._reply_check(tx, ask_id, reply)
                if isinstance(found, AskHandle):
                    return found
                result = encode(found)
                self._record(tx, reply.request_id, key, result)
                return result

            found = await self._transact(check)
            if isinstance(found, bytes):
                return found
            handle = found
            try:
                outcome = await self._on_reply(handle, reply)
            except Exception as exc:
                log.warning("on_reply for %s failed: %s", ask_id, exc)
                raise RequestError(
                    502, "upstream", "The answer could not be passed on; nothing was recorded."
                ) from None

            async def record(tx: Tx) -> bytes:
                if handle.open:
                    how = {"accepted": "answered"}.get(outcome.outcome, outcome.outcome)
                    if how in _OUTCOME_OF:
                        request_id = reply.request_id if outcome.outcome == "accepted" else None
                        answer = reply.answer if outcome.outcome == "accepted" else None
                        resolution = Resolution(
                            how=how, at=self.now(), answer=answer, request_id=request_id
                        )
                        self._resolve(tx, handle, resolution)
                result = encode(outcome)
                self._record(tx, reply.request_id, key, result)
                return result

            try:
                return await self._transact(record)
            finally:
                if not handle.open:  # later replies find it closed without the handler
                    self._reply_locks.pop(ask_id, None)

    async def command_start(self, key: bytes, cmd: StartConversation) -> bytes:
        """``POST /conversations``: the starter's handler opens the conversation; the command
        is recorded in the transaction that opens it."""
        loop = asyncio.get_running_loop()

        async def check(tx: Tx) -> bytes | tuple[bool, asyncio.Future[bytes]]:
            inflight = self._inflight.get(cmd.request_id)
            if inflight is not None:
                if inflight[0] != key:
                    raise _reused()
                return False, inflight[1]
            prior = await self._prior(cmd.request_id, key)
            if prior is not None:
                return prior
            result: CommandResult | None = None
            if not self.has("starters"):
                result = _refused("unsupported")
            elif all(s.id != cmd.starter for s in self.starters):
                result = CommandResult(outcome="not_found", reason="starter")
            if result is not None:
                encoded = encode(result)
                self._record(tx, cmd.request_id, key, encoded)
                return encoded
            future: asyncio.Future[bytes] = loop.create_future()
            self._inflight[cmd.request_id] = (key, future)
            return True, future

        found = await self._transact(check)
        if isinstance(found, bytes):
            return found
        mine, future = found
        if not mine:  # the same command is running: its result is ours
            return await asyncio.shield(future)
        try:
            result = await self._start(key, cmd)
        except BaseException:
            future.set_exception(
                RequestError(500, "internal", "The starter failed; nothing was recorded.")
            )
            future.exception()  # the waiters, if any, get it; none is not an error
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._inflight[cmd.request_id]

    async def _start(self, key: bytes, cmd: StartConversation) -> bytes:
        starter = next(s for s in self.starters if s.id == cmd.starter)
        pending = _PendingStart(cmd.request_id, key)
        token = _PENDING_START.set(pending)
        try:
            if self._on_start is not None:
                conv = await self._on_start(starter.id)
            else:
                conv = await self.open_conversation(title=starter.label)
        finally:
            _PENDING_START.reset(token)
            pending.closed = True
        if pending.result is not None:
            return pending.result
        result = encode(CommandResult(outcome="accepted", conversation_id=conv.id))

        async def record(tx: Tx) -> bytes:
            self._record(tx, cmd.request_id, key, result)
            return result

        return await self._transact(record)

    # --- reads (called by the HTTP layer) ------------------------------------------------

    async def read_open(self) -> tuple[ConversationPage, int]:
        """Every open conversation, newest first, and the id of the newest event reflected."""
        async with self._store.locked():
            convs = sorted(
                (c.snapshot() for c in self._open.values()),
                key=lambda c: (aware(c.updated_at), c.id),
                reverse=True,
            )
            return ConversationPage(conversations=convs), self._store.last_event_id

    async def read_closed(
        self, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[ConversationPage, int]:
        """A page of closed conversations, newest ``updated_at`` first."""
        if not self.keeps_list:
            return ConversationPage(keeps_list=False), self._store.last_event_id
        sql = "SELECT updated_us, id, data FROM conversations WHERE state = 'closed'"
        params: tuple[Any, ...] = ()
        if cursor is not None:
            sql += " AND (updated_us, id) < (?, ?)"
            params = cursor
        sql += " ORDER BY updated_us DESC, id DESC LIMIT ?"
        async with self._store.locked():
            rows = await self._store.fetch(sql, (*params, limit + 1))
            last = self._store.last_event_id
        page = [decode(bytes(r[2]), Conversation) for r in rows[:limit]]
        next_cursor = f"{rows[limit - 1][0]}:{rows[limit - 1][1]}" if len(rows) > limit else None
        return ConversationPage(conversations=page, next_cursor=next_cursor), last

    async def read_conversation(self, conversation_id: str) -> tuple[Conversation | None, int]:
        """One conversation with its items."""
        async with self._store.locked():
            last = self._store.last_event_id
            conv = self._open.get(conversation_id)
            if conv is not None:
                return _fit(replace(conv.snapshot(), items=list(conv._items))), last
            rows = await self._store.fetch(
                "SELECT data FROM conversations WHERE id = ?", (conversation_id,)
            )
            if not rows:
                return None, last
            items = await self._load_items(conversation_id)
        return _fit(replace(decode(bytes(rows[0][0]), Conversation), items=items)), last


LEFT_OUT: Final = "Earlier items were left out: the conversation is too long to send whole."


def _fit(conv: Conversation) -> Conversation:
    """``conv`` as one answer can carry it: over 8 MiB, its oldest items are left out and a
    notice says so (wire/SPEC.md §4)."""
    items = conv.items or []
    if len(encode(conv)) <= MAX_BODY:
        return conv
    taken = {item.id for item in items}
    notice_id = next(f"left-out-{n}" for n in range(len(items) + 1) if f"left-out-{n}" not in taken)
    notice = Item(id=notice_id, kind="notice", text=LEFT_OUT)
    budget = MAX_BODY - len(encode(replace(conv, items=[notice])))
    kept: list[Item] = []
    for item in reversed(items):
        budget -= len(encode(item)) + 1  # and its comma
        if budget < 0:
            break
        kept.append(item)
    return replace(conv, items=[notice, *reversed(kept)])


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run ``work`` until it ends (True) or ``stop`` is set first (then cancel it: False)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()  # setup's own error ends the agent
    return True


def _refused(reason: str) -> CommandResult:
    return CommandResult(outcome="refused", reason=reason)


def _reused() -> RequestError:
    return RequestError(
        409, "request_id_reused", "This request id came before with another command."
    )


__all__ = [
    "Agent",
    "AskHandle",
    "ButtonHandler",
    "CloseHandler",
    "ConversationHandle",
    "ItemHandle",
    "MessageHandler",
    "RequestError",
    "Resolution",
    "StartHandler",
]
