"""What an agent's link reads, handed to each sink in a stated order.

A link tells the router three things (:class:`~collie_gateway.services.links.LinkListener`):
its state changed, it read the open conversations anew (a snapshot), or one event arrived
and was applied to the mirror. The router hands each to its sinks in the order given when
the gateway is built (``gateway.py``); each sink does one job:

- ``MirrorSink``: the store's mirror is marked for its next flush;
- ``RowSink``: the agent's dashboard row is published when it changed (and ``list.reset``
  after a snapshot);
- ``ReceiptSink``: an ask that expired or was decided with no tap gets a receipt (R3, R4);
- ``AskSink``: an ask raised pushes (P1–P3) and is told to a lead following this gateway
  (W4); one resolved releases a push still owed;
- ``AnswerSink``: unsettled taps are settled or sent again (T1);
- the chats (:class:`~collie_gateway.services.chats.Chats`): lists and chats stay live.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol

from collie_gateway.core.mirror import AgentMirror, Change, LinkState
from collie_gateway.core.notes import RECEIPTS, receipt_note
from collie_gateway.core.texts import MaskedAsks
from collie_gateway.services.answering import Answering
from collie_gateway.services.answers import Answers
from collie_gateway.services.chats import Chats
from collie_gateway.services.phonebus import Publish
from collie_gateway.services.pushing import Pushing
from collie_gateway.services.rows import Rows
from collie_gateway.services.tasks import Spawn
from collie_gateway.store.protocols import MirrorsStore
from wire.messages import (
    AgentEvent,
    Ask,
    AskChanged,
    AskRaised,
    AskResolved,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
)


class Sink(Protocol):
    """One job done with what links read."""

    def on_link(self, mirror: AgentMirror) -> None:
        """The link's state, reason or hello changed."""

    def on_snapshot(self, mirror: AgentMirror) -> None:
        """The open conversations were read anew."""

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        """One event was applied to the mirror."""


class Router:
    """A :class:`LinkListener` that hands everything to its sinks, in order."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        on_link: Sequence[Sink],
        on_snapshot: Sequence[Sink],
        on_event: Sequence[Sink],
    ) -> None:
        self.clock = clock
        self._link = tuple(on_link)
        self._snapshot = tuple(on_snapshot)
        self._event = tuple(on_event)

    def link_changed(self, mirror: AgentMirror) -> None:
        """A link's state or hello changed."""
        for sink in self._link:
            sink.on_link(mirror)

    def snapshot_taken(self, mirror: AgentMirror) -> None:
        """A link read the open conversations anew."""
        for sink in self._snapshot:
            sink.on_snapshot(mirror)

    def event_received(self, mirror: AgentMirror, event: AgentEvent, change: Change) -> None:
        """An agent event was applied to the mirror."""
        now = self.clock()
        for sink in self._event:
            sink.on_event(mirror, event, change, now)


class MirrorSink:
    """Marks what changed for the store's next flush."""

    def __init__(self, mirrors: MirrorsStore) -> None:
        self.mirrors = mirrors

    def on_link(self, mirror: AgentMirror) -> None:
        self.mirrors.mark(mirror.name)

    def on_snapshot(self, mirror: AgentMirror) -> None:
        self.mirrors.mark_all(mirror.name)

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        # Item events change no stored row: they do not wake the store. (The stored last
        # event id then lags behind them; a link takes a snapshot when it starts anyway.)
        if not isinstance(event, ItemDelta | ItemAppended | ItemUpdated):
            self.mirrors.mark(mirror.name, change.conversation_id)


class RowSink:
    """Publishes the agent's dashboard row when it changed."""

    def __init__(self, rows: Rows, publish: Publish) -> None:
        self.rows = rows
        self.publish = publish

    def on_link(self, mirror: AgentMirror) -> None:
        self.rows.changed(mirror)

    def on_snapshot(self, mirror: AgentMirror) -> None:
        self.rows.changed(mirror)
        self.publish("list.reset", {"agent": mirror.name})

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        if change.counts_changed:
            self.rows.changed(mirror)


class ChatSink:
    """Keeps lists and chats live."""

    def __init__(self, chats: Chats) -> None:
        self.chats = chats

    def on_link(self, mirror: AgentMirror) -> None:
        pass

    def on_snapshot(self, mirror: AgentMirror) -> None:
        # The list snapshot holds no items: what the chats missed in a gap (a reset: the
        # agent's log was cut or lost) is read again, chat by chat (wire §10 step 4).
        self.chats.read_again(mirror.name)

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        self.chats.on_event(mirror.name, event, change, now)


class ReceiptSink:
    """R3, R4: an ask that closed without the person's tap gets a receipt in its chat."""

    def __init__(
        self,
        chats: Chats,
        tapped: Callable[[str, str], Awaitable[bool]],
        redact: Callable[[str], str],
        spawn: Spawn,
    ) -> None:
        self.chats = chats
        self.tapped = tapped
        self.redact = redact
        self.spawn = spawn

    def on_link(self, mirror: AgentMirror) -> None:
        pass

    def on_snapshot(self, mirror: AgentMirror) -> None:
        pass

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        if isinstance(event, AskResolved) and change.resolved and event.how in RECEIPTS:
            self.spawn(self._receipt(mirror.name, event, change.resolved, now), "receipt")

    async def _receipt(self, agent: str, event: AskResolved, ask: Ask, now: datetime) -> None:
        tapped = await self.tapped(agent, ask.id)
        after = self.chats.after_item(agent, event.conversation_id)
        note = receipt_note(event.how, ask, tapped, self.redact, now, after)
        if note is None:
            return
        self.chats.add_note(agent, event.conversation_id, f"ask:{ask.id}", note)


