"""The crew's parts: the lead's dashboard with members' sections (W1–W3), the ``crew`` list
of sources.json (and where a member's token may travel), URL rewriting, and a member of the
tests' own that sends what no Collie sends."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from collie_gateway.errors import SourcesError
from collie_gateway.services.crew import MAX_EVENT, rewrite_urls
from collie_gateway.sources import Member, load_crew, load_sources
from collie_gateway.strings import Catalogue
from collie_gateway.views.dashboard import (
    AgentRow,
    Dashboard,
    RightEdge,
    Section,
    build_dashboard,
)
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json

CAT = Catalogue()


def row(agent: str, *, waiting: bool = False, machine: str | None = None) -> AgentRow:
    return AgentRow(
        agent=agent,
        line1=agent,
        badge="Experimental",
        line2="durable, local",
        state="ready",
        right=RightEdge(open=1, waiting=1 if waiting else None),
        waiting=waiting,
        href=f"/api/v1/agents/{agent}/conversations",
        machine=machine,
    )


def member(machine: str, *rows: AgentRow) -> Section:
    return Section(kind="durable_agents", title=machine, rows=list(rows), machine=machine)


def order(board: object) -> list[tuple[str, str | None]]:
    data = msgspec.to_builtins(board)
    return [(s["kind"], s.get("machine")) for s in data["sections"]]


def test_W1_own_section_first_naming_no_machine_then_crew_order() -> None:
    members = [member("workshop", row("pi")), member("attic", row("desk"))]
    board = build_dashboard([row("mine")], ["home"], CAT, members=members)
    assert order(board) == [
        ("spaces", None),
        ("durable_agents", None),
        ("durable_agents", "workshop"),
        ("durable_agents", "attic"),
    ]
    assert board.durable_agents_position == "below"


def test_W1_a_lead_with_no_agents_of_its_own_shows_only_its_members() -> None:
    board = build_dashboard([], ["home"], CAT, members=[member("workshop", row("pi"))])
    assert order(board) == [("spaces", None), ("durable_agents", "workshop")]
    assert board.durable_agents_position is None


def test_W3_only_the_machine_with_a_waiting_ask_moves_above_the_spaces() -> None:
    members = [member("workshop", row("pi")), member("attic", row("desk", waiting=True))]
    board = build_dashboard([row("mine")], ["home"], CAT, members=members)
    assert order(board) == [
        ("durable_agents", "attic"),
        ("spaces", None),
        ("durable_agents", None),
        ("durable_agents", "workshop"),
    ]
    both = build_dashboard([row("mine", waiting=True)], ["home"], CAT, members=members)
    assert order(both)[:3] == [
        ("durable_agents", None),
        ("durable_agents", "attic"),
        ("spaces", None),
    ]
    assert both.durable_agents_position == "above"


def test_W3_pending_only_keeps_waiting_rows_across_machines() -> None:
    members = [
        member("workshop", row("pi"), row("pi2", waiting=True)),
        member("attic", row("desk")),
    ]
    board = build_dashboard([row("mine")], ["home"], CAT, pending_only=True, members=members)
    assert order(board) == [("durable_agents", "workshop"), ("spaces", None)]
    data = msgspec.to_builtins(board)
    assert [r["agent"] for r in data["sections"][0]["rows"]] == ["pi2"]
    assert board.durable_agents_position is None


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_W1_crew_list_in_order_token_from_env_and_kept_out_of_repr(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "durable_agents": [{"name": "desk", "socket": "/run/desk.sock"}],
            "crew": [
                {"name": "workshop", "url": "https://workshop.example:8765/", "token_env": "W"},
                {"name": "attic", "url": "http://127.0.0.1:9000"},
                {"name": "v6", "url": "http://[::1]:9001"},
            ],
        },
    )
    crew = load_crew(path, {"W": "s3cret-token"})
    assert [m.name for m in crew] == ["workshop", "attic", "v6"]
    assert crew[0].url == "https://workshop.example:8765"
    assert crew[0].token == "s3cret-token"
    assert "s3cret-token" not in repr(crew)
    assert [s.name for s in load_sources(path, {})] == ["desk"]


@pytest.mark.parametrize(
    ("entry", "fault"),
    [
        (
            {"name": "w", "url": "http://workshop.example:8765"},
            "crew member 1 ('w'): url 'http://workshop.example:8765' must be https:// off loopback",
        ),
        ({"name": "w"}, "crew member 1 ('w'): \"url\" is required"),
        ({"name": "w", "url": "https://w", "token_env": "NOPE"}, "NOPE is not set or empty"),
        ({"name": "w", "url": "https://w", "socket": "/x"}, "unknown key 'socket'"),
        ({"name": "a/b", "url": "https://w"}, "no '/'"),
    ],
)
def test_W4_a_bad_crew_entry_is_one_clear_error(tmp_path: Path, entry: object, fault: str) -> None:
    path = write(tmp_path, {"crew": [entry]})
    with pytest.raises(SourcesError) as caught:
        load_crew(path, {})
    assert fault in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_W4_duplicate_member_names_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {"crew": [{"name": "w", "url": "https://a"}] * 2})
    with pytest.raises(SourcesError, match="duplicate name 'w'"):
        load_crew(path, {})


def test_W4_a_members_urls_become_the_leads_and_texts_stay() -> None:
    member_json = {
        "href": "/api/v1/agents/pi/conversations",
        "rows": [{"href": "/api/v1/agents/pi/conversations/c1", "title": "/api/v1/agents/x"}],
        "cards": {"cards": [{"answer_url": "/api/v1/agents/pi/asks/a1/answer"}]},
        "new": "/api/v1/agents/pi/new",
    }
    out = rewrite_urls(member_json, "/api/v1/machines/workshop/")
    assert out == {
        "href": "/api/v1/machines/workshop/agents/pi/conversations",
        "rows": [
            {
                "href": "/api/v1/machines/workshop/agents/pi/conversations/c1",
                "title": "/api/v1/agents/x",
            }
        ],
        "cards": {"cards": [{"answer_url": "/api/v1/machines/workshop/agents/pi/asks/a1/answer"}]},
        "new": "/api/v1/machines/workshop/agents/pi/new",
    }


# --- a member of the tests' own that misbehaves ------------------------------------------


def _sse(event_id: str, kind: str, data: bytes) -> bytes:
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (event_id.encode(), kind.encode(), data)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def odd_member(events: Handler, rows: list[AgentRow] | None = None) -> AsyncIterator[str]:
    """A member of the tests' own named "odd" on 127.0.0.1: its crew route and a dashboard
    (``rows``, else one calm row) are as a Collie's; its event stream is ``events``. Its base
    URL."""
    board = Dashboard(
        sections=[Section(kind="durable_agents", rows=rows or [row("tool")])],
        durable_agents_position="below",
        pending_only=False,
    )

    async def crew_route(request: web.Request) -> web.Response:
        return web.json_response({"crew": 1, "machine": "odd", "answers": True})

    async def dashboard(request: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(board), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/crew", crew_route)
    app.router.add_get("/api/v1/dashboard", dashboard)
    app.router.add_get("/api/v1/events", events)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.name
    finally:
        await runner.cleanup()


async def waiting_on_odd(client: Any) -> bool:
    """Whether the lead shows odd's section ready, its row waiting."""
    data = await get_json(client, "/api/v1/dashboard")
    odd = [s for s in data["sections"] if s.get("machine") == "odd"]
    return bool(odd) and odd[0]["state"] == "ready" and odd[0]["rows"][0]["waiting"]


