"""Wire v1 messages: every body an agent and a gateway exchange, as msgspec Structs.

Sans-I/O: this module imports only the standard library and msgspec. Decoders are built once.
Open sets (ask kinds, item kinds, features, states) are ``str`` so that an unknown value
decodes and degrades (spec A7) instead of rejecting the whole message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import Meta, Struct

from wire.errors import BodyTooLarge, MalformedMessage, UnknownEvent

WIRE_VERSION: Final = 1

# Limits enforced while decoding (wire/SPEC.md, "Limits").
MAX_BODY: Final = 8 * 1024 * 1024  # one HTTP body: a snapshot page or one conversation
MAX_EVENT: Final = 1024 * 1024  # one server-sent event's data
MAX_ID: Final = 200
MAX_LABEL: Final = 2000
MAX_TEXT: Final = 1024 * 1024
MAX_LIST: Final = 10_000

# A string the gateway shows or sends as the agent gave it, never masked (X1): ids, the values
# of open sets, a link's URL. Every other string of a wire struct, at any depth (an argument's
# value is any JSON), is a text, and every surface that leaves the gateway masks it
# (collie_gateway/core/texts.py walks these types; wire/SPEC.md "Secrets").
VERBATIM: Final = {"verbatim": True}

Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID, extra=VERBATIM)]
Label = Annotated[str, Meta(max_length=MAX_LABEL)]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
# The value of an open set (a kind, a state, a role, an origin): a word of the protocol.
Kind = Annotated[str, Meta(max_length=MAX_LABEL, extra=VERBATIM)]
Url = Annotated[str, Meta(max_length=MAX_TEXT, extra=VERBATIM)]
# An agent's opaque cursor, sent back to it as it is.
Cursor = Annotated[str, Meta(max_length=MAX_LABEL, extra=VERBATIM)]
Count = Annotated[int, Meta(ge=0, le=2**53 - 1)]
Version = Annotated[int, Meta(ge=0, le=2**53 - 1)]
Length = Annotated[int, Meta(ge=1, le=2**53 - 1)]
Time = Annotated[datetime, Meta(tz=True)]

# Known values of the open sets; anything else still decodes.
FEATURES: Final = (
    "history",
    "reopen",
    "close",
    "starters",
    "steer",
    "stop",
    "buttons",
    "progress",
    "deadlines",
)
CONVERSATION_STATES: Final = ("idle", "working", "waiting", "closed")
ITEM_KINDS: Final = ("user", "reply", "thinking", "notice", "markdown", "code", "link", "tool")
TOOL_STATUSES: Final = ("running", "done", "failed", "denied")
ASK_KINDS: Final = ("permission", "choice", "text", "form")
OPTION_ROLES: Final = ("allow", "always", "deny", "cancel")
FIELD_KINDS: Final = ("text", "select", "switch")
RESOLUTIONS: Final = ("answered", "decided", "expired", "stopped")
# Where an argument's value came from (people-in-the-loop S1); ``result:<step>`` names a step.
ARGUMENT_ORIGINS: Final = ("typed", "reply", "context", "computed", "result", "model", "agent")
MAX_REASONS: Final = 100


def known_state(state: str) -> str:
    """A conversation state as a v1 reader reads it: an unknown value is ``idle`` (§14)."""
    return state if state in CONVERSATION_STATES else "idle"


class Base(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every wire struct: immutable, keyword-only, unknown fields ignored."""


# --- hello -------------------------------------------------------------------------------


class VersionProbe(Base, frozen=True, kw_only=True):
    """The version-neutral part of a hello: all a gateway needs to refuse an agent."""

    wire: int


class Hello(Base, frozen=True, kw_only=True):
    """``GET /hello``: what the agent says of itself."""

    wire: int
    runtime: Label | None = None
    subtitle: Label | None = None
    features: Annotated[list[Kind], Meta(max_length=100)] = []

    def has(self, feature: str) -> bool:
        """Whether the agent declared ``feature`` (spec G1)."""
        return feature in self.features


# --- conversations -----------------------------------------------------------------------


class Step(Base, frozen=True, kw_only=True):
    """One progress step; ``state`` is ``pending``, ``running`` or ``done``."""

    label: Label
    state: Kind = "pending"


class Progress(Base, frozen=True, kw_only=True):
    """Steps with labels and which runs, or a percent with a label."""

    steps: Annotated[list[Step], Meta(max_length=100)] | None = None
    percent: Annotated[float, Meta(ge=0, le=100)] | None = None
    label: Label | None = None


