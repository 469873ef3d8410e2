"""The phone API's OpenAPI 3.1 document; schemas come from the view types and request bodies.

Handlers that answer with a plain dict are described by the small Structs below, used only
for their schemas. ``tests/collie_gateway/test_openapi.py`` checks every route is here.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Annotated, Any

import msgspec

from collie_gateway.mirror import LinkState
from collie_gateway.views.bar import Bar, Header
from collie_gateway.views.cards import Body, CardList, OutcomeLine, TapOutcome
from collie_gateway.views.chat import Chat, ChatLine, LineState
from collie_gateway.views.dashboard import AgentRow, Dashboard, Section
from collie_gateway.views.listing import ConversationList, Footer, ListRow
from wire.messages import Ask

_Nullable = str | None

# --- shapes of the dict answers (schemas only) ----------------------------------------------


class Error(msgspec.Struct, kw_only=True):
    """Every error answer: a machine code and a sentence."""

    error: Annotated[str, msgspec.Meta(examples=["bad_request", "not_found", "unauthorized"])]
    message: str


class Health(msgspec.Struct, kw_only=True):
    """Liveness, and how many agents are ready."""

    ok: bool
    agents: int
    ready: int
    crew: int = 0  # crew members this gateway leads (only on a lead)
    crew_ready: int = 0  # of them, those whose section is Ready


class AgentHome(msgspec.Struct, kw_only=True):
    """An agent's home header; ``warning`` is R5's box (refused for its wire version)."""

    agent: str
    state: LinkState
    reason: _Nullable
    runtime: _Nullable
    features: list[str]
    warning: _Nullable
    conversations: Annotated[str, msgspec.Meta(description="Path of the agent's list")]


class ClosedPage(msgspec.Struct, kw_only=True):
    """One "Load more" page of closed conversations (L6) and the footer after it."""

    rows: list[ListRow]
    footer: Footer | None


class CommandAnswer(msgspec.Struct, kw_only=True):
    """A command's outcome: the agent's (wire §12.2), ``refused``, or ``uncertain`` when no
    answer came (then ``conversation_id`` is absent)."""

    outcome: Annotated[
        str,
        msgspec.Meta(examples=["accepted", "moved_on", "not_found", "refused", "uncertain"]),
    ]
    message: _Nullable
    conversation_id: _Nullable = None


class MessageAnswer(msgspec.Struct, kw_only=True):
    """A message's outcome and the person's line (C4); ``composer_text`` is given back when
    the line was not sent."""

    outcome: str
    line_state: LineState
    label: _Nullable
    message: _Nullable
    composer_text: _Nullable


class AnswerView(msgspec.Struct, kw_only=True):
    """What a tap came to (T1) and what its card says now."""

    request_id: str
    outcome: TapOutcome
    settled: bool
    card: OutcomeLine


class NewStarter(msgspec.Struct, kw_only=True):
    """One starter on the New page (N2)."""

    id: str
    label: str
    description: _Nullable


class NewPage(msgspec.Struct, kw_only=True):
    """The New page (N1–N3): ``empty`` when the agent has no starters, ``error`` when they
    could not be read."""

    title: str
    starters: list[NewStarter]
    empty: _Nullable
    error: _Nullable


# --- the data of the phone's events ---------------------------------------------------------


class ListRowEvent(msgspec.Struct, kw_only=True):
    """``list.row``: one conversation's row, new or changed."""

    agent: str
    row: ListRow


class ListResetEvent(msgspec.Struct, kw_only=True):
    """``list.reset``: the agent's open conversations were read anew: read its list again."""

    agent: str
    machine: str | None = None  # on a lead: the crew member the agent runs on


class AskRaisedEvent(msgspec.Struct, kw_only=True):
    """``ask.raised``: an agent raised an ask (or one was found open on a new read); a lead
    pushes a member's asks from it. On a lead, a member's carries ``machine``."""

    agent: str
    ask: Ask
    pane: str | None
    from_snapshot: bool
    machine: str | None = None


