"""The ACP bridge end to end: the scripted ACP agent (a real process on the
``agent-client-protocol`` package), the bridge, and a gateway, driven through the phone API
(spec T1, A4, A7, B1, C3, H2, R4; issue 13)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from typing import Any

import pytest

from bridges.acp.bridge import ASK_LOST, OVERSIZED, RESTARTED, UNDELIVERED
from bridges.acp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND
from collie_gateway.core.mirror import LinkState
from tests.bridges.conftest import Acp, acp_rig, agent_env
from tests.collie_gateway.conftest import Rig, eventually, post_json
from wire.agent._agent import RequestError
from wire.messages import Answer, Reply


def selected(acp: Acp, pid: int | None = None) -> list[object]:
    """The permission outcomes the agent's processes received, in order."""
    return [
        r["result"]["outcome"]
        for r in acp.responses(pid)
        if isinstance(r.get("result"), dict) and "outcome" in r["result"]
    ]


async def test_hello_runtime_from_agent_info_and_features(acp: Acp) -> None:
    mirror = acp.gw.mirrors["claude"]
    assert mirror.hello is not None
    assert mirror.hello.runtime == "scripted"
    # ACP has no steering; no session/load or session/resume declared: no reopen.
    assert set(mirror.hello.features) == {"history", "close", "stop", "progress", "starters"}


async def test_C3_a_reply_streams_by_deltas_and_ends_final(acp: Acp) -> None:
    conv = await acp.start()
    assert (await acp.say(conv, "stream 5"))["outcome"] == "accepted"
    await acp.wait_text(conv, "reply", "w1 w2 w3 w4 w5 ")

    async def final() -> bool:
        replies = [i for i in await acp.items(conv) if i["kind"] == "reply"]
        return len(replies) == 1 and replies[0].get("final", True) is True

    await eventually(final)
    events = await _events(acp)
    appended = [e for e in events if e["type"] == "item.appended" and e["item"]["kind"] == "reply"]
    assert [e["item"].get("final", True) for e in appended] == [False]  # streamed, then final
    deltas = [e["text"] for e in events if e["type"] == "item.delta"]
    # Chunks the bridge reads together are one delta: at most one per chunk after the first.
    assert 1 <= len(deltas) + 1 <= 5
    assert appended[0]["item"]["text"] + "".join(deltas) == "w1 w2 w3 w4 w5 "


async def _events(acp: Acp) -> list[dict[str, Any]]:
    with sqlite3.connect(acp.tmp / "claude.db") as db:
        rows = db.execute("SELECT data FROM events ORDER BY id").fetchall()
    return [json.loads(bytes(r[0])) for r in rows]


async def test_thinking_tool_diff_plan_title_image_and_refusal(acp: Acp) -> None:
    conv = await acp.start()
    for text in ["think", "tool", "plan", "title Shop fixes", "image", "refuse"]:
        await acp.say(conv, text)
    await acp.wait_text(conv, "notice", "The agent refused to continue this turn.")
    items = await acp.items(conv)
    assert await acp.texts(conv, "thinking") == ["Let me see."]
    tool = next(i for i in items if i["kind"] == "tool")
    assert (tool["name"], tool["status"]) == ("Edit a.txt", "done")
    assert tool["output"] == "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new"
    assert "The agent sent an image; images are not shown on the phone." in await acp.texts(
        conv, "notice"
    )
    snapshot, _ = await acp.bridge.agent.read_conversation(conv)
    assert snapshot is not None
    assert snapshot.title == "Shop fixes"
    assert snapshot.progress is not None
    assert [(s.label, s.state) for s in snapshot.progress.steps or []] == [
        ("Read", "done"),
        ("Change", "done"),
        ("Test", "done"),
    ]


