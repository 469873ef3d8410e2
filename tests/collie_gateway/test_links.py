"""Agent links: every state transition, and hostile agents that never disturb another link."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from collie_gateway.core.mirror import LinkState
from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually, get_json, raw_agent

HELLO = b'{"wire": 1, "runtime": "raw", "features": []}'
EMPTY_PAGE = b'{"conversations": []}'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def scripted(
    hello: bytes | None = HELLO, page: bytes | None = EMPTY_PAGE, events: Handler | None = None
) -> Handler:
    """A raw agent answering /hello, the open page and /events as told (None: hang)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            body = hello
        elif request.path == "/conversations":
            body = page
        elif request.path == "/events" and events is not None:
            return await events(request)
        else:
            body = None
        if body is None:
            await asyncio.sleep(3600)
        return web.Response(body=body, content_type="application/json")

    return handler


async def with_good_neighbour(rig: Rig, bad: Handler, *, want: LinkState, reason: str) -> None:
    """Run ``bad`` beside a good SDK agent: the bad link lands in ``want``; the good one and
    the gateway carry on."""
    good = rig.agent("good", runtime="good")
    good_sock = await rig.serve("good")
    await good.open_conversation("c1", title="Fine")
    bad_sock = rig.tmp / "bad.sock"
    async with raw_agent(bad, bad_sock):
        client, gw = await rig.gateway(
            [Source(name="bad", socket=bad_sock), Source(name="good", socket=good_sock)]
        )
        await eventually(lambda: gw.mirrors["bad"].state is want)
        assert reason in gw.mirrors["bad"].reason
        await eventually(lambda: gw.mirrors["good"].state is LinkState.READY)
        await good.open_conversation("c2", title="Still fine")
        await eventually(lambda: gw.mirrors["good"].open_count == 2)
        dash = await get_json(client, "/api/v1/dashboard")
        assert len(dash["sections"]) == 2
        health = await get_json(client, "/healthz")
        assert health["ok"] is True
        await client.close()


async def test_link_bad_json_hello(rig: Rig) -> None:
    await with_good_neighbour(
        rig, scripted(hello=b"{not json"), want=LinkState.UNREACHABLE, reason="protocol error"
    )


async def test_link_hello_not_an_object(rig: Rig) -> None:
    await with_good_neighbour(
        rig, scripted(hello=b"[1, 2]"), want=LinkState.UNREACHABLE, reason="protocol error"
    )


async def test_link_hello_hangs_times_out(rig: Rig) -> None:
    await with_good_neighbour(
        rig, scripted(hello=None), want=LinkState.UNREACHABLE, reason="no answer in time"
    )


async def test_link_50_MB_body_refused_unread(rig: Rig) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            return web.Response(body=HELLO, content_type="application/json")
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        chunk = b" " * (1024 * 1024)
        try:
            for _ in range(50):
                await resp.write(chunk)
        except ConnectionResetError:
            pass
        return resp

    await with_good_neighbour(rig, huge, want=LinkState.UNREACHABLE, reason="over the limit")


