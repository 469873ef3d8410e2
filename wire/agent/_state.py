"""The agent's state in memory (open conversations, their asks, the handles given out) and
every change to it, each made inside one transaction of the store with an undo, so memory
and the state file move together. Decisions come from ``_rules``, statements from ``_store``.

It knows its agent only as the :class:`~wire.agent._handles.Host` its handles belong to:
imports run ``_agent`` → ``_state`` → ``_handles`` → ``_store`` → ``_rules``."""

from __future__ import annotations

import contextvars
import secrets
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from msgspec.structs import replace

from wire.agent._handles import AskHandle, ConversationHandle, Host, Turn
from wire.agent._rules import (
    Resolution,
    accepted,
    ask_resolved,
    aware,
    checked,
    derived_state,
    finished,
    is_due,
    requests_cutoff,
    us,
)
from wire.agent._store import UPDATE_ITEM, Store, Tx
from wire.messages import (
    Ask,
    AskChanged,
    AskRaised,
    Button,
    Conversation,
    ConversationClosed,
    ConversationOpened,
    ConversationUpdated,
    Item,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    Progress,
    TurnStopped,
    encode,
)

S = TypeVar("S")


@dataclass(eq=False)
class PendingStart:
    """A ``POST /conversations`` whose starter runs: the first conversation it opens records
    the command's result in the transaction that opens it."""

    request_id: str
    key: bytes
    result: bytes | None = None
    closed: bool = False


PENDING_START: contextvars.ContextVar[PendingStart | None] = contextvars.ContextVar(
    "wire_agent_pending_start", default=None
)


def _nothing() -> None:
    return None


def _cancel(turn: Turn) -> None:
    if turn.task is not None:
        turn.task.cancel()