class Button(Base, frozen=True, kw_only=True):
    """A button the agent defines for a conversation's bottom bar (spec B2)."""

    id: Id
    label: Label
    icon: Kind | None = None
    busy: bool = False
    disabled: bool = False


class ToolRef(Base, frozen=True, kw_only=True):
    """The tool call an ask or an item is about.

    Attributes:
        call_id: The tool call's id.
        name: The tool's name.
    """

    call_id: Id
    name: Label


class Option(Base, frozen=True, kw_only=True):
    """An option of a permission or choice ask, or of a form's select field.

    Attributes:
        id: The option's id, sent back in the answer.
        label: Its words.
        role: A permission's option: `allow`, `always`, `deny` or `cancel`.
    """

    id: Id
    label: Label
    role: Kind | None = None  # permission: allow | always | deny | cancel


class FormField(Base, frozen=True, kw_only=True):
    """A field of a form ask: ``text``, ``select`` or ``switch``.

    Attributes:
        id: The field's id, the key of its value in the answer.
        kind: `text`, `select` or `switch`.
        label: Its words.
        required: Whether the answer must give it.
        options: A `select` field's options.
        max_length: A `text` field's longest value.
    """

    id: Id
    kind: Kind
    label: Label
    required: bool = False
    options: Annotated[list[Option], Meta(max_length=MAX_LIST)] = []
    max_length: Length | None = None


class Argument(Base, frozen=True, kw_only=True):
    """One argument of the call an ask is about (S1): ``value`` is any JSON, shown as text;
    ``origin`` says where it came from (open set: ``typed``, ``reply``, ``context``,
    ``computed``, ``result:<step>``, ``model``, ``agent``).

    Attributes:
        name: The argument's name.
        value: Its value, any JSON; the phone shows it as text.
        origin: Where the value came from (an open set); null: not said.
    """

    name: Label
    value: Any = None
    origin: Kind | None = None


class Ask(Base, frozen=True, kw_only=True):
    """A question to the person. ``id`` is stable across the agent's restarts;
    ``version`` grows whenever the content changes.

    Attributes:
        id: The ask's id, stable across the agent's restarts.
        version: Grows whenever the content changes.
        conversation: The conversation it belongs to.
        kind: `permission`, `choice`, `text` or `form`.
        title: The question.
        text: More words under it.
        tool: The tool call it is about.
        deadline: When it expires; null: never.
        options: A permission's or choice's options.
        multiple: A choice: whether several options may be picked.
        max_length: A text ask: the longest answer.
        fields: A form's fields.
        push_title: The push's title, when the agent words it.
        push_line: The push's line, when the agent words it.
        raised_at: When it was raised.
        arguments: What the call will use: each argument with the origin of its value (S1).
        reasons: Why the call waits for the person, shown verbatim (S1).
        irreversible: Whether nothing can undo the step once it runs (S1).
    """

    id: Id
    version: Version = 1
    conversation: Id
    kind: Kind
    title: Label = ""
    text: Text = ""
    tool: ToolRef | None = None
    deadline: Time | None = None
    options: Annotated[list[Option], Meta(max_length=MAX_LIST)] = []
    multiple: bool = False
    max_length: Length | None = None
    fields: Annotated[list[FormField], Meta(max_length=MAX_LIST)] = []
    push_title: Label | None = None
    push_line: Label | None = None
    raised_at: Time | None = None
    arguments: Annotated[list[Argument], Meta(max_length=MAX_LIST)] = []
    reasons: Annotated[list[Label], Meta(max_length=MAX_REASONS)] = []
    irreversible: bool = False


class Words(Base, frozen=True, kw_only=True):
    """An item's text as a key of the gateway's catalogue with its arguments: the gateway
    shows its own wording in the phone's language; a key it does not have shows ``text``.

    Attributes:
        key: A catalogue key (``say_…``), e.g. `say_hooks_queued`.
        args: The values of its placeholders, by name (texts).
    """

    key: Id
    args: Annotated[dict[Id, Label], Meta(max_length=20)] = {}


class NoticePush(Base, frozen=True, kw_only=True):
    """A notice item's push: the agent asks the gateway to push it (P1's limits, once per
    item id, P3).

    Attributes:
        title: The push's title, ≤ 60 shown (P2); null: the notice's text (its ``words``).
        line: The push's one line, ≤ 120 shown (P2).
    """

    title: Label | None = None
    line: Label | None = None


