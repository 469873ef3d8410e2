"""The phone API's own answers and live-stream events, as msgspec types (pure).

The routes answer with these (the screens are in ``views``), and the OpenAPI document is
generated from them: each ``Attributes:`` entry is that property's description.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from collie_gateway.core.answers import TapOutcome
from collie_gateway.core.mirror import LinkState
from collie_gateway.views.bar import Bar, Header
from collie_gateway.views.cards import CardList, OutcomeLine
from collie_gateway.views.chat import LineState
from collie_gateway.views.dashboard import AgentRow, Section
from collie_gateway.views.listing import ConversationList, Footer, ListRow
from wire.messages import Ask, Item, Time

_Outcome = Annotated[
    str, msgspec.Meta(examples=["accepted", "moved_on", "not_found", "refused", "uncertain"])
]


class Error(msgspec.Struct, kw_only=True):
    """Every error answer: a machine code and a sentence.

    Attributes:
        error: What went wrong, for a program: `bad_request`, `bad_cursor`, `not_found`,
            `method_not_allowed`, `unauthorized`, `too_large`, `agent_error`, `no_answer`.
        message: What went wrong, in a sentence for a person.
    """

    error: Annotated[str, msgspec.Meta(examples=["bad_request", "not_found", "unauthorized"])]
    message: str


class Health(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Liveness, and how many agents are ready.

    Attributes:
        ok: Always true: the gateway answers.
        agents: How many durable agents sources.json names.
        ready: How many of them are linked and ready now.
        crew: On a crew's lead: how many crew members it leads; absent when not a lead.
        crew_ready: On a crew's lead: how many of those members' sections are Ready (W1);
            absent when not a lead.
    """

    ok: bool
    agents: int
    ready: int
    crew: int | None = None
    crew_ready: int | None = None


class Strings(msgspec.Struct, kw_only=True):
    """The phone's words: the catalogue with ``--strings`` applied.

    Attributes:
        strings: Every string a client draws, by its catalogue key (e.g. `t_decided`).
    """

    strings: dict[str, str]


class OpenApi(msgspec.Struct, kw_only=True):
    """The OpenAPI 3.1 document itself (this one).

    Attributes:
        openapi: The OpenAPI version, 3.1.0.
        info: Title, version and the API's description.
        paths: One entry per route.
        components: The schemas and the security scheme.
        security: A token is needed unless the gateway runs on loopback without one.
    """

    openapi: str
    info: dict[str, str]
    paths: dict[str, dict[str, Any]]
    components: dict[str, dict[str, Any]]
    security: list[dict[str, list[str]]]


class AgentHome(msgspec.Struct, kw_only=True):
    """An agent's home header; ``warning`` is R5's box (refused for its wire version).

    Attributes:
        agent: The agent's name in sources.json.
        state: The link's state: `starting`, `ready`, `unreachable` or `version_mismatch`.
        reason: Why the link is not ready, in a sentence; null when ready.
        runtime: The name the agent gives itself in its hello; null before any hello.
        features: The features its hello declares (wire/SPEC.md §5); empty before any hello.
        warning: R5's box when the agent speaks another wire version, else null.
        conversations: The path of the agent's conversation list.
    """

    agent: str
    state: LinkState
    reason: str | None
    runtime: str | None
    features: list[str]
    warning: str | None
    conversations: str


class ClosedPage(msgspec.Struct, kw_only=True):
    """One "Load more" page of closed conversations (L6) and the footer after it.

    Attributes:
        rows: The next closed conversations, up to 100.
        footer: The footer after them: another "Load more", or why there is none; null when
            there is nothing more.
    """

    rows: list[ListRow]
    footer: Footer | None


class CommandAnswer(msgspec.Struct, kw_only=True):
    """A command's outcome (an outcome is not an error).

    Attributes:
        outcome: The agent's outcome (wire/SPEC.md §12.2: `accepted`, `moved_on`,
            `not_found`, `refused`), or `uncertain` when no answer came: send the same
            request id again.
        message: What to show with it: the agent's reason, "No starter named …", the moved-on
            line (B3); null when there is nothing to say.
        conversation_id: The conversation a starter opened (N2); null otherwise.
    """

    outcome: _Outcome
    message: str | None
    conversation_id: str | None = None


class MessageAnswer(msgspec.Struct, kw_only=True):
    """A message's outcome and the person's line (C4).

    Attributes:
        outcome: As a command's outcome.
        line_state: The person's line now: `sent`, `not_confirmed` or `not_sent`.
        label: The words under the line ("Sent", "Sending, not confirmed", "Not sent").
        message: The agent's reason when not sent, or the moved-on line; else null.
        composer_text: The text given back to the composer when the line was not sent;
            else null.
    """

    outcome: _Outcome
    line_state: LineState
    label: str | None
    message: str | None
    composer_text: str | None


