"""The LangGraph bridge against an Agent Server: the fake of its HTTP API
(``fixtures/langgraph/server.py``) for every case, and ``langgraph dev`` itself (the in-memory
Agent Server, from ``.cache/`` or the command ``COLLIE_LANGGRAPH_DEV`` names) for the cases
that show what a fake cannot: the server's own threads, runs, cancellation and state. Real
graphs either way; the bridge a ``langgraph-sdk`` client on loopback, driven over its real
Unix socket by a raw wire client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.errors import ConflictError, UnprocessableEntityError

from fixtures.agents.harness import short_dir
from fixtures.langgraph.server import GRAPH_NAMES, named_dev, start
from tests.bridges.langgraph_dev import langgraph_dev
from tests.bridges.langgraph_rig import (
    GRAPHS,
    Served,
    Wire,
    deploys,
    expires,
    rid,
    texts,
    two_turns,
    until,
)
from tests.bridges.test_kit import request

SAID = f"{GRAPHS}:said"
SPECS = {
    **{name: f"{GRAPHS}:{name}" for name in GRAPH_NAMES},
    "agent": "docs.examples.graphs.deploy:graph",  # the guide's example
}
FAKE, DEV = "fake", "langgraph-dev"
ON_DEV = pytest.mark.xdist_group("langgraph_dev")  # one worker, the module's one server
BOTH = pytest.mark.parametrize("server", [FAKE, pytest.param(DEV, marks=ON_DEV)], indirect=True)


@dataclass(frozen=True)
class Site:
    """An Agent Server for one test: its URL, and the folder of the files its graphs read
    (``LANGGRAPH_EFFECTS``, ``LANGGRAPH_HANG``)."""

    url: str
    files: Path

    @property
    def hang(self) -> Path:
        return self.files / "hang"

    def effects(self) -> list[str]:
        path = self.files / "effects"
        return path.read_text().splitlines() if path.exists() else []


def graphs_env(files: Path) -> dict[str, str]:
    return {"LANGGRAPH_EFFECTS": str(files / "effects"), "LANGGRAPH_HANG": str(files / "hang")}


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The module's ``langgraph dev`` (it starts in seconds; installed first if missing)."""
    files = tmp_path_factory.mktemp("langgraph-dev")
    running = start(files, graphs_env(files), SPECS, named_dev() or langgraph_dev())
    try:
        yield Site(running.url, files)
    finally:
        running.stop()


def emptied(site: Site) -> Site:
    """``site`` with no thread, no run going and no effect: as a fresh server."""
    site.hang.unlink(missing_ok=True)
    client = get_sync_client(url=site.url)
    try:
        for thread in client.threads.search(limit=1000):
            tid = thread["thread_id"]
            for run in client.runs.list(tid):
                if run["status"] in ("pending", "running"):
                    client.runs.cancel(tid, run["run_id"], wait=True)
            client.threads.delete(tid)
    finally:
        client.close()
    (site.files / "effects").unlink(missing_ok=True)
    return site


@pytest.fixture
def server(request: pytest.FixtureRequest, folder: Path) -> Iterator[Site]:
    """The fake Agent Server of this test, or (``BOTH``'s second case) the module's
    ``langgraph dev``, emptied."""
    if getattr(request, "param", FAKE) == DEV:
        yield emptied(request.getfixturevalue("dev_server"))
        return
    running = start(folder, graphs_env(folder), SPECS)
    try:
        yield Site(running.url, folder)
    finally:
        running.stop()


@pytest.fixture
async def client(server: Site) -> AsyncIterator[Any]:
    """Another client of the server (langgraph-sdk)."""
    made = get_client(url=server.url)
    try:
        yield made
    finally:
        await made.aclose()


async def begun(wire: Wire, text: str) -> str:
    """A new thread, ``text`` its first message: its conversation's id."""
    conv = await wire.start()
    await wire.say(conv, text)
    return conv


async def drained(parts: AsyncIterator[Any]) -> None:
    async for _ in parts:
        pass


