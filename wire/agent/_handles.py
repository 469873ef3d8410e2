"""The handles an agent's code holds: a conversation, an item, an ask. Every change goes
through the agent's one writer and is sent as events before the call returns.

A handle knows its agent only as a :class:`Host`, and the agent's state as a :class:`Keeper`
(the clock, the state file, the writer's operations), so this module imports nothing of
``_agent`` or ``_state``: imports run one way, ``_state`` → ``_handles`` → ``_store``."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from msgspec import UNSET, UnsetType
from msgspec.structs import replace

from wire.agent._rules import (
    Resolution,
    aware,
    changed_in_run,
    checked,
    derived_id,
    next_item_id,
    reraised,
)
from wire.agent._store import Store, Tx
from wire.errors import LocalWireError
from wire.messages import (
    MAX_TEXT,
    Answer,
    Argument,
    Ask,
    Button,
    Conversation,
    FormField,
    Item,
    NoticePush,
    Option,
    Progress,
    SendMessage,
    ToolRef,
    Words,
)

S = TypeVar("S")
log = logging.getLogger(__name__)


class Keeper(Protocol):
    """What a handle needs of the agent's state: the clock, the state file, and the
    operations of the one writer, each run inside a transaction (``State`` is the
    implementation)."""

    store: Store
    open_asks: dict[str, AskHandle]
    acted: set[tuple[str, str]]  # AskHandle.once marks of this run
    served: bool  # an app was built: answers can arrive

    def now(self) -> datetime: ...

    async def transact(self, build: Callable[[Tx], Awaitable[S]], *, defer: bool = False) -> S: ...

    def touch(self, tx: Tx, conv: ConversationHandle) -> None: ...

    def set_info(self, tx: Tx, conv: ConversationHandle, info: Conversation) -> None: ...

    def add_item(self, tx: Tx, conv: ConversationHandle, item: Item) -> int: ...

    def put_item(
        self, tx: Tx, conv: ConversationHandle, seq: int, item: Item, delta: str | None
    ) -> None: ...

    def put_ask(self, tx: Tx, handle: AskHandle, ask: Ask, *, changed: bool) -> None: ...

    def resolve(self, tx: Tx, handle: AskHandle, resolution: Resolution) -> None: ...

    async def close(self, tx: Tx, conv: ConversationHandle) -> None: ...

    async def reopen(self, tx: Tx, conv: ConversationHandle) -> None: ...


class Host(Protocol):
    """The agent a handle belongs to (``conv.agent``): it holds the state its handles change
    (``Agent`` is the implementation)."""

    @property
    def _state(self) -> Keeper: ...


@dataclass(eq=False)
class Turn:
    """A turn of a conversation: its task, once started, and whether it was stopped."""

    number: int
    task: asyncio.Task[None] | None = None
    stopped: bool = False


class ConversationHandle:
    """One conversation of the agent. Every change is written to the state file and sent as
    events before the call returns."""

    def __init__(self, agent: Host, info: Conversation, items: list[Item]) -> None:
        self.agent = agent
        self._keeper = agent._state
        self._info = info
        self._items = items
        self._item_ids = {item.id: seq for seq, item in enumerate(items)}
        self._open_asks: dict[str, AskHandle] = {}
        self._turns: list[Turn] = []
        self._explicit_state: str | None = None
        self.steered: asyncio.Queue[SendMessage] = asyncio.Queue()
        """Steering messages for the running turn; what a turn leaves unread is dropped."""

    def __repr__(self) -> str:
        return f"<ConversationHandle {self.id} {self.state}>"

    @property
    def id(self) -> str:
        """The conversation's id."""
        return self._info.id

    @property
    def state(self) -> str:
        """``idle``, ``working``, ``waiting`` or ``closed`` (or the agent's own)."""
        return self._info.state

    @property
    def turn(self) -> int:
        """The current turn."""
        return self._info.turn

    @property
    def closed(self) -> bool:
        """Whether the conversation is closed."""
        return self._info.state == "closed"

    @property
    def running(self) -> bool:
        """Whether a turn runs (or waits to run) and was not stopped."""
        return any(not t.stopped for t in self._turns)

    @property
    def items(self) -> list[Item]:
        """The items, in order (of an open conversation, or one closed in this process)."""
        return list(self._items)

    @property
    def asks(self) -> list[AskHandle]:
        """The open asks, in the order they were raised."""
        return list(self._open_asks.values())

    def snapshot(self) -> Conversation:
        """The conversation as ``GET /conversations`` shows it: asks, no items."""
        return replace(self._info, asks=[a.ask for a in self._open_asks.values()])

    def _next_item_id(self) -> str:
        return next_item_id(len(self._items), self._item_ids)

    def _drain_steered(self) -> None:
        while not self.steered.empty():
            self.steered.get_nowait()

    def _check_open(self) -> None:
        if self.closed:
            raise LocalWireError(f"conversation {self.id} is closed")

    async def append(
        self,
        kind: str = "reply",
        text: str = "",
        *,
        final: bool = True,
        id: str | None = None,
        language: str | None = None,
        url: str | None = None,
        label: str | None = None,
        call_id: str | None = None,
        name: str | None = None,
        status: str | None = None,
        output: str | None = None,
        words: Words | None = None,
        push: NoticePush | None = None,
        defer: bool = False,
    ) -> ItemHandle:
        """Append an item (``item.appended``). ``final=False`` starts one that grows by
        :meth:`ItemHandle.delta` until :meth:`ItemHandle.finish`. ``words``: its text as a
        key of the gateway's catalogue; ``push`` (a ``notice``): the gateway pushes it.

        ``defer=True`` returns once the item is applied: it is committed (and sent) with the
        agent's next write, e.g. the ask raised about it — one commit for both — or on its
        own a few milliseconds later, as a delta is.

        Raises:
            LocalWireError: the conversation is closed, the id is taken, or a limit is broken.
        """
        keeper = self._keeper

        async def build(tx: Tx) -> ItemHandle:
            self._check_open()
            if id is not None and id in self._item_ids:
                raise LocalWireError(f"item {id} exists in conversation {self.id}")
            item = checked(
                Item(
                    id=id or self._next_item_id(),
                    kind=kind,
                    text=text,
                    final=final,
                    at=keeper.now() if final else None,
                    language=language,
                    url=url,
                    label=label,
                    call_id=call_id,
                    name=name,
                    status=status,
                    output=output,
                    words=words,
                    push=push,
                )
            )
            return ItemHandle(self, keeper.add_item(tx, self, item))

        return await keeper.transact(build, defer=defer)

    async def update(
        self,
        *,
        title: str | UnsetType | None = UNSET,
        subtitle: str | UnsetType | None = UNSET,
        state: str | UnsetType | None = UNSET,
        progress: Progress | UnsetType | None = UNSET,
        buttons: Sequence[Button] | UnsetType = UNSET,
        turn: int | UnsetType = UNSET,
        workspace: str | UnsetType | None = UNSET,
    ) -> None:
        """Change what is given (``conversation.updated`` when anything changed).

        ``state`` sets a state of the agent's own that holds until it sets ``None`` (back to
        automatic: ``waiting`` while asks are open, ``working`` while a turn runs, else
        ``idle``); open asks still make the conversation ``waiting``.

        Raises:
            LocalWireError: the conversation is closed, ``state`` is ``closed`` (use
                :meth:`close`), ``turn`` is below the current turn, or a limit is broken.
        """
        keeper = self._keeper
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("title", title),
                ("subtitle", subtitle),
                ("progress", progress),
                ("turn", turn),
                ("workspace", workspace),
            )
            if v is not UNSET
        }
        if not isinstance(buttons, UnsetType):
            changes["buttons"] = list(buttons)

        async def build(tx: Tx) -> None:
            self._check_open()
            if not isinstance(turn, UnsetType) and turn < self.turn:
                raise LocalWireError(f"the turn never decreases: {turn} < {self.turn}")
            keeper.touch(tx, self)
            if not isinstance(state, UnsetType):
                if state == "closed":
                    raise LocalWireError("close a conversation with close()")
                old = self._explicit_state
                self._explicit_state = state
                tx.on_undo(lambda: setattr(self, "_explicit_state", old))
            if changes:
                keeper.set_info(tx, self, checked(replace(self._info, **changes)))

        await keeper.transact(build)

    async def ask(
        self,
        *,
        kind: str,
        id: str | None = None,
        title: str = "",
        text: str = "",
        tool: ToolRef | None = None,
        options: Sequence[Option] = (),
        multiple: bool = False,
        max_length: int | None = None,
        fields: Sequence[FormField] = (),
        deadline: datetime | None = None,
        push_title: str | None = None,
        push_line: str | None = None,
        arguments: Sequence[Argument] = (),
        reasons: Sequence[str] = (),
        irreversible: bool = False,
    ) -> AskHandle:
        """Raise an ask (``ask.raised``) and return its handle; ``await handle.wait()``.

        ``arguments`` (each with the origin of its value), ``reasons`` and ``irreversible``
        describe the call a permission is about (S1); the card shows them.

        Give a stable ``id`` to survive restarts: raised again after a restart under the same
        id, an ask answered before returns its recorded resolution and is not raised again;
        one still open is raised again (its version grows if the content changed).

        Raises:
            LocalWireError: the conversation is closed, the id belongs to another
                conversation, or a limit is broken.
        """
        keeper = self._keeper

        async def build(tx: Tx) -> AskHandle:
            self._check_open()
            ask = checked(
                Ask(
                    id=id or "a-" + secrets.token_hex(8),
                    conversation=self.id,
                    kind=kind,
                    title=title,
                    text=text,
                    tool=tool,
                    deadline=aware(deadline) if deadline is not None else None,
                    options=list(options),
                    multiple=multiple,
                    max_length=max_length,
                    fields=list(fields),
                    push_title=push_title,
                    push_line=push_line,
                    raised_at=keeper.now(),
                    arguments=list(arguments),
                    reasons=list(reasons),
                    irreversible=irreversible,
                )
            )
            return await self._raise(tx, ask)

        return await keeper.transact(build)

    async def _raise(self, tx: Tx, ask: Ask) -> AskHandle:
        """Raise ``ask``, or find it raised before under its id: open in this run (its
        version grows if the content changed), or kept in the state file (resolved: handed
        back as it ended; open: raised again)."""
        keeper = self._keeper
        existing = keeper.open_asks.get(ask.id)
        if existing is not None:
            if existing.conversation is not self:
                raise LocalWireError(f"ask {ask.id} belongs to another conversation")
            new = changed_in_run(existing.ask, ask)
            if new is not None:
                keeper.put_ask(tx, existing, new, changed=True)
            return existing
        kept = await keeper.store.ask(ask.id)
        if kept is not None:
            if kept.conversation != self.id:
                raise LocalWireError(f"ask {ask.id} belongs to another conversation")
            if kept.resolution is not None:
                return AskHandle(self, kept.ask, kept.turn, resolution=kept.resolution)
            ask = reraised(kept.ask, ask)
        handle = AskHandle(self, ask, self.turn)
        keeper.put_ask(tx, handle, ask, changed=False)
        return handle

    async def close(self) -> None:
        """Close the conversation: stops its turn, resolves its asks ``stopped``."""
        keeper = self._keeper

        async def build(tx: Tx) -> None:
            if not self.closed:
                await keeper.close(tx, self)

        await keeper.transact(build)

    async def reopen(self) -> None:
        """Reopen a closed conversation (``conversation.opened``)."""
        keeper = self._keeper

        async def build(tx: Tx) -> None:
            if self.closed:
                await keeper.reopen(tx, self)

        await keeper.transact(build)