class Item(Base, frozen=True, kw_only=True):
    """One item of a conversation. Fields beyond ``id``/``kind``/``text`` apply per kind:
    ``request_id`` (user), ``language`` (code), ``url``/``label`` (link),
    ``call_id``/``name``/``status``/``output`` (tool).

    Attributes:
        id: The item's id, unique in its conversation.
        kind: `user`, `reply`, `thinking`, `tool`, `code`, `markdown`, `link` or `notice`.
        text: Its text.
        final: False while it grows by deltas.
        at: When it was written; null while not final.
        request_id: A `user` item: the request id of the message it echoes (C5).
        language: A `code` item: its language.
        url: A `link` item: its URL.
        label: A `link` item: its words.
        call_id: A `tool` item: the tool call's id.
        name: A `tool` item: the tool's name.
        status: A `tool` item: `running`, `done` or `failed`.
        output: A `tool` item: its output.
        words: Its text as a catalogue key with arguments (shown in the phone's language).
        push: A `notice` item: push it (P1–P3).
    """

    id: Id
    kind: Kind
    text: Text = ""
    final: bool = True
    at: Time | None = None
    request_id: Id | None = None
    language: Kind | None = None
    url: Url | None = None
    label: Label | None = None
    call_id: Id | None = None
    name: Label | None = None
    status: Kind | None = None
    output: Text | None = None
    words: Words | None = None
    push: NoticePush | None = None


class Conversation(Base, frozen=True, kw_only=True):
    """A conversation's snapshot. ``items`` is present only in ``GET /conversations/{id}``."""

    id: Id
    title: Label | None = None
    subtitle: Label | None = None
    state: Kind = "idle"
    updated_at: Time
    turn: Count = 0
    workspace: Label | None = None
    progress: Progress | None = None
    buttons: Annotated[list[Button], Meta(max_length=100)] = []
    asks: Annotated[list[Ask], Meta(max_length=MAX_LIST)] = []
    items: Annotated[list[Item], Meta(max_length=100_000)] | None = None


class ConversationPage(Base, frozen=True, kw_only=True):
    """``GET /conversations?state=…``. ``keeps_list`` false: the agent keeps no list of
    closed conversations (spec L6), which is not the same as an empty page."""

    conversations: Annotated[list[Conversation], Meta(max_length=100_000)] = []
    next_cursor: Cursor | None = None
    keeps_list: bool = True


class Starter(Base, frozen=True, kw_only=True):
    """A way to start a conversation that needs no folder and no text (spec N2)."""

    id: Id
    label: Label
    description: Label | None = None


class StarterList(Base, frozen=True, kw_only=True):
    """``GET /starters``."""

    starters: Annotated[list[Starter], Meta(max_length=100)] = []


# --- events (GET /events, text/event-stream; the JSON is each event's data) ---------------


