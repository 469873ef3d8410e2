"""The LangGraph bridge against an Agent Server: the fake of its HTTP API
(``fixtures/langgraph/server.py``), or ``langgraph dev`` itself when ``COLLIE_LANGGRAPH_DEV``
names its command; real graphs either way, the bridge a ``langgraph-sdk`` client on loopback,
driven over its real Unix socket by a raw wire client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from fixtures.agents.harness import short_dir
from fixtures.langgraph.server import launch
from tests.bridges.langgraph_rig import (
    GRAPHS,
    Served,
    deploys,
    expires,
    rid,
    texts,
    two_turns,
    until,
)
from tests.bridges.test_kit import request

SAID = f"{GRAPHS}:said"


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture
async def server(folder: Path) -> AsyncIterator[str]:
    env = {"LANGGRAPH_EFFECTS": str(folder / "effects"), "LANGGRAPH_HANG": str(folder / "hang")}
    url, proc = await launch(folder, env)
    try:
        yield url
    finally:
        proc.terminate()
        await proc.wait()


@pytest.fixture
async def client(server: str) -> AsyncIterator[Any]:
    """Another client of the server (langgraph-sdk)."""
    made = get_client(url=server)
    try:
        yield made
    finally:
        await made.aclose()


def lines(folder: Path) -> list[str]:
    path = folder / "effects"
    return path.read_text().splitlines() if path.exists() else []


async def drained(parts: AsyncIterator[Any]) -> None:
    async for _ in parts:
        pass


async def test_a_thread_made_elsewhere_is_listed_with_its_ask(
    folder: Path, server: str, client: Any
) -> None:
    thread = (await client.threads.create())["thread_id"]
    await drained(client.runs.stream(thread, "bare", input={"said": ["hi"]}))
    [waiting] = (await client.threads.get_state(thread))["interrupts"]
    async with Served(folder, server, "bare", input=SAID) as wire:
        [ask] = await wire.asks(thread, 1)  # the thread is a conversation, its interrupt an ask
        assert (ask["id"], ask["title"]) == (f"{thread}:{waiting['id']}", "What is your name?")
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "accepted"
        await wire.items(thread, lambda i: "Hello, Ada" in texts(i))
        assert (await client.threads.get_state(thread))["interrupts"] == []


async def test_a_conversation_from_the_phone_is_a_thread_and_its_runs(
    folder: Path, server: str, client: Any
) -> None:
    async with Served(folder, server, "chat") as wire:
        conv = await wire.start()
        thread = await client.threads.get(conv)  # the server's own thread
        assert thread["thread_id"] == conv
        await two_turns(wire, conv)


@pytest.mark.parametrize(("option", "status", "effects"), [
    ("allow", "done", ["send_email ada@example.org"]),
    ("deny", "failed", []),
])  # fmt: skip
async def test_a_tool_approval_allowed_or_denied(
    folder: Path, server: str, client: Any, option: str, status: str, effects: list[str]
) -> None:
    async with Served(folder, server, "per_call") as wire:
        conv = await wire.start()
        await wire.say(conv, "mail ada")
        [ask] = await wire.asks(conv, 1)
        assert (ask["kind"], ask["title"]) == ("permission", "Run send_email?")
        assert {a["name"]: a["value"] for a in ask["arguments"]}["to"] == "ada@example.org"
        _, result = await wire.reply(ask, {"option": option})
        assert result["outcome"] == "accepted"
        items = await wire.items(conv, lambda i: "Done." in texts(i))
        tool = next(i for i in items if i["kind"] == "tool")
        assert (tool["name"], tool["status"]) == ("send_email", status)
        assert lines(folder) == effects
        _, stale = await wire.reply(ask, {"option": option})  # a stale id: never accepted
        assert stale["outcome"] != "accepted"


async def test_two_parallel_interrupts_by_id_and_a_restart_between_the_legs(
    folder: Path, server: str, client: Any
) -> None:
    rig = Served(folder, server, "parallel", input=SAID)
    wire = await rig.open()
    try:
        conv = await wire.start()
        await wire.say(conv, "go")
        by_title = {a["title"]: a for a in await wire.asks(conv, 2)}
        await wire.reply(by_title["Right?"], {"text": "R"})
        [left] = await wire.asks(conv, 1)
        assert (left["id"], left.get("version", 1)) == (by_title["Left?"]["id"], 1)

        async def leg_ended() -> bool:
            return bool((await client.threads.get(conv))["status"] == "interrupted")

        await until(leg_ended)
        await rig.close()
        wire = await rig.open()  # a restart: the same pending set, read from the server
        [again] = await wire.asks(conv, 1)
        assert (again["id"], again.get("version", 1)) == (left["id"], 1)
        await wire.reply(again, {"text": "L"})
        items = await wire.items(conv, lambda i: any("left L" in t for t in texts(i)))
        assert any("right R" in t for t in texts(items))
    finally:
        await rig.close()


async def test_stop_cancels_the_run_on_the_server(folder: Path, server: str, client: Any) -> None:
    (folder / "hang").touch()
    rig = Served(folder, server, "slow", input=SAID)
    wire = await rig.open()
    try:
        conv = await wire.start()
        await wire.say(conv, "go")

        async def status(wanted: str) -> bool:
            runs = await client.runs.list(conv)
            return bool(runs) and runs[0]["status"] == wanted

        await until(lambda: status("running"))
        body = {"request_id": rid(), "turn": 1}
        got, result = await request(wire.sock, "POST", f"/conversations/{conv}/stop", body)
        assert (got, result["outcome"]) == (200, "accepted")
        await until(lambda: status("interrupted"))  # cancelled there, not only here
    finally:
        (folder / "hang").unlink()
        await rig.close()
    assert lines(folder) == []


async def test_an_interrupt_resumed_by_another_client_is_decided(
    folder: Path, server: str, client: Any
) -> None:
    async with Served(folder, server, "bare", input=SAID, poll=0.1) as wire:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        [waiting] = (await client.threads.get_state(conv))["interrupts"]
        resume = {"resume": {waiting["id"]: "Bob"}}
        await drained(client.runs.stream(conv, "bare", command=resume))
        await wire.asks(conv, 0)  # read again by the bridge: the ask ends, decided
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "decided"  # never accepted: another client moved it on
        assert (await client.threads.get_state(conv))["values"]["out"] == "Hello, Bob"


async def test_a_deadline_from_the_assistants_configuration(
    folder: Path, server: str, client: Any
) -> None:
    made = await client.assistants.create("bare", config={"configurable": {"collie_deadline_s": 1}})
    async with Served(folder, server, made["assistant_id"], input=SAID) as wire:
        await expires(wire)


async def test_stop_while_an_approval_waits_rejects_it(
    folder: Path, server: str, client: Any
) -> None:
    async with Served(folder, server, "per_call") as wire:
        conv = await wire.start()
        await wire.say(conv, "mail ada")
        await wire.asks(conv, 1)
        body = {"request_id": rid(), "turn": 1}
        got, result = await request(wire.sock, "POST", f"/conversations/{conv}/stop", body)
        assert (got, result["outcome"]) == (200, "accepted")
        items = await wire.items(conv, lambda i: "Done." in texts(i))  # the graph went on
        tool = next(i for i in items if i["kind"] == "tool")
        assert (tool["name"], tool["status"]) == ("send_email", "failed")
        assert "Stopped from the phone" in tool["output"]
        assert lines(folder) == []
        assert (await client.threads.get_state(conv))["interrupts"] == []


async def test_a_run_outlives_the_bridge(folder: Path, server: str, client: Any) -> None:
    (folder / "hang").touch()
    rig = Served(folder, server, "slow", input=SAID, poll=0.1)
    wire = await rig.open()
    try:
        conv = await wire.start()
        await wire.say(conv, "go")

        async def running() -> bool:
            runs = await client.runs.list(conv)
            return bool(runs) and runs[0]["status"] == "running"

        await until(running)
        await rig.close()  # the bridge goes; the run does not
        wire = await rig.open()
        await wire.say(conv, "more")  # the run the bridge no longer streams goes on
        notices = await wire.items(conv, lambda i: bool(texts(i, "notice")))
        assert "running elsewhere" in texts(notices, "notice")[0]
        await rig.close()
        (folder / "hang").unlink()

        async def done() -> bool:
            return lines(folder) == ["slow done"]  # the node ran to its end, on the server

        await until(done)
        wire = await rig.open()
        assert (await client.runs.list(conv))[0]["status"] == "success"
        assert (await wire.read(conv))["id"] == conv  # the same conversation, read again
    finally:
        await rig.close()


async def test_the_guides_example_graph_on_a_server(folder: Path) -> None:
    url, proc = await launch(folder, {}, {"agent": "docs.examples.graphs.deploy:graph"})
    try:
        async with Served(folder, url, "agent") as wire:
            await deploys(wire)
    finally:
        proc.terminate()
        await proc.wait()


async def test_messages_made_elsewhere_are_shown_once(
    folder: Path, server: str, client: Any
) -> None:
    thread = (await client.threads.create(metadata={"graph_id": "chat"}))["thread_id"]
    said: Any = {"messages": [{"role": "user", "content": "hi from elsewhere"}]}
    await drained(client.runs.stream(thread, "chat", input=said))
    rig = Served(folder, server, "chat", poll=0.1)
    async with rig as wire:
        await wire.items(thread, lambda i: "You said: hi from elsewhere" in texts(i))
        assert (await wire.read(thread))["title"] == "hi from elsewhere"
        again: Any = {"messages": [{"role": "user", "content": "and again"}]}
        await drained(client.runs.stream(thread, "chat", input=again))  # the bridge not told
        await wire.items(thread, lambda i: "You said: and again" in texts(i))
        await wire.say(thread, "from the phone")
        await wire.items(thread, lambda i: "You said: from the phone" in texts(i))
        last = (await client.threads.get_state(thread))["checkpoint"]["checkpoint_id"]

        async def read_again() -> bool:  # the last state read by the bridge's polling too
            return rig.bridge is not None and rig.bridge.marks.get(thread) == last

        await until(read_again)
        items = (await wire.read(thread))["items"]
        assert texts(items).count("You said: and again") == 1
        assert texts(items).count("You said: from the phone") == 1


async def test_a_thread_deleted_on_the_server_ends_its_asks(
    folder: Path, server: str, client: Any
) -> None:
    async with Served(folder, server, "bare", input=SAID) as wire:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        await client.threads.delete(conv)
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "not_open"  # never accepted
        assert (await wire.read(conv)).get("asks", []) == []