class ItemHandle:
    """An item of a conversation, to grow (``delta``) or replace (``update``, ``finish``)."""

    def __init__(self, conversation: ConversationHandle, seq: int) -> None:
        self.conversation = conversation
        self._seq = seq

    @property
    def item(self) -> Item:
        """The item as it stands."""
        return self.conversation._items[self._seq]

    @property
    def id(self) -> str:
        """The item's id."""
        return self.item.id

    async def delta(self, text: str) -> None:
        """Append ``text`` to an item still being written (``item.delta``).

        Returns once the delta is applied; it is committed with the deltas written in the
        next few milliseconds, in one transaction, and sent to readers only then. Any other
        write (``finish`` too) commits it in its own transaction.

        Raises:
            LocalWireError: the item is final, its conversation closed, or its text too long.
        """
        conv = self.conversation

        async def build(tx: Tx) -> None:
            conv._check_open()
            item = self.item
            if item.final:
                raise LocalWireError(f"item {item.id} is final")
            new = replace(item, text=item.text + text)
            if len(new.text) > MAX_TEXT:  # the limits a delta can break: length, and UTF-8
                raise LocalWireError(f"item {item.id} is over {MAX_TEXT} characters")
            # (a lone surrogate fails the event's encoding, which undoes the change)
            conv._keeper.put_item(tx, conv, self._seq, new, text)

        await conv._keeper.transact(build, defer=True)

    async def update(
        self,
        *,
        text: str | UnsetType = UNSET,
        final: bool | UnsetType = UNSET,
        status: str | UnsetType | None = UNSET,
        output: str | UnsetType | None = UNSET,
        label: str | UnsetType | None = UNSET,
        url: str | UnsetType | None = UNSET,
        language: str | UnsetType | None = UNSET,
        defer: bool = False,
    ) -> None:
        """Replace the item whole with what is given changed (``item.updated``): a tool
        call's status and output, a final text. ``defer``: as in
        :meth:`ConversationHandle.append`."""
        conv = self.conversation
        changes = {
            k: v
            for k, v in (
                ("text", text),
                ("final", final),
                ("status", status),
                ("output", output),
                ("label", label),
                ("url", url),
                ("language", language),
            )
            if v is not UNSET
        }

        async def build(tx: Tx) -> None:
            conv._check_open()
            new = replace(self.item, **changes)
            if new.final and new.at is None:
                new = replace(new, at=conv._keeper.now())
            conv._keeper.put_item(tx, conv, self._seq, checked(new), None)

        await conv._keeper.transact(build, defer=defer)

    async def finish(self, text: str | None = None) -> None:
        """Make the item final, with ``text`` as its whole text when given (``item.updated``)."""
        if text is None:
            await self.update(final=True)
        else:
            await self.update(final=True, text=text)