class State:
    """The open conversations and asks, the ``once`` marks of this run, and the writer's
    operations on them (the :class:`~wire.agent._handles.Keeper` of the handles)."""

    def __init__(self, host: Host, store: Store, clock: Callable[[], datetime]) -> None:
        self.host = host
        self.store = store
        self.clock = clock
        self.open: dict[str, ConversationHandle] = {}
        self.handles: weakref.WeakValueDictionary[str, ConversationHandle] = (
            weakref.WeakValueDictionary()
        )
        self.open_asks: dict[str, AskHandle] = {}
        # Called when an ask with a deadline opens: the expiry sweep sleeps until then (an
        # agent with no deadline to watch never wakes for it).
        self.on_deadline: Callable[[], None] = _nothing
        # Called for each turn a Stop ended, once committed: its task is to be cancelled.
        self.on_stop: Callable[[Turn], None] = _cancel
        self.acted: set[tuple[str, str]] = set()  # AskHandle.once marks of this run
        self.served = False  # an app was built: answers can arrive

    def now(self) -> datetime:
        """The agent's clock (UTC)."""
        return aware(self.clock())

    async def transact(self, build: Callable[[Tx], Awaitable[S]], *, defer: bool = False) -> S:
        """Run ``build`` in one transaction of the store; each conversation it changed sends
        one ``conversation.updated``."""

        async def inner(tx: Tx) -> S:
            result = await build(tx)
            self._finish(tx)
            return result

        return await self.store.transact(inner, defer=defer)

    # --- reading -------------------------------------------------------------------------

    async def load(self) -> None:
        """Load the open conversations, forget old command records, and settle what no run
        holds any more."""
        store = self.store
        async with store.locked():
            for info in await store.open_conversations():
                conv = ConversationHandle(self.host, info, await store.items(info.id))
                self.open[info.id] = conv
                self.handles[info.id] = conv
            await store.forget_requests(requests_cutoff(self.now()))

        async def settle(tx: Tx) -> None:
            # No turn runs and no ask is raised yet: a state kept from before is not true now,
            # and an item still being written lost its writer.
            for conv in self.open.values():
                self.touch(tx, conv)
                self.finish_items(tx, conv)

        await self.transact(settle)

    async def find(self, conversation_id: str) -> ConversationHandle | None:
        """The handle of a conversation; the caller holds the store's lock."""
        conv = self.open.get(conversation_id) or self.handles.get(conversation_id)
        if conv is not None:
            return conv
        info = await self.store.conversation(conversation_id)
        if info is None:
            return None
        conv = ConversationHandle(self.host, info, [])
        self.handles[conversation_id] = conv
        return conv

    # --- the agent's own calls -----------------------------------------------------------

    async def open_conversation(
        self,
        id: str | None,
        *,
        title: str | None = None,
        subtitle: str | None = None,
        workspace: str | None = None,
        buttons: Sequence[Button] = (),
        progress: Progress | None = None,
    ) -> ConversationHandle:
        """Open a conversation, or return the one with ``id``, open or closed."""

        async def build(tx: Tx) -> ConversationHandle:
            if id is not None:
                found = await self.find(id)
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
            conv = ConversationHandle(self.host, info, [])
            self.open[conv_id] = conv
            self.handles[conv_id] = conv
            tx.on_undo(lambda: self.open.pop(conv_id, None))
            tx.put_conversation(info)
            tx.emit(ConversationOpened(conversation=conv.snapshot()))
            self._settle_start(tx, conv_id)
            return conv

        return await self.transact(build)

    def _settle_start(self, tx: Tx, conv_id: str) -> None:
        """Record the ``POST /conversations`` whose starter opened ``conv_id``, if any."""
        pending = PENDING_START.get()
        if pending is not None and not pending.closed and pending.result is None:
            result = encode(accepted(conv_id))
            self.record(tx, pending.request_id, pending.key, result)
            pending.result = result
            tx.on_undo(lambda: setattr(pending, "result", None))

    async def expire_due(self) -> int:
        """Resolve as ``expired`` every open ask whose deadline passed; returns how many."""

        async def build(tx: Tx) -> int:
            now = self.now()
            due = [a for a in self.open_asks.values() if is_due(a.ask, now)]
            for ask in due:
                self.resolve(tx, ask, Resolution(how="expired", at=now))
            return len(due)

        return await self.transact(build)

    def any_deadline(self) -> bool:
        """Whether an open ask has a deadline."""
        return any(a.ask.deadline is not None for a in self.open_asks.values())

    def any_due(self) -> bool:
        """Whether an open ask's deadline has passed."""
        now = self.now()
        return any(is_due(a.ask, now) for a in self.open_asks.values())

    # --- changes, each inside a transaction ----------------------------------------------

    def touch(self, tx: Tx, conv: ConversationHandle) -> None:
        """Note ``conv`` as changed by ``tx``, as it stood before."""
        if conv.id not in tx.touched:
            tx.touched[conv.id] = (conv, conv.snapshot())

    def _finish(self, tx: Tx) -> None:
        """Emit ``conversation.updated`` once for each conversation the transaction changed."""
        for conv, before in tx.touched.values():
            if conv.closed:
                continue
            state = derived_state(
                asks_open=bool(conv._open_asks),
                explicit=conv._explicit_state,
                running=conv.running,
            )
            if state != conv._info.state:
                self.set_info(tx, conv, replace(conv._info, state=state))
            if conv.snapshot() == before:
                continue
            self.set_info(tx, conv, replace(conv._info, updated_at=self.now()))
            tx.put_conversation(conv._info)
            tx.emit(ConversationUpdated(conversation=conv.snapshot()))

    def set_info(self, tx: Tx, conv: ConversationHandle, info: Conversation) -> None:
        """Replace what ``conv`` says of itself (written by :meth:`_finish`)."""
        old = conv._info
        conv._info = info
        tx.on_undo(lambda: setattr(conv, "_info", old))

    def add_item(self, tx: Tx, conv: ConversationHandle, item: Item) -> int:
        """Append ``item`` (``item.appended``); returns its index."""
        seq = len(conv._items)
        conv._items.append(item)
        conv._item_ids[item.id] = seq
        tx.on_undo(conv._items.pop)
        tx.on_undo(lambda: conv._item_ids.pop(item.id, None))
        tx.add_item(conv.id, seq, item)
        tx.emit(ItemAppended(conversation_id=conv.id, item=item))
        return seq

    def put_item(
        self, tx: Tx, conv: ConversationHandle, seq: int, item: Item, delta: str | None
    ) -> None:
        """Replace the item at ``seq``: ``item.delta`` of ``delta``, else ``item.updated``."""
        old = conv._items[seq]
        conv._items[seq] = item

        def undo() -> None:
            conv._items[seq] = old

        tx.on_undo(undo)
        tx.execute(UPDATE_ITEM, lambda: (encode(item), conv.id, seq), key=("item", conv.id, seq))
        if delta is not None:
            tx.emit(ItemDelta(conversation_id=conv.id, item_id=item.id, text=delta))
        else:
            tx.emit(ItemUpdated(conversation_id=conv.id, item=item))

    def put_ask(self, tx: Tx, handle: AskHandle, ask: Ask, *, changed: bool) -> None:
        """Open ``ask`` as ``handle`` (``ask.raised``) or change it (``ask.changed``)."""
        conv = handle.conversation
        self.touch(tx, conv)
        old_ask, old_conv_asks, old_asks = handle._ask, dict(conv._open_asks), dict(self.open_asks)
        handle._ask = ask
        conv._open_asks[ask.id] = handle
        self.open_asks[ask.id] = handle
        if ask.deadline is not None:
            self.on_deadline()

        def undo() -> None:
            handle._ask = old_ask
            conv._open_asks = old_conv_asks
            self.open_asks = old_asks

        tx.on_undo(undo)
        tx.put_ask(ask, handle.turn)
        tx.emit(AskChanged(ask=ask) if changed else AskRaised(ask=ask))

    def resolve(self, tx: Tx, handle: AskHandle, resolution: Resolution) -> None:
        """End the open ask ``handle`` as ``resolution`` (``ask.resolved``)."""
        conv = handle.conversation
        self.touch(tx, conv)
        old_conv_asks, old_asks = dict(conv._open_asks), dict(self.open_asks)
        conv._open_asks.pop(handle.id, None)
        self.open_asks.pop(handle.id, None)

        def undo() -> None:
            conv._open_asks = old_conv_asks
            self.open_asks = old_asks

        tx.on_undo(undo)
        tx.resolve_ask(handle.id, resolution)
        tx.emit(ask_resolved(handle.id, conv.id, resolution))
        tx.on_commit(lambda: handle._resolved(resolution))

    def record(self, tx: Tx, request_id: str, key: bytes, result: bytes) -> None:
        """Keep a command's first result."""
        tx.record(request_id, key, result, us(self.now()))

    def stop_turns(self, tx: Tx, conv: ConversationHandle) -> bool:
        """Mark the running turns stopped, cancelled on commit; False when none ran."""
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
                self.on_stop(t)
            conv._drain_steered()

        tx.on_undo(undo)
        tx.on_commit(cancel)
        return True

    def stop(self, tx: Tx, conv: ConversationHandle) -> None:
        """``POST …/stop`` taken: stop the turn, end its asks ``stopped``, finish its items."""
        asks = list(conv._open_asks.values())
        if self.stop_turns(tx, conv) or asks:
            stopped = Resolution(how="stopped", at=self.now())
            for ask in asks:
                self.resolve(tx, ask, stopped)
            self.finish_items(tx, conv)
            tx.emit(TurnStopped(conversation_id=conv.id, turn=conv.turn))
            self.touch(tx, conv)

    def new_turn(self, tx: Tx, conv: ConversationHandle, user: Item) -> Turn:
        """A message starts a new turn: its number, and the person's item appended."""
        turn = Turn(number=conv.turn + 1)
        self.touch(tx, conv)
        conv._turns.append(turn)
        tx.on_undo(lambda: conv._turns.remove(turn))
        self.set_info(tx, conv, replace(conv._info, turn=turn.number))
        self.add_item(tx, conv, user)
        return turn

    def end_turn(self, tx: Tx, conv: ConversationHandle, turn: Turn) -> None:
        """A turn's task ended: drop it (and unread steering when none runs)."""
        if turn not in conv._turns:
            return
        self.touch(tx, conv)
        conv._turns.remove(turn)
        tx.on_undo(lambda: conv._turns.append(turn))
        if not conv.running:
            tx.on_commit(conv._drain_steered)

    def finish_items(self, tx: Tx, conv: ConversationHandle) -> None:
        """Make every item still being written final: its writer stopped (or died)."""
        for seq, done in finished(conv._items, self.now()):
            self.put_item(tx, conv, seq, done, None)

    async def close(self, tx: Tx, conv: ConversationHandle) -> None:
        """Close ``conv``: stop its turn, end its asks ``stopped`` (kept ones too)."""
        now = self.now()
        stopped = Resolution(how="stopped", at=now)
        if self.stop_turns(tx, conv):
            tx.emit(TurnStopped(conversation_id=conv.id, turn=conv.turn))
        raised = list(conv._open_asks.values())
        for ask in raised:
            self.resolve(tx, ask, stopped)
        self.finish_items(tx, conv)
        # Asks kept from before a restart and not raised again end too.
        for ask_id in await self.store.unresolved_asks(conv.id):
            if any(a.id == ask_id for a in raised):
                continue
            tx.resolve_ask(ask_id, stopped)
            tx.emit(ask_resolved(ask_id, conv.id, stopped))
        self.set_info(tx, conv, replace(conv._info, state="closed", updated_at=now))
        old_explicit = conv._explicit_state
        conv._explicit_state = None
        self.open.pop(conv.id, None)

        def undo() -> None:
            conv._explicit_state = old_explicit
            self.open[conv.id] = conv

        tx.on_undo(undo)
        tx.put_conversation(conv._info)
        tx.emit(ConversationClosed(conversation_id=conv.id, at=now))

    async def reopen(self, tx: Tx, conv: ConversationHandle) -> None:
        """Reopen ``conv`` with its items read back (``conversation.opened``)."""
        items = await self.store.items(conv.id)
        old_items, old_ids = conv._items, conv._item_ids
        conv._items = items
        conv._item_ids = {item.id: seq for seq, item in enumerate(items)}
        self.open[conv.id] = conv

        def undo() -> None:
            conv._items, conv._item_ids = old_items, old_ids
            self.open.pop(conv.id, None)

        tx.on_undo(undo)
        self.set_info(tx, conv, replace(conv._info, state="idle", updated_at=self.now()))
        tx.put_conversation(conv._info)
        tx.emit(ConversationOpened(conversation=conv.snapshot()))