class ListRemovedEvent(msgspec.Struct, kw_only=True):
    """``list.removed``: a conversation left the open list."""

    agent: str
    conversation_id: str


class ChatItemEvent(msgspec.Struct, kw_only=True):
    """``chat.item``: an item appended or updated, as the chat's line shows it (cleaned and
    rendered exactly as ``GET …/conversations/{id}`` shows it): replace the line of that id,
    or add it."""

    agent: str
    conversation_id: str
    item: ChatLine


class ChatDeltaEvent(msgspec.Struct, kw_only=True):
    """``chat.delta``: text added to the ``text`` of a line still being written (cleaned);
    ``shortened`` comes once, when the text reached its limit and was cut ("…")."""

    agent: str
    conversation_id: str
    item_id: str
    text: str
    shortened: str | None = None


class ChatReloadEvent(msgspec.Struct, kw_only=True):
    """``chat.reload``: the gateway read the conversation again (the agent's event log was
    cut or lost): read the chat again."""

    agent: str
    conversation_id: str


class ChatNote(msgspec.Struct, kw_only=True):
    """A receipt (R3) or "stopped" line (C3), placed after ``after_item``."""

    kind: Annotated[str, msgspec.Meta(examples=["receipt", "stopped"])]
    text: str
    at: datetime
    after_item: _Nullable


class ChatNoteEvent(msgspec.Struct, kw_only=True):
    """``chat.note``: the gateway added a line to a chat."""

    agent: str
    conversation_id: str
    note: ChatNote


class ChatChangedEvent(msgspec.Struct, kw_only=True):
    """``chat.changed``: a loaded chat's header, bar, cards, dots or turn changed."""

    agent: str
    conversation_id: str
    header: Header
    bar: Bar | None
    cards: CardList
    dots: bool
    turn: int


class AnswerSettledEvent(msgspec.Struct, kw_only=True):
    """``answer.settled``: a tap sent again (after a restart, a lost link, or when its ask
    closed) came to an end."""

    agent: str
    request_id: str
    outcome: TapOutcome


class DeviceRegistered(msgspec.Struct, kw_only=True):
    """``POST /api/v1/devices``: the device's id (the same for the same token)."""

    device_id: str


class DeviceRow(msgspec.Struct, kw_only=True):
    """A registered device; its token and key are never shown."""

    device_id: str
    provider: str
    environment: str
    private: bool
    registered_at: float


class DeviceList(msgspec.Struct, kw_only=True):
    """``GET /api/v1/devices``."""

    devices: list[DeviceRow]


class Removed(msgspec.Struct, kw_only=True):
    """A device was forgotten."""

    removed: bool


class Ok(msgspec.Struct, kw_only=True):
    """The request was taken."""

    ok: bool


class PushRow(msgspec.Struct, kw_only=True):
    """One push decision or delivery: ``dispatched``, ``sent``, ``suppressed`` (why),
    ``rate_limited`` (which limit), ``failed`` (why), ``gone`` (token removed)."""

    at: str
    agent: str | None
    conversation: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None
    provider_id: str | None


class PushLog(msgspec.Struct, kw_only=True):
    """``GET /api/v1/pushes``: newest first."""

    pushes: list[PushRow]


class StreamHello(msgspec.Struct, kw_only=True):
    """``stream``: the first event of every stream (no id): its id for presence, its screen."""

    stream_id: str
    screen: str | None


class PushLoggedEvent(msgspec.Struct, kw_only=True):
    """``push.logged``: a push decision or delivery was logged."""

    agent: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None


class ResetEvent(msgspec.Struct):
    """``reset``: the events since ``Last-Event-ID`` are lost; read every screen again."""


class AskResolvedEvent(msgspec.Struct, kw_only=True):
    """``ask.resolved``: an agent's ask closed; on a lead, a member's carries ``machine``."""

    agent: str
    ask: Ask
    machine: str | None = None


