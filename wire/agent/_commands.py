"""The commands and reads of wire/SPEC.md, applied to the agent's state exactly once per
request id: each command's outcome is decided by ``_rules`` and recorded with its changes in
one transaction, so a retry gets the first result again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec
from msgspec.structs import replace

from wire.agent._handles import AskHandle, ConversationHandle
from wire.agent._rules import (
    NO_CONVERSATION,
    AnswerCheck,
    Resolution,
    accepted,
    answered,
    button_refusal,
    fit,
    forwarded,
    judge_reply,
    newest_first,
    next_cursor,
    not_open,
    refused,
    start_refusal,
    steer_refusal,
    turn_refusal,
)
from wire.agent._server import RequestError
from wire.agent._state import PENDING_START, PendingStart, State
from wire.agent._store import Tx
from wire.agent._tasks import Handlers, Tasks
from wire.messages import (
    CommandResult,
    Conversation,
    ConversationPage,
    Item,
    PlainCommand,
    Reply,
    ReplyResult,
    SendMessage,
    StartConversation,
    Starter,
    TurnCommand,
    encode,
)

log = logging.getLogger(__name__)


class Options(Protocol):
    """What the commands read of the agent's options (``Agent`` is the implementation)."""

    starters: list[Starter]
    keeps_list: bool
    echo_request_id: bool
    answer_check: AnswerCheck | None

    def has(self, feature: str) -> bool: ...


def _reused() -> RequestError:
    return RequestError(
        409, "request_id_reused", "This request id came before with another command."
    )