class Event(Base, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event an agent sends on its stream."""


class ConversationOpened(Event, frozen=True, kw_only=True, tag="conversation.opened"):
    """A conversation opened or reopened; the snapshot carries no items."""

    conversation: Conversation


class ConversationUpdated(Event, frozen=True, kw_only=True, tag="conversation.updated"):
    """A conversation's title, state, turn, progress, buttons or asks changed."""

    conversation: Conversation


class ConversationClosed(Event, frozen=True, kw_only=True, tag="conversation.closed"):
    """A conversation closed."""

    conversation_id: Id
    at: Time


class ItemAppended(Event, frozen=True, kw_only=True, tag="item.appended"):
    """A new item; ``final`` false means its text will grow by deltas."""

    conversation_id: Id
    item: Item


class ItemDelta(Event, frozen=True, kw_only=True, tag="item.delta"):
    """Text appended to an item still being written."""

    conversation_id: Id
    item_id: Id
    text: Text


class ItemUpdated(Event, frozen=True, kw_only=True, tag="item.updated"):
    """An item replaced whole: its final text, or a tool call's new status."""

    conversation_id: Id
    item: Item


class AskRaised(Event, frozen=True, kw_only=True, tag="ask.raised"):
    """An ask opened, or was raised again after a restart under the same id."""

    ask: Ask


class AskChanged(Event, frozen=True, kw_only=True, tag="ask.changed"):
    """An ask's content changed; its version grew."""

    ask: Ask


class AskResolved(Event, frozen=True, kw_only=True, tag="ask.resolved"):
    """An ask closed: ``how`` is answered, decided, expired or stopped."""

    ask_id: Id
    conversation_id: Id
    how: Kind
    request_id: Id | None = None
    at: Time


class TurnStopped(Event, frozen=True, kw_only=True, tag="turn.stopped"):
    """A turn was stopped; the chat shows the note "stopped" (spec C3)."""

    conversation_id: Id
    turn: Count


class Reset(Event, frozen=True, kw_only=True, tag="reset"):
    """The agent cannot replay from the ``Last-Event-ID`` it was given: read snapshots again."""


AgentEvent = (
    ConversationOpened
    | ConversationUpdated
    | ConversationClosed
    | ItemAppended
    | ItemDelta
    | ItemUpdated
    | AskRaised
    | AskChanged
    | AskResolved
    | TurnStopped
    | Reset
)

# --- commands (POST bodies) and their results ---------------------------------------------


class Answer(Base, frozen=True, kw_only=True):
    """The person's answer, by ask kind: ``option`` (permission, choice), ``options`` (choice
    with ``multiple``), ``text`` (text), ``fields`` (form). ``confirmed`` must be true for an
    answer whose option has the role ``always`` (spec A5).

    Attributes:
        option: The option picked (permission, choice).
        options: The options picked (choice with `multiple`).
        text: The text (text ask).
        fields: The form's values by field id: text or select option id (strings), switch
            (booleans).
        confirmed: True with the second tap on an `always` option (A5).
    """

    option: Id | None = None
    options: Annotated[list[Id], Meta(max_length=100)] | None = None
    text: Text | None = None
    fields: dict[Id, str | bool] | None = None
    confirmed: bool = False


class Reply(Base, frozen=True, kw_only=True):
    """``POST /asks/{id}/reply``."""

    request_id: Id
    version: Version
    answer: Answer


class SendMessage(Base, frozen=True, kw_only=True):
    """``POST /conversations/{id}/messages``; ``steer`` sends into the running turn."""

    request_id: Id
    text: Text
    steer: bool = False
    turn: Count | None = None


class TurnCommand(Base, frozen=True, kw_only=True):
    """``POST …/stop`` and ``POST …/buttons/{button}``: ``turn`` is the newest the phone saw."""

    request_id: Id
    turn: Count


class PlainCommand(Base, frozen=True, kw_only=True):
    """``POST …/close`` and ``POST …/reopen``."""

    request_id: Id


class StartConversation(Base, frozen=True, kw_only=True):
    """``POST /conversations``: open a new conversation from a starter."""

    request_id: Id
    starter: Id


REPLY_OUTCOMES: Final = ("accepted", "decided", "expired", "answered", "not_open", "changed")
COMMAND_OUTCOMES: Final = ("accepted", "moved_on", "not_found", "refused")


class ReplyResult(Base, frozen=True, kw_only=True):
    """The outcome of a reply. The same request id always gets the first outcome again."""

    outcome: Kind
    reason: Label | None = None


class CommandResult(Base, frozen=True, kw_only=True):
    """The outcome of a command other than a reply."""

    outcome: Kind
    reason: Label | None = None
    conversation_id: Id | None = None


class ErrorBody(Base, frozen=True, kw_only=True):
    """The body of every 4xx/5xx answer: a machine code and a sentence."""

    error: Kind
    message: Label = ""


# --- the codec -----------------------------------------------------------------------------

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type[T] | Any) -> msgspec.json.Decoder[Any]:
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.json.Decoder(kind)
    return dec


def encode(message: Any) -> bytes:
    """Encode any wire struct (or plain value) to JSON bytes."""
    return _encoder.encode(message)


def decode(data: bytes | str, kind: type[T], *, limit: int = MAX_BODY) -> T:
    """Decode ``data`` as ``kind``.

    Raises:
        BodyTooLarge: ``data`` is longer than ``limit`` bytes.
        MalformedMessage: not JSON, or not of the shape of ``kind``.
    """
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > limit:
        raise BodyTooLarge(f"body of {size} bytes is over the limit of {limit}")
    try:
        result: T = _decoder(kind).decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MalformedMessage(str(exc) or "nested too deeply") from None
    return result


def decode_event(data: bytes | str) -> AgentEvent:
    """Decode one event's data.

    Raises:
        UnknownEvent: well-formed, but of a type this side does not know.
        BodyTooLarge, MalformedMessage: as :func:`decode`.
    """
    try:
        return decode(data, AgentEvent, limit=MAX_EVENT)  # type: ignore[arg-type]
    except MalformedMessage:
        try:
            probe = _decoder(_TypeProbe).decode(data)
        except (msgspec.DecodeError, RecursionError):
            raise MalformedMessage('event data is not an object with a string "type"') from None
        if probe.type not in EVENT_TYPES:
            raise UnknownEvent(probe.type) from None
        raise


class _TypeProbe(Struct):
    type: str


EVENT_TYPES: Final = frozenset(str(t.__struct_config__.tag) for t in AgentEvent.__args__)


# Built once at import: the hot paths.
_decoders[AgentEvent] = msgspec.json.Decoder(AgentEvent)