@BOTH
async def test_a_thread_made_elsewhere_is_listed_with_its_ask(
    folder: Path, server: Site, client: Any
) -> None:
    thread = (await client.threads.create())["thread_id"]
    await drained(client.runs.stream(thread, "bare", input={"said": ["hi"]}))
    [waiting] = (await client.threads.get_state(thread))["interrupts"]
    async with Served(folder, server.url, "bare", input=SAID) as wire:
        [ask] = await wire.asks(thread, 1)  # the thread is a conversation, its interrupt an ask
        assert (ask["id"], ask["title"]) == (f"{thread}:{waiting['id']}", "What is your name?")
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "accepted"
        await wire.items(thread, lambda i: "Hello, Ada" in texts(i))
        assert (await client.threads.get_state(thread))["interrupts"] == []


async def test_a_conversation_from_the_phone_is_a_thread_and_its_runs(
    folder: Path, server: Site, client: Any
) -> None:
    async with Served(folder, server.url, "chat") as wire:
        conv = await wire.start()
        thread = await client.threads.get(conv)  # the server's own thread
        assert thread["thread_id"] == conv
        await two_turns(wire, conv)


@pytest.mark.parametrize(("server", "option", "status", "effects"), [
    (FAKE, "allow", "done", ["send_email ada@example.org"]),
    (FAKE, "deny", "failed", []),
    pytest.param(DEV, "allow", "done", ["send_email ada@example.org"], marks=ON_DEV),
], indirect=["server"])  # fmt: skip
async def test_a_tool_approval_allowed_or_denied(
    folder: Path, server: Site, client: Any, option: str, status: str, effects: list[str]
) -> None:
    async with Served(folder, server.url, "per_call") as wire:
        conv = await begun(wire, "mail ada")
        [ask] = await wire.asks(conv, 1)
        assert (ask["kind"], ask["title"]) == ("permission", "Run send_email?")
        assert {a["name"]: a["value"] for a in ask["arguments"]}["to"] == "ada@example.org"
        _, result = await wire.reply(ask, {"option": option})
        assert result["outcome"] == "accepted"
        items = await wire.items(conv, lambda i: "Done." in texts(i))
        tool = next(i for i in items if i["kind"] == "tool")
        assert (tool["name"], tool["status"]) == ("send_email", status)
        assert server.effects() == effects
        _, stale = await wire.reply(ask, {"option": option})  # a stale id: never accepted
        assert stale["outcome"] != "accepted"


@BOTH
async def test_two_parallel_interrupts_by_id_and_a_restart_between_the_legs(
    folder: Path, server: Site, client: Any
) -> None:
    rig = Served(folder, server.url, "parallel", input=SAID)
    wire = await rig.open()
    try:
        conv = await begun(wire, "go")
        by_title = {a["title"]: a for a in await wire.asks(conv, 2)}
        await wire.reply(by_title["Right?"], {"text": "R"})
        [left] = await wire.asks(conv, 1)
        assert (left["id"], left.get("version", 1)) == (by_title["Left?"]["id"], 1)

        async def leg_ended() -> bool:  # the leg's run, not only the thread's first
            runs = await client.runs.list(conv)
            return [r["status"] for r in runs] == ["success", "success"]

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


@pytest.mark.parametrize("when", ["running", "queued"])  # queued: its id not said yet
@BOTH
async def test_stop_cancels_the_run_on_the_server(
    folder: Path, server: Site, client: Any, when: str
) -> None:
    server.hang.touch()
    rig = Served(folder, server.url, "slow", input=SAID)
    wire = await rig.open()
    try:
        conv = await begun(wire, "go")

        async def status(*wanted: str) -> bool:
            runs = await client.runs.list(conv)
            return bool(runs) and runs[0]["status"] in wanted

        # langgraph dev picks a run up from its queue within a second; the fake at once
        made = ("running",) if when == "running" else ("pending", "running")
        await until(lambda: status(*made))
        body = {"request_id": rid(), "turn": 1}
        got, result = await request(wire.sock, "POST", f"/conversations/{conv}/stop", body)
        assert (got, result["outcome"]) == (200, "accepted")
        await until(lambda: status("interrupted"))  # cancelled there, not only here

        async def thread_ended() -> bool:  # the thread says so too, a moment after
            return bool((await client.threads.get(conv))["status"] != "busy")

        await until(thread_ended)
        if when == "running":  # a run that never started leaves its thread as it was
            assert (await client.threads.get(conv))["status"] == "interrupted"
    finally:
        server.hang.unlink()
        await rig.close()
    assert server.effects() == []


