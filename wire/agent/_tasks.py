"""The agent's running work: its tasks (cancelled when it closes, their failures logged), the
turns of its conversations, the handlers the agent's code registered, and the deadline check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from wire.agent._handles import AskHandle, ConversationHandle, Turn
from wire.agent._state import State
from wire.agent._store import Tx
from wire.messages import Reply, ReplyResult, SendMessage
from wire.tasks import all_cancelled

log = logging.getLogger(__name__)

MessageHandler = Callable[[ConversationHandle, SendMessage], Awaitable[None]]
StartHandler = Callable[[str], Awaitable[ConversationHandle]]
ButtonHandler = Callable[[ConversationHandle, str], Awaitable[None]]
ReplyHandler = Callable[[AskHandle, Reply], Awaitable[ReplyResult]]
CloseHandler = Callable[[ConversationHandle], Awaitable[None]]


@dataclass(eq=False)
class Handlers:
    """The handlers the agent's code registered (``None``: not registered)."""

    message: MessageHandler | None = None
    start: StartHandler | None = None
    button: ButtonHandler | None = None
    reply: ReplyHandler | None = None
    close: CloseHandler | None = None


class Tasks:
    """The agent's tasks: turns, handlers run after a command, and its own (``spawn``)."""

    def __init__(self, state: State, handlers: Handlers) -> None:
        self.state = state
        self.handlers = handlers
        self.closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        state.on_stop = self._stop_turn

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task of the agent (closed unrun once the agent closes)."""
        if self.closing:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("agent task failed", exc_info=exc)

    async def cancel_all(self) -> None:
        """Cancel every task and wait until they ended (a task that lost a cancel is
        cancelled again)."""
        await all_cancelled(self._tasks)

    def _stop_turn(self, turn: Turn) -> None:
        """A Stop ended ``turn``: cancel its task, and again while it goes on (a cancel lost
        would leave it running on)."""
        if turn.task is not None:
            self.spawn(all_cancelled([turn.task]))

    async def expire_loop(self, interval: float) -> None:
        """Every ``interval`` seconds while an open ask has a deadline, resolve the asks whose
        deadline passed; with none, wait for one to open."""
        opened = asyncio.Event()
        self.state.on_deadline = opened.set
        while True:
            if not self.state.any_deadline():
                opened.clear()
                await opened.wait()
            await asyncio.sleep(interval)
            if self.state.any_due():
                await self.state.expire_due()

    # --- turns ---------------------------------------------------------------------------

    def begin_turn(self, conv: ConversationHandle, turn: Turn, msg: SendMessage) -> None:
        """Run ``turn`` once the turns before it in ``conv`` ended."""
        if self.closing:
            return
        earlier = [t.task for t in conv._turns if t is not turn and t.task is not None]
        task = asyncio.ensure_future(self._run_turn(conv, msg, earlier))
        turn.task = task
        self._tasks.add(task)
        task.add_done_callback(self._done)
        task.add_done_callback(lambda _: self.spawn(self._end_turn(conv, turn)))

    async def _run_turn(
        self, conv: ConversationHandle, msg: SendMessage, earlier: list[asyncio.Task[None]]
    ) -> None:
        if earlier:
            await asyncio.wait(earlier)
        if self.handlers.message is None:
            return
        try:
            await self.handlers.message(conv, msg)
        except Exception:
            log.exception("turn %s of %s failed", conv.turn, conv.id)
            if not conv.closed:
                await conv.append(kind="notice", text="This turn failed.")

    async def _end_turn(self, conv: ConversationHandle, turn: Turn) -> None:
        async def build(tx: Tx) -> None:
            self.state.end_turn(tx, conv, turn)

        await self.state.transact(build)

    # --- handlers run after a command ----------------------------------------------------

    def button(self, conv: ConversationHandle, button_id: str) -> None:
        """Run the button handler for a tap on ``button_id``."""
        self.spawn(self._run_button(conv, button_id))

    async def _run_button(self, conv: ConversationHandle, button_id: str) -> None:
        if self.handlers.button is None:
            return
        try:
            await self.handlers.button(conv, button_id)
        except Exception:
            log.exception("button %s of %s failed", button_id, conv.id)

    def closed(self, conv: ConversationHandle) -> None:
        """Run the close handler: ``POST …/close`` closed ``conv``."""
        self.spawn(self._run_close(conv))

    async def _run_close(self, conv: ConversationHandle) -> None:
        if self.handlers.close is None:
            return
        try:
            await self.handlers.close(conv)
        except Exception:
            log.exception("closing %s failed", conv.id)