_EVENTS: dict[str, tuple[type[Any], str]] = {
    "dashboard.row": (AgentRow, "one agent's dashboard row changed"),
    "list.changed": (ConversationList, "an agent's whole list, read anew"),
    "list.reset": (ListResetEvent, "an agent's open conversations were read anew"),
    "list.row": (ListRowEvent, "one conversation's row, new or changed"),
    "list.removed": (ListRemovedEvent, "a conversation left the open list"),
    "chat.item": (ChatItemEvent, "an item appended to or updated in a chat"),
    "chat.delta": (ChatDeltaEvent, "text appended to an item still being written"),
    "chat.note": (ChatNoteEvent, "a receipt or a stopped line"),
    "chat.reload": (ChatReloadEvent, "a chat was read again from the agent: read it again"),
    "chat.changed": (ChatChangedEvent, "a loaded chat's header, bar, cards, dots or turn"),
    "answer.settled": (AnswerSettledEvent, "a tap sent again settled"),
    "stream": (StreamHello, "the first event (no id): the stream's id for presence"),
    "push.logged": (PushLoggedEvent, "a push decision or delivery was logged"),
    "ask.raised": (AskRaisedEvent, "an agent raised an ask"),
    "ask.resolved": (AskResolvedEvent, "an agent's ask closed (a lead settles its push)"),
    "crew.section": (Section, "on a lead: a crew member's section changed state (W1)"),
    "reset": (ResetEvent, "events were lost: read every screen again (data is {})"),
}

_EVENTS_DESCRIPTION = """\
Server-sent events. Each event is `id: <boot>-<seq>`, `event: <type>` and one `data:` line of
JSON; a `: ping` comment comes every 15 s of silence. On a crew's lead, a member's events come
too, each with `machine` (the member's name) and its URLs the lead's.

A phone that reconnects sends the last id it saw as `Last-Event-ID` (or the `last_event_id`
query parameter): the events after it are replayed. When they cannot be (the gateway restarted,
or the id fell out of the ring), the stream starts with `reset`. A phone that falls too far
behind gets `reset` and the stream ends. Without an id nothing is replayed. When the gateway
stops, every stream ends after the events already queued: reconnect (to the next run) with
`Last-Event-ID`.

Event types (`x-events` gives each one's data schema):

"""


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR_WORDS = {
    400: "Bad request: a query parameter or the JSON body is not of the documented shape",
    401: "No valid bearer token (when the gateway has a token)",
    404: "Not found",
    502: "The agent refused the read, or its answer was not wire v1",
    504: "The agent did not answer",
}


def _errors(codes: dict[int, str]) -> dict[str, Any]:
    return {str(c): _json(_ref("Error"), words) for c, words in codes.items()}


