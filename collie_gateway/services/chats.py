"""Conversation lists and chats: reads from the agent, live state, and the person's lines.

Open rows come from the mirror (instant, L5). Closed rows are read from the agent on each
visit and when a conversation opens or closes, never on a poll; the last good read is kept
(L8). A chat is read from the agent when first opened and then kept live from the events.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol
from urllib.parse import quote

import msgspec

from collie_gateway.core.cleaning import ShownText
from collie_gateway.core.mirror import AgentMirror, Change
from collie_gateway.core.notes import Note, note_json
from collie_gateway.errors import AgentRejected, AgentUnreachable, BadCursor
from collie_gateway.services.answers import CardStates
from collie_gateway.services.links import UNAUTHORIZED, AgentClient
from collie_gateway.services.phonebus import Publish
from collie_gateway.services.tasks import Spawn, cancelled
from collie_gateway.store.protocols import NotesStore
from collie_gateway.strings import Catalogue, Catalogues
from collie_gateway.views.cards import build_cards
from collie_gateway.views.chat import (
    CHAT_TEXT_LIMIT,
    Chat,
    ChatContext,
    ChatLine,
    LineState,
    MyLine,
    build_chat,
    chat_text,
    item_line,
    match_echo,
    render_written,
)
from collie_gateway.views.listing import (
    PAGE_SIZE,
    ClosedRead,
    ConversationList,
    ListContext,
    ReadStatus,
    build_list,
    footer_for,
    list_row,
)
from wire.errors import RemoteWireError
from wire.messages import (
    AgentEvent,
    AskResolved,
    Conversation,
    ConversationClosed,
    ConversationOpened,
    ConversationPage,
    ConversationUpdated,
    Item,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    TurnStopped,
    decode,
)

log = logging.getLogger(__name__)
# Ours (C2): a Markdown item being written is rendered at most this often (live equals
# reload: a read shows the same render the phones were sent).
RENDER_EVERY = timedelta(milliseconds=500)
CHATS_KEPT = 500  # ours: chats kept live in memory, least recently opened dropped first


class AgentReader(Protocol):
    """What the chats read of the agents: mirrors, the version gate, calls."""

    def mirror(self, agent: str) -> AgentMirror:
        """The agent's mirror."""
        ...

    def version_warning(self, agent: str, catalogue: Catalogue | None = None) -> str | None:
        """R5's box for an agent refused for its wire version (in ``catalogue``'s language),
        else None."""
        ...

    def client(self, agent: str) -> AgentClient:
        """The agent's HTTP client (raises when nothing may be sent)."""
        ...


@dataclass(frozen=True, slots=True)
class ChatConfig:
    """The words (every language; the default's unless a phone asks for another), the clock
    and the masks the chats are drawn with."""

    languages: Catalogues
    clock: Callable[[], datetime]
    redact: Callable[[str], str]  # titles and card texts (X1)
    items_mask: Callable[[str], str] | None  # chat items (X1); None: masking is off


@dataclass(slots=True)
class ChatState:
    """One conversation as its chat shows it. ``texts`` holds each item's text as shown,
    cleaned once as it came (the items keep the rest of what the agent sent); ``drawn``
    each final item's line as last drawn, with the item and the catalogue it was drawn
    from (a chat drawn again draws only what changed)."""

    conv: Conversation
    items: list[Item] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    texts: dict[str, ShownText] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    seen: str | None = None  # the read's Wire-Event-Id: item events up to it are in ``items``
    echoed: set[str] = field(default_factory=set)  # request ids of the user items (C4)
    drawn: dict[str, tuple[Item, Catalogue, ChatLine]] = field(default_factory=dict)

    def put(self, item: Item, shown: ShownText) -> None:
        """Append or replace an item, with its text as shown."""
        self.texts[item.id] = shown
        if item.kind == "user" and item.request_id is not None:
            self.echoed.add(item.request_id)
        at = self.index.get(item.id)
        if at is None:
            self.index[item.id] = len(self.items)
            self.items.append(item)
        else:
            self.items[at] = item

    @property
    def last_item(self) -> str | None:
        """The id of the newest item."""
        return self.items[-1].id if self.items else None


