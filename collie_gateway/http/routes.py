"""The phone API's routes: decode, ask the gateway, encode. No business logic here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import msgspec
from aiohttp import hdrs, web

from collie_gateway.core.answers import Record, TapOutcome, tap_state
from collie_gateway.core.cleaning import LABEL_LIMIT, TITLE_LIMIT, Redact, clean
from collie_gateway.core.mirror import LinkState
from collie_gateway.errors import (
    AgentRejected,
    AgentUnreachable,
    AnswerMisfit,
    BadCursor,
    VersionRefused,
)
from collie_gateway.http.api import (
    EVENTS,
    AgentHome,
    AnswerView,
    ClosedPage,
    CommandAnswer,
    DeviceList,
    DeviceRegistered,
    DeviceRow,
    Error,
    Health,
    MessageAnswer,
    NewPage,
    NewStarter,
    Ok,
    OpenApi,
    PushLog,
    PushRow,
    Removed,
    Strings,
)
from collie_gateway.http.crew_routes import (
    crew_info,
    crew_refusal,
    member_answer,
    member_command,
    member_read,
)
from collie_gateway.http.keys import AGENTS, ANSWERS, BUS, CHATS, CREW, PUSHING, ROWS, SETTINGS
from collie_gateway.http.language import named_language, stream_language, words
from collie_gateway.http.openapi import Param, Route, flag_param, openapi_document
from collie_gateway.http.phones import PHONE_ROUTES, caller_of, phone_stream, tapper
from collie_gateway.http.push_routes import PUSH_ROUTES
from collie_gateway.http.responses import encoded, http_error, json_body, json_error
from collie_gateway.http.workers_routes import WORKER_ROUTES
from collie_gateway.services.crew import CrewInfo
from collie_gateway.services.links import expect
from collie_gateway.services.phonebus import PhoneEvent, Subscription
from collie_gateway.services.pushing import DeviceError, DeviceIn, PresenceIn
from collie_gateway.strings import Catalogue
from collie_gateway.views.cards import outcome_line
from collie_gateway.views.chat import Chat, LineState, MyLine
from collie_gateway.views.dashboard import Dashboard
from collie_gateway.views.listing import ConversationList
from wire.errors import RemoteWireError
from wire.messages import (
    WIRE_VERSION,
    Answer,
    CommandResult,
    Id,
    PlainCommand,
    SendMessage,
    StartConversation,
    Starter,
    StarterList,
    TurnCommand,
    Version,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

PING_SECONDS = 15.0
WRITE_BATCH = 1000  # ours: phone events sent in one write at most
_encoder = msgspec.json.Encoder()


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter: ``true``/``false`` (absent is false).

    Raises:
        HTTPBadRequest: any other value.
    """
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise http_error(web.HTTPBadRequest, "bad_request", f"{name} must be true or false")
    return value in ("true", "1")


async def healthz(request: web.Request) -> web.Response:
    """Liveness, and how many agents are ready (no token needed)."""
    agents = request.app[AGENTS]
    health = Health(ok=True, agents=len(agents.mirrors), ready=len(agents.ready()))
    members, ready = request.app[CREW].readiness()
    if members:  # a lead: its members, and how many of their sections are Ready
        health.crew, health.crew_ready = members, ready
    return encoded(health)


async def strings(request: web.Request) -> web.Response:
    """The catalogue with ``--strings`` applied: every word a client draws."""
    return encoded(Strings(strings=words(request).texts()))


async def dashboard(request: web.Request) -> web.Response:
    """D1–D10: the dashboard's sections."""
    pending_only = flag(request, "pending_only")
    rows = request.app[ROWS]
    return json_body(rows.dashboard_json(pending_only=pending_only, catalogue=words(request)))