class Commands:
    """What the HTTP layer calls with decoded bodies; each returns the encoded result."""

    def __init__(self, options: Options, state: State, tasks: Tasks, handlers: Handlers) -> None:
        self.options = options
        self.state = state
        self.tasks = tasks
        self.handlers = handlers
        self._inflight: dict[str, tuple[bytes, asyncio.Future[bytes]]] = {}
        self._reply_locks: dict[str, asyncio.Lock] = {}

    async def _command(
        self, request_id: str, key: bytes, decide: Callable[[Tx], Awaitable[msgspec.Struct]]
    ) -> bytes:
        async def build(tx: Tx) -> bytes:
            prior = await self._prior(request_id, key)
            if prior is not None:
                return prior
            result = encode(await decide(tx))
            self.state.record(tx, request_id, key, result)
            return result

        return await self.state.transact(build)

    async def _prior(self, request_id: str, key: bytes) -> bytes | None:
        """The first result of ``request_id``; raises when it came with another body."""
        inflight = self._inflight.get(request_id)
        if inflight is not None and inflight[0] != key:
            raise _reused()
        kept = await self.state.store.prior(request_id)
        if kept is None:
            return None
        if kept[0] != key:
            raise _reused()
        return kept[1]

    async def _open_target(self, conversation_id: str) -> ConversationHandle | CommandResult:
        """The open conversation a command is for, or its refusal (not found, closed)."""
        conv = await self.state.find(conversation_id)
        if conv is None:
            return NO_CONVERSATION
        return refused("closed") if conv.closed else conv

    async def message(self, key: bytes, conversation_id: str, msg: SendMessage) -> bytes:
        """``POST /conversations/{id}/messages``."""
        options, state = self.options, self.state

        async def decide(tx: Tx) -> CommandResult:
            conv = await self._open_target(conversation_id)
            if isinstance(conv, CommandResult):
                return conv
            user = Item(
                id=conv._next_item_id(),
                kind="user",
                text=msg.text,
                at=state.now(),
                request_id=msg.request_id if options.echo_request_id else None,
            )
            if msg.steer:
                refusal = steer_refusal(
                    supported=options.has("steer"),
                    running=conv.running,
                    turn=msg.turn,
                    current=conv.turn,
                )
                if refusal is not None:
                    return refusal
                state.add_item(tx, conv, user)
                tx.on_commit(lambda: conv.steered.put_nowait(msg))
                return accepted(conv.id)
            turn = state.new_turn(tx, conv, user)
            tx.on_commit(lambda: self.tasks.begin_turn(conv, turn, msg))
            return accepted(conv.id)

        return await self._command(msg.request_id, key, decide)

    async def stop(self, key: bytes, conversation_id: str, cmd: TurnCommand) -> bytes:
        """``POST /conversations/{id}/stop``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self._open_target(conversation_id)
            if isinstance(conv, CommandResult):
                return conv
            supported = self.options.has("stop")
            refusal = turn_refusal(supported=supported, turn=cmd.turn, current=conv.turn)
            if refusal is not None:
                return refusal
            self.state.stop(tx, conv)
            return accepted(conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def button(
        self, key: bytes, conversation_id: str, button_id: str, cmd: TurnCommand
    ) -> bytes:
        """``POST /conversations/{id}/buttons/{button}``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self._open_target(conversation_id)
            if isinstance(conv, CommandResult):
                return conv
            supported = self.options.has("buttons")
            refusal = turn_refusal(
                supported=supported, turn=cmd.turn, current=conv.turn
            ) or button_refusal(next((b for b in conv._info.buttons if b.id == button_id), None))
            if refusal is not None:
                return refusal
            tx.on_commit(lambda: self.tasks.button(conv, button_id))
            return accepted(conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def close(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/close``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self.state.find(conversation_id)
            if conv is None:
                return NO_CONVERSATION
            if not self.options.has("close"):
                return refused("unsupported")
            if not conv.closed:
                await self.state.close(tx, conv)
                tx.on_commit(lambda: self.tasks.closed(conv))
            return accepted(conv.id)

        return await self._command(cmd.request_id, key, decide)

    async def reopen(self, key: bytes, conversation_id: str, cmd: PlainCommand) -> bytes:
        """``POST /conversations/{id}/reopen``."""

        async def decide(tx: Tx) -> CommandResult:
            conv = await self.state.find(conversation_id)
            if conv is None:
                return NO_CONVERSATION
            if not self.options.has("reopen"):
                return refused("unsupported")
            if conv.closed:
                await self.state.reopen(tx, conv)
            return accepted(conv.id)

        return await self._command(cmd.request_id, key, decide)

    # --- replies -------------------------------------------------------------------------

    async def reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes:
        """``POST /asks/{id}/reply``.

        Raises:
            RequestError: the answer does not fit the ask (400), or the request id came
                before with another body (409).
        """
        if self.handlers.reply is not None:
            return await self._forward_reply(key, ask_id, reply)

        async def decide(tx: Tx) -> ReplyResult:
            found = await self._reply_check(tx, ask_id, reply)
            if isinstance(found, ReplyResult):
                return found
            self.state.resolve(tx, found, answered(reply, self.state.now()))
            return ReplyResult(outcome="accepted")

        return await self._command(reply.request_id, key, decide)

    async def _reply_check(self, tx: Tx, ask_id: str, reply: Reply) -> ReplyResult | AskHandle:
        """The outcome of a reply that cannot be accepted (§12.1 rows 2–6), or the open ask
        it fits.

        Raises:
            RequestError: the answer does not fit the ask (400).
        """
        state = self.state
        handle = state.open_asks.get(ask_id)
        if handle is None:
            return not_open(await state.store.resolution(ask_id))
        now = state.now()
        verdict = judge_reply(handle.ask, reply, now, self.options.answer_check)
        if isinstance(verdict, str):
            raise RequestError(400, "bad_request", verdict)
        if verdict is None:
            return handle
        if verdict.outcome == "expired":
            state.resolve(tx, handle, Resolution(how="expired", at=now))
        return verdict

    async def _forward_reply(self, key: bytes, ask_id: str, reply: Reply) -> bytes:
        """A reply through ``on_reply``: checked and recorded here, decided by the handler,
        with no transaction held while it runs."""
        lock = self._reply_locks.setdefault(ask_id, asyncio.Lock())
        async with lock:
            found = await self.state.transact(
                lambda tx: self._check_forward(tx, key, ask_id, reply)
            )
            if isinstance(found, bytes):
                return found
            handle = found
            outcome = await self._call_on_reply(handle, ask_id, reply)

            async def record(tx: Tx) -> bytes:
                if handle.open:
                    resolution = forwarded(outcome, reply, self.state.now())
                    if resolution is not None:
                        self.state.resolve(tx, handle, resolution)
                result = encode(outcome)
                self.state.record(tx, reply.request_id, key, result)
                return result

            try:
                return await self.state.transact(record)
            finally:
                if not handle.open:  # later replies find it closed without the handler
                    self._reply_locks.pop(ask_id, None)

    async def _check_forward(
        self, tx: Tx, key: bytes, ask_id: str, reply: Reply
    ) -> bytes | AskHandle:
        """A forwarded reply's first result, or its outcome recorded now, or the open ask."""
        prior = await self._prior(reply.request_id, key)
        if prior is not None:
            return prior
        found = await self._reply_check(tx, ask_id, reply)
        if isinstance(found, AskHandle):
            return found
        result = encode(found)
        self.state.record(tx, reply.request_id, key, result)
        return result

    async def _call_on_reply(self, handle: AskHandle, ask_id: str, reply: Reply) -> ReplyResult:
        assert self.handlers.reply is not None
        try:
            return await self.handlers.reply(handle, reply)
        except Exception as exc:
            log.warning("on_reply for %s failed: %s", ask_id, exc)
            raise RequestError(
                502, "upstream", "The answer could not be passed on; nothing was recorded."
            ) from None

    # --- starting a conversation ---------------------------------------------------------

    async def start(self, key: bytes, cmd: StartConversation) -> bytes:
        """``POST /conversations``: the starter's handler opens the conversation; the command
        is recorded in the transaction that opens it."""
        found = await self.state.transact(lambda tx: self._check_start(tx, key, cmd))
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

    async def _check_start(
        self, tx: Tx, key: bytes, cmd: StartConversation
    ) -> bytes | tuple[bool, asyncio.Future[bytes]]:
        """A start's first result (or the one running), its refusal recorded now, or a new
        future for the one this call runs (``True``)."""
        inflight = self._inflight.get(cmd.request_id)
        if inflight is not None:
            if inflight[0] != key:
                raise _reused()
            return False, inflight[1]
        prior = await self._prior(cmd.request_id, key)
        if prior is not None:
            return prior
        options = self.options
        refusal = start_refusal(
            supported=options.has("starters"), starters=options.starters, starter_id=cmd.starter
        )
        if refusal is not None:
            encoded = encode(refusal)
            self.state.record(tx, cmd.request_id, key, encoded)
            return encoded
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._inflight[cmd.request_id] = (key, future)
        return True, future

    async def _start(self, key: bytes, cmd: StartConversation) -> bytes:
        starter = next(s for s in self.options.starters if s.id == cmd.starter)
        pending = PendingStart(cmd.request_id, key)
        token = PENDING_START.set(pending)
        try:
            if self.handlers.start is not None:
                conv = await self.handlers.start(starter.id)
            else:
                conv = await self.state.open_conversation(None, title=starter.label)
        finally:
            PENDING_START.reset(token)
            pending.closed = True
        if pending.result is not None:
            return pending.result
        result = encode(accepted(conv.id))

        async def record(tx: Tx) -> bytes:
            self.state.record(tx, cmd.request_id, key, result)
            return result

        return await self.state.transact(record)

    # --- reads ---------------------------------------------------------------------------

    async def read_open(self) -> tuple[ConversationPage, int]:
        """Every open conversation, newest first, and the id of the newest event reflected."""
        store = self.state.store
        async with store.locked():
            convs = newest_first(c.snapshot() for c in self.state.open.values())
            return ConversationPage(conversations=convs), store.last_event_id

    async def read_closed(
        self, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[ConversationPage, int]:
        """A page of closed conversations, newest ``updated_at`` first."""
        store = self.state.store
        if not self.options.keeps_list:
            return ConversationPage(keeps_list=False), store.last_event_id
        async with store.locked():
            rows = await store.closed_page(limit + 1, cursor)
            last = store.last_event_id
        page = [conv for _, _, conv in rows[:limit]]
        after = next_cursor([(at, conv_id) for at, conv_id, _ in rows], limit)
        return ConversationPage(conversations=page, next_cursor=after), last

    async def read_conversation(self, conversation_id: str) -> tuple[Conversation | None, int]:
        """One conversation with its items."""
        store = self.state.store
        async with store.locked():
            last = store.last_event_id
            conv = self.state.open.get(conversation_id)
            if conv is not None:
                return fit(replace(conv.snapshot(), items=list(conv._items))), last
            info = await store.conversation(conversation_id)
            if info is None:
                return None, last
            items = await store.items(conversation_id)
        return fit(replace(info, items=items)), last