async def test_link_50_MB_declared_length_refused(rig: Rig) -> None:
    async def declared(request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            return web.Response(body=HELLO, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Length": str(50 * 1024 * 1024)})
        await resp.prepare(request)
        await resp.write(b"{")
        await asyncio.sleep(3600)
        return resp

    await with_good_neighbour(rig, declared, want=LinkState.UNREACHABLE, reason="over the limit")


async def test_link_endless_event_line(rig: Rig) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: ")
        try:
            for _ in range(3000):
                await resp.write(b"x" * 4096)
        except ConnectionResetError:
            pass
        return resp

    await with_good_neighbour(
        rig, scripted(events=endless), want=LinkState.UNREACHABLE, reason="protocol error"
    )


async def test_link_garbage_event_data(rig: Rig) -> None:
    async def garbage(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"id: 1\nevent: x\ndata: {oops\n\n")
        await asyncio.sleep(3600)
        return resp

    await with_good_neighbour(
        rig, scripted(events=garbage), want=LinkState.UNREACHABLE, reason="protocol error"
    )


async def test_link_silent_stream_times_out(rig: Rig) -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(3600)
        return resp

    await with_good_neighbour(
        rig, scripted(events=silent), want=LinkState.UNREACHABLE, reason="went silent"
    )


async def test_link_unknown_event_is_skipped(rig: Rig) -> None:
    async def unknown(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'id: 1\nevent: shiny.new\ndata: {"type": "shiny.new", "x": 1}\n\n')
        opened = (
            b'id: 2\ndata: {"type": "conversation.opened", "conversation": {"id": "c9",'
            b' "updated_at": "2026-12-02T12:00:00Z"}}\n\n'
        )
        await resp.write(opened)
        for _ in range(100):
            await resp.write(b": ping\n\n")
            await asyncio.sleep(0.1)
        return resp

    bad_sock = rig.tmp / "u.sock"
    async with raw_agent(scripted(events=unknown), bad_sock):
        client, gw = await rig.gateway([Source(name="u", socket=bad_sock)])
        await eventually(lambda: gw.mirrors["u"].open_count == 1)
        assert gw.mirrors["u"].state is LinkState.READY
        assert gw.mirrors["u"].last_event_id == "2"
        await client.close()


async def test_link_reset_reads_snapshots_again(rig: Rig) -> None:
    reads = {"page": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/hello":
            return web.Response(body=HELLO, content_type="application/json")
        if request.path == "/conversations":
            reads["page"] += 1
            return web.Response(
                body=EMPTY_PAGE, content_type="application/json", headers={"Wire-Event-Id": "5"}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if reads["page"] == 1:
            await resp.write(b'event: reset\ndata: {"type": "reset"}\n\n')
        await asyncio.sleep(3600)
        return resp

    sock = rig.tmp / "r.sock"
    async with raw_agent(handler, sock):
        client, gw = await rig.gateway([Source(name="r", socket=sock)])
        await eventually(lambda: reads["page"] == 2)
        await eventually(lambda: gw.mirrors["r"].state is LinkState.READY)
        await client.close()


async def test_link_replays_missed_events_after_reconnect(rig: Rig, tmp_path: Path) -> None:
    agent = rig.agent("desk", runtime="desk")
    sock = await rig.serve("desk")
    await agent.open_conversation("c1", title="one")
    _, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    await rig.stop("desk")
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.UNREACHABLE)
    again = rig.agent("desk", runtime="desk")
    conv2 = await again.open_conversation("c2", title="two")
    await conv2.ask(kind="text", id="q", title="Name?")
    await rig.serve("desk", again)
    await eventually(lambda: gw.mirrors["desk"].waiting_count == 1)
    assert set(gw.mirrors["desk"].conversations) == {"c1", "c2"}


async def _count_streams(rig: Rig, ending: Handler, window: float) -> tuple[int, int]:
    """Run a raw agent whose stream ends as ``ending`` makes it; after ``window`` seconds,
    the /events requests made, and then (the agent behaving again: its stream stays open
    and opens a conversation) whether the link follows it."""
    calls = {"events": 0}
    behave = asyncio.Event()

    async def events(request: web.Request) -> web.StreamResponse:
        calls["events"] += 1
        if not behave.is_set():
            return await ending(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        opened = (
            b'id: 7\ndata: {"type": "conversation.opened", "conversation": {"id": "c7",'
            b' "updated_at": "2026-12-02T12:00:00Z"}}\n\n'
        )
        await resp.write(opened)
        await asyncio.sleep(3600)
        return resp

    sock = rig.tmp / "q.sock"
    timing = LinkTiming(
        connect=1.0, request=2.0, stream_read=5.0, backoff_first=0.2, backoff_cap=5.0
    )
    async with raw_agent(scripted(events=events), sock):
        client, gw = await rig.gateway([Source(name="q", socket=sock)], timing=timing)
        await eventually(lambda: calls["events"] >= 1)
        await asyncio.sleep(window)
        made = calls["events"]
        behave.set()
        await eventually(lambda: gw.mirrors["q"].open_count == 1, within=10)
        assert gw.mirrors["q"].state is LinkState.READY
        await client.close()
    return made, calls["events"]


async def test_wire_10_an_agent_that_keeps_closing_its_stream_is_asked_less_and_less(
    rig: Rig,
) -> None:
    async def closes(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        return resp  # 200, no event, ended cleanly

    made, _ = await _count_streams(rig, closes, window=1.0)
    # After 0.1-0.2 s, 0.2-0.4 s, 0.4-0.8 s: at most 4 in the first second, so at most 5 by
    # the time it is counted (without the backoff: hundreds). A slower machine makes fewer.
    assert 2 <= made <= 5


async def test_wire_10_an_agent_that_keeps_answering_reset_is_asked_less_and_less(
    rig: Rig,
) -> None:
    async def resets(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'event: reset\ndata: {"type": "reset"}\n\n')
        await asyncio.sleep(3600)
        return resp

    made, _ = await _count_streams(rig, resets, window=1.0)
    assert 2 <= made <= 5


async def test_many_agents_are_read_a_few_at_a_time_and_none_times_out(rig: Rig) -> None:
    # Twelve agents whose hello takes 0.3 s, two links reading at once: the last pair waits
    # 1.5 s for its turn, longer than a read may take (1.5 s), and still reads each agent once.
    in_flight = {"now": 0, "most": 0}
    hellos: dict[str, int] = {}

    def slow_hello(name: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            if request.path == "/events":
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await asyncio.sleep(3600)
                return resp
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            try:
                if request.path == "/hello":
                    hellos[name] = hellos.get(name, 0) + 1
                    await asyncio.sleep(0.3)
                    return web.Response(body=HELLO, content_type="application/json")
                return web.Response(body=EMPTY_PAGE, content_type="application/json")
            finally:
                in_flight["now"] -= 1

        return handler

    names = [f"slow{i:02d}" for i in range(12)]
    timing = LinkTiming(request=1.5, stream_read=30.0, connecting=2)
    async with contextlib.AsyncExitStack() as stack:
        for name in names:
            await stack.enter_async_context(raw_agent(slow_hello(name), rig.tmp / f"{name}.sock"))
        sources = [Source(name=n, socket=rig.tmp / f"{n}.sock") for n in names]
        client, gw = await rig.gateway(sources, timing=timing)
        await eventually(
            lambda: all(m.state is LinkState.READY for m in gw.mirrors.values()), within=20.0
        )
        await client.close()
    assert in_flight["most"] == 2
    assert hellos == {name: 1 for name in names}