async def agent_home(request: web.Request) -> web.Response:
    """An agent's home header: its state and, when refused for its version, R5's box."""
    agents = request.app[AGENTS]
    name = request.match_info["agent"]
    mirror = agents.mirrors.get(name)
    if mirror is None:
        return json_error(404, "not_found", f"no durable agent named {name!r}")
    cat = words(request)
    warning = agents.version_warning(name, cat)
    hello = mirror.hello
    # The link's reason names exceptions and addresses: the log has it, the phone reads words.
    reason = None
    if mirror.state is LinkState.UNREACHABLE:
        reason = cat["agent_unauthorized" if mirror.unauthorized else "error_no_answer"]
    return encoded(
        AgentHome(
            agent=name,
            state=mirror.state,
            reason=reason,
            runtime=mask_of(request)(hello.runtime)
            if hello and hello.runtime is not None
            else None,
            features=list(hello.features) if hello else [],
            warning=warning,
            conversations=f"/api/v1/agents/{quote(name, safe='')}/conversations",
        )
    )


async def events(request: web.Request) -> web.StreamResponse:
    """The phone's live stream (server-sent events), resumable with `Last-Event-ID`.

    Each event is `id: <boot>-<seq>`, `event: <type>` and one `data:` line of JSON; a
    `: ping` comment comes every 15 s of silence. The first event, `stream`, has no id.

    To miss nothing, read a screen first and open the stream with `Last-Event-ID` set to the
    screen's `event_id` (or any id the phone saw last): the events after it are replayed, then
    live ones follow. When they cannot be replayed (the gateway restarted, or the id is older
    than the last 10,000 events), the stream starts with `reset`: read the screens again. A
    phone that falls too far behind gets `reset` and the stream ends. Without an id nothing is
    replayed.
    """
    bus = request.app[BUS]
    pushing = request.app[PUSHING]
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    screen = request.query.get("screen") or None
    stream_id = "s-" + secrets.token_hex(8)
    sub, replay = await bus.open(last, stream_language(request))
    unfollow = phone_stream(request, sub)  # a revoked phone's stream ends
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    pushing.stream_opened(stream_id, screen)
    pinger: _Pinger | None = None
    try:
        await resp.prepare(request)
        hello = _encoder.encode({"stream_id": stream_id, "screen": screen})
        await resp.write(b"event: stream\ndata: %s\n\n" % hello)
        if replay is None:
            await resp.write(PhoneEvent(bus.last_id, "reset", b"{}").frame)
        elif replay:
            await resp.write(b"".join(event.frame_in(sub.lang) for event in replay))
        pinger = _Pinger(sub)
        sub.writer = _writer_of(request, resp, pinger)
        while True:
            if sub.overflowed:
                await resp.write(PhoneEvent(bus.last_id, "reset", b"{}").frame)
                break
            if not sub.ready.is_set():
                # Woken by the bus's frame clock (at most once a frame, every phone at once):
                # what arrives meanwhile (a streamed reply's deltas) goes out in one write.
                await sub.ready.wait()
            frames = sub.take(WRITE_BATCH)
            if frames:
                await resp.write(b"".join(frames))
                pinger.wrote()
            elif pinger.due:
                await resp.write(b": ping\n\n")
                pinger.wrote()
            if sub.ended and not sub.pending:
                break  # the gateway stops: the phone reconnects to the next run
    except ConnectionResetError:
        return resp
    finally:
        sub.writer = None
        if pinger is not None:
            pinger.stop()
        unfollow()
        sub.close()
        pushing.stream_closed(stream_id)
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp


def _writer_of(
    request: web.Request, resp: web.StreamResponse, pinger: _Pinger
) -> Callable[[bytes], bool] | None:
    """Writes a stream's frames straight to its connection when nothing waits to be sent on
    it (False otherwise): the bus's wake writes every phone's with no task woken per phone.
    None where aiohttp's writer must frame them itself (compression)."""
    transport = request.transport
    if transport is None or resp.compression:
        return None
    chunked = resp.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"

    def write(data: bytes) -> bool:
        if transport.is_closing() or transport.get_write_buffer_size():
            return False
        transport.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        pinger.wrote()
        return True

    return write