async def test_an_interrupt_resumed_by_another_client_is_decided(
    folder: Path, server: Site, client: Any
) -> None:
    async with Served(folder, server.url, "bare", input=SAID, poll=0.1) as wire:
        conv = await begun(wire, "hi")
        [ask] = await wire.asks(conv, 1)
        [waiting] = (await client.threads.get_state(conv))["interrupts"]
        resume = {"resume": {waiting["id"]: "Bob"}}
        await drained(client.runs.stream(conv, "bare", command=resume))
        await wire.asks(conv, 0)  # read again by the bridge: the ask ends, decided
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "decided"  # never accepted: another client moved it on
        assert (await client.threads.get_state(conv))["values"]["out"] == "Hello, Bob"


@BOTH
async def test_a_deadline_from_the_assistants_configuration(
    folder: Path, server: Site, client: Any
) -> None:
    made = await client.assistants.create("bare", config={"configurable": {"collie_deadline_s": 1}})
    async with Served(folder, server.url, made["assistant_id"], input=SAID) as wire:
        await expires(wire)


async def test_stop_while_an_approval_waits_rejects_it(
    folder: Path, server: Site, client: Any
) -> None:
    async with Served(folder, server.url, "per_call") as wire:
        conv = await begun(wire, "mail ada")
        await wire.asks(conv, 1)
        body = {"request_id": rid(), "turn": 1}
        got, result = await request(wire.sock, "POST", f"/conversations/{conv}/stop", body)
        assert (got, result["outcome"]) == (200, "accepted")
        items = await wire.items(conv, lambda i: "Done." in texts(i))  # the graph went on
        tool = next(i for i in items if i["kind"] == "tool")
        assert (tool["name"], tool["status"]) == ("send_email", "failed")
        assert "Stopped from the phone" in tool["output"]
        assert server.effects() == []
        assert (await client.threads.get_state(conv))["interrupts"] == []


@BOTH
async def test_a_run_outlives_the_bridge(folder: Path, server: Site, client: Any) -> None:
    server.hang.touch()
    rig = Served(folder, server.url, "slow", input=SAID, poll=0.1)
    wire = await rig.open()
    try:
        conv = await begun(wire, "go")

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
        server.hang.unlink()

        async def done() -> bool:
            return server.effects() == ["slow done"]  # the node ran to its end, on the server

        await until(done)
        wire = await rig.open()
        assert (await client.runs.list(conv))[0]["status"] == "success"
        assert (await wire.read(conv))["id"] == conv  # the same conversation, read again
    finally:
        await rig.close()


async def test_the_guides_example_graph_on_a_server(folder: Path, server: Site) -> None:
    async with Served(folder, server.url, "agent") as wire:
        await deploys(wire)