class AnswerView(msgspec.Struct, kw_only=True):
    """What a tap came to (T1) and what its card says now.

    Attributes:
        request_id: The tap's request id.
        outcome: The ledger's outcome (T1's rows).
        settled: False while the gateway still tries to hand the answer over (after a lost
            link or a restart): watch for `answer.settled`.
        card: What the card says now.
        phone: The phone that tapped, when a phone did (not the admin token, nor a gateway
            open on loopback).
    """

    request_id: str
    outcome: TapOutcome
    settled: bool
    card: OutcomeLine
    phone: Tapper | None = None


class Tapper(msgspec.Struct, kw_only=True):
    """The phone that tapped.

    Attributes:
        phone_id: Its id (`GET /api/v1/phones`).
        name: The name it paired with.
    """

    phone_id: str
    name: str


class NewStarter(msgspec.Struct, kw_only=True):
    """One starter on the New page (N2).

    Attributes:
        id: The starter's id, to send as `starter`.
        label: Its label.
        description: The line under it; null when the agent gives none.
    """

    id: str
    label: str
    description: str | None


class NewPage(msgspec.Struct, kw_only=True):
    """The New page (N1–N3).

    Attributes:
        title: The page's title ("New conversation").
        starters: The agent's starters, in its order.
        empty: The line shown when the agent offers no starters; else null.
        error: The line shown when the starters could not be read; else null.
    """

    title: str
    starters: list[NewStarter]
    empty: str | None
    error: str | None


class DeviceRegistered(msgspec.Struct, kw_only=True):
    """The registered device.

    Attributes:
        device_id: The device's id: the same for the same token.
    """

    device_id: str


class DeviceRow(msgspec.Struct, kw_only=True):
    """A registered device; its token and key are never shown.

    Attributes:
        device_id: The device's id.
        provider: `apns`, `fcm` or `webpush`.
        environment: `production` or `sandbox` (APNs).
        private: Whether pushes to it are encrypted with its key (private content).
        registered_at: When it registered or last refreshed its token.
        lang: The language tag its pushes are worded in; null: the gateway's default.
    """

    device_id: str
    provider: str
    environment: str
    private: bool
    registered_at: Time
    lang: str | None = None


class DeviceList(msgspec.Struct, kw_only=True):
    """The registered devices.

    Attributes:
        devices: Oldest registration first.
    """

    devices: list[DeviceRow]


class Removed(msgspec.Struct, kw_only=True):
    """A device was forgotten.

    Attributes:
        removed: Always true.
    """

    removed: bool


class Ok(msgspec.Struct, kw_only=True):
    """The request was taken.

    Attributes:
        ok: Always true.
    """

    ok: bool


class PushRow(msgspec.Struct, kw_only=True):
    """One push decision or delivery.

    Attributes:
        at: When.
        agent: The agent whose ask it was about; null for a log line about no agent.
        conversation: The ask's conversation.
        ask: The ask's id.
        device: The device it went to, `webhook`, or null for a decision about no device.
        outcome: `dispatched`, `sent`, `suppressed`, `rate_limited`, `failed`, `gone` (the
            provider said the token is gone; the device was removed) or `withdrawn` (the
            device was told the ask closed: its notification goes).
        reason: Why: the limit, the suppression (e.g. the chat is on screen), the failure.
        provider_id: The provider's id for the message (APNs apns-id, FCM name), when sent.
    """

    at: Time
    agent: str | None
    conversation: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None
    provider_id: str | None


class PushLog(msgspec.Struct, kw_only=True):
    """The push log.

    Attributes:
        pushes: Newest first.
    """

    pushes: list[PushRow]


# --- the data of the live stream's events ------------------------------------------------------


class StreamHello(msgspec.Struct, kw_only=True):
    """The first event of every stream (it has no id): its id for presence, its screen.

    Attributes:
        stream_id: This stream's id, for `POST /api/v1/presence`.
        screen: The screen the phone said it shows (the `screen` parameter); else null.
    """

    stream_id: str
    screen: str | None


class _AgentEvent(msgspec.Struct, kw_only=True):
    """An event about one of the agents (only its kinds are in the document).

    Attributes:
        agent: The agent's name.
    """

    agent: str


class _ConversationEvent(_AgentEvent, kw_only=True):
    """An event about one conversation (only its kinds are in the document).

    Attributes:
        conversation_id: The conversation.
    """

    conversation_id: str


class ListRowEvent(_AgentEvent, kw_only=True):
    """One conversation's row, new or changed.

    Attributes:
        row: The row as the list draws it.
    """

    row: ListRow