class _Pinger:
    """A ``: ping`` after ``PING_SECONDS`` of silence on a stream: one timer, moved on only when
    it fires (not one per wait: a streamed reply wakes a stream every frame)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self.due = False
        self._timer = self._loop.call_at(self._last + PING_SECONDS, self._fire)

    def wrote(self) -> None:
        """Something went out now."""
        self._last = self._loop.time()
        self.due = False

    def _fire(self) -> None:
        now = self._loop.time()
        if now >= self._last + PING_SECONDS:
            self.due = True
            self._sub.ready.set()  # the stream's reader writes the ping
            self._timer = self._loop.call_at(now + PING_SECONDS, self._fire)
        else:
            self._timer = self._loop.call_at(self._last + PING_SECONDS, self._fire)

    def stop(self) -> None:
        self._timer.cancel()


async def openapi(request: web.Request) -> web.Response:
    """This document (OpenAPI 3.1), generated from the route table."""
    return web.Response(body=_openapi_body(), content_type="application/json")


@cache
def _openapi_body() -> bytes:
    return _encoder.encode(document())


def document() -> dict[str, Any]:
    """The OpenAPI document of :data:`ROUTES`."""
    return openapi_document(ROUTES, Error)


# --- bodies the phone sends -----------------------------------------------------------------


class PhoneAnswer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An answer to an ask: the request id, the ask version shown, the answer.

    Attributes:
        request_id: Made once per tap; a retry sends the same one (T1).
        version: The card's `version`: an answer to an older version is refused `changed`.
        answer: The answer, by ask kind.
    """

    request_id: Id
    version: Version  # 0 … 2^53−1, as on the wire (§3)
    answer: Answer


class PhoneMessage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A message or a steer (C4, B1).

    Attributes:
        request_id: Made once per message; a retry sends the same one.
        text: The message.
        steer: Send into the running turn (B1) rather than as a new message.
        turn: With `steer`: the newest turn the phone saw (B3).
    """

    request_id: Id
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    steer: bool = False
    turn: int | None = None


class PhoneTurn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Stop or a button: the newest turn the phone saw (B3).

    Attributes:
        request_id: Made once per tap; a retry sends the same one.
        turn: The newest turn the phone saw (the bar's `turn`, B3).
    """

    request_id: Id
    turn: int