async def test_T1_A4_a_permission_answered_from_the_phone_reaches_the_agent_once(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    assert ask_id == f"e{acp.bridge.epoch}-0"  # the process's epoch and its request id
    card = (await acp.chat(conv))["cards"]["cards"][0]
    assert card["answerable"] is True
    ask = acp.bridge.agent._open_asks[ask_id].ask
    # Roles from the option kinds; the agent's labels stay; our own option ids.
    assert [(o.id, o.role, o.label) for o in ask.options] == [
        ("o1", "allow", "Allow once #0"),
        ("o2", "always", "Always allow #1"),
        ("o3", "deny", "Reject #2"),
        ("o4", "deny", "Reject always #3"),
    ]
    assert ask.tool is not None
    assert ask.tool.call_id == f"e{acp.bridge.epoch}-call-1"
    first = await acp.answer(ask_id, "r1", {"option": "o1"})
    again = await acp.answer(ask_id, "r1", {"option": "o1"})  # a retried tap
    other = await acp.answer(ask_id, "r2", {"option": "o3"})  # a second phone, later
    assert (first["outcome"], again["outcome"], other["outcome"]) == (
        "accepted",
        "accepted",
        "answered",
    )
    await acp.wait_text(conv, "reply", "chose opt-0")
    assert selected(acp) == [{"outcome": "selected", "optionId": "opt-0"}]


async def test_S4_two_pending_asks_answered_in_reverse_order(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit2")
    first, second = await acp.wait_asks(conv, 2)
    assert (await acp.answer(second, "r-b", {"option": "o3"}))["outcome"] == "accepted"
    assert (await acp.answer(first, "r-a", {"option": "o1"}))["outcome"] == "accepted"
    await acp.wait_text(conv, "reply", "chose opt-0 and opt-2")
    assert selected(acp) == [
        {"outcome": "selected", "optionId": "opt-2"},
        {"outcome": "selected", "optionId": "opt-0"},
    ]


async def test_B1_R4_stop_with_a_pending_ask_answers_it_cancelled(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    turn = acp.gw.mirrors["claude"].conversations[conv].turn
    result = await post_json(
        acp.client,
        f"/api/v1/agents/claude/conversations/{conv}/stop",
        {"request_id": "stop-1", "turn": turn},
    )
    assert result["outcome"] == "accepted"
    await acp.wait_text(conv, "reply", "chose cancelled")
    assert selected(acp) == [{"outcome": "cancelled"}]
    assert any(r["message"].get("method") == "session/cancel" for r in acp.log())
    late = await acp.answer(ask_id, "r-late", {"option": "o1"})
    assert late["outcome"] != "accepted"
    assert selected(acp) == [{"outcome": "cancelled"}]  # nothing more was written


async def test_stop_cancels_a_running_turn(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "slow")
    await acp.wait_text(conv, "reply", "working")
    turn = acp.gw.mirrors["claude"].conversations[conv].turn
    await post_json(
        acp.client,
        f"/api/v1/agents/claude/conversations/{conv}/stop",
        {"request_id": "stop-2", "turn": turn},
    )
    await eventually(lambda: any(r["message"].get("method") == "session/cancel" for r in acp.log()))
    await acp.say(conv, "next one")  # the next turn runs once the stopped prompt ended
    await acp.wait_text(conv, "reply", "you said: next one")


async def test_T1_killed_mid_permission_old_ask_not_open_nothing_stale_written(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    title = acp.bridge.agent._open_asks[ask_id].ask.title
    old_epoch = acp.bridge.epoch
    old_pid = acp.kill()
    await eventually(lambda: acp.bridge.epoch == old_epoch + 1 and acp.bridge.process is not None)
    await acp.wait_text(conv, "notice", RESTARTED.format(code=-signal.SIGKILL))
    await acp.wait_asks(conv, 0)
    # The card does not just vanish: the chat says the question died with the process.
    await acp.wait_text(conv, "notice", ASK_LOST.format(title=title))
    result = await acp.answer(ask_id, "r-stale", {"option": "o1"})
    assert result["outcome"] == "not_open"
    # The conversation goes on in the new process, in a new session.
    await acp.say(conv, "hello again")
    await acp.wait_text(conv, "reply", "you said: hello again")
    new_pid = acp.bridge.process.pid if acp.bridge.process else None
    assert new_pid not in (None, old_pid)
    assert selected(acp, new_pid) == []  # no stale answer reached the new process
    assert selected(acp, old_pid) == []


async def test_accepted_but_undelivered_answer_gets_a_notice_and_is_not_resent(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    proc = acp.bridge.process
    assert proc is not None
    assert proc.pid is not None
    deliver = proc.respond

    async def dies_first(id: object, result: object) -> bool:
        # The process dies between the ledger's acceptance and the write.
        os.kill(proc.pid or 0, signal.SIGKILL)
        await asyncio.shield(proc.exited)
        return await deliver(id, result)  # type: ignore[arg-type]

    proc.respond = dies_first  # type: ignore[method-assign]
    assert (await acp.answer(ask_id, "r1", {"option": "o1"}))["outcome"] == "accepted"
    await acp.wait_text(conv, "notice", UNDELIVERED.format(title="Run call-1"))
    await eventually(lambda: acp.bridge.process is not None and acp.bridge.process is not proc)
    assert selected(acp) == []


async def test_withdrawn_ask_resolves_decided_and_is_answered_cancelled(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "withdraw 0.5")
    [ask_id] = await acp.wait_asks(conv, 1)
    await acp.wait_text(conv, "reply", "chose withdrawn (-32800)")
    await acp.wait_asks(conv, 0)
    result = await acp.answer(ask_id, "r1", {"option": "o1"})
    assert result["outcome"] == "decided"
    assert selected(acp) == []


async def test_a_message_during_a_turn_is_queued_until_it_ends(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    assert (await acp.say(conv, "then this"))["outcome"] == "accepted"
    await asyncio.sleep(0.3)
    assert "you said: then this" not in await acp.texts(conv, "reply")
    prompts = [r for r in acp.log() if r["message"].get("method") == "session/prompt"]
    assert len(prompts) == 1  # ACP runs one prompt at a time: the second waits in the bridge
    await acp.answer(ask_id, "r1", {"option": "o1"})
    await acp.wait_text(conv, "reply", "you said: then this")
    texts = await acp.texts(conv, "reply")
    assert texts.index("chose opt-0") < texts.index("you said: then this")


async def test_A4_over_six_options_the_ask_is_unanswerable(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "permit7")
    await acp.wait_asks(conv, 1)
    card = (await acp.chat(conv))["cards"]["cards"][0]
    assert card["answerable"] is False


async def test_elicitation_form_checked_against_its_schema(acp: Acp) -> None:
    conv = await acp.start()
    await acp.say(conv, "elicit")
    [ask_id] = await acp.wait_asks(conv, 1)
    ask = acp.bridge.agent._open_asks[ask_id].ask
    assert ask.kind == "form"
    assert [(f.id, f.kind, f.label, f.required) for f in ask.fields] == [
        ("f1", "text", "Name", True),
        ("f2", "select", "Size", True),
        ("f3", "text", "Count", False),
        ("f4", "switch", "Gift", False),
    ]
    # Too short for the schema's minLength: refused before anything is forwarded (400).
    with pytest.raises(RequestError) as refused:
        await acp.bridge.agent.command_reply(b"k1", ask_id, _reply("x1", {"f1": "A", "f2": "f2v2"}))
    assert (refused.value.status, refused.value.message) == (400, "Name: at least 2 characters.")
    assert acp.open_asks(conv) == [ask_id]
    # From the phone: refused with the sentence; nothing reached the agent.
    short_answer = await acp.answer(ask_id, "r0", {"fields": {"f1": "A", "f2": "f2v2"}})
    assert short_answer["outcome"] == "refused"
    assert "Name: at least 2 characters." in str(short_answer)
    assert [r for r in acp.responses() if "action" in str(r)] == []
    result = await acp.answer(
        ask_id, "r1", {"fields": {"f1": "Ada", "f2": "f2v2", "f3": "3", "f4": True}}
    )
    assert result["outcome"] == "accepted"
    await acp.wait_text(
        conv,
        "reply",
        'elicited {"action": "accept", "content": {"count": 3, "gift": true, "name": "Ada", '
        '"size": "M"}}',
    )


def _reply(request_id: str, fields: dict[str, str | bool]) -> Reply:
    return Reply(request_id=request_id, version=1, answer=Answer(fields=fields))


async def test_an_oversized_line_is_dropped_with_a_notice_and_the_link_lives(rig: Rig) -> None:
    acp = await acp_rig(rig, max_line=64 * 1024)
    try:
        conv = await acp.start()
        await acp.say(conv, "big 200000")
        await acp.wait_text(conv, "reply", "after")
        assert OVERSIZED.format(limit=64 * 1024) in await acp.texts(conv, "notice")
        assert acp.bridge.process is not None
        assert acp.bridge.epoch == 1  # the same process: nothing restarted
    finally:
        await acp.bridge.close()


async def test_session_load_replay_is_not_shown_twice_and_raises_no_ask(rig: Rig) -> None:
    env = agent_env(rig.tmp, ACP_LOAD="1", ACP_LOAD_PERMIT="1")
    acp = await acp_rig(rig, env=env)
    try:
        hello = acp.gw.mirrors["claude"].hello
        assert hello is not None
        assert "reopen" in hello.features
        conv = await acp.start()
        await acp.say(conv, "first")
        await acp.wait_text(conv, "reply", "you said: first")
        acp.kill()
        await eventually(lambda: acp.bridge.epoch == 2 and acp.bridge.process is not None)
        await acp.say(conv, "second")
        await acp.wait_text(conv, "reply", "you said: second")
        # The replayed "you said: first" is not appended again, and the permission the agent
        # asked during the replay was answered cancelled, never shown.
        assert await acp.texts(conv, "reply") == ["you said: first", "you said: second"]
        assert acp.open_asks(conv) == []
        assert selected(acp) == [{"outcome": "cancelled"}]
        assert any(r["message"].get("method") == "session/load" for r in acp.log())
    finally:
        await acp.bridge.close()


async def test_history_survives_the_bridge_restarting(rig: Rig) -> None:
    acp = await acp_rig(rig)
    conv = await acp.start()
    await acp.say(conv, "keep me")
    await acp.wait_text(conv, "reply", "you said: keep me")
    await rig.stop("claude")
    await acp.bridge.close()
    await eventually(lambda: acp.gw.mirrors["claude"].state is not LinkState.READY)
    again = await acp_rig(rig)
    try:
        assert await again.texts(conv, "reply") == ["you said: keep me"]
        assert again.bridge.epoch == 2
    finally:
        await again.bridge.close()


async def test_the_bridge_dies_after_accepting_an_answer_its_restart_says_so_once(
    rig: Rig,
) -> None:
    acp = await acp_rig(rig)
    conv = await acp.start()
    await acp.say(conv, "permit")
    [ask_id] = await acp.wait_asks(conv, 1)
    proc = acp.bridge.process
    assert proc is not None
    never = asyncio.Event()

    async def stuck(id: object, result: object) -> bool:
        await never.wait()  # the bridge dies before this write
        return False

    proc.respond = stuck  # type: ignore[method-assign]
    assert (await acp.answer(ask_id, "r1", {"option": "o1"}))["outcome"] == "accepted"
    await rig.stop("claude")
    await acp.bridge.close()
    notice = UNDELIVERED.format(title="Run call-1")
    again = await acp_rig(rig)
    try:
        assert (await again.texts(conv, "notice")).count(notice) == 1
        assert selected(again) == []  # the answer went to no process
    finally:
        await again.bridge.close()
    third = await acp_rig(rig)
    try:
        assert (await third.texts(conv, "notice")).count(notice) == 1  # said once
    finally:
        await third.bridge.close()


@pytest.mark.parametrize("declared", [True, False])
async def test_G2_close_sends_session_close_only_when_declared(
    rig: Rig, declared: bool, caplog: pytest.LogCaptureFixture
) -> None:
    extra = {"ACP_CLOSE": "1"} if declared else {}
    acp = await acp_rig(rig, env=agent_env(rig.tmp, **extra))
    try:
        conv = await acp.start()
        await acp.say(conv, "hi")
        await acp.wait_text(conv, "reply", "you said: hi")
        result = await post_json(
            acp.client,
            f"/api/v1/agents/claude/conversations/{conv}/close",
            {"request_id": "close-1"},
        )
        assert result["outcome"] == "accepted"

        def closes() -> list[object]:
            return [r for r in acp.log() if r["message"].get("method") == "session/close"]

        if declared:
            await eventually(lambda: len(closes()) == 1 and acp.bridge.sessions == {})
            assert not [m for m in caplog.messages if "session/close" in m]  # it succeeded
        else:
            await asyncio.sleep(0.3)
            assert closes() == []
    finally:
        await acp.bridge.close()


# --- an agent of the tests' own that misbehaves (not the ACP package) -------------------------

RUDE = [sys.executable, "-m", "fixtures.acp.rude"]


async def test_a_rude_agent_gets_clear_errors_loses_nothing_and_the_link_lives(rig: Rig) -> None:
    """Lines no SDK would send: not JSON, not JSON-RPC, wrong types, no such session or request,
    a method nobody offers, then a process that dies mid-line. Each request is answered with
    its JSON-RPC error, the rest is skipped; the same process goes on, and after the cut a new
    one does, with the chat's earlier replies all there."""
    answers = rig.tmp / "rude.log"
    acp = await acp_rig(rig, env=agent_env(rig.tmp, RUDE_LOG=str(answers)), command=RUDE)
    try:
        conv = await acp.start()
        await acp.say(conv, "garbage")
        await acp.wait_text(conv, "reply", "still here")

        def errors() -> dict[str, int]:
            lines = answers.read_text().splitlines() if answers.exists() else []
            return {m["id"]: m["error"]["code"] for m in map(json.loads, lines)}

        await eventually(lambda: len(errors()) == 2)
        assert errors() == {"p-77": INVALID_PARAMS, "x-78": METHOD_NOT_FOUND}
        assert acp.open_asks(conv) == []  # a permission request it cannot read raises no ask
        assert acp.bridge.epoch == 1  # the same process throughout
        await acp.say(conv, "hello")
        await acp.wait_text(conv, "reply", "you said: hello")

        await acp.say(conv, "cut")  # half a line, then the process exits
        await acp.wait_text(conv, "notice", RESTARTED.format(code=3))
        await eventually(lambda: acp.bridge.epoch == 2 and acp.bridge.process is not None)
        await acp.say(conv, "again")
        await acp.wait_text(conv, "reply", "you said: again")
        replies = await acp.texts(conv, "reply")
        assert replies == [  # "to nobody" (no such session) is nowhere
            "still here",
            "you said: hello",
            "you said: again",
        ]
        assert acp.gw.mirrors["claude"].state is LinkState.READY
    finally:
        await acp.bridge.close()
