"""MCP sessions and the asks they leave: a client killed mid-ask, a session that ends with
an ask open, a call retried with the same request id, the bridge restarted (spec T1, R3, R4;
issue 24)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys

import pytest

from bridges.mcp.bridge import ASK_ENDED, RESTARTED, SESSION_ENDED
from fixtures.agents.harness import short_dir
from tests.bridges.conftest import REPO
from tests.bridges.mcp_rig import Mcp, RawMcp, call_soon, mcp_rig, tool_json
from tests.collie_gateway.conftest import ClientFactory, Rig


def asks_in_store(mcp: Mcp) -> list[str]:
    with sqlite3.connect(mcp.rig.tmp / "asks.db") as db:
        return [r[0] for r in db.execute("SELECT id FROM asks ORDER BY id")]


async def test_T1_R3_client_killed_mid_ask_resolves_it_decided_with_notices(quick: Mcp) -> None:
    mcp = quick
    args = json.dumps({"question": "Still there?"})
    host = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fixtures.mcp.host",
        mcp.bridge.url,
        "ask_text",
        args,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert host.stdout is not None
        assert await asyncio.wait_for(host.stdout.readline(), 20) == b"connected\n"
        [(conv, ask)] = await mcp.wait_asks(1)
        host.send_signal(signal.SIGKILL)
        await host.wait()
        await mcp.wait_asks(0)
        await mcp.wait_text(conv, "notice", SESSION_ENDED)
    finally:
        if host.returncode is None:
            host.kill()
            await host.wait()
    assert await mcp.texts(conv, "notice") == [
        ASK_ENDED.format(title="Still there?"),
        SESSION_ENDED,
    ]
    lines = [(line["kind"], line["text"]) for line in (await mcp.chat(conv))["lines"]]
    assert lines[1:] == [
        ("receipt", "Decided in the durable agent: Still there?"),
        ("notice", ASK_ENDED.format(title="Still there?")),
        ("notice", SESSION_ENDED),
    ]
    late = await mcp.answer(ask, {"text": "yes"}, request_id="r-late")
    assert late["outcome"] == "decided"
    assert late["card"]["line"] == "Decided in the durable agent."
    snapshot, _ = await mcp.bridge.agent.read_conversation(conv)
    assert snapshot is not None
    assert snapshot.state == "closed"
    assert snapshot.title == "killable-host"
    assert [i["status"] for i in await mcp.items(conv) if i["kind"] == "tool"] == ["failed"]


async def test_R4_session_closed_by_the_client_ends_its_open_ask(quick: Mcp) -> None:
    mcp = quick
    async with mcp.session("closing-host") as client:
        task = await call_soon(client, "ask_choice", {"question": "Go?", "options": ["yes"]})
        [(conv, ask)] = await mcp.wait_asks(1)
        task.cancel()  # the host gives up: notifications/cancelled, then DELETE on exit
        with pytest.raises(asyncio.CancelledError):
            await task
    await mcp.wait_asks(0)
    await mcp.wait_text(conv, "notice", SESSION_ENDED)
    assert ASK_ENDED.format(title="Go?") in await mcp.texts(conv, "notice")
    assert (await mcp.answer(ask, {"option": "o1"}, request_id="r-late"))["outcome"] == "decided"


async def test_T1_a_call_retried_with_the_same_request_id_is_one_ask(quick: Mcp) -> None:
    mcp = quick
    raw = RawMcp(mcp.bridge.url)
    try:
        await raw.initialize("retrying-host")
        first = asyncio.create_task(raw.call(7, "ask_text", {"question": "Tag?"}))
        [(conv, ask)] = await mcp.wait_asks(1)
        first.cancel()  # the client's connection drops, and it sends the call again
        with pytest.raises(asyncio.CancelledError):
            await first
        again = asyncio.create_task(raw.call(7, "ask_text", {"question": "Tag?"}))
        await asyncio.sleep(0.2)
        assert mcp.open_asks() == [(conv, ask)]
        await mcp.answer(ask, {"text": "v1.0"})
        response = await asyncio.wait_for(again, 10)
        assert json.loads(response["result"]["content"][0]["text"]) == {
            "outcome": "answered",
            "text": "v1.0",
        }
        # Once answered, the same id again gets the same result, not a new card.
        repeat = await asyncio.wait_for(raw.call(7, "ask_text", {"question": "Tag?"}), 10)
        assert repeat["result"] == response["result"]
        assert asks_in_store(mcp) == [ask]
        assert [i["kind"] for i in await mcp.items(conv)] == ["tool"]
        # The same id for another call is refused, not mistaken for the first.
        other = await asyncio.wait_for(raw.call(7, "ask_text", {"question": "Other?"}), 10)
        assert other["result"]["isError"] is True
        assert other["result"]["content"][0]["text"] == (
            "Request id 7 was used for another call in this session."
        )
    finally:
        await raw.close()


async def test_R3_restarted_bridge_ends_what_was_open(aiohttp_client: ClientFactory) -> None:
    with short_dir() as tmp:
        base = Rig(tmp=tmp, make_client=aiohttp_client)
        first = await mcp_rig(base)
        async with first.session() as client:
            task = await call_soon(client, "ask_text", {"question": "Before?"})
            [(conv, ask)] = await first.wait_asks(1)
            await base.close()
            await first.bridge.close()
            task.cancel()
            with pytest.raises((asyncio.CancelledError, Exception)):
                await task
        base2 = Rig(tmp=tmp, make_client=aiohttp_client)
        second = await mcp_rig(base2)
        try:
            assert second.open_asks() == []
            assert RESTARTED in await second.texts(conv, "notice")
            snapshot, _ = await second.bridge.agent.read_conversation(conv)
            assert snapshot is not None
            assert snapshot.state == "closed"
            late = await second.answer(ask, {"text": "x"}, request_id="r-late")
            assert late["outcome"] == "decided"
            async with second.session() as client:
                result = await client.call_tool("notify", {"text": "hello again"})
                assert tool_json(result) == {"outcome": "shown"}
        finally:
            await base2.close()
            await second.bridge.close()


async def test_a_live_hosts_session_outlives_idle_between_calls(quick: Mcp) -> None:
    mcp = quick
    async with mcp.session("idle-host") as client:
        await client.call_tool("notify", {"text": "one"})
        await asyncio.sleep(1.0)  # over three times --idle: the host's open stream holds it
        await client.call_tool("notify", {"text": "two"})
        [conv] = list(mcp.bridge.agent._open)
        assert await mcp.texts(conv, "notice") == ["one", "two"]