@dataclass(frozen=True, slots=True)
class ListPage:
    """A page of closed rows read with "Load more"."""

    rows: list[object]
    footer: object | None


class Chats:
    """Lists and chats for every agent of one gateway."""

    def __init__(
        self,
        agents: AgentReader,
        notes: NotesStore,
        cards: CardStates,
        publish: Publish,
        spawn: Spawn,
        config: ChatConfig,
        kept: int = CHATS_KEPT,
    ) -> None:
        self.agents = agents
        self.notes = notes
        self.cards = cards
        self.publish = publish
        self.spawn = spawn
        self.languages = config.languages
        self.catalogue = config.languages.default
        self.clock = config.clock
        self.redact = config.redact
        self.items_mask = config.items_mask  # how chat items are masked (X1); None: off
        self.kept = kept  # chats kept live in memory
        self.closed: dict[str, ClosedRead] = {}
        self.chats: OrderedDict[tuple[str, str], ChatState] = OrderedDict()
        self.mine: dict[tuple[str, str], list[MyLine]] = {}
        self.last_item: dict[tuple[str, str], str] = {}
        self._refreshes: dict[str, asyncio.Task[None]] = {}
        self._read_again: set[str] = set()
        # Reads of a chat under way, each with the events and notes that came meanwhile.
        self._loading: dict[tuple[str, str], list[list[tuple[str | None, AgentEvent | Note]]]] = {}
        self._epochs: dict[str, int] = {}  # snapshots of each agent's list so far
        self.unsaved: dict[tuple[str, str], list[Note]] = {}  # notes not yet in SQLite
        # Conversations to publish, in order, each in the context its change was applied in
        # (with several workers: told by this worker, or kept quiet; services/following.py).
        self._to_publish: dict[tuple[str, str], contextvars.Context] = {}
        # Items still being written, by chat: their text as shown, cleaned delta by delta.
        # A loaded chat's ``texts`` holds the same objects, so each delta is cleaned once.
        self.writing: dict[tuple[str, str], dict[str, ShownText]] = {}
        self._writing_items: dict[tuple[str, str], dict[str, Item]] = {}  # the same, as sent
        # Chats dropped from memory (past ``kept``): phones may still show them, and deltas
        # still reach them through ``writing``; after a reset they are read again on their
        # next open, and the phones are told to (wire §10 step 4).
        self._dropped: set[tuple[str, str]] = set()
        self._rereads: dict[tuple[str, str], bool] = {}  # chats read again; True: once more
        # Markdown being written whose newest text waits for its render (C2): a timer each.
        self._trailing: dict[tuple[str, str, str], asyncio.TimerHandle] = {}

    async def close(self) -> None:
        """Cancel background refreshes and renders."""
        for timer in self._trailing.values():
            timer.cancel()
        self._trailing.clear()
        for task in list(self._refreshes.values()):
            await cancelled(task)

    # --- the list ---------------------------------------------------------------------------

    def _ctx(self, agent: str, now: datetime, catalogue: Catalogue | None = None) -> ListContext:
        mirror = self.agents.mirror(agent)
        hello = mirror.hello
        return ListContext(
            agent=agent,
            agent_subtitle=hello.subtitle if hello else None,
            features=hello.features if hello else [],
            catalogue=catalogue or self.catalogue,
            now=now,
            redact=self.redact,
        )

    def _asks_history(self, agent: str) -> bool:
        mirror = self.agents.mirror(agent)
        return mirror.wire == 1 and mirror.hello is not None and mirror.hello.has("history")

    async def visit(self, agent: str, catalogue: Catalogue | None = None) -> ConversationList:
        """A visit to the list: open rows now, closed rows read from the agent (L5)."""
        if self._asks_history(agent):
            await self.read_closed(agent)
        return self.build(agent, catalogue)

    def build(self, agent: str, catalogue: Catalogue | None = None) -> ConversationList:
        """The list from what the gateway holds now, in ``catalogue``'s language (default:
        the default's); no read."""
        mirror = self.agents.mirror(agent)
        ctx = self._ctx(agent, self.clock(), catalogue)
        warning = self.agents.version_warning(agent, ctx.catalogue)
        closed = self.closed.get(agent) if self._asks_history(agent) else None
        if closed is None and self._asks_history(agent):
            closed = ClosedRead()  # not read yet (a poll before any visit): no footer
        return build_list(mirror.conversations.values(), closed, ctx, version_warning=warning)

    async def read_closed(self, agent: str) -> ClosedRead:
        """Read the first page of closed conversations; keep the last good one (L8)."""
        kept = self.closed.setdefault(agent, ClosedRead())
        try:
            page = await self._read_page(agent, None)
        except _ReadFailed as exc:
            kept.status = exc.status
            return kept
        if not page.keeps_list:
            kept.rows, kept.next_cursor, kept.status = [], None, ReadStatus.NO_LIST
            kept.drawn = False
            return kept
        kept.rows = [c for c in page.conversations if c.state == "closed"]
        kept.next_cursor = page.next_cursor
        kept.status = ReadStatus.OK
        kept.drawn = True
        return kept

    async def closed_page(
        self, agent: str, cursor: str, catalogue: Catalogue | None = None
    ) -> dict[str, object]:
        """One "Load more" page: the next 100 closed rows and the footer after them.

        Raises:
            BadCursor: the agent does not take ``cursor``.
        """
        ctx = self._ctx(agent, self.clock(), catalogue)
        try:
            page = await self._read_page(agent, cursor)
        except _ReadFailed as exc:
            read = ClosedRead(status=exc.status)
            return {"rows": [], "footer": footer_for(read, ctx)}
        read = ClosedRead(
            rows=[c for c in page.conversations if c.state == "closed"],
            next_cursor=page.next_cursor,
            status=ReadStatus.OK if page.keeps_list else ReadStatus.NO_LIST,
            drawn=True,
        )
        return {"rows": [list_row(c, ctx) for c in read.rows], "footer": footer_for(read, ctx)}

    async def _read_page(self, agent: str, cursor: str | None) -> ConversationPage:
        path = f"/conversations?state=closed&limit={PAGE_SIZE}"
        if cursor is not None:
            path += "&cursor=" + quote(cursor, safe="")
        try:
            fetched = await self.agents.client(agent).get(path)
            if fetched.status == 404:
                raise _ReadFailed(ReadStatus.NO_LIST)
            if fetched.status in UNAUTHORIZED:
                raise _ReadFailed(ReadStatus.UNAUTHORIZED)
            if fetched.status == 400 and cursor is not None:
                raise BadCursor(f"the cursor {cursor!r} is not valid")
            if not 200 <= fetched.status < 300:
                raise _ReadFailed(ReadStatus.FAILED)
            return decode(fetched.body, ConversationPage)
        except AgentUnreachable as exc:
            raise _ReadFailed(ReadStatus.FAILED if exc.midway else ReadStatus.NO_ANSWER) from None
        except AgentRejected:
            raise _ReadFailed(ReadStatus.VERSION) from None
        except RemoteWireError:
            raise _ReadFailed(ReadStatus.FAILED) from None

    def _refresh_closed_soon(self, agent: str) -> None:
        """A conversation opened or closed: read the closed rows once more (L5)."""
        if not self._asks_history(agent):
            return
        if agent in self._refreshes:
            # The read in flight may have been answered before this change: read once more.
            self._read_again.add(agent)
            return

        async def refresh() -> None:
            try:
                while True:
                    await asyncio.sleep(0.05)  # several open/close events: one read
                    self._read_again.discard(agent)
                    await self.read_closed(agent)
                    self.publish("list.changed", self.build(agent), self._list_in(agent))
                    if agent not in self._read_again:
                        return
            finally:
                self._refreshes.pop(agent, None)
                self._read_again.discard(agent)

        self._refreshes[agent] = asyncio.create_task(refresh())

    # --- the chat ----------------------------------------------------------------------------

    async def open_chat(
        self,
        agent: str,
        conv_id: str,
        *,
        show_all: bool = False,
        catalogue: Catalogue | None = None,
    ) -> Chat:
        """The chat of one conversation; read from the agent the first time.

        Raises:
            AgentUnreachable, AgentRejected: the conversation could not be read.
        """
        key = (agent, conv_id)
        state = self.chats.get(key)
        if state is None:
            state = await self._load(agent, conv_id)
        else:
            self.chats.move_to_end(key)
        live = self.agents.mirror(agent).conversations.get(conv_id)
        if live is not None:
            state.conv = live
        return self.view(agent, state, show_all=show_all, catalogue=catalogue)

    async def _load(self, agent: str, conv_id: str) -> ChatState:
        key = (agent, conv_id)
        # Events and notes that arrive while the chat is read are kept and applied after
        # (those the snapshot already holds are skipped by event id): none is lost.
        # Each read has a buffer of its own (two reads of one chat may overlap).
        buffer: list[tuple[str | None, AgentEvent | Note]] = []
        self._loading.setdefault(key, []).append(buffer)
        try:
            while True:
                # A snapshot of the agent's list while this read is under way (after a
                # ``reset``: its ids may have started again) makes the read stale: read again,
                # keeping only what came after the new read began.
                epoch = self._epochs.get(agent, 0)
                buffer.clear()
                fetched = await self.agents.client(agent).get(
                    "/conversations/" + quote(conv_id, safe="")
                )
                if fetched.status == 404:
                    raise AgentRejected("no such conversation", status=404, code="not_found")
                if not 200 <= fetched.status < 300:
                    raise AgentRejected(
                        f"the agent answered {fetched.status}", status=fetched.status
                    )
                conv = decode(fetched.body, Conversation)
                notes = await self.notes.load(agent, conv_id)
                if self._epochs.get(agent, 0) == epoch:
                    break
            state = ChatState(conv=msgspec.structs.replace(conv, items=None), seen=fetched.event_id)
            for item in conv.items or []:
                state.put(item, chat_text(item.text))
            state.notes = notes
        finally:
            buffers = self._loading.get(key, [])
            buffers.remove(buffer)
            if not buffers:
                self._loading.pop(key, None)
        # No await from here on: the events buffered are applied, and the items still being
        # written take over the live path, in one step (no delta cleaned twice or missed).
        seen = {(n.kind, n.text, n.at) for n in state.notes}
        unsaved: list[tuple[str | None, AgentEvent | Note]] = [
            (None, n) for n in self.unsaved.get(key, [])
        ]
        for event_id, late in unsaved + buffer:
            if isinstance(late, Note):
                if (late.kind, late.text, late.at) not in seen:
                    seen.add((late.kind, late.text, late.at))
                    state.notes.append(late)
            elif _newer(event_id, fetched.event_id):
                match late:
                    case ItemAppended(item=item) | ItemUpdated(item=item):
                        state.put(item, chat_text(item.text))
                    case ItemDelta(item_id=item_id, text=text) if item_id in state.texts:
                        state.texts[item_id].feed(text)
                    case _:
                        pass
        self.writing[key] = {
            item.id: state.texts[item.id] for item in state.items if not item.final
        }
        self._writing_items[key] = {item.id: item for item in state.items if not item.final}
        if state.last_item is not None:
            self.last_item[key] = state.last_item
        self.chats[key] = state
        self._dropped.discard(key)
        while len(self.chats) > self.kept:
            dropped, _ = self.chats.popitem(last=False)
            self._dropped.add(dropped)
        return state

    def view(
        self,
        agent: str,
        state: ChatState,
        *,
        show_all: bool = False,
        catalogue: Catalogue | None = None,
        lines: bool = True,
    ) -> Chat:
        """Build the chat as the phone draws it now, in ``catalogue``'s language (default:
        the default's); ``lines=False``: all but its lines (a live ``chat.changed``)."""
        mirror = self.agents.mirror(agent)
        now = self.clock()
        ctx = ChatContext(
            agent=agent,
            features=mirror.hello.features if mirror.hello else [],
            catalogue=catalogue or self.catalogue,
            now=now,
            redact=self.redact,
            agent_subtitle=mirror.hello.subtitle if mirror.hello else None,
            redact_items=self.items_mask,
        )
        key = (agent, state.conv.id)
        mine = self.mine.get(key, [])
        states = self.cards.of(agent, state.conv.id)
        cat = ctx.catalogue

        def line_of(item: Item, _: ShownText | None) -> ChatLine:
            kept = state.drawn.get(item.id)
            if kept is not None and kept[0] is item and kept[1] is cat:
                return kept[2]
            line = item_line(item, cat, state.texts.get(item.id), self.items_mask)
            if item.final:
                state.drawn[item.id] = (item, cat, line)
            return line

        chat = build_chat(
            state.conv,
            state.items,
            state.notes,
            mine,
            states,
            ctx,
            lines=lines,
            line_of=line_of,
            known=state.index,
            echoed=state.echoed,
        )
        if show_all:
            chat.cards = build_cards(
                state.conv.asks,
                agent_name=agent,
                now=now,
                catalogue=ctx.catalogue,
                states=states,
                show_all=True,
                redact=self.redact,
            )
        return chat

    # --- the person's lines (C4, C5) ---------------------------------------------------------

    def after_item(self, agent: str, conv_id: str) -> str | None:
        """The newest item of the conversation: a line or note added now follows it."""
        return self.last_item.get((agent, conv_id))

    def line_sent(self, agent: str, conv_id: str, line: MyLine) -> None:
        """The person tapped Send (or Send again with the same request id)."""
        state = self.chats.get((agent, conv_id))
        if state is not None and line.request_id in state.echoed:
            return  # C4: the agent's copy is already in the chat; no second line
        lines = self.mine.setdefault((agent, conv_id), [])
        lines[:] = [m for m in lines if m.request_id != line.request_id]
        lines.append(line)

    def line_state(self, agent: str, conv_id: str, request_id: str, state: LineState) -> None:
        """A line's send came to ``state`` (unless it was echoed meanwhile)."""
        lines = self.mine.get((agent, conv_id), [])
        for index, mine in enumerate(lines):
            if mine.request_id == request_id:
                lines[index] = replace(mine, state=state)

    # --- live events --------------------------------------------------------------------------

    def on_event(self, agent: str, event: AgentEvent, change: Change, now: datetime) -> None:
        """Keep lists and loaded chats live; tell the phones what changed."""
        cid = change.conversation_id
        if cid is None:
            return
        key = (agent, cid)
        state = self.chats.get(key)
        event_id = self.agents.mirror(agent).last_event_id
        for buffer in self._loading.get(key, ()):
            buffer.append((event_id, event))
        # A stream behind the chat's read brings events the read holds: skip them (wire §10);
        # the phones that read the chat have them too, so they are not published either.
        # While a chat is read again after a reset, its events wait for that read (they are
        # buffered): the phones read it again after it, told by "chat.reload".
        stale = key in self._rereads or (state is not None and not _newer(event_id, state.seen))
        match event:
            case ItemAppended(item=item) | ItemUpdated(item=item):
                self.last_item[key] = item.id
                if item.kind == "user":
                    self._echoed(key, item, now)
                if not stale:
                    self._item(key, state, item)
            case ItemDelta(item_id=item_id, text=text) if not stale:
                self._delta(key, item_id, text)
            case TurnStopped(turn=turn):
                note = Note(
                    kind="stopped",
                    text="",
                    at=now,
                    after_item=self.last_item.get(key),
                    words="chat_stopped",
                )
                self.add_note(agent, cid, f"stop:{turn}", note)
            case ConversationClosed():
                self._closed(key)
                self._refresh_closed_soon(agent)
            case ConversationOpened():
                self._refresh_closed_soon(agent)
            case ConversationUpdated(conversation=conv) if conv.state == "closed":
                self._refresh_closed_soon(agent)
            case AskResolved(ask_id=ask_id):
                self.cards.resolved(agent, cid, ask_id)
            case _:
                pass
        if state is not None:
            live = self.agents.mirror(agent).conversations.get(cid)
            if live is not None:
                state.conv = live
            elif change.closed:
                state.conv = msgspec.structs.replace(state.conv, state="closed", asks=[])
        if not isinstance(event, ItemDelta | ItemAppended | ItemUpdated):
            self._publish_soon(agent, cid)

    def _closed(self, key: tuple[str, str]) -> None:
        """A conversation closed: what was kept for it while open goes (its items being
        written, the person's lines not echoed, the last item, its cards' taps)."""
        self.writing.pop(key, None)
        self._writing_items.pop(key, None)
        self.mine.pop(key, None)
        self.last_item.pop(key, None)
        self.cards.forget(*key)

    def _item(self, key: tuple[str, str], state: ChatState | None, item: Item) -> None:
        """An item appended or replaced: cleaned and rendered once, for the chat and for the
        phones' live stream alike (C2: live equals reload)."""
        shown = chat_text(item.text)
        writing = self.writing.setdefault(key, {})
        items = self._writing_items.setdefault(key, {})
        if item.final:
            writing.pop(item.id, None)
            items.pop(item.id, None)
        else:
            writing[item.id] = shown
            items[item.id] = item
        if state is not None:
            state.put(item, shown)
        if item.kind == "markdown" and not item.final and shown.text:
            render_written(shown, self.items_mask, self.clock())
        line = self._publish_line(key, item, shown)
        if state is not None and item.final:  # drawn once: the chat's next read takes it
            state.drawn[item.id] = (item, self.catalogue, line)

    def _publish_line(self, key: tuple[str, str], item: Item, shown: ShownText) -> ChatLine:
        """Tell the phones an item's whole line; the line in the default language."""
        languages = self.languages

        def worded(cat: Catalogue) -> dict[str, object]:
            line = item_line(item, cat, shown, self.items_mask)
            return {"agent": key[0], "conversation_id": key[1], "item": line}

        payload = worded(self.catalogue)
        self.publish("chat.item", payload, lambda t: worded(languages.get(t)))
        line = payload["item"]
        assert isinstance(line, ChatLine)
        return line

    def _delta(self, key: tuple[str, str], item_id: str, raw: str) -> None:
        """Text for an item being written: cleaned once; the phones get what it adds."""
        writing = self.writing.setdefault(key, {})
        shown = writing.get(item_id)
        if shown is None:
            # Begun before this gateway followed the agent, in a chat not read: from here.
            shown = writing[item_id] = ShownText(CHAT_TEXT_LIMIT)
        mask = self.items_mask
        if mask is not None:
            shown.keep_live(mask)  # from now on each piece is masked as it comes (X1)
        was_cut = shown.cut
        piece = shown.feed(raw)
        if not piece:
            return
        if mask is not None:
            change = shown.live_change
            if change is None:
                # Masking changed text already shown (a token completed): the whole line,
                # which phones put in place of theirs, so they show what a read shows.
                item = self._writing_items.get(key, {}).get(item_id)
                if item is not None:
                    self._publish_line(key, item, shown)
                return
            piece = change
            if not piece and not shown.cut:
                return  # held back: an unfinished word may be the start of a secret
        event: dict[str, object] = {
            "agent": key[0],
            "conversation_id": key[1],
            "item_id": item_id,
            "text": piece,
        }
        if shown.cut and not was_cut:
            event["shortened"] = self.catalogue["text_shortened"]
            languages = self.languages
            self.publish(
                "chat.delta",
                event,
                lambda t: {**event, "shortened": languages.get(t)["text_shortened"]},
            )
            return
        self.publish("chat.delta", event)
        self._render_written(key, item_id, shown)

    def _render_written(self, key: tuple[str, str], item_id: str, shown: ShownText) -> None:
        """C2 while written: a Markdown item's text so far, rendered at most once per
        ``RENDER_EVERY``, goes out as its whole line after the delta (a phone appending the
        deltas stays exact; one showing ``html`` takes the line)."""
        item = self._writing_items.get(key, {}).get(item_id)
        if item is None or item.kind != "markdown":
            return
        now = self.clock()
        if shown.rendered_at is None or now - shown.rendered_at >= RENDER_EVERY:
            render_written(shown, self.items_mask, now)
            self._publish_line(key, item, shown)
        elif (*key, item_id) not in self._trailing:
            # Text that came too soon is rendered when its time comes, even with no delta
            # after it (the agent paused), once a RENDER_EVERY at most.
            delay = (RENDER_EVERY - (now - shown.rendered_at)).total_seconds()
            loop = asyncio.get_running_loop()
            self._trailing[(*key, item_id)] = loop.call_later(
                delay, self._trailing_render, key, item_id
            )

    def _trailing_render(self, key: tuple[str, str], item_id: str) -> None:
        self._trailing.pop((*key, item_id), None)
        shown = self.writing.get(key, {}).get(item_id)
        if shown is not None:  # else final (rendered whole) or its chat closed
            self._render_written(key, item_id, shown)

    # --- after a reset (wire §10 step 4) ----------------------------------------

    def read_again(self, agent: str) -> None:
        """The agent's open conversations were read anew (after ``reset``, its log may have
        lost events): read every chat kept for it again, then tell the phones to. A chat
        being read for the first time reads again by itself (``_epochs``)."""
        self._epochs[agent] = self._epochs.get(agent, 0) + 1
        for key in [k for k in self._dropped if k[0] == agent]:
            # Not in memory: their next open reads them from the agent. What the gateway
            # still holds of them (the items being written) may lack lost events: drop it,
            # and tell the phones that may show them to read them again.
            self._dropped.discard(key)
            self.writing.pop(key, None)
            self._writing_items.pop(key, None)
            self.publish("chat.reload", {"agent": agent, "conversation_id": key[1]})
        for key in [k for k in self.chats if k[0] == agent]:
            if key in self._rereads:
                self._rereads[key] = True  # the read under way may predate this one
                continue
            self._rereads[key] = False
            self.spawn(self._read_again_chat(key), "chat-reread")

    async def _read_again_chat(self, key: tuple[str, str]) -> None:
        agent, conv_id = key
        try:
            while True:
                self._rereads[key] = False
                try:
                    await self._load(agent, conv_id)
                except (AgentUnreachable, AgentRejected, RemoteWireError) as exc:
                    log.info("agent %s: chat %s not read again: %s", agent, conv_id, exc)
                    self.chats.pop(key, None)  # read on the next visit
                # At once, with no await since the read was applied: the events it skipped
                # as stale (ids from before a lost log) were never sent to the phones.
                self.publish("chat.reload", {"agent": agent, "conversation_id": conv_id})
                if not self._rereads.get(key):
                    break
        finally:
            self._rereads.pop(key, None)

    def add_note(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Add a receipt or "stopped" line to a chat (stored by the gateway)."""
        state = self.chats.get((agent, conv_id))
        if state is not None:
            state.notes.append(note)
        for buffer in self._loading.get((agent, conv_id), ()):
            buffer.append((None, note))
        self.unsaved.setdefault((agent, conv_id), []).append(note)
        languages = self.languages

        def worded(cat: Catalogue) -> dict[str, object]:
            return {"agent": agent, "conversation_id": conv_id, "note": note_json(note, cat)}

        self.publish("chat.note", worded(self.catalogue), lambda t: worded(languages.get(t)))
        self.spawn(self._save_note(agent, conv_id, key, note), "note")

    async def _save_note(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        await self.notes.save(agent, conv_id, key, note)
        self.note_saved(agent, conv_id, note)

    def note_saved(self, agent: str, conv_id: str, note: Note) -> None:
        """A note reached SQLite: a chat read from now on finds it there."""
        notes = self.unsaved.get((agent, conv_id))
        if notes is not None and note in notes:
            notes.remove(note)
            if not notes:
                del self.unsaved[agent, conv_id]

    def _echoed(self, key: tuple[str, str], item: Item, now: datetime) -> None:
        lines = self.mine.get(key)
        if not lines:
            return
        mine = match_echo(lines, item, now)
        if mine is not None:
            lines.remove(mine)

    def retell(self, agent: str, conversations: Sequence[str]) -> None:
        """Tell the phones these conversations' rows (and a loaded chat's state) again, as
        they are (another worker may not have told them)."""
        for conv_id in conversations:
            self._publish_soon(agent, conv_id)

    def _publish_soon(self, agent: str, conv_id: str) -> None:
        """Publish the conversation's row and chat once the events read with this one are
        applied: an agent's transaction (an ask raised and its conversation now waiting)
        costs one build and reaches the phone as one state, not two."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call): at once
            self._publish_conversation(agent, conv_id)
            return
        if not self._to_publish:
            loop.call_soon(self._publish_pending)
        self._to_publish[agent, conv_id] = contextvars.copy_context()

    def _publish_pending(self) -> None:
        pending, self._to_publish = self._to_publish, {}
        for (agent, conv_id), context in pending.items():
            context.run(self._publish_conversation, agent, conv_id)

    def _publish_conversation(self, agent: str, conv_id: str) -> None:
        mirror = self.agents.mirror(agent)
        conv = mirror.conversations.get(conv_id)
        if conv is None:
            self.publish("list.removed", {"agent": agent, "conversation_id": conv_id})
            return
        languages, now = self.languages, self.clock()

        def row(cat: Catalogue) -> dict[str, object]:
            return {"agent": agent, "row": list_row(conv, self._ctx(agent, now, cat))}

        self.publish("list.row", row(self.catalogue), lambda t: row(languages.get(t)))
        state = self.chats.get((agent, conv_id))
        if state is not None:

            def changed(cat: Catalogue) -> dict[str, object]:
                chat = self.view(agent, state, catalogue=cat, lines=False)
                return {
                    "agent": agent,
                    "conversation_id": conv_id,
                    "header": chat.header,
                    "bar": chat.bar,
                    "cards": chat.cards,
                    "dots": chat.dots,
                    "turn": chat.turn,
                }

            worded = languages.get
            self.publish("chat.changed", changed(self.catalogue), lambda t: changed(worded(t)))

    def _list_in(self, agent: str) -> Callable[[str], object]:
        """The agent's list in the language a tag names (for the live stream)."""
        languages = self.languages
        return lambda lang: self.build(agent, languages.get(lang))


def _newer(event_id: str | None, snapshot_id: str | None) -> bool:
    """Whether an event came after the snapshot (unknown ids: assume it did)."""
    if event_id is None or snapshot_id is None:
        return True
    if event_id.isdigit() and snapshot_id.isdigit():
        return int(event_id) > int(snapshot_id)
    return True


class _ReadFailed(Exception):
    def __init__(self, status: ReadStatus) -> None:
        super().__init__(status.value)
        self.status = status
