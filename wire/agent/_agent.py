"""The agent: conversations, items, asks and turns, kept in its SQLite file, and the commands
of wire/SPEC.md applied to them exactly once per request id.

The facade of the SDK: it builds its rooms and delegates to them — ``_state`` (memory and the
writer's operations) over ``_store`` (all SQL), ``_commands`` (the commands and reads the HTTP
face calls), ``_tasks`` (turns and handlers), ``_server`` (the HTTP face); the decisions are
``_rules``'s (pure). The handles and the HTTP face know the agent only through the protocols
they declare (``Host``, ``ServedAgent``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from wire.agent._commands import Commands
from wire.agent._handles import AskHandle, ConversationHandle, ItemHandle
from wire.agent._rules import Resolution
from wire.agent._server import AgentRunner, RequestError, build_app, serve_tcp, serve_unix
from wire.agent._state import State
from wire.agent._store import Store
from wire.agent._tasks import (
    ButtonHandler,
    CloseHandler,
    Handlers,
    MessageHandler,
    ReplyHandler,
    StartHandler,
    Tasks,
)
from wire.messages import (
    WIRE_VERSION,
    Answer,
    Ask,
    Button,
    Conversation,
    ConversationPage,
    Hello,
    PlainCommand,
    Progress,
    Reply,
    SendMessage,
    StartConversation,
    Starter,
    TurnCommand,
)
from wire.tasks import cancelled

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Middleware

KEEP_EVENTS: Final = 10_000
PING_INTERVAL: Final = 15.0  # wire/SPEC.md, Events: a ping at least every 15 s


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
        self._store = Store(state_path, keep_events=keep_events)
        self._state = State(self, self._store, now or (lambda: datetime.now(UTC)))
        self._handlers = Handlers()
        self._work = Tasks(self._state, self._handlers)
        self._commands = Commands(self, self._state, self._work, self._handlers)
        self._runners: list[AgentRunner] = []
        self._started = False
        self._start_lock = asyncio.Lock()

    @property
    def _open(self) -> dict[str, ConversationHandle]:
        """The open conversations by id (kept by ``_state``)."""
        return self._state.open

    @property
    def _open_asks(self) -> dict[str, AskHandle]:
        """The open asks by id (kept by ``_state``)."""
        return self._state.open_asks

    # --- handlers ----------------------------------------------------------------------

    def on_message(self, fn: MessageHandler) -> MessageHandler:
        """Register the turn: ``async (conv, SendMessage) -> None``. A steering message does
        not call it; it goes to ``conv.steered``."""
        self._handlers.message = fn
        return fn

    def on_start(self, fn: StartHandler) -> StartHandler:
        """Register ``async (starter_id) -> ConversationHandle`` for ``POST /conversations``;
        without it a starter opens a conversation titled with the starter's label."""
        self._handlers.start = fn
        return fn

    def on_button(self, fn: ButtonHandler) -> ButtonHandler:
        """Register ``async (conv, button_id) -> None`` for a tap on one of the agent's buttons."""
        self._handlers.button = fn
        return fn

    def on_reply(self, fn: ReplyHandler) -> ReplyHandler:
        """Register ``async (ask, Reply) -> ReplyResult``: a reply that fits an open ask is
        handed to it before anything is recorded, and its outcome is the reply's (a bridge
        forwards the answer and reports what the far end said). ``accepted`` resolves the ask
        ``answered`` with the reply's request id; ``answered``, ``decided`` and ``expired``
        resolve it so (another answer won); any other outcome leaves it open. If it raises,
        the reply is answered ``502`` and nothing is recorded, so a retry calls it again.
        Replies to one ask reach it one at a time."""
        self._handlers.reply = fn
        return fn

    def on_close(self, fn: CloseHandler) -> CloseHandler:
        """Register ``async (conv) -> None``, run after ``POST …/close`` closed a conversation
        (an agent's own :meth:`ConversationHandle.close` does not call it)."""
        self._handlers.close = fn
        return fn

    # --- life ----------------------------------------------------------------------------

    def now(self) -> datetime:
        """The agent's clock (UTC)."""
        return self._state.now()

    def has(self, feature: str) -> bool:
        """Whether the hello declares ``feature``."""
        return self.hello.has(feature)

    async def start(self) -> None:
        """Open the state file and load the open conversations (done by the first use)."""
        async with self._start_lock:
            if self._started:
                return
            if self._work.closing:
                raise RuntimeError("the agent is closed")
            await self._store.open()
            try:
                await self._state.load()
            except BaseException:
                await self._store.close()
                raise
            self._started = True
            self._work.spawn(self._work.expire_loop(self.expiry_interval))

    async def close(self) -> None:
        """Stop serving, cancel running turns and handlers, close the state file."""
        if self._work.closing:
            return
        self._work.closing = True
        for runner in list(self._runners):
            await runner.close()
        await self._work.cancel_all()
        if self._started:
            await self._store.close()

    @contextlib.asynccontextmanager
    async def between_commits(self) -> AsyncIterator[None]:
        """Hold the state file between the agent's own writes: inside, the agent has no
        transaction open on it (its writes wait), so a bridge's short write to its own tables
        in the same file can run on the event loop without waiting for the agent's writer."""
        await self.start()
        async with self._store.lock:
            yield

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def serve_unix(self, path: Path) -> AgentRunner:
        """Serve on a Unix socket at ``path``, created mode 0600."""
        await self.start()
        self._state.served = True
        runner = await serve_unix(self, path, on_close=self._forget_runner)
        self._runners.append(runner)
        return runner

    async def serve_tcp(self, host: str, port: int) -> AgentRunner:
        """Serve on ``host``:``port`` (0 picks a free port; see ``runner.url``)."""
        await self.start()
        self._state.served = True
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
        self._work.spawn(coro)

    def app(self) -> web.Application:
        """An aiohttp application serving this agent (after :meth:`start`)."""
        self._state.served = True
        return build_app(self)

    # --- the agent's own API ---------------------------------------------------------------

    @property
    def conversations(self) -> list[ConversationHandle]:
        """The open conversations."""
        return list(self._state.open.values())

    async def conversation(self, id: str) -> ConversationHandle | None:
        """The conversation ``id``, open or closed; ``None`` when there is none."""
        await self.start()
        async with self._store.locked():
            return await self._state.find(id)

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
        return await self._state.open_conversation(
            id,
            title=title,
            subtitle=subtitle,
            workspace=workspace,
            buttons=buttons,
            progress=progress,
        )

    async def expire_due(self) -> int:
        """Resolve as ``expired`` every open ask whose deadline passed; returns how many."""
        await self.start()
        return await self._state.expire_due()

    # --- commands and reads (called by the HTTP layer with decoded bodies) ----------------

    async def command_start(self, key: bytes, cmd: StartConversation) -> bytes:
        """``POST /conversations``: the starter's handler opens the conversation; the command
        is recorded in the transaction that opens it."""
        return await self._commands.start(key, cmd)

    async def command_message(self, key: bytes, conversation_id: str, msg: SendMessage) -> bytes:
        """``POST /conversations/{id}/messages``."""
        return await self._commands.message(key, conversation_id, msg)

    async def command_stop(self, key: bytes, conversation_id: str, cmd: TurnCommand) -> bytes:
        """``POST /conversations/{id}/stop``."""
        return await self._commands.stop(key, conversation_id, cmd)

    async def command_button(
        self, key: bytes, conversation_id: str, button_id: str, cmd: TurnCommand
    ) -> bytes:
        """``POST /conversations/{id}/buttons/{button}``."""
        return await self._commands.button(key, conversation_id, button_id, cmd)

    async def command_close(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/close``."""
        return await self._commands.close(key, conversation_id, cmd)

    async def command_reopen(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/reopen``."""
        return await self._commands.reopen(key, conversation_id, cmd)

    async def command_reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes:
        """``POST /asks/{id}/reply``.

        Raises:
            RequestError: the answer does not fit the ask (400), or the request id came
                before with another body (409).
        """
        return await self._commands.reply(key, ask_id, reply)

    async def read_open(self) -> tuple[ConversationPage, int]:
        """Every open conversation, newest first, and the id of the newest event reflected."""
        return await self._commands.read_open()

    async def read_closed(
        self, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[ConversationPage, int]:
        """A page of closed conversations, newest ``updated_at`` first."""
        return await self._commands.read_closed(limit, cursor)

    async def read_conversation(self, conversation_id: str) -> tuple[Conversation | None, int]:
        """One conversation with its items."""
        return await self._commands.read_conversation(conversation_id)


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run ``work`` until it ends (True) or ``stop`` is set first (then cancel it: False)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        await cancelled(task)
        return False
    task.result()  # setup's own error ends the agent
    return True


__all__ = [
    "Agent",
    "AskHandle",
    "ButtonHandler",
    "CloseHandler",
    "ConversationHandle",
    "ItemHandle",
    "MessageHandler",
    "ReplyHandler",
    "RequestError",
    "Resolution",
    "StartHandler",
]