def _op(
    operation_id: str,
    summary: str,
    ok: dict[str, Any],
    errors: dict[int, str],
    *,
    params: list[dict[str, Any]] | None = None,
    body: str | None = None,
    description: str | None = None,
    open_path: bool = False,
) -> dict[str, Any]:
    """One operation: 200 ``ok``, then ``errors`` (with 401 unless ``open_path``, 400 and 413
    with a ``body``), each answered with the Error schema but 413."""
    codes = dict(errors)
    if not open_path:
        codes.setdefault(401, _ERROR_WORDS[401])
    if body is not None:
        codes.setdefault(400, _ERROR_WORDS[400])
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if description:
        op["description"] = description
    if open_path:
        op["security"] = []
    if params:
        op["parameters"] = params
    responses = {"200": ok, **_errors(dict(sorted(codes.items())))}
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
        responses["413"] = {
            "description": "Body over 1 MiB (aiohttp's plain-text answer)",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    op["responses"] = responses
    return op


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


def _flag(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": "boolean", "default": False},
        "description": description + " (`true`/`false`/`1`/`0`; anything else is 400)",
    }


_AGENT = _path("agent", "The agent's name in sources.json (URL-encoded)")
_CONV = _path("conversation", "The conversation's id (URL-encoded)")
_NO_AGENT = {404: "No durable agent of that name"}
_BAD_FLAG = {400: "A flag that is not true or false"}


def _paths() -> dict[str, Any]:
    """Every route of ``routes.add_routes``."""
    answer = _json(_ref("CommandAnswer"), "The command's outcome (an outcome is no error)")
    base = "/api/v1/agents/{agent}/conversations/{conversation}"
    events = {
        "description": "The stream (text/event-stream)",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    events_description = _EVENTS_DESCRIPTION + "\n".join(
        f"- `{name}` — {kind.__name__}: {words}" for name, (kind, words) in _EVENTS.items()
    )
    return {
        "/healthz": {
            "get": _op(
                "healthz",
                "Liveness (no token needed)",
                _json(_ref("Health"), "The gateway answers"),
                {},
                open_path=True,
            )
        },
        "/openapi.json": {
            "get": _op("openapi", "This document", _json({"type": "object"}, "OpenAPI 3.1"), {})
        },
        "/api/v1/dashboard": {
            "get": _op(
                "dashboard",
                "The dashboard (D1–D10)",
                _json(_ref("Dashboard"), "Sections in drawing order"),
                _BAD_FLAG,
                params=[_flag("pending_only", "Show only agents with waiting requests (D9)")],
            )
        },
        "/api/v1/events": {
            "get": {
                **_op(
                    "events",
                    "The phone's live stream",
                    events,
                    {},
                    params=[
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "The last event id the phone saw",
                        },
                        {
                            "name": "last_event_id",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "As Last-Event-ID, which wins when both are given",
                        },
                        {
                            "name": "screen",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "What the phone shows, e.g. chat:desk:c1: no push "
                            "for that chat while the stream is open and fresh (see presence)",
                        },
                    ],
                    description=events_description,
                ),
                "x-events": {name: _ref(kind.__name__) for name, (kind, _) in _EVENTS.items()},
            }
        },
        "/api/v1/agents/{agent}": {
            "get": _op(
                "agent_home",
                "An agent's home header (R5's warning box)",
                _json(_ref("AgentHome"), "The agent"),
                _NO_AGENT,
                params=[_AGENT],
            )
        },
        "/api/v1/agents/{agent}/conversations": {
            "get": _op(
                "conversation_list",
                "The conversation list (L1–L8)",
                _json(_ref("ConversationList"), "Open rows, closed rows and the footer"),
                {**_BAD_FLAG, **_NO_AGENT},
                params=[
                    _AGENT,
                    _flag("poll", "Only what the gateway holds: never read from the agent (L5)"),
                ],
                description="A visit reads the closed rows from the agent; `poll=true` never does.",
            ),
            "post": _op(
                "start_conversation",
                "Start a conversation from a starter (N2)",
                answer,
                _NO_AGENT,
                params=[_AGENT],
                body="PhoneStart",
                description="`conversation_id` names the new conversation when accepted.",
            ),
        },
        "/api/v1/agents/{agent}/closed": {
            "get": _op(
                "closed_page",
                '"Load more": the next 100 closed conversations (L6)',
                _json(_ref("ClosedPage"), "The rows and the footer after them"),
                {400: "No cursor", **_NO_AGENT},
                params=[
                    _AGENT,
                    {
                        "name": "cursor",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1},
                        "description": "From the footer's `load_more` href",
                    },
                ],
            )
        },
        base: {
            "get": _op(
                "chat",
                "A conversation's chat (C1–C6) with header, bar and cards",
                _json(_ref("Chat"), "The chat"),
                {
                    **_BAD_FLAG,
                    404: "No durable agent of that name, or no such conversation",
                    502: _ERROR_WORDS[502],
                    504: _ERROR_WORDS[504],
                },
                params=[_AGENT, _CONV, _flag("all_cards", "Show every card, not the first 5 (A8)")],
            )
        },
        base + "/messages": {
            "post": _op(
                "send_message",
                "Send a message or a steer (C4, B1)",
                _json(_ref("MessageAnswer"), "The outcome and the person's line"),
                _NO_AGENT,
                params=[_AGENT, _CONV],
                body="PhoneMessage",
            )
        },
        base + "/stop": {
            "post": _op(
                "stop",
                "Stop the running turn (B1, B3)",
                answer,
                _NO_AGENT,
                params=[_AGENT, _CONV],
                body="PhoneTurn",
            )
        },
        base + "/buttons/{button}": {
            "post": _op(
                "button",
                "Press an agent's button (B2, B3)",
                answer,
                _NO_AGENT,
                params=[_AGENT, _CONV, _path("button", "The button's id (URL-encoded)")],
                body="PhoneTurn",
            )
        },
        base + "/close": {
            "post": _op(
                "close_conversation",
                'The pane menu\'s "Close conversation" (G2)',
                answer,
                _NO_AGENT,
                params=[_AGENT, _CONV],
                body="PhonePlain",
            )
        },
        base + "/reopen": {
            "post": _op(
                "reopen_conversation",
                '"Reopen" a closed conversation (L4)',
                answer,
                _NO_AGENT,
                params=[_AGENT, _CONV],
                body="PhonePlain",
            )
        },
        "/api/v1/agents/{agent}/new": {
            "get": _op(
                "new_page",
                "The New page with the agent's starters (N1–N3)",
                _json(_ref("NewPage"), "The page"),
                _NO_AGENT,
                params=[_AGENT],
            )
        },
        "/api/v1/agents/{agent}/asks/{ask}/answer": {
            "post": _op(
                "answer_ask",
                "Answer an ask: sent at most once whatever the retries (T1)",
                _json(_ref("AnswerView"), "What the tap came to"),
                _NO_AGENT,
                params=[_AGENT, _path("ask", "The ask's id (URL-encoded)")],
                body="PhoneAnswer",
            )
        },
        "/api/v1/devices": {
            "post": _op(
                "register_device",
                "Register or refresh a phone's APNs or FCM token (P1–P3)",
                _json(_ref("DeviceRegistered"), "The device's id"),
                {},
                body="DeviceIn",
            ),
            "get": _op(
                "list_devices",
                "Registered devices (no tokens, no keys)",
                _json(_ref("DeviceList"), "The devices"),
                {},
            ),
        },
        "/api/v1/devices/{device}": {
            "delete": _op(
                "remove_device",
                "Forget a device",
                _json(_ref("Removed"), "Removed"),
                {404: "No such device"},
                params=[_path("device", "The device's id")],
            )
        },
        "/api/v1/presence": {
            "post": _op(
                "presence",
                "The screen a stream's phone shows (e.g. chat:desk:c1); send it on every change "
                "and at least every 30 s: a screen not confirmed for 45 s is stale and never "
                "holds a push back",
                _json(_ref("Ok"), "Taken"),
                {404: "No open stream with that id"},
                body="PresenceIn",
            )
        },
        "/api/v1/pushes": {
            "get": _op(
                "push_log",
                "The newest push decisions and deliveries",
                _json(_ref("PushLog"), "Newest first"),
                {400: "limit is not a whole number"},
                params=[
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "default": 100, "minimum": 1},
                        "description": "How many (1–1000)",
                    }
                ],
            )
        },
        "/api/v1/answers/{request_id}": {
            "get": _op(
                "answer_status",
                "The ledger's word on one request id",
                _json(_ref("AnswerView"), "What the tap came to"),
                {404: "No answer with that request id"},
                params=[_path("request_id", "The tap's request id")],
            )
        },
    }


