"""The sample agents, each in a process of its own: what they show, and that a kill -9 loses
nothing a command was told."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.agents.harness import REPO, SampleAgent
from tests.wire.conftest import Client, message
from wire.messages import FEATURES

DESK_CONVERSATIONS = {
    "desk-showcase",
    "desk-permission",
    "desk-choices",
    "desk-text",
    "desk-form",
    "desk-deadline",
}


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[SampleAgent]:
    async with SampleAgent("desk", state=tmp_path / "desk.db") as sample:
        yield sample


def by_id(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in page.get("conversations", [])}


async def test_desk_shows_every_kind(desk: SampleAgent) -> None:
    assert desk.address is not None
    c = Client(desk.address)
    try:
        hello = (await c.get("/hello")).body
        assert (hello["wire"], hello["runtime"]) == (1, "desk")
        assert set(hello["features"]) == set(FEATURES)
        assert len((await c.get("/starters")).body["starters"]) == 3
        convs = by_id((await c.get("/conversations?state=open")).body)
        assert set(convs) == DESK_CONVERSATIONS
        asks = {a["id"]: a for conv in convs.values() for a in conv.get("asks", [])}
        permission = asks["desk-permission-ask"]
        assert permission["tool"]["name"] == "delete_notes"
        assert {o["role"] for o in permission["options"]} == {"allow", "always", "deny"}
        assert not asks["desk-choice-ask"].get("multiple", False)
        assert asks["desk-text-ask"]["max_length"] == 80
        form = asks["desk-form-ask"]
        assert [f["kind"] for f in form["fields"]] == ["text", "select", "switch"]
        assert form["fields"][0]["required"]
        assert "deadline" in asks["desk-deadline-ask"]
        showcase = convs["desk-showcase"]
        buttons = showcase["buttons"]
        assert all(b.get("icon") for b in buttons)
        assert [b.get("busy", False) for b in buttons].count(True) == 1
        assert [b.get("disabled", False) for b in buttons].count(True) == 1
        assert [s.get("state", "pending") for s in showcase["progress"]["steps"]] == [
            "done",
            "running",
            "pending",
        ]
        items = (await c.get("/conversations/desk-showcase")).body["items"]
        kinds = {i["kind"] for i in items}
        assert {"user", "thinking", "tool", "reply", "markdown", "code", "link", "notice"} <= kinds
        async with c.events("0") as stream:
            types = {e.event for e in await stream.quiet(0.3)}
        assert "item.delta" in types
    finally:
        await c.close()


async def test_desk_after_kill_9(desk: SampleAgent) -> None:
    assert desk.address is not None
    c = Client(desk.address)
    body = {"request_id": "r1", "version": 1, "answer": {"option": "allow"}}
    try:
        first = await c.post("/asks/desk-permission-ask/reply", body)
        assert first.body == {"outcome": "accepted"}
        sent = await c.post("/conversations/desk-showcase/messages", message("m1", "hello"))
        assert sent.body["outcome"] == "accepted"
        before = int((await c.get("/conversations?state=open")).headers["Wire-Event-Id"])
    finally:
        await c.close()
    await desk.kill()
    await desk.start()
    c = Client(desk.address)
    try:
        assert (await c.post("/asks/desk-permission-ask/reply", body)).body == first.body
        other = {**body, "request_id": "r2"}
        assert (await c.post("/asks/desk-permission-ask/reply", other)).body == {
            "outcome": "answered"
        }
        again = await c.post("/conversations/desk-showcase/messages", message("m1", "hello"))
        assert again.body == sent.body
        page = await c.get("/conversations?state=open")
        assert int(page.headers["Wire-Event-Id"]) >= before
        convs = by_id(page.body)
        assert convs["desk-permission"].get("asks", []) == []
        [text_ask] = convs["desk-text"]["asks"]
        assert (text_ask["id"], text_ask.get("version", 1)) == ("desk-text-ask", 1)
        showcase = (await c.get("/conversations/desk-showcase")).body
        assert [i.get("request_id") for i in showcase["items"]].count("m1") == 1
    finally:
        await c.close()


async def test_desk_streams_a_reply(desk: SampleAgent) -> None:
    assert desk.address is not None
    c = Client(desk.address)
    try:
        mark = (await c.get("/conversations?state=open")).headers["Wire-Event-Id"]
        async with c.events(mark) as stream:
            sent = await c.post("/conversations/desk-text/messages", message("m1", "a note"))
            assert sent.body["outcome"] == "accepted"
            seen = await stream.until("item.updated", within=5)
        assert "item.delta" in [e.event for e in seen]
        assert [int(e.id or "") for e in seen] == sorted(int(e.id or "") for e in seen)
    finally:
        await c.close()


async def test_pi_durable_on_tcp_stops_and_survives_a_kill(tmp_path: Path) -> None:
    pi = SampleAgent("pi-durable", state=tmp_path / "pi.db", tcp=True, args=["--step-delay", "1"])
    async with pi:
        assert pi.address is not None
        assert pi.address.url.startswith("http://127.0.0.1:")
        c = Client(pi.address)
        try:
            hello = (await c.get("/hello")).body
            assert set(hello["features"]) == {"history", "stop", "steer", "progress"}
            mark = (await c.get("/conversations?state=open")).headers["Wire-Event-Id"]
            async with c.events(mark) as stream:
                sent = await c.post("/conversations/pi-main/messages", message("m1", "go"))
                assert sent.body["outcome"] == "accepted"
                while True:
                    [event] = await stream.take(1)
                    data = json.loads(event.data)
                    if data.get("conversation", {}).get("progress", {}).get("label"):
                        break
                assert data["conversation"]["progress"]["percent"] == 0
                steer = message("m2", "faster", steer=True, turn=1)
                assert (await c.post("/conversations/pi-main/messages", steer)).body[
                    "outcome"
                ] == "accepted"
                stop = {"request_id": "s1", "turn": 1}
                assert (await c.post("/conversations/pi-main/stop", stop)).body[
                    "outcome"
                ] == "accepted"
                await stream.until("turn.stopped")
        finally:
            await c.close()
        port = pi.port
        await pi.kill()
        await pi.start()
        assert pi.port == port
        c = Client(pi.address)
        try:
            stop = {"request_id": "s1", "turn": 1}
            assert (await c.post("/conversations/pi-main/stop", stop)).body["outcome"] == (
                "accepted"
            )
            conv = (await c.get("/conversations/pi-main")).body
            assert conv["turn"] == 1
            assert conv.get("state", "idle") == "idle"
        finally:
            await c.close()


async def test_nohistory(tmp_path: Path) -> None:
    async with SampleAgent("nohistory", state=tmp_path / "n.db") as sample:
        assert sample.address is not None
        c = Client(sample.address)
        try:
            assert "history" not in (await c.get("/hello")).body["features"]
            closed = await c.get("/conversations?state=closed")
            assert (closed.status, closed.body["error"]) == (404, "no_history")
        finally:
            await c.close()


async def test_wire2_says_2_and_logs_every_post(tmp_path: Path) -> None:
    log = tmp_path / "posts.jsonl"
    async with SampleAgent("wire2", state=tmp_path / "w.db", args=["--log", str(log)]) as sample:
        assert sample.address is not None
        c = Client(sample.address)
        try:
            assert (await c.get("/hello")).body["wire"] == 2
            assert not log.exists()
            await c.post("/conversations/future/close", {"request_id": "x"})
            await c.post("/conversations/future/messages", raw=b"not json")
        finally:
            await c.close()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["method"], x["path"]) for x in lines] == [
        ("POST", "/conversations/future/close"),
        ("POST", "/conversations/future/messages"),
    ]
    assert lines[1]["body"] == "not json"


@pytest.mark.parametrize("name", ["desk", "pi_durable", "nohistory", "wire2"])
async def test_help(name: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"fixtures.agents.{name}",
        "--help",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    assert b"--state" in out


async def test_desk_ask_me_something_raises_one_ask_of_each_kind(desk: SampleAgent) -> None:
    """Issue 11.5: the starter opens a new conversation with four asks, every time; an answer
    is followed by one notice, also after a kill -9."""
    assert desk.address is not None
    c = Client(desk.address)
    try:
        starters = (await c.get("/starters")).body["starters"]
        assert starters[0] == {
            "id": "asks",
            "label": "Ask me something",
            "description": "One ask of each kind",
        }
        opened = []
        for request_id in ("s1", "s2"):
            started = await c.post("/conversations", {"request_id": request_id, "starter": "asks"})
            assert started.body["outcome"] == "accepted"
            opened.append(started.body["conversation_id"])
        assert len(set(opened)) == 2
        convs = by_id((await c.get("/conversations?state=open")).body)
        for conversation_id in opened:
            asks = convs[conversation_id]["asks"]
            assert [a["kind"] for a in asks] == ["permission", "choice", "text", "form"]
        first = opened[0]
        reply = {"request_id": "r1", "version": 1, "answer": {"text": "Rex"}}
        assert (await c.post(f"/asks/{first}-text/reply", reply)).body == {"outcome": "accepted"}
        await _until_notice(c, first, "What name? answered: Rex")
    finally:
        await c.close()
    await desk.kill()
    await desk.start()
    c = Client(desk.address)
    try:
        choice = {"request_id": "r2", "version": 1, "answer": {"option": "blue"}}
        assert (await c.post(f"/asks/{first}-choice/reply", choice)).body == {"outcome": "accepted"}
        items = await _until_notice(c, first, "Which colour? answered: blue")
        texts = [i.get("text") for i in items]
        assert texts.count("What name? answered: Rex") == 1, "a follow-up added twice"
    finally:
        await c.close()


async def _until_notice(c: Client, conversation_id: str, text: str) -> list[dict[str, Any]]:
    for _ in range(200):
        items: list[dict[str, Any]] = (await c.get(f"/conversations/{conversation_id}")).body[
            "items"
        ]
        if any(i.get("text") == text for i in items):
            return items
        await asyncio.sleep(0.02)
    raise AssertionError(f"no notice {text!r}")