async def test_W1_bad_events_from_a_member_are_skipped_and_lose_nothing(rig: Rig) -> None:
    """A member (a server of the test's own) sends events that are not what a Collie sends: the
    lead skips each, keeps the stream (no reconnect) and applies the good event after them."""
    calm = msgspec.json.encode(row("tool"))
    busy = msgspec.json.encode(row("tool", waiting=True))
    streams: list[int] = []
    release = asyncio.Event()

    async def events(request: web.Request) -> web.StreamResponse:
        streams.append(1)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"event: stream\ndata: {}\n\n")
        await resp.write(_sse("b-1", "dashboard.row", b'{"not": "a row"}'))
        await resp.write(_sse("b-2", "ask.raised", b'{"agent": 5}'))
        await resp.write(_sse("b-3", "list.row", b"not json"))
        await resp.write(_sse("b-4", "dashboard.row", calm.replace(b"{", b"[", 1)))
        await resp.write(_sse("b-5", "dashboard.row", busy))
        await release.wait()
        return resp

    async with odd_member(events) as url:
        try:
            client, gw = await rig.gateway([], crew=[Member(name="odd", url=url)])
            await eventually(lambda: waiting_on_odd(client))
            assert streams == [1]  # one stream: nothing made the lead reconnect
            assert gw.crew.links["odd"].last_event_id == "b-5"
        finally:
            release.set()