class PhonePlain(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Close or reopen.

    Attributes:
        request_id: Made once per tap; a retry sends the same one.
    """

    request_id: Id


class PhoneStart(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A new conversation from a starter (N2).

    Attributes:
        request_id: Made once per tap; a retry sends the same one (and gets the same conversation).
        starter: The starter's id from the New page.
    """

    request_id: Id
    starter: Id


async def body_of(request: web.Request, kind: type[T]) -> T:
    """Decode the request's JSON body as ``kind``.

    Raises:
        HTTPBadRequest: not JSON, or not of that shape (the message says what is wrong).
    """
    raw = await request.read()
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise http_error(web.HTTPBadRequest, "bad_request", str(exc)) from None


def agent_of(request: web.Request) -> str:
    """The path's agent name.

    Raises:
        HTTPNotFound: no agent of that name in sources.json.
    """
    name = request.match_info["agent"]
    if name not in request.app[AGENTS].mirrors:
        raise http_error(web.HTTPNotFound, "not_found", f"no durable agent named {name!r}")
    return name


# --- the list, the chat, commands (L, C, B, N) ---------------------------------------------


async def conversation_list(request: web.Request) -> web.Response:
    """L1–L8: a visit reads the closed rows from the agent; ``poll=true`` never does (L5)."""
    agent = agent_of(request)
    chats = request.app[CHATS]
    cat = words(request)
    view = chats.build(agent, cat) if flag(request, "poll") else await chats.visit(agent, cat)
    view.event_id = request.app[BUS].last_id  # subscribe after it: nothing twice
    return encoded(view)


async def closed_page(request: web.Request) -> web.Response:
    """L6 "Load more": the next 100 closed conversations."""
    agent = agent_of(request)
    cursor = request.query.get("cursor", "")
    if not cursor:
        return json_error(400, "bad_request", "cursor is required")
    try:
        return encoded(await request.app[CHATS].closed_page(agent, cursor, words(request)))
    except BadCursor:
        return json_error(
            400,
            "bad_cursor",
            "the cursor is not valid: take it from the load_more href of a list read now",
        )


async def chat(request: web.Request) -> web.Response:
    """C1–C6 with header, bar and cards; ``all_cards=true`` shows every card (A8)."""
    agent = agent_of(request)
    bus = request.app[BUS]
    chats = request.app[CHATS]
    cat = words(request)
    try:
        view = await chats.open_chat(
            agent,
            request.match_info["conversation"],
            show_all=flag(request, "all_cards"),
            catalogue=cat,
        )
    except AgentRejected as exc:
        if exc.status == 404:
            return json_error(404, "not_found", "no such conversation")
        return json_error(
            502, exc.code or "agent_error", phone_reason(exc, cat, "chat read", mask_of(request))
        )
    except AgentUnreachable as exc:
        return json_error(504, "no_answer", phone_reason(exc, cat, "chat read", mask_of(request)))
    except RemoteWireError as exc:
        return json_error(502, "agent_error", phone_reason(exc, cat, "chat read", mask_of(request)))
    view.event_id = bus.last_id  # subscribe after it: nothing twice
    return encoded(view)


def mask_of(request: web.Request) -> Redact:
    """The mask (X1) of every agent's text this gateway shows, as the chats use it."""
    return request.app[CHATS].redact


def phone_reason(exc: Exception, cat: Catalogue, doing: str, redact: Redact) -> str:
    """What the phone reads for a failed call to an agent: catalogue words, never an
    exception's name or an address (those go to the log). An agent's own sentence in an
    error body (wire §13) is the agent's text, shown cleaned and masked (X1)."""
    log.info("%s failed: %s: %s", doing, type(exc).__name__, exc)
    if isinstance(exc, VersionRefused):  # R5's words, in the phone's language
        return cat.fmt("version_mismatch", theirs=exc.theirs, ours=WIRE_VERSION)
    if isinstance(exc, AgentRejected):
        if exc.code and str(exc):
            return clean(str(exc), TITLE_LIMIT, redact=redact).text
        return cat["error_refused"]
    if isinstance(exc, RemoteWireError):
        return cat["error_not_understood"]
    return cat["error_no_answer"]


def _command_answer(
    result: CommandResult | None, cat: Catalogue, error: str | None, redact: Redact
) -> CommandAnswer:
    if result is None:
        return CommandAnswer(outcome="uncertain", message=error)
    message = cat["moved_on"] if result.outcome == "moved_on" else result.reason
    if message is not None:
        message = clean(message, TITLE_LIMIT, redact=redact).text
    return CommandAnswer(
        outcome=result.outcome, message=message, conversation_id=result.conversation_id
    )


def declared(request: web.Request, agent: str, feature: str) -> bool:
    """Whether the agent's hello declares ``feature`` (G1, wire §5)."""
    hello = request.app[AGENTS].mirrors[agent].hello
    return hello is not None and hello.has(feature)


def unsupported(cat: Catalogue) -> web.Response:
    """G1: a command for an undeclared feature is refused here; nothing reaches the agent."""
    return encoded(CommandAnswer(outcome="refused", message=cat["refused_unsupported"]))


async def _run_command(
    request: web.Request,
    agent: str,
    path: str,
    body: object,
    feature: str,
    *,
    not_found: str | None = None,
) -> web.Response:
    """Send a command; ``not_found`` is the message for that outcome (else the agent's word)."""
    agents = request.app[AGENTS]
    cat, mask = words(request), mask_of(request)
    if not declared(request, agent, feature):
        return unsupported(cat)
    try:
        result = await agents.command(agent, path, body)
        if result.outcome == "not_found" and not_found is not None:
            result = msgspec.structs.replace(result, reason=not_found)
    except (AgentUnreachable, RemoteWireError) as exc:
        return encoded(_command_answer(None, cat, phone_reason(exc, cat, path, mask), mask))
    except AgentRejected as exc:
        refused = CommandResult(outcome="refused", reason=phone_reason(exc, cat, path, mask))
        return encoded(_command_answer(refused, cat, None, mask))
    return encoded(_command_answer(result, cat, None, mask))


def _conv_path(request: web.Request, tail: str) -> str:
    return "/conversations/" + quote(request.match_info["conversation"], safe="") + tail


async def send_message(request: web.Request) -> web.Response:
    """C4: the person's line, through sending, sent, not confirmed or not sent."""
    agent = agent_of(request)
    agents = request.app[AGENTS]
    chats = request.app[CHATS]
    cat = words(request)
    body = await body_of(request, PhoneMessage)
    conv_id = request.match_info["conversation"]
    if body.steer and not declared(request, agent, "steer"):
        return unsupported(cat)
    line = MyLine(
        request_id=body.request_id,
        text=body.text,
        sent_at=request.app[SETTINGS].clock(),
        state=LineState.SENDING,
        steer=body.steer,
        after_item=chats.after_item(agent, conv_id),
    )
    chats.line_sent(agent, conv_id, line)
    wire_body = SendMessage(
        request_id=body.request_id, text=body.text, steer=body.steer, turn=body.turn
    )
    try:
        result = await agents.command(agent, _conv_path(request, "/messages"), wire_body)
        state = LineState.SENT if result.outcome == "accepted" else LineState.NOT_SENT
        outcome = result.outcome
        message = cat["moved_on"] if outcome == "moved_on" else result.reason
        if message is not None:
            message = clean(message, TITLE_LIMIT, redact=mask_of(request)).text
    except (AgentUnreachable, RemoteWireError) as exc:
        log.info("message %s: not sure it arrived: %s", body.request_id, exc)
        state, outcome, message = LineState.NOT_CONFIRMED, "uncertain", None
    except AgentRejected as exc:
        state, outcome, message = (
            LineState.NOT_SENT,
            "refused",
            phone_reason(exc, cat, "message", mask_of(request)),
        )
    chats.line_state(agent, conv_id, body.request_id, state)
    labels = {
        LineState.SENT: cat["chat_sent"],
        LineState.NOT_CONFIRMED: cat["chat_not_confirmed"],
        LineState.NOT_SENT: cat["chat_not_sent"],
    }
    return encoded(
        MessageAnswer(
            outcome=outcome,
            line_state=state,
            label=labels.get(state),
            message=message,
            composer_text=body.text if state is LineState.NOT_SENT else None,
        )
    )


async def stop(request: web.Request) -> web.Response:
    """B1, B3: stop the running turn, if the phone saw the newest turn."""
    agent = agent_of(request)
    body = await body_of(request, PhoneTurn)
    wire_body = TurnCommand(request_id=body.request_id, turn=body.turn)
    return await _run_command(request, agent, _conv_path(request, "/stop"), wire_body, "stop")


async def button(request: web.Request) -> web.Response:
    """B2, B3: press an agent's button."""
    agent = agent_of(request)
    body = await body_of(request, PhoneTurn)
    wire_body = TurnCommand(request_id=body.request_id, turn=body.turn)
    tail = "/buttons/" + quote(request.match_info["button"], safe="")
    return await _run_command(request, agent, _conv_path(request, tail), wire_body, "buttons")


async def close_conversation(request: web.Request) -> web.Response:
    """G2: the pane menu's "Close conversation"."""
    agent = agent_of(request)
    body = await body_of(request, PhonePlain)
    wire_body = PlainCommand(request_id=body.request_id)
    return await _run_command(request, agent, _conv_path(request, "/close"), wire_body, "close")


async def reopen_conversation(request: web.Request) -> web.Response:
    """L4: "Reopen" on a closed conversation."""
    agent = agent_of(request)
    body = await body_of(request, PhonePlain)
    wire_body = PlainCommand(request_id=body.request_id)
    path = _conv_path(request, "/reopen")
    return await _run_command(request, agent, path, wire_body, "reopen")


async def new_page(request: web.Request) -> web.Response:
    """N1–N3: the New page with the agent's starters, read from the agent."""
    agent = agent_of(request)
    agents = request.app[AGENTS]
    cat = words(request)
    mirror = agents.mirrors[agent]
    mask = mask_of(request)
    starters: list[Starter] = []
    error = None
    if mirror.hello is not None and mirror.hello.has("starters"):
        try:
            fetched = await agents.starters(agent)
            starters = expect(fetched, StarterList).starters
        except (AgentUnreachable, AgentRejected, RemoteWireError):
            error = cat["footer_no_answer"]
    rows = [
        NewStarter(
            id=s.id,
            label=clean(s.label, LABEL_LIMIT, redact=mask).text,
            description=clean(s.description, TITLE_LIMIT, redact=mask).text
            if s.description
            else None,
        )
        for s in starters
    ]
    return encoded(
        NewPage(
            title=cat["new_title"],
            starters=rows,
            empty=cat["no_starters"] if not rows and error is None else None,
            error=error,
        )
    )


async def start_conversation(request: web.Request) -> web.Response:
    """N2: a starter's tap makes the agent open a new conversation."""
    agent = agent_of(request)
    body = await body_of(request, PhoneStart)
    wire_body = StartConversation(request_id=body.request_id, starter=body.starter)
    missing = words(request).fmt("no_starter", starter=clean(body.starter, LABEL_LIMIT).text)
    return await _run_command(
        request, agent, "/conversations", wire_body, "starters", not_found=missing
    )


# --- answers (A, T, R) -----------------------------------------------------------------------


async def answer_ask(request: web.Request) -> web.Response:
    """T1: one tap, sent at most once whatever the retries; the card's words come back."""
    agent = agent_of(request)
    answers = request.app[ANSWERS]
    body = await body_of(request, PhoneAnswer)
    refused = crew_refusal(request)
    if refused is not None:  # V2: sent through a lead, and this machine takes none that way
        return encoded(_answer_view(request, body.request_id, TapOutcome.REFUSED, refused, None))
    try:
        result = await answers.answer(
            agent,
            request.match_info["ask"],
            body.request_id,
            body.version,
            body.answer,
            caller_of(request).phone_id,
            catalogue=words(request),
        )
    except AnswerMisfit as exc:
        return json_error(400, "bad_request", str(exc))  # nothing sent, nothing recorded
    view = _answer_view(request, result.request_id, result.outcome, result.reason, result.record)
    view.phone = await tapper(request, result.record)
    return encoded(view)


async def answer_status(request: web.Request) -> web.Response:
    """The ledger's word on one request id (after a restart, or to poll an uncertain tap)."""
    answers = request.app[ANSWERS]
    record = await answers.lookup(request.match_info["request_id"])
    if record is None:
        return json_error(404, "not_found", "no answer with that request id")
    outcome = record.outcome or TapOutcome.UNCERTAIN
    view = _answer_view(request, record.tap.request_id, outcome, record.reason, record)
    view.phone = await tapper(request, record)
    return encoded(view)


def _answer_view(
    request: web.Request,
    request_id: str,
    outcome: TapOutcome,
    reason: str | None,
    record: Record | None,
) -> AnswerView:
    state = tap_state(outcome, request_id, reason, record)
    line = outcome_line(state, words(request), mask_of(request))  # the agent's reason (X1)
    return AnswerView(
        request_id=request_id,
        outcome=outcome,
        settled=record.settled if record is not None else True,
        card=line,
    )


# --- push (P1–P3): devices, presence, the delivery log ---------------------------------------


async def register_device(request: web.Request) -> web.Response:
    """Register or refresh a phone's push token (APNs or FCM) or a Web Push subscription
    (the browser's `PushSubscription.toJSON()` with `"provider": "webpush"`); the same token
    or endpoint, the same id."""
    body = await body_of(request, DeviceIn)
    try:
        language, phone = named_language(request), caller_of(request).phone_id
        device_id = await request.app[PUSHING].register(body, language, phone)
    except DeviceError as exc:
        return json_error(400, "bad_request", str(exc))
    return encoded(DeviceRegistered(device_id=device_id))


async def remove_device(request: web.Request) -> web.Response:
    """Forget a device."""
    if not await request.app[PUSHING].remove(request.match_info["device"]):
        return json_error(404, "not_found", "no such device")
    return encoded(Removed(removed=True))


async def list_devices(request: web.Request) -> web.Response:
    """Registered devices (never their tokens or keys)."""
    devices = await request.app[PUSHING].devices()
    return encoded(
        DeviceList(
            devices=[
                DeviceRow(
                    device_id=d.id,
                    provider=d.provider.value,
                    environment=d.environment.value,
                    private=d.key is not None,
                    registered_at=datetime.fromtimestamp(d.registered_at, UTC),
                    lang=d.lang,
                )
                for d in devices
            ]
        )
    )


async def presence(request: web.Request) -> web.Response:
    """The screen a phone's live stream shows now (no push for a chat on screen).

    A phone sends it on each change and at least every 30 s while it shows a chat: a screen
    not confirmed for 45 s is stale and never holds a push back.
    """
    body = await body_of(request, PresenceIn)
    if not request.app[PUSHING].confirm(body):
        return json_error(404, "not_found", "no open stream with that id")
    return encoded(Ok(ok=True))


async def push_log(request: web.Request) -> web.Response:
    """The newest push decisions and deliveries (sent, suppressed, rate-limited, failed)."""
    try:
        limit = min(max(int(request.query.get("limit", "100")), 1), 1000)
    except ValueError:
        return json_error(400, "bad_request", "limit must be a whole number")
    rows = await request.app[PUSHING].recent(limit)
    return encoded(PushLog(pushes=msgspec.convert(rows, list[PushRow])))


_NO_CONVERSATION = {404: "No durable agent of that name, or no such conversation"}
_BASE = "/api/v1/agents/{agent}/conversations/{conversation}"

# The phone API: every route, and all the OpenAPI document says of it.
ROUTES: list[Route] = [
    Route("GET", "/healthz", healthz, Health, public=True),
    Route("GET", "/openapi.json", openapi, OpenApi),
    Route("GET", "/api/v1/strings", strings, Strings),
    Route(
        "GET",
        "/api/v1/dashboard",
        dashboard,
        Dashboard,
        params=(flag_param("pending_only", "List only agents waiting for the person (D9)"),),
    ),
    Route(
        "GET",
        "/api/v1/events",
        events,
        None,
        media="text/event-stream",
        params=(
            Param("Last-Event-ID", "The last event id the phone saw", where="header"),
            Param("last_event_id", "As Last-Event-ID, which wins when both are given"),
            Param(
                "screen",
                "What the phone shows, e.g. `chat:desk:c1`: no push for that chat while the "
                "stream is open and its presence fresh (see `POST /api/v1/presence`)",
            ),
        ),
        events=EVENTS,
    ),
    Route("GET", "/api/v1/agents/{agent}", agent_home, AgentHome),
    Route(
        "GET",
        "/api/v1/agents/{agent}/conversations",
        conversation_list,
        ConversationList,
        params=(flag_param("poll", "Only what the gateway holds: never read from the agent (L5)"),),
    ),
    Route(
        "POST",
        "/api/v1/agents/{agent}/conversations",
        start_conversation,
        CommandAnswer,
        body=PhoneStart,
    ),
    Route(
        "GET",
        "/api/v1/agents/{agent}/closed",
        closed_page,
        ClosedPage,
        params=(
            Param(
                "cursor",
                "From the footer's `load_more` href",
                {"type": "string", "minLength": 1},
                required=True,
            ),
        ),
        errors={400: "No cursor (`bad_request`), or the agent does not take it (`bad_cursor`)"},
    ),
    Route(
        "GET",
        _BASE,
        chat,
        Chat,
        params=(flag_param("all_cards", "Show every card, not the first 5 (A8)"),),
        errors={
            **_NO_CONVERSATION,
            502: "The agent refused the read, or its answer was not wire v1",
            504: "The agent did not answer",
        },
    ),
    Route("POST", _BASE + "/messages", send_message, MessageAnswer, body=PhoneMessage),
    Route("POST", _BASE + "/stop", stop, CommandAnswer, body=PhoneTurn),
    Route("POST", _BASE + "/buttons/{button}", button, CommandAnswer, body=PhoneTurn),
    Route("POST", _BASE + "/close", close_conversation, CommandAnswer, body=PhonePlain),
    Route("POST", _BASE + "/reopen", reopen_conversation, CommandAnswer, body=PhonePlain),
    Route("GET", "/api/v1/agents/{agent}/new", new_page, NewPage),
    Route(
        "POST",
        "/api/v1/agents/{agent}/asks/{ask}/answer",
        answer_ask,
        AnswerView,
        body=PhoneAnswer,
    ),
    Route(
        "GET",
        "/api/v1/answers/{request_id}",
        answer_status,
        AnswerView,
        errors={404: "No answer with that request id"},
    ),
    Route(
        "POST",
        "/api/v1/devices",
        register_device,
        DeviceRegistered,
        body=DeviceIn,
    ),
    Route("GET", "/api/v1/devices", list_devices, DeviceList),
    Route(
        "DELETE",
        "/api/v1/devices/{device}",
        remove_device,
        Removed,
        errors={404: "No such device"},
    ),
    Route(
        "POST",
        "/api/v1/presence",
        presence,
        Ok,
        body=PresenceIn,
        errors={404: "No open stream with that id"},
    ),
    Route(
        "GET",
        "/api/v1/pushes",
        push_log,
        PushLog,
        params=(
            Param(
                "limit",
                "How many entries, newest first (1–1000; out of range is clamped)",
                {"type": "integer", "default": 100},
            ),
        ),
        errors={400: "limit is not a whole number"},
    ),
]


_MACHINE_ERRORS = {
    404: "No crew member of that name, or a route a lead does not pass on",
    502: "The member refused the lead's token, or answered with no JSON",
    504: "The member did not answer",
}
_MEMBER_VIEW: dict[str, Any] = {"type": "object"}
_MEMBER_WORDS = "The member's answer to the same local route, its URLs the lead's, with `machine`"

# The crew's routes (W1–W4, V2): on a member, what it can do for a lead; on a lead, a
# member's phone API under /api/v1/machines/{machine}/… (``crew_routes``).
CREW_ROUTES: list[Route] = [
    Route("GET", "/api/v1/crew", crew_info, CrewInfo),
    Route(
        "POST",
        "/api/v1/machines/{machine}/agents/{agent}/asks/{ask}/answer",
        member_answer,
        AnswerView,
        body=PhoneAnswer,
        ok_words="What the tap came to, as the member says it (with `machine`)",
        errors={
            404: "No crew member of that name",
            502: "The member refused the lead's token",
        },
    ),
    Route(
        "GET",
        "/api/v1/machines/{machine}/{tail:.+}",
        member_read,
        _MEMBER_VIEW,
        ok_words=_MEMBER_WORDS,
        errors=_MACHINE_ERRORS,
    ),
    Route(
        "POST",
        "/api/v1/machines/{machine}/{tail:.+}",
        member_command,
        _MEMBER_VIEW,
        body=(PhoneMessage, PhoneTurn, PhonePlain, PhoneStart),
        ok_words=_MEMBER_WORDS,
        errors=_MACHINE_ERRORS,
    ),
]
ROUTES += CREW_ROUTES
ROUTES += PHONE_ROUTES
ROUTES += PUSH_ROUTES
ROUTES += WORKER_ROUTES


def add_routes(app: web.Application) -> None:
    """Register every route of :data:`ROUTES`."""
    for route in ROUTES:
        app.router.add_route(route.method, route.path, route.handler)
