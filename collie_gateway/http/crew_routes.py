"""The crew's routes (W1–W4, V2).

On a member: ``GET /api/v1/crew`` says what it can do for a lead. On a lead: a member's
phone API under ``/api/v1/machines/{machine}/…`` — its agents, lists, chats, cards, starters,
commands and answers with the same views as local ones, each URL in them the lead's.

The routes are registered from ``routes.CREW_ROUTES``, part of the route table the OpenAPI
document is generated from.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from aiohttp import web

from collie_gateway.core.answers import TapOutcome, tap_state
from collie_gateway.errors import AgentUnreachable
from collie_gateway.http.keys import BUS, CREW, SETTINGS
from collie_gateway.http.language import words
from collie_gateway.http.responses import http_error, json_error
from collie_gateway.services.crew import (
    CREW_VERSION,
    LEAD_HEADER,
    CrewInfo,
    MemberLink,
    Unauthorized,
    lead_cards,
    rewrite_urls,
)
from collie_gateway.views.cards import outcome_line
from wire.messages import Answer, Id

_encoder = msgspec.json.Encoder()
# What a lead may reach on a member: its agents and its answers' ledger, nothing else (not
# its devices, push log or presence).
_REACHABLE: Final = ("agents/", "answers/")


class CrewAnswer(msgspec.Struct, kw_only=True):
    """An answer as the phone posts it; checked on the lead before it goes to the member,
    which then checks it in full. The body sent on is the phone's, byte for byte."""

    request_id: Id
    version: int
    answer: Answer


def _json(payload: object, status: int = 200) -> web.Response:
    return web.Response(
        body=_encoder.encode(payload), status=status, content_type="application/json"
    )


async def crew_info(request: web.Request) -> web.Response:
    """What this gateway can do as a crew member (W4, V2).

    The crew version it speaks, its machine name, and whether it takes answers given on a
    lead (V2)."""
    settings = request.app[SETTINGS]
    return _json(
        CrewInfo(crew=CREW_VERSION, machine=settings.machine, answers=settings.crew_answers)
    )


def crew_refusal(request: web.Request) -> str | None:
    """On a member that takes no answers given on a lead (``--no-crew-answers``): T1's last
    row for an answer a lead sent on; else None. Nothing is recorded or sent."""
    if LEAD_HEADER in request.headers and not request.app[SETTINGS].crew_answers:
        return words(request)["t_older_collie"]
    return None


def _member(request: web.Request) -> MemberLink:
    name = request.match_info["machine"]
    link = request.app[CREW].member(name)
    if link is None:
        raise http_error(web.HTTPNotFound, "not_found", f"no crew member named {name!r}")
    return link


def _tail(request: web.Request) -> str:
    """The path after ``/api/v1/machines/{machine}/``, with the query, as the phone quoted it."""
    # "", "api", "v1", "machines", the machine, the rest
    parts = request.rel_url.raw_path.split("/", 5)
    query = request.rel_url.raw_query_string
    return parts[5] + ("?" + query if query else "")


def _card(request: web.Request, request_id: str, outcome: TapOutcome, reason: str | None) -> Any:
    line = outcome_line(tap_state(outcome, request_id, reason), words(request))
    return {
        "request_id": request_id,
        "outcome": outcome.value,
        "settled": outcome is not TapOutcome.UNCERTAIN,
        "card": line,
        "machine": request.match_info["machine"],
    }


async def member_answer(request: web.Request) -> web.Response:
    """An answer to a crew member's ask, sent on with the same request id (W4).

    A tap on a member's card goes to that member with the phone's request id unchanged; the
    member's ledger sends it to its agent once (T1). V2: a member that does not take answers
    from a lead is sent nothing: the card says T1's last row."""
    link = _member(request)
    raw = await request.read()
    try:
        body = msgspec.json.decode(raw, type=CrewAnswer)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return json_error(400, "bad_request", str(exc))
    cat = words(request)
    if link.refuses_answers:
        return _json(_card(request, body.request_id, TapOutcome.REFUSED, cat["t_older_collie"]))
    if not link.info_read:
        # This run has not read what the member can do: nothing is sent; Retry tries again.
        return _json(_card(request, body.request_id, TapOutcome.UNCERTAIN, None))
    try:
        # The member waits for its agent up to its own request timeout: wait longer.
        seconds = 2 * link.timing.request + link.timing.connect
        status, answer = await link.forward(
            "POST", _tail(request), raw, seconds=seconds, lang=cat.lang
        )
    except AgentUnreachable:
        return _json(_card(request, body.request_id, TapOutcome.UNCERTAIN, None))
    except Unauthorized:
        message = cat.fmt("crew_unauthorized", machine=link.name)
        return json_error(502, "member_unauthorized", message)
    return _relay(request, link, status, answer)


def _relay(request: web.Request, link: MemberLink, status: int, body: bytes) -> web.Response:
    try:
        payload = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return json_error(502, "member_error", f"{link.name} answered {status}, not JSON")
    if isinstance(payload, dict):
        refusal = words(request)["t_older_collie"] if link.refuses_answers else None
        lead_cards(payload, refusal)
        payload = rewrite_urls(payload, link.prefix)
        payload["machine"] = link.name
        if "event_id" in payload:
            # The phone follows the lead's stream: subscribe after the lead's newest event.
            payload["event_id"] = request.app[BUS].last_id
    return _json(payload, status)


async def member_read(request: web.Request) -> web.Response:
    """A crew member's screen: the same views as a local agent's (W1–W4).

    A member's agents and answers' ledger, with the same views as local ones, each URL in
    them the lead's, with `machine`."""
    return await _member_proxy(request)


async def member_command(request: web.Request) -> web.Response:
    """A command to a crew member's agent, as to a local one (W1–W4).

    The body is sent on as the phone sent it; a command that may or may not have arrived
    answers `uncertain`, as for a local agent (C4, B3)."""
    return await _member_proxy(request)


async def _member_proxy(request: web.Request) -> web.Response:
    """A member's agents and answers' ledger, with the same views as local ones."""
    link = _member(request)
    tail = _tail(request)
    if not tail.startswith(_REACHABLE):
        return json_error(404, "not_found", "not reachable through the lead")
    cat = words(request)
    body = await request.read() if request.method == "POST" else None
    try:
        status, answer = await link.forward(request.method, tail, body, lang=cat.lang)
    except Unauthorized:
        message = cat.fmt("crew_unauthorized", machine=link.name)
        return json_error(502, "member_unauthorized", message)
    except AgentUnreachable:
        message = cat.fmt("crew_no_answer", machine=link.name)
        if request.method == "POST":
            # A command that may or may not have arrived, as for a local agent (C4, B3).
            return _json({"outcome": "uncertain", "message": message, "machine": link.name})
        return json_error(504, "no_answer", message)
    return _relay(request, link, status, answer)