_MACHINE = _path("machine", "The crew member's name in the lead's sources.json (URL-encoded)")
_TAIL = _path(
    "tail",
    "The rest of a local route after /api/v1/: agents/… or answers/… (the member's own route)",
)
_NO_MEMBER = {404: "No crew member of that name, or a route a lead does not pass on"}


def _crew_paths() -> dict[str, Any]:
    """The crew's routes (``crew_routes.add_crew_routes``)."""
    member_view = _json(
        {"type": "object"},
        "The member's answer to the same local route, its URLs the lead's, with `machine`",
    )
    member_errors = {
        **_NO_MEMBER,
        502: "The member refused the lead's token, or answered with no JSON",
        504: "The member did not answer",
    }
    return {
        "/api/v1/crew": {
            "get": _op(
                "crew_info",
                "What this gateway can do as a crew member (W4, V2)",
                _json(_ref("CrewInfo"), "Crew version, machine name, answers taken"),
                {},
            )
        },
        "/api/v1/machines/{machine}/agents/{agent}/asks/{ask}/answer": {
            "post": _op(
                "member_answer",
                "An answer to a crew member's ask, sent on with the same request id (W4)",
                _json(_ref("AnswerView"), "What the tap came to, as the member says it"),
                {**_NO_MEMBER, 502: "The member refused the lead's token"},
                params=[_MACHINE, _AGENT, _path("ask", "The ask's id")],
                body="PhoneAnswer",
                description="A member that does not take answers from a lead (V2) is sent "
                "nothing: the card says T1's last row.",
            )
        },
        "/api/v1/machines/{machine}/{tail}": {
            "get": _op(
                "member_read",
                "A crew member's screen: the same views as a local agent's (W1–W4)",
                member_view,
                member_errors,
                params=[_MACHINE, _TAIL],
            ),
            "post": {
                **_op(
                    "member_command",
                    "A command to a crew member's agent, as to a local one",
                    member_view,
                    {**member_errors, 400: _ERROR_WORDS[400]},
                    params=[_MACHINE, _TAIL],
                ),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    _ref(n)
                                    for n in (
                                        "PhoneMessage",
                                        "PhoneTurn",
                                        "PhonePlain",
                                        "PhoneStart",
                                    )
                                ]
                            }
                        }
                    },
                },
            },
        },
    }