@BOTH
async def test_messages_made_elsewhere_are_shown_once(
    folder: Path, server: Site, client: Any
) -> None:
    thread = (await client.threads.create(metadata={"graph_id": "chat"}))["thread_id"]
    said: Any = {"messages": [{"role": "user", "content": "hi from elsewhere"}]}
    await drained(client.runs.stream(thread, "chat", input=said))
    rig = Served(folder, server.url, "chat", poll=0.1)
    async with rig as wire:
        await wire.items(thread, lambda i: "You said: hi from elsewhere" in texts(i))
        assert (await wire.read(thread))["title"] == "hi from elsewhere"
        again: Any = {"messages": [{"role": "user", "content": "and again"}]}
        await drained(client.runs.stream(thread, "chat", input=again))  # the bridge not told
        await wire.items(thread, lambda i: "You said: and again" in texts(i))
        await wire.say(thread, "from the phone")
        await wire.items(thread, lambda i: "You said: from the phone" in texts(i))

        async def read_again() -> bool:  # the last state read by the bridge's polling too
            # (read again each time: a real server may write the run's last checkpoint after
            # the reply's items are shown)
            state = await client.threads.get_state(thread)
            last = state["checkpoint"]["checkpoint_id"]
            return rig.bridge is not None and rig.bridge.marks.get(thread) == last

        await until(read_again)
        items = (await wire.read(thread))["items"]
        assert texts(items).count("You said: and again") == 1
        assert texts(items).count("You said: from the phone") == 1


@BOTH
async def test_a_thread_deleted_on_the_server_ends_its_asks(
    folder: Path, server: Site, client: Any
) -> None:
    async with Served(folder, server.url, "bare", input=SAID) as wire:
        conv = await begun(wire, "hi")
        [ask] = await wire.asks(conv, 1)
        await client.threads.delete(conv)
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "not_open"  # never accepted
        assert (await wire.read(conv)).get("asks", []) == []


@BOTH
async def test_a_failing_graph_is_a_notice_and_the_thread_says_error(
    folder: Path, server: Site, client: Any
) -> None:
    async with Served(folder, server.url, "broken", input=SAID) as wire:
        conv = await begun(wire, "go")
        items = await wire.items(conv, lambda i: bool(texts(i, "notice")))
        assert texts(items, "notice") == ["The graph failed: the disk is full"]
        thread = await client.threads.get(conv)
        assert (thread["status"], thread["error"]["message"]) == ("error", "the disk is full")


# What the bridge reads, as the fake answers it beside langgraph dev: the same for both.


@BOTH
async def test_a_thread_its_state_and_its_stream_read_as_the_server_says(
    server: Site, client: Any
) -> None:
    thread = (await client.threads.create())["thread_id"]
    events = [p.event async for p in client.runs.stream(thread, "bare", input={"said": ["hi"]})]
    assert events == ["metadata", "values", "values"]  # the default mode; nothing after
    state = await client.threads.get_state(thread)
    [waiting] = state["interrupts"]  # no response_schema when there is none
    assert waiting == {"id": waiting["id"], "value": "What is your name?"}
    assert [t["interrupts"] for t in state["tasks"]] == [[waiting]]
    assert state["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    read = await client.threads.get(thread)
    assert (read["status"], read["values"], list(read["interrupts"].values())) == (
        "interrupted", {"said": ["hi"]}, [[waiting]]
    )  # fmt: skip
    with pytest.raises(UnprocessableEntityError):  # by its id only, never a graph's
        await client.assistants.get("bare")


@BOTH
async def test_a_run_of_a_busy_thread_waits_its_turn_unless_refused(
    server: Site, client: Any
) -> None:
    server.hang.touch()
    thread = (await client.threads.create())["thread_id"]
    first = asyncio.create_task(drained(client.runs.stream(thread, "slow", input={"said": ["1"]})))
    try:

        async def statuses(*wanted: str) -> bool:
            return [r["status"] for r in await client.runs.list(thread)] == list(wanted)

        await until(lambda: statuses("running"))
        second = asyncio.create_task(
            drained(client.runs.stream(thread, "slow", input={"said": ["2"]}))
        )  # enqueue, the default
        await until(lambda: statuses("pending", "running"))  # the newest first
        with pytest.raises(ConflictError):  # what the bridge asks for: never queued
            await drained(
                client.runs.stream(
                    thread, "slow", input={"said": ["3"]}, multitask_strategy="reject"
                )
            )
        assert (await client.threads.get(thread))["status"] == "busy"
    finally:
        server.hang.unlink()
    await asyncio.wait_for(asyncio.gather(first, second), 20)
    assert await statuses("success", "success")
    assert (await client.threads.get_state(thread))["values"]["said"] == ["1", "2"]