async def test_W1_a_member_cut_mid_event_or_over_the_event_limit_is_followed_again(
    rig: Rig,
) -> None:
    """A member's stream ends in the middle of an event, then sends a line over the lead's
    event limit: the lead drops the half event and the huge line, reads the stream again
    from the last whole event, and the member's next event shows. The lead never stops
    following it."""
    calm = msgspec.json.encode(row("tool"))
    busy = msgspec.json.encode(row("tool", waiting=True))
    resumed_from: list[str | None] = []
    release = asyncio.Event()

    async def events(request: web.Request) -> web.StreamResponse:
        resumed_from.append(request.headers.get("Last-Event-ID"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"event: stream\ndata: {}\n\n")
        if len(resumed_from) == 1:
            await resp.write(_sse("c-1", "dashboard.row", calm))
            await resp.write(b"id: c-2\nevent: dashboard.row\ndata: " + busy[:20])  # cut
        elif len(resumed_from) == 2:
            await resp.write(b"data: " + b"x" * (MAX_EVENT + 1024) + b"\n\n")
            await release.wait()
        else:
            await resp.write(_sse("c-3", "dashboard.row", busy))
            await release.wait()
        return resp

    async with odd_member(events) as url:
        try:
            client, gw = await rig.gateway([], crew=[Member(name="odd", url=url)])
            await eventually(lambda: waiting_on_odd(client), within=15)
            assert resumed_from == [None, "c-1", "c-1"]
            assert gw.crew.links["odd"].last_event_id == "c-3"
        finally:
            release.set()


async def test_W1_a_member_that_keeps_ending_its_stream_is_asked_again_less_and_less_often(
    rig: Rig,
) -> None:
    """A member answers each stream request with a 200 that ends at once, empty or with one
    event: the lead asks again after a growing wait (as after a failure), not in a loop. Once
    the member keeps its stream open, the lead follows it as usual and its row shows."""
    calm = msgspec.json.encode(row("tool"))
    busy = msgspec.json.encode(row("tool", waiting=True))
    loop = asyncio.get_running_loop()
    asked: list[tuple[float, str | None]] = []  # (loop time, Last-Event-ID) of each request
    behave = asyncio.Event()
    release = asyncio.Event()

    async def events(request: web.Request) -> web.StreamResponse:
        asked.append((loop.time(), request.headers.get("Last-Event-ID")))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"event: stream\ndata: {}\n\n")
        if behave.is_set():
            await resp.write(_sse("d-9", "dashboard.row", busy))
            await release.wait()
        elif len(asked) % 2 == 0:
            await resp.write(_sse(f"d-{len(asked)}", "dashboard.row", calm))
        return resp  # ends the stream cleanly: a 200, whole, no error

    # Waits of 0.05 s doubling up to 0.8 s, each jittered down to no less than half.
    timing = dataclasses.replace(FAST, backoff_first=0.05, backoff_cap=0.8)
    async with odd_member(events) as url:
        try:
            client, gw = await rig.gateway([], crew=[Member(name="odd", url=url)], timing=timing)

            async def asked_six_times() -> bool:
                return len(asked) >= 6

            await eventually(asked_six_times, within=15)
            times = [at for at, _ in asked]
            # Five waits of at least 0.025, 0.05, 0.1, 0.2 and 0.4 s between the first six
            # requests (a loop asks six times within milliseconds), the last the longest.
            assert times[5] - times[0] >= 0.775
            assert times[5] - times[4] >= 0.4
            # Each stream resumes from the last event the lead read.
            assert [last for _, last in asked[:6]] == [None, None, "d-2", "d-2", "d-4", "d-4"]
            behave.set()
            await eventually(lambda: waiting_on_odd(client), within=15)
            assert gw.crew.links["odd"].last_event_id == "d-9"
        finally:
            release.set()


async def test_W1_a_member_stream_that_lasted_is_resumed_at_once_when_it_ends(rig: Rig) -> None:
    """A member's stream that lasted at least ``stream_stable`` and then ended cleanly is
    asked for again at once: the backoff (5 s here) is not waited."""
    calm = msgspec.json.encode(row("tool"))
    asked: list[str | None] = []

    async def events(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("Last-Event-ID"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_sse(f"e-{len(asked)}", "dashboard.row", calm))
        await asyncio.sleep(0.15)  # longer than stream_stable
        return resp

    timing = dataclasses.replace(FAST, backoff_first=5.0, backoff_cap=5.0, stream_stable=0.1)
    async with odd_member(events) as url:
        await rig.gateway([], crew=[Member(name="odd", url=url)], timing=timing)

        async def asked_thrice() -> bool:
            return len(asked) >= 3

        await eventually(asked_thrice, within=2.4)  # one wait would be 2.5 s at least
        assert asked[:3] == [None, "e-1", "e-2"]


async def test_W1_a_members_large_dashboard_is_read_whole(rig: Rig) -> None:
    """A member with many agents answers a dashboard far larger than what arrives at once: the
    lead reads all of it (it once read only the first chunk, and took the member for
    something that is not a Collie)."""
    rows = [row(f"agent-{n:04}") for n in range(3000)]
    release = asyncio.Event()

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"event: stream\ndata: {}\n\n")
        await release.wait()
        return resp

    async with odd_member(events, rows) as url:
        try:
            client, _gw = await rig.gateway([], crew=[Member(name="odd", url=url)])

            async def all_rows() -> bool:
                data = await get_json(client, "/api/v1/dashboard")
                odd = [s for s in data["sections"] if s.get("machine") == "odd"]
                return bool(odd) and odd[0]["state"] == "ready" and len(odd[0]["rows"]) == 3000

            await eventually(all_rows, within=15)
        finally:
            release.set()
