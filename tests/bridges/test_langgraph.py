"""The LangGraph bridge, in-process mode, with real graphs (``fixtures/langgraph/graphs``) on a
fake chat model, driven over its real Unix socket by a raw wire client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fixtures.agents.harness import short_dir
from tests.bridges.langgraph_rig import GRAPHS, InProcess, Wire, deploys, expires, texts, two_turns


@pytest.fixture
async def folder() -> AsyncIterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture
def effects(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = folder / "effects"
    monkeypatch.setenv("LANGGRAPH_EFFECTS", str(path))
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def opened(folder: Path, graph: str) -> tuple[InProcess, Wire]:
    chats = ("chat", "per_call", "batched")
    rig = InProcess(folder, graph, "messages" if graph in chats else f"{GRAPHS}:said")
    return rig, await rig.open()


async def test_a_thread_is_a_conversation_its_reply_streamed(folder: Path) -> None:
    rig, wire = await opened(folder, "chat")
    try:
        conv = await wire.start()
        await two_turns(wire, conv)
    finally:
        await rig.close()


async def test_per_call_tool_approval(folder: Path, effects: Path) -> None:
    rig, wire = await opened(folder, "per_call")
    try:
        conv = await wire.start()
        await wire.say(conv, "mail ada")
        [ask] = await wire.asks(conv, 1)
        assert ask["id"].startswith(f"{conv}:")
        assert ask["kind"] == "permission"
        assert ask["title"] == "Run send_email?"
        assert {a["name"]: a["value"] for a in ask["arguments"]}["to"] == "ada@example.org"
        assert "not offered" in ask["text"]
        assert [o["role"] for o in ask["options"]] == ["allow", "deny"]
        assert lines(effects) == []
        status, result = await wire.reply(ask, {"option": "allow"})
        assert (status, result["outcome"]) == (200, "accepted")
        items = await wire.items(conv, lambda i: "Done." in texts(i))
        tool = next(i for i in items if i["kind"] == "tool")
        assert (tool["name"], tool["status"], tool["output"]) == (
            "send_email",
            "done",
            "sent to ada@example.org",
        )
        assert lines(effects) == ["send_email ada@example.org"]
        status, again = await wire.reply(ask, {"option": "allow"})  # a stale id: never accepted
        assert again["outcome"] != "accepted"
    finally:
        await rig.close()


async def test_per_call_rejected_runs_nothing(folder: Path, effects: Path) -> None:
    rig, wire = await opened(folder, "per_call")
    try:
        conv = await wire.start()
        await wire.say(conv, "mail ada")
        [ask] = await wire.asks(conv, 1)
        await wire.reply(ask, {"option": "deny"})
        items = await wire.items(conv, lambda i: "Done." in texts(i))
        tool = next(i for i in items if i["kind"] == "tool")
        assert tool["status"] == "failed"
        assert lines(effects) == []
    finally:
        await rig.close()


async def test_batched_approval_one_card_per_action_resumed_once(
    folder: Path, effects: Path
) -> None:
    rig, wire = await opened(folder, "batched")
    try:
        conv = await wire.start()
        await wire.say(conv, "mail and delete")
        first, second = await wire.asks(conv, 2)
        assert (first["title"], second["title"]) == ("Run send_email?", "Run delete_file?")
        assert first["id"].endswith(":1")
        assert second["id"].endswith(":2")
        _, result = await wire.reply(second, {"option": "deny"})
        assert result["outcome"] == "accepted"
        await asyncio.sleep(0.2)
        assert lines(effects) == []  # nothing resumed before the last is answered
        assert len((await wire.read(conv)).get("asks", [])) == 1
        await wire.reply(first, {"option": "allow"})
        items = await wire.items(conv, lambda i: "Done." in texts(i))
        statuses = {i["name"]: i["status"] for i in items if i["kind"] == "tool"}
        assert statuses == {"send_email": "done", "delete_file": "failed"}
        assert lines(effects) == ["send_email ada@example.org"]
    finally:
        await rig.close()


async def test_two_parallel_interrupts_answered_one_at_a_time(folder: Path) -> None:
    rig, wire = await opened(folder, "parallel")
    try:
        conv = await wire.start()
        await wire.say(conv, "go")
        asks = await wire.asks(conv, 2)
        by_title = {a["title"]: a for a in asks}
        await wire.reply(by_title["Right?"], {"text": "R"})
        [left] = await wire.asks(conv, 1)
        assert left["id"] == by_title["Left?"]["id"]  # the sibling stays, same id
        await wire.reply(left, {"text": "L"})
        items = await wire.items(conv, lambda i: any("left L" in t for t in texts(i)))
        assert any("right R" in t for t in texts(items))
    finally:
        await rig.close()


async def test_concurrent_answers_to_sibling_interrupts(folder: Path) -> None:
    rig, wire = await opened(folder, "parallel")
    try:
        conv = await wire.start()
        await wire.say(conv, "go")
        a, b = await wire.asks(conv, 2)
        results = await asyncio.gather(wire.reply(a, {"text": "x"}), wire.reply(b, {"text": "y"}))
        assert [r[1]["outcome"] for r in results] == ["accepted", "accepted"]
        items = await wire.items(
            conv, lambda i: any("left" in t and "right" in t for t in texts(i))
        )
        assert (await wire.read(conv)).get("asks", []) == []
        assert items
    finally:
        await rig.close()


async def test_two_interrupts_in_one_node_and_a_restart_between_legs(folder: Path) -> None:
    rig, wire = await opened(folder, "two_in_one")
    try:
        conv = await wire.start()
        await wire.say(conv, "go")
        [first] = await wire.asks(conv, 1)
        assert first["title"] == "First?"
        await wire.reply(first, {"text": "one"})
        [second] = await wire.asks(conv, 1)
        assert second["title"] == "Second?"
        assert second["id"] != first["id"]
        await rig.close()
        wire = await rig.open()  # a restart between the legs: same ids, same pending set
        [again] = await wire.asks(conv, 1)
        assert (again["id"], again.get("version")) == (second["id"], second.get("version"))
        await wire.reply(again, {"text": "two"})
        await wire.items(conv, lambda i: "one then two" in texts(i))
    finally:
        await rig.close()


async def test_a_bare_string_interrupt_is_a_text_card(folder: Path) -> None:
    rig, wire = await opened(folder, "bare")
    try:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        assert (ask["kind"], ask["title"]) == ("text", "What is your name?")
        await wire.reply(ask, {"text": "Ada"})
        await wire.items(conv, lambda i: "Hello, Ada" in texts(i))  # no messages: its state
    finally:
        await rig.close()


async def test_a_kind_value_is_that_card_resumed_with_the_answer_body(folder: Path) -> None:
    rig, wire = await opened(folder, "kind")
    try:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        assert ask["kind"] == "choice"
        assert [o["id"] for o in ask["options"]] == ["tea", "coffee"]
        await wire.reply(ask, {"option": "coffee"})
        await wire.items(conv, lambda i: "picked coffee" in texts(i))
    finally:
        await rig.close()


async def test_any_other_value_is_shown_as_json(folder: Path) -> None:
    rig, wire = await opened(folder, "other")
    try:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        assert ask["kind"] == "text"
        assert '"rows"' in ask["text"]
        await wire.reply(ask, {"text": "ok"})
        await wire.items(conv, lambda i: "noted ok" in texts(i))
    finally:
        await rig.close()


async def test_response_schema_is_a_form_checked_and_converted(folder: Path) -> None:
    rig, wire = await opened(folder, "order")
    try:
        conv = await wire.start()
        await wire.say(conv, "order")
        [ask] = await wire.asks(conv, 1)
        assert ask["kind"] == "form"
        fields = {f["id"]: f for f in ask["fields"]}
        assert fields["size"]["kind"] == "select"
        assert fields["count"]["required"]
        status, wrong = await wire.reply(ask, {"fields": {"count": "three", "size": "m"}})
        assert status == 400
        assert "count must be an integer" in str(wrong)
        assert (await wire.read(conv)).get("asks", [])[0]["id"] == ask["id"]  # nothing resumed
        _, ok = await wire.reply(ask, {"fields": {"count": "3", "size": "m"}})
        assert ok["outcome"] == "accepted"
        await wire.items(conv, lambda i: "6 m" in texts(i))  # "3" reached the graph as 3
    finally:
        await rig.close()


async def test_an_interrupt_gone_without_our_resume_is_decided(folder: Path) -> None:
    rig, wire = await opened(folder, "bare")
    try:
        conv = await wire.start()
        await wire.say(conv, "hi")
        [ask] = await wire.asks(conv, 1)
        assert rig.local is not None  # another client moves the thread on
        await rig.local.graph.aupdate_state(
            rig.local.config(conv), {"out": "moved"}, as_node="bare"
        )
        _, result = await wire.reply(ask, {"text": "Ada"})
        assert result["outcome"] == "not_open"  # never accepted
        assert (await wire.read(conv)).get("asks", []) == []
    finally:
        await rig.close()


async def test_a_message_while_an_interrupt_waits_is_not_sent(folder: Path) -> None:
    rig, wire = await opened(folder, "bare")
    try:
        conv = await wire.start()
        await wire.say(conv, "hi")
        await wire.asks(conv, 1)
        await wire.say(conv, "are you there?")
        await wire.items(
            conv, lambda i: any("waits for an answer" in t for t in texts(i, "notice"))
        )
    finally:
        await rig.close()


async def test_stop_is_unsupported_in_process(folder: Path) -> None:
    from tests.bridges.langgraph_rig import rid
    from tests.bridges.test_kit import request

    rig, wire = await opened(folder, "chat")
    try:
        conv = await wire.start()
        status, body = await request(
            wire.sock, "POST", f"/conversations/{conv}/stop", {"request_id": rid(), "turn": 1}
        )
        assert (status, body["outcome"], body["reason"]) == (200, "refused", "unsupported")
    finally:
        await rig.close()


async def test_kill_9_inside_a_resumed_node_asks_again_with_a_notice(
    folder: Path, effects: Path
) -> None:
    from tests.bridges.langgraph_rig import spawn

    hang = folder / "hang"
    hang.touch()
    env = {"LANGGRAPH_HANG": str(hang)}
    proc = await spawn(folder, "crash", env)
    wire = Wire(folder / "lg.sock")
    try:
        conv = await wire.start()
        await wire.say(conv, "ship")
        [ask] = await wire.asks(conv, 1)
        _, result = await wire.reply(ask, {"text": "yes"})
        assert result["outcome"] == "accepted"
        for _ in range(400):  # the node acts on the answer, then hangs
            if lines(effects):
                break
            await asyncio.sleep(0.02)
        proc.kill()  # kill -9 inside the resumed node
        await proc.wait()
        hang.unlink()
        proc = await spawn(folder, "crash", env)
        [again] = await wire.asks(conv, 1)
        assert again["id"] == f"{ask['id']}:attempt2"
        assert again["title"] == "Ship it?"
        items = await wire.items(conv, lambda i: bool(texts(i, "notice")))
        assert len([t for t in texts(items, "notice") if "not known" in t]) == 1
        assert lines(effects) == ["shipped yes"]  # the old answer not sent again
        _, stale = await wire.reply(ask, {"text": "yes"})
        assert stale["outcome"] != "accepted"
        await wire.reply(again, {"text": "again"})
        await wire.items(conv, lambda i: "shipped again" in texts(i))
        assert lines(effects) == ["shipped yes", "shipped again"]
    finally:
        proc.kill()
        await proc.wait()


async def test_the_guides_example_graph(folder: Path) -> None:
    rig = InProcess(folder, "", graph_spec="docs.examples.graphs.deploy:graph")
    try:
        await deploys(await rig.open())
    finally:
        await rig.close()


async def test_a_node_rerun_with_new_content_is_changed(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = folder / "right"
    monkeypatch.setenv("LANGGRAPH_RIGHT", str(right))
    right.write_text("Right, first?")
    rig, wire = await opened(folder, "parallel")
    try:
        conv = await wire.start()
        await wire.say(conv, "go")
        old = {a["title"]: a for a in await wire.asks(conv, 2)}["Right, first?"]
        right.write_text("Right, second?")
        assert rig.local is not None  # another client runs the thread: the node runs again
        await rig.local.graph.ainvoke(None, rig.local.config(conv))
        _, result = await wire.reply(old, {"text": "R"})
        assert result["outcome"] == "changed"  # checked before it was taken
        now = {a["title"]: a for a in await wire.asks(conv, 2)}["Right, second?"]
        assert (now["id"], now.get("version", 1)) == (old["id"], old.get("version", 1) + 1)
        _, result = await wire.reply(now, {"text": "R"})
        assert result["outcome"] == "accepted"
    finally:
        await rig.close()


async def test_a_deadline_from_the_graphs_configuration(folder: Path) -> None:
    rig = InProcess(folder, "soon", f"{GRAPHS}:said")  # collie_deadline_s: 1
    try:
        await expires(await rig.open())
    finally:
        await rig.close()