class AskHandle:
    """An ask: wait for its resolution, change it, or decide it in the agent."""

    def __init__(
        self,
        conversation: ConversationHandle,
        ask: Ask,
        turn: int,
        *,
        resolution: Resolution | None = None,
    ) -> None:
        self.conversation = conversation
        self.turn = turn
        self._ask = ask
        self._resolution = resolution
        self._done = asyncio.Event()
        if resolution is not None:
            self._done.set()

    def __repr__(self) -> str:
        return f"<AskHandle {self.id} v{self.version} {self.resolution or 'open'}>"

    @property
    def ask(self) -> Ask:
        """The ask as it stands."""
        return self._ask

    @property
    def id(self) -> str:
        """The ask's id."""
        return self._ask.id

    @property
    def version(self) -> int:
        """The ask's version."""
        return self._ask.version

    @property
    def resolution(self) -> Resolution | None:
        """How the ask ended; ``None`` while open."""
        return self._resolution

    @property
    def open(self) -> bool:
        """Whether the ask waits for an answer."""
        return self._resolution is None

    def _resolved(self, resolution: Resolution) -> None:
        self._resolution = resolution
        self._done.set()

    async def wait(self) -> Resolution:
        """Wait until the ask ends: answered, decided, expired or stopped.

        Waiting before the agent serves logs a warning: no answer can arrive until it does
        (wait in ``agent.spawn(...)``, or serve first; ``Agent.run`` serves before ``setup``).
        """
        keeper = self.conversation._keeper
        if not self._done.is_set() and not keeper.served:
            log.warning(
                "ask %s: waiting for an answer while the agent does not listen yet: no answer "
                "can arrive until it serves",
                self.id,
            )
        await self._done.wait()
        assert self._resolution is not None
        return self._resolution

    async def change(
        self,
        *,
        title: str | UnsetType = UNSET,
        text: str | UnsetType = UNSET,
        tool: ToolRef | UnsetType | None = UNSET,
        options: Sequence[Option] | UnsetType = UNSET,
        multiple: bool | UnsetType = UNSET,
        max_length: int | UnsetType | None = UNSET,
        fields: Sequence[FormField] | UnsetType = UNSET,
        deadline: datetime | UnsetType | None = UNSET,
        push_title: str | UnsetType | None = UNSET,
        push_line: str | UnsetType | None = UNSET,
        arguments: Sequence[Argument] | UnsetType = UNSET,
        reasons: Sequence[str] | UnsetType = UNSET,
        irreversible: bool | UnsetType = UNSET,
    ) -> None:
        """Change the ask's content: its version grows (``ask.changed``); an answer to the
        old version is answered ``changed``.

        Raises:
            LocalWireError: the ask is not open, or a limit is broken.
        """
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("title", title),
                ("text", text),
                ("tool", tool),
                ("multiple", multiple),
                ("max_length", max_length),
                ("push_title", push_title),
                ("push_line", push_line),
                ("irreversible", irreversible),
            )
            if v is not UNSET
        }
        if not isinstance(arguments, UnsetType):
            changes["arguments"] = list(arguments)
        if not isinstance(reasons, UnsetType):
            changes["reasons"] = list(reasons)
        if not isinstance(options, UnsetType):
            changes["options"] = list(options)
        if not isinstance(fields, UnsetType):
            changes["fields"] = list(fields)
        if not isinstance(deadline, UnsetType):
            changes["deadline"] = aware(deadline) if deadline is not None else None
        keeper = self.conversation._keeper

        async def build(tx: Tx) -> None:
            if keeper.open_asks.get(self.id) is not self:
                raise LocalWireError(f"ask {self.id} is not open")
            new = checked(replace(self._ask, version=self._ask.version + 1, **changes))
            keeper.put_ask(tx, self, new, changed=True)

        await keeper.transact(build)

    async def follow_up(
        self, text: str, *, kind: str = "notice", key: str = "follow-up"
    ) -> ItemHandle | None:
        """Append, once, the item that says what came of the ask (``kind``, ``text``).

        After a restart :meth:`wait` hands a recorded resolution back at once, so code that
        waits and then appends would append again; this item's id comes from the ask's id and
        ``key``, and the item is appended only if no run before added it (the id is the
        mark, written with the item in one transaction). Returns the new item, or None when it
        was there already or the conversation is closed.
        """
        conv = self.conversation
        item_id = derived_id(self.id, key)
        if item_id in conv._item_ids or conv.closed:
            return None
        return await conv.append(kind=kind, text=text, id=item_id)

    async def once(
        self, action: Callable[[Resolution], Awaitable[object]], *, key: str = "action"
    ) -> bool:
        """Wait for the resolution and run ``action`` with it, unless this run or one before
        already ran it for this ask and ``key``. Returns whether it ran now.

        The mark is kept in the agent's state file before ``action`` runs, so an action never
        runs twice, even across restarts; if the process dies while it runs, it is not run
        again (make such an action check its own result if it must finish).
        """
        resolution = await self.wait()
        keeper = self.conversation._keeper

        async def claim(tx: Tx) -> bool:
            mark = (self.id, key)
            if mark in keeper.acted:
                return False
            done_before = await keeper.store.acted(self.id, key)
            keeper.acted.add(mark)
            if done_before:
                return False
            tx.on_undo(lambda: keeper.acted.discard(mark))
            tx.mark_acted(self.id, key)
            return True

        if not await keeper.transact(claim):
            return False
        await action(resolution)
        return True

    async def answered_elsewhere(self) -> Resolution:
        """The ask was answered somewhere other than through this agent (another channel of
        a bridged runtime): it resolves ``answered`` with no request id, and a later reply is
        answered ``answered``. Returns the resolution (the earlier one if it had ended)."""
        return await self._end("answered")

    async def decide(self, answer: Answer | None = None) -> Resolution:
        """The agent decides the ask itself (``how=decided``); a later reply is answered
        ``decided``. Returns the resolution (the earlier one if the ask had already ended)."""
        return await self._end("decided", answer)

    async def _end(self, how: str, answer: Answer | None = None) -> Resolution:
        keeper = self.conversation._keeper

        async def build(tx: Tx) -> Resolution:
            if keeper.open_asks.get(self.id) is not self:
                assert self._resolution is not None
                return self._resolution
            resolution = Resolution(how=how, at=keeper.now(), answer=answer)
            keeper.resolve(tx, self, resolution)
            return resolution

        return await keeper.transact(build)

    async def withdraw(self, how: str = "stopped") -> Resolution:
        """The agent takes the ask back without an answer (``how``, ``stopped`` by default: a
        later reply is answered ``not_open`` with that reason). Returns the resolution (the
        earlier one if the ask had already ended)."""
        return await self._end(how)