class AskSink:
    """Asks raised push (P1–P3) and are told to a lead following this gateway (W4); a push
    still owed for an ask resolved is not sent. ``told``: on a worker that does not hold the
    agent, asks raised and resolved are only told (kept quiet, to be told if the holder dies
    before it did: services/following.py), nothing pushed."""

    def __init__(
        self,
        pushing: Pushing,
        publish: Publish,
        spawn: Spawn,
        masked: MaskedAsks,
        *,
        told: bool = False,
    ) -> None:
        self.pushing = pushing
        self.publish = publish
        self.spawn = spawn
        self.masked = masked  # the phones' stream and a lead see every text masked (X1)
        self.told = told

    def on_link(self, mirror: AgentMirror) -> None:
        pass

    def on_snapshot(self, mirror: AgentMirror) -> None:
        # Asks raised while the gateway was away push now; once per ask (P3) keeps the rest
        # quiet.
        if self.told:
            return
        for conv in list(mirror.conversations.values()):
            for ask in conv.asks:
                self._raised(mirror.name, ask, conv.title, from_snapshot=True)

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        if isinstance(event, AskRaised):
            conv = mirror.conversations.get(event.ask.conversation)
            self._raised(mirror.name, event.ask, conv.title if conv else None, from_snapshot=False)
        elif isinstance(event, AskResolved) and change.resolved is not None:
            if not self.told and self.pushing.owes(mirror.name, change.resolved):
                self.spawn(self.pushing.ask_resolved(mirror.name, change.resolved), "push")
            # A lead following this gateway settles its own push for it (W4).
            shown = self.masked(change.resolved)
            self.masked.forget(change.resolved)
            self.publish("ask.resolved", {"agent": mirror.name, "ask": shown})

    def _raised(self, agent: str, ask: Ask, pane: str | None, *, from_snapshot: bool) -> None:
        if not self.told:
            pushed = self.pushing.ask_raised(agent, ask, pane, from_snapshot=from_snapshot)
            self.spawn(pushed, "push")
        # A lead following this gateway pushes it to its own phones (W4); a phone may ignore it.
        shown, pane = self.masked(ask), self.masked.mask(pane) if pane else pane
        payload = {"agent": agent, "ask": shown, "pane": pane, "from_snapshot": from_snapshot}
        self.publish("ask.raised", payload)


class AnswerSink:
    """Unsettled taps settle when the agent says, or are sent again (T1)."""

    def __init__(self, answers: Answers, ledger: Answering, spawn: Spawn) -> None:
        self.answers = answers
        self.ledger = ledger
        self.spawn = spawn

    def on_link(self, mirror: AgentMirror) -> None:
        # Most links come back with no tap to send again: no task for them (thousands start
        # at once).
        if mirror.state is LinkState.READY and self.ledger.may_have_pending(mirror.name):
            self.spawn(self.answers.resend_pending(mirror.name), f"resend-{mirror.name}")

    def on_snapshot(self, mirror: AgentMirror) -> None:
        pass

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        if isinstance(event, AskResolved):
            if self.ledger.may_settle(mirror.name, event.ask_id, event.request_id):
                self.spawn(self.answers.settle(mirror.name, event), "settle")
        elif isinstance(event, AskChanged):
            # An unsettled tap on the old version can no longer be applied, but it holds the
            # ask's claim: send it again now, so it settles ("changed") and frees the claim
            # for a tap on the new version.
            self.spawn(self.answers.resend_pending(mirror.name, event.ask.id), "settle")


class NoticeSink:
    """A notice the agent asked to push (wire ``Item.push``) pushes within P1's limits, once
    per item id (P3); links and snapshots mean nothing to it (a snapshot holds no items).
    ``kept``: on a worker that does not hold the agent, the notice is only kept, to be
    decided here if its holder dies before it did (``Pushing.taken_over``)."""

    def __init__(self, pushing: Pushing, spawn: Spawn, *, kept: bool = False) -> None:
        self.pushing = pushing
        self.spawn = spawn
        self.kept = kept

    def on_link(self, mirror: AgentMirror) -> None:
        """Nothing: a link's state pushes no notice."""

    on_snapshot = on_link

    def on_event(
        self, mirror: AgentMirror, event: AgentEvent, change: Change, now: datetime
    ) -> None:
        if not isinstance(event, ItemAppended | ItemUpdated):
            return
        item = event.item
        if item.kind != "notice" or item.push is None or not item.final:
            return
        conv = mirror.conversations.get(event.conversation_id)
        pane = conv.title if conv is not None else None
        if self.kept:
            self.pushing.notice_seen(mirror.name, event.conversation_id, item, pane)
            return
        pushed = self.pushing.notice_pushed(mirror.name, event.conversation_id, item, pane)
        self.spawn(pushed, "push")
