"""The conversation list through the phone API against SDK agents (spec L1–L8, X1, N1–N3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from collie_gateway.mirror import LinkState
from collie_gateway.settings import LinkTiming
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import FAST, Rig, eventually, get_json, post_json
from wire.agent import Agent, Starter

LIST = "/api/v1/agents/desk/conversations"
TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"


def closed_reads(counter: dict[str, int], behave: Callable[[int], str] | None = None) -> Any:
    """A middleware counting the agent's closed reads; ``behave(n)`` may make the n-th read
    ``hang`` or ``cut``."""

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/conversations" and request.query.get("state") == "closed":
            counter["closed"] = counter.get("closed", 0) + 1
            what = behave(counter["closed"]) if behave else "ok"
            if what == "hang":
                await asyncio.sleep(2)
            elif what == "cut":
                resp = web.StreamResponse(headers={"Content-Length": "5000"})
                resp.content_type = "application/json"
                await resp.prepare(request)
                await resp.write(b'{"conversations": [')
                assert request.transport is not None
                request.transport.close()
                return resp
        return await handler(request)

    return count


async def start(
    rig: Rig, *, timing: LinkTiming = FAST, **agent_args: Any
) -> tuple[Any, Any, Agent]:
    agent_args.setdefault("features", ["history", "reopen", "close", "starters"])
    agent = rig.agent("desk", runtime="desk", **agent_args)
    sock = await rig.serve("desk")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)], timing=timing)
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.READY)
    return client, gw, agent


async def test_L2_L3_L4_order_rows_and_closed_group(rig: Rig) -> None:
    client, gw, agent = await start(rig, subtitle="Keeps your notes")
    old = await agent.open_conversation("old", title="Old notes")
    rig.clock.advance(minutes=1)
    await agent.open_conversation("untitled")
    rig.clock.advance(minutes=5)
    await agent.open_conversation("new", title="New notes", subtitle="Writing")
    waiting = await agent.open_conversation("wait", title="Needs you")
    await waiting.ask(id="q1", kind="text", title="Which folder?")
    await waiting.ask(id="q2", kind="text", title="Which name?")
    done = await agent.open_conversation("done", title="Finished")
    await done.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 4)
    view = await get_json(client, LIST)
    assert [r["conversation_id"] for r in view["rows"]] == ["wait", "new", "untitled", "old"]
    wait_row, new_row, untitled_row, _ = view["rows"]
    assert wait_row["line"] == "Which folder?"
    assert wait_row["open_asks"] == 2
    assert wait_row["waiting"] is True
    assert new_row["line"] == "Writing"
    assert untitled_row["title"] == "Untitled conversation"
    assert untitled_row["line"] == "Keeps your notes"  # the agent's subtitle
    assert view["closed_label"] == "Closed"
    assert [r["conversation_id"] for r in view["closed"]] == ["done"]
    assert view["closed"][0]["reopen"] == "Reopen"
    assert view["footer"] is None
    del old


async def test_L4_no_reopen_without_the_feature(rig: Rig) -> None:
    client, _gw, agent = await start(rig, features=["history"])
    conv = await agent.open_conversation("done", title="Finished")
    await conv.close()
    view = await get_json(client, LIST)
    assert view["closed"][0]["reopen"] is None


async def test_L5_closed_rows_read_on_visits_and_open_close_never_on_polls(rig: Rig) -> None:
    counter: dict[str, int] = {}
    client, gw, agent = await start(rig, middlewares=[closed_reads(counter)])
    conv = await agent.open_conversation("c1", title="One")
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    await asyncio.sleep(0.2)
    counter.clear()
    await get_json(client, LIST)
    assert counter == {"closed": 1}  # a visit reads once
    for _ in range(5):
        await get_json(client, LIST + "?poll=true")
    await conv.append(kind="reply", text="hello")
    await asyncio.sleep(0.2)
    assert counter == {"closed": 1}  # polls and other events never read
    await conv.close()
    await eventually(lambda: counter.get("closed") == 2)  # a close reads again
    await agent.open_conversation("c2", title="Two")
    await eventually(lambda: counter.get("closed") == 3)  # an open reads again
    view = await get_json(client, LIST + "?poll=true")
    assert [r["conversation_id"] for r in view["closed"]] == ["c1"]


async def test_L6_load_more_over_100(rig: Rig) -> None:
    client, _gw, agent = await start(rig)
    for i in range(105):
        conv = await agent.open_conversation(f"c{i:03}", title=f"Conversation {i}")
        await conv.close()
    view = await get_json(client, LIST)
    assert len(view["closed"]) == 100
    assert view["footer"]["text"] == "Load more"
    more = await get_json(client, view["footer"]["href"])
    assert len(more["rows"]) == 5
    assert more["footer"] is None
    seen = {r["conversation_id"] for r in view["closed"]} | {
        r["conversation_id"] for r in more["rows"]
    }
    assert len(seen) == 105


async def test_L6_agent_keeps_no_list(rig: Rig) -> None:
    client, _, agent = await start(rig, keeps_list=False)
    await agent.open_conversation("c1", title="One")
    view = await get_json(client, LIST)
    assert view["footer"]["text"] == "This durable agent doesn't keep a list of its conversations."
    assert view["closed"] is None


async def test_L6_agent_did_not_answer(rig: Rig) -> None:
    counter: dict[str, int] = {}
    timing = LinkTiming(connect=1, request=0.5, stream_read=1, backoff_first=0.05, backoff_cap=0.2)
    client, _, _ = await start(
        rig, timing=timing, middlewares=[closed_reads(counter, lambda n: "hang")]
    )
    view = await get_json(client, LIST)
    assert view["footer"]["text"] == "The durable agent didn't answer. Try again in a moment."


async def test_L6_L8_read_cut_mid_transfer_keeps_the_drawn_list(rig: Rig) -> None:
    counter: dict[str, int] = {}
    client, _gw, agent = await start(
        rig, middlewares=[closed_reads(counter, lambda n: "cut" if n >= 2 else "ok")]
    )
    conv = await agent.open_conversation("c1", title="One")
    await conv.close()
    await asyncio.sleep(0.3)  # the close's own read happens first
    counter.clear()
    counter["closed"] = 0
    first = await get_json(client, LIST)  # the refresh after the close may have read already
    second = await get_json(client, LIST)
    assert second["footer"]["text"] == "Couldn't load conversations. Try again."
    assert [r["conversation_id"] for r in second["closed"]] == ["c1"]  # L8: still drawn
    del first


async def test_L6_version_message(rig: Rig) -> None:
    agent = rig.agent("desk", wire_version=2, features=["history"])
    sock = await rig.serve("desk")
    client, gw = await rig.gateway([Source(name="desk", socket=sock)])
    await eventually(lambda: gw.mirrors["desk"].state is LinkState.VERSION_MISMATCH)
    view = await get_json(client, LIST)
    assert view["footer"]["text"] == (
        "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    )
    del agent


async def test_L7_no_history_only_open_rows_no_footer(rig: Rig) -> None:
    counter: dict[str, int] = {}
    client, gw, agent = await start(rig, features=[], middlewares=[closed_reads(counter)])
    await agent.open_conversation("c1", title="One")
    closed = await agent.open_conversation("c2", title="Two")
    await closed.close()
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    assert [r["conversation_id"] for r in view["rows"]] == ["c1"]
    assert view["closed"] is None
    assert view["closed_label"] is None
    assert view["footer"] is None
    assert counter == {}  # never asked


async def test_X1_secrets_masked_in_titles_and_subtitles(rig: Rig) -> None:
    client, gw, agent = await start(rig)
    await agent.open_conversation("c1", title=f"Rotate {TOKEN}", subtitle=f"old {TOKEN}")
    await eventually(lambda: gw.mirrors["desk"].open_count == 1)
    view = await get_json(client, LIST)
    row = view["rows"][0]
    assert TOKEN not in row["title"]
    assert TOKEN[4:12] not in row["title"]
    assert row["title"].startswith("Rotate ghp_")
    assert TOKEN not in row["line"]
    header = (await get_json(client, f"{LIST}/c1"))["header"]
    assert TOKEN[4:12] not in header["title"]


async def test_N1_N2_starters_open_a_conversation(rig: Rig) -> None:
    client, gw, agent = await start(
        rig, starters=[Starter(id="tidy", label="Tidy my notes", description="Sorts them")]
    )

    @agent.on_start
    async def begin(starter: str) -> Any:
        return await agent.open_conversation(title=f"Started: {starter}")

    page = await get_json(client, "/api/v1/agents/desk/new")
    assert page["title"] == "New conversation"
    assert page["starters"] == [
        {"id": "tidy", "label": "Tidy my notes", "description": "Sorts them"}
    ]
    assert page["empty"] is None
    result = await post_json(client, LIST, {"request_id": "n1", "starter": "tidy"})
    assert result["outcome"] == "accepted"
    new_id = result["conversation_id"]
    await eventually(lambda: new_id in gw.mirrors["desk"].conversations)
    view = await get_json(client, LIST + "?poll=true")
    assert view["rows"][0]["title"] == "Started: tidy"


async def test_N3_no_starters(rig: Rig) -> None:
    client, _, _ = await start(rig)
    page = await get_json(client, "/api/v1/agents/desk/new")
    assert page["starters"] == []
    assert page["empty"] == "This machine's durable agent offers no starters yet."