class ListResetEvent(_AgentEvent, kw_only=True, omit_defaults=True):
    """The agent's open conversations were read anew: read its list again.

    Attributes:
        machine: On a crew's lead: the crew member the agent runs on; absent for a local
            agent.
    """

    machine: str | None = None


class ChatReloadEvent(_ConversationEvent, kw_only=True):
    """A chat's items were re-read after the agent's reset (or dropped: the chat is read from
    the agent on its next open): read the chat again (wire §10 step 4)."""


class AskRaisedEvent(_AgentEvent, kw_only=True, omit_defaults=True):
    """An agent raised an ask (or one was found open on a new read); a lead pushes a
    member's asks from it (W4).

    Attributes:
        ask: The ask as the agent raised it.
        pane: The pane the ask belongs to, if the agent names one.
        from_snapshot: True when the ask was found open on a new read, not raised live.
        machine: On a crew's lead: the crew member the agent runs on; absent for a local
            agent.
    """

    ask: Ask
    pane: str | None
    from_snapshot: bool
    machine: str | None = None


class AskResolvedEvent(_AgentEvent, kw_only=True, omit_defaults=True):
    """An agent's ask closed; a lead settles its push for it (W4).

    Attributes:
        ask: The ask that closed.
        machine: On a crew's lead: the crew member the agent runs on; absent for a local
            agent.
    """

    ask: Ask
    machine: str | None = None


class ListRemovedEvent(_ConversationEvent, kw_only=True):
    """A conversation left the open list."""


class ChatItemEvent(_ConversationEvent, kw_only=True):
    """An item appended to a chat or updated (the agent's wire item); also a line being
    written whose masked text changed whole (X1: a secret completed): replace the line.

    Attributes:
        item: The item as the agent sent it.
    """

    item: Item


class ChatDeltaEvent(_ConversationEvent, kw_only=True):
    """Text appended to an item still being written (a streamed reply).

    Attributes:
        item_id: The item growing.
        text: The text to append to it, cleaned and masked as a read shows it (X1: a word
            comes once it ends).
    """

    item_id: str
    text: str


class ChatNote(msgspec.Struct, kw_only=True):
    """A line the gateway adds to a chat.

    Attributes:
        kind: `receipt` (R3) or `stopped` (C3).
        text: The line.
        at: When.
        after_item: The item it follows; null: at the top.
    """

    kind: Annotated[str, msgspec.Meta(examples=["receipt", "stopped"])]
    text: str
    at: Time
    after_item: str | None


class ChatNoteEvent(_ConversationEvent, kw_only=True):
    """A receipt or a "stopped" line added to a chat.

    Attributes:
        note: The line.
    """

    note: ChatNote


class ChatChangedEvent(_ConversationEvent, kw_only=True):
    """A loaded chat's header, bar, cards, dots or turn changed.

    Attributes:
        header: The header now.
        bar: The bottom bar now; null for a closed conversation.
        cards: The cards now.
        dots: Whether the agent is working (the typing dots).
        turn: The newest turn: send it with Stop and buttons (B3).
    """

    header: Header
    bar: Bar | None
    cards: CardList
    dots: bool
    turn: int


class AnswerSettledEvent(_AgentEvent, kw_only=True):
    """A tap sent again (after a restart, a lost link, or when its ask closed) came to an end.

    Attributes:
        request_id: The tap's request id.
        outcome: Its final outcome.
    """

    request_id: str
    outcome: TapOutcome


class PushLoggedEvent(msgspec.Struct, kw_only=True):
    """A push decision or delivery was logged (as a row of the push log).

    Attributes:
        agent: The agent.
        ask: The ask's id.
        device: The device, `webhook`, or null.
        outcome: As in the push log.
        reason: As in the push log.
    """

    agent: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None


class ResetEvent(msgspec.Struct):
    """Events were lost (data `{}`): read every screen again, then go on with this stream."""


EVENTS: dict[str, type[msgspec.Struct]] = {
    "stream": StreamHello,
    "reset": ResetEvent,
    "dashboard.row": AgentRow,
    "list.changed": ConversationList,
    "list.reset": ListResetEvent,
    "list.row": ListRowEvent,
    "list.removed": ListRemovedEvent,
    "chat.item": ChatItemEvent,
    "chat.delta": ChatDeltaEvent,
    "chat.note": ChatNoteEvent,
    "chat.changed": ChatChangedEvent,
    "answer.settled": AnswerSettledEvent,
    "push.logged": PushLoggedEvent,
    "chat.reload": ChatReloadEvent,
    "ask.raised": AskRaisedEvent,
    "ask.resolved": AskResolvedEvent,
    "crew.section": Section,
}
