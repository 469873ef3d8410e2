"""The in-memory mirror of every agent's open conversations (pure: no I/O).

The store persists it; the dashboard reads it. Counts are kept incrementally so a dashboard
costs the same whatever the number of conversations (spec L5).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import msgspec

from wire.messages import (
    AgentEvent,
    Ask,
    AskChanged,
    AskRaised,
    AskResolved,
    Conversation,
    ConversationClosed,
    ConversationOpened,
    ConversationUpdated,
    Hello,
    ItemAppended,
    ItemDelta,
    ItemUpdated,
    Reset,
    TurnStopped,
)


class LinkState(enum.StrEnum):
    """Where an agent link stands (spec D5, D6)."""

    STARTING = "starting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    VERSION_MISMATCH = "version_mismatch"


def is_waiting(conv: Conversation) -> bool:
    """Whether a conversation waits for the person: an open ask, or the agent says so."""
    return bool(conv.asks) or conv.state == "waiting"


@dataclass(slots=True)
class AgentMirror:
    """One agent: its link state, its hello and its open conversations."""

    name: str
    state: LinkState = LinkState.STARTING
    reason: str = ""
    unauthorized: bool = False  # unreachable because it refused the gateway's token (D6)
    hello: Hello | None = None
    wire: int | None = None
    last_event_id: str | None = None
    conversations: dict[str, Conversation] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)

    @property
    def open_count(self) -> int:
        """Open conversations."""
        return len(self.conversations)

    @property
    def waiting_count(self) -> int:
        """Open conversations waiting for the person."""
        return len(self.waiting)

    def put(self, conv: Conversation) -> None:
        """Insert or replace one open conversation (a closed one is removed)."""
        if conv.state == "closed":
            self.drop(conv.id)
            return
        self.conversations[conv.id] = conv
        if is_waiting(conv):
            self.waiting.add(conv.id)
        else:
            self.waiting.discard(conv.id)

    def drop(self, conv_id: str) -> None:
        """Forget a conversation (it closed)."""
        self.conversations.pop(conv_id, None)
        self.waiting.discard(conv_id)

    def replace_all(self, convs: list[Conversation]) -> None:
        """Replace every open conversation with a fresh snapshot."""
        self.conversations.clear()
        self.waiting.clear()
        for conv in convs:
            self.put(conv)


@dataclass(frozen=True, slots=True)
class Change:
    """What an event changed: the conversation touched, and whether it is gone."""

    conversation_id: str | None
    closed: bool = False
    counts_changed: bool = False
    reset: bool = False
    resolved: Ask | None = None  # the ask an ``ask.resolved`` removed, as it was


def apply_event(agent: AgentMirror, event: AgentEvent) -> Change:
    """Apply one agent event to its mirror and say what changed.

    Item events change no conversation row; they are returned so the caller can forward them.
    """
    before = (agent.open_count, agent.waiting_count)
    conv_id: str | None
    closed = False
    resolved: Ask | None = None
    match event:
        case ConversationOpened(conversation=conv) | ConversationUpdated(conversation=conv):
            agent.put(_without_items(conv))
            conv_id = conv.id
            closed = conv.state == "closed"
        case ConversationClosed(conversation_id=cid):
            agent.drop(cid)
            conv_id, closed = cid, True
        case AskRaised(ask=ask) | AskChanged(ask=ask):
            conv_id = ask.conversation
            _put_ask(agent, ask)
        case AskResolved(ask_id=ask_id, conversation_id=cid):
            conv_id = cid
            resolved = _drop_ask(agent, cid, ask_id)
        case ItemAppended(conversation_id=cid) | ItemUpdated(conversation_id=cid):
            conv_id = cid
        case ItemDelta(conversation_id=cid) | TurnStopped(conversation_id=cid):
            conv_id = cid
        case Reset():
            return Change(None, reset=True)
    after = (agent.open_count, agent.waiting_count)
    return Change(conv_id, closed=closed, counts_changed=before != after, resolved=resolved)


def _without_items(conv: Conversation) -> Conversation:
    return conv if conv.items is None else msgspec.structs.replace(conv, items=None)


def _put_ask(agent: AgentMirror, ask: Ask) -> None:
    conv = agent.conversations.get(ask.conversation)
    if conv is None:
        return
    asks = list(conv.asks)
    for index, old in enumerate(asks):
        if old.id == ask.id:
            asks[index] = ask
            break
    else:
        asks.append(ask)
    agent.put(msgspec.structs.replace(conv, asks=asks))


def _drop_ask(agent: AgentMirror, conv_id: str, ask_id: str) -> Ask | None:
    conv = agent.conversations.get(conv_id)
    if conv is None:
        return None
    gone = next((a for a in conv.asks if a.id == ask_id), None)
    if gone is not None:
        agent.put(msgspec.structs.replace(conv, asks=[a for a in conv.asks if a.id != ask_id]))
    return gone