def _card_bodies() -> dict[str, type[Body]]:
    """The kinds of a card's body, by tag."""
    bodies: dict[str, type[Body]] = {}
    for kind in Body.__subclasses__():
        info = msgspec.inspect.type_info(kind)
        assert isinstance(info, msgspec.inspect.StructType)
        bodies[str(info.tag)] = kind
    return bodies


@cache
def openapi_document() -> dict[str, Any]:
    """The whole document (built once)."""
    from collie_gateway.crew import CrewInfo
    from collie_gateway.pushing import DeviceIn, PresenceIn
    from collie_gateway.routes import (  # routes imports this module
        PhoneAnswer,
        PhoneMessage,
        PhonePlain,
        PhoneStart,
        PhoneTurn,
    )

    bodies = _card_bodies()
    types: list[Any] = [
        Error,
        Health,
        AgentHome,
        Dashboard,
        ConversationList,
        ClosedPage,
        Chat,
        CommandAnswer,
        MessageAnswer,
        AnswerView,
        NewPage,
        PhoneAnswer,
        PhoneMessage,
        PhoneTurn,
        PhonePlain,
        PhoneStart,
        DeviceIn,
        PresenceIn,
        DeviceRegistered,
        DeviceList,
        Removed,
        Ok,
        PushLog,
        CrewInfo,
        *(kind for kind, _ in _EVENTS.values()),
        *bodies.values(),
    ]
    _, components = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}"
    )
    # A card's ``body`` is typed as the tagged base ``Body``; the phone gets one of its kinds.
    components["Body"] = {
        "title": "Body",
        "description": "What a card offers to answer with, by ask kind.",
        "oneOf": [_ref(kind.__name__) for kind in bodies.values()],
        "discriminator": {
            "propertyName": "kind",
            "mapping": {tag: _ref(kind.__name__)["$ref"] for tag, kind in bodies.items()},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Collie gateway phone API", "version": "1"},
        "paths": {**_paths(), **_crew_paths()},
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # A gateway on loopback may run without a token; then no header is needed.
        "security": [{}, {"bearer": []}],
    }
