"""The hooks bridge driven with the JSON Claude Code and Codex send (fixtures/hooks/), a real
gateway following it, the person answering through the phone API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from bridges.hooks import mapping
from tests.bridges.hooks_rig import FIXTURES, Hooks, running, start_bridge
from tests.collie_gateway.conftest import ClientFactory

DENY: dict[str, object] = {"behavior": "deny", "message": mapping.DENIED}


def decision(value: dict[str, object]) -> dict[str, object]:
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": value}}


@pytest.fixture
async def hooks(aiohttp_client: ClientFactory) -> AsyncIterator[Hooks]:
    async with running(aiohttp_client) as found:
        yield found


async def test_S1_permission_card_allowed_on_the_phone(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(conv, ask)] = await hooks.wait_asks(1)
    handle = hooks.bridge.agent._open_asks[ask]
    assert handle.ask.kind == "permission"
    assert handle.ask.title == "Claude Code · Bash: rm -rf build"
    assert [(a.name, a.value) for a in handle.ask.arguments] == [
        ("command", "rm -rf build"),
        ("description", "Remove the build folder"),
    ]
    assert handle.ask.reasons == ["Remove the build folder"]
    assert [o.role for o in handle.ask.options] == ["allow", "always", "deny"]
    assert [o.label for o in handle.ask.options] == ["", "Bash(rm -rf build)", ""]
    snapshot, _ = await hooks.bridge.agent.read_conversation(conv)
    assert snapshot is not None
    assert (snapshot.title, snapshot.workspace) == (
        "Claude Code · shop",
        str(hooks.rig.tmp / "shop"),
    )
    assert not held.done()
    assert (await hooks.answer(ask, {"option": "allow"}))["outcome"] == "accepted"
    assert await asyncio.wait_for(held, 10) == (200, decision({"behavior": "allow"}))


async def test_permission_denied_on_the_phone(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(_, ask)] = await hooks.wait_asks(1)
    await hooks.answer(ask, {"option": "deny"})
    assert await asyncio.wait_for(held, 10) == (200, decision(DENY))


async def test_always_allow_answers_with_the_suggestions_for_the_session(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(_, ask)] = await hooks.wait_asks(1)
    await hooks.answer(ask, {"option": "always", "confirmed": True})
    rule = {"toolName": "Bash", "ruleContent": "rm -rf build"}
    kept = {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": "session"}
    expected = decision({"behavior": "allow", "updatedPermissions": [kept]})
    assert await asyncio.wait_for(held, 10) == (200, expected)


async def test_no_suggestions_no_always(hooks: Hooks) -> None:
    body = hooks.body("PermissionRequest")
    del body["permission_suggestions"]
    hooks.hold(body)
    [(_, ask)] = await hooks.wait_asks(1)
    assert [o.role for o in hooks.bridge.agent._open_asks[ask].ask.options] == ["allow", "deny"]


async def test_ask_user_question_is_choice_cards_answered_through_updated_input(
    hooks: Hooks,
) -> None:
    body = hooks.body("AskUserQuestion")
    held = hooks.hold(body)
    asks = await hooks.wait_asks(2)
    handles = [hooks.bridge.agent._open_asks[a] for _, a in asks]
    by_title = {h.ask.title: h for h in handles}
    db = by_title["Which database should the shop use?"]
    checks = by_title["Which checks should run?"]
    assert (db.ask.kind, db.ask.multiple) == ("choice", False)
    assert checks.ask.multiple is True
    assert [o.label for o in checks.ask.options] == ["ruff", "mypy", "pytest"]
    await hooks.answer(db.id, {"option": "o1"}, request_id="q1")
    assert not held.done()
    await hooks.answer(checks.id, {"options": ["o0", "o2"]}, request_id="q2")
    answers = {
        "Which database should the shop use?": "PostgreSQL",
        "Which checks should run?": "ruff, pytest",
    }
    updated = {**body["tool_input"], "answers": answers}
    expected = decision({"behavior": "allow", "updatedInput": updated})
    assert await asyncio.wait_for(held, 10) == (200, expected)


async def test_the_same_question_asked_again_is_the_same_card(hooks: Hooks) -> None:
    first = hooks.hold(hooks.body("PermissionRequest"))
    [(_, ask)] = await hooks.wait_asks(1)
    second = hooks.hold(hooks.body("PermissionRequest"))
    await asyncio.sleep(0.3)
    assert hooks.open_asks() == [(hooks.conv_id(), ask)]
    await hooks.answer(ask, {"option": "allow"})
    allowed = (200, decision({"behavior": "allow"}))
    assert await asyncio.wait_for(first, 10) == allowed
    assert await asyncio.wait_for(second, 10) == allowed


@pytest.mark.parametrize("then", ["PostToolUse", "UserPromptSubmit", "Stop", "SessionEnd"])
async def test_the_desk_answering_first_ends_the_card_decided(hooks: Hooks, then: str) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(conv, ask)] = await hooks.wait_asks(1)
    assert await hooks.post(hooks.body(then)) == (200, {})
    assert await asyncio.wait_for(held, 5) == (200, {})  # no decision: the desk decided
    assert hooks.open_asks() == [] or then == "SessionEnd"
    await hooks.wait_asks(0)
    late = await hooks.answer(ask, {"option": "allow"}, request_id="late")
    assert late["outcome"] == "decided"
    assert mapping.DESK_FIRST.format(client="Claude Code") in await hooks.texts(conv, "notice")


async def test_the_tools_result_in_the_transcript_ends_the_card(hooks: Hooks) -> None:
    transcript = hooks.rig.tmp / "s1.jsonl"
    all_lines = (FIXTURES / "transcript.jsonl").read_text().splitlines(keepends=True)
    transcript.write_text("".join(all_lines[:3]))
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(conv, _ask)] = await hooks.wait_asks(1)
    with transcript.open("a") as f:
        f.write(all_lines[3])
    assert await asyncio.wait_for(held, 5) == (200, {})
    await hooks.wait_asks(0)
    tools = [i for i in await hooks.items(conv) if i["kind"] == "tool"]
    assert [(t["name"], t["status"], t["output"]) for t in tools] == [
        ("Bash", "done", "removed 12 files")
    ]


async def test_a_transcript_growing_while_the_phone_watches(hooks: Hooks) -> None:
    transcript = hooks.rig.tmp / "s1.jsonl"
    lines = (FIXTURES / "transcript.jsonl").read_text().splitlines(keepends=True)
    transcript.write_text(lines[0] + lines[1][:30])  # a partial line: waited for
    assert await hooks.post(hooks.body("UserPromptSubmit")) == (200, {})
    conv = hooks.conv_id()
    await asyncio.sleep(0.2)
    assert await hooks.texts(conv, "user") == []
    with transcript.open("a") as f:
        f.write(lines[1][30:] + lines[2])
    await hooks.wait_text(conv, "user", "Clean the build and run the tests")
    await hooks.wait_text(conv, "reply", "I'll remove the build folder first.")
    with transcript.open("a") as f:
        f.writelines(lines[3:])
    await hooks.wait_text(conv, "reply", "The build folder is gone.\nTests next.")
    transcript.write_text("".join(lines))  # rewritten whole (compacted): nothing twice
    transcript.write_text("".join(lines[:2]))
    await asyncio.sleep(0.3)
    kinds = [i["kind"] for i in await hooks.items(conv)]
    assert kinds == ["user", "reply", "tool", "reply"]
    snapshot, _ = await hooks.bridge.agent.read_conversation(conv)
    assert snapshot is not None
    assert snapshot.title == "Claude Code · shop · Clean the build and run the tests"


async def test_two_sessions_at_once(hooks: Hooks) -> None:
    one = hooks.hold(hooks.body("PermissionRequest", session="s1"))
    two = hooks.hold(hooks.body("PermissionRequest", session="s2"))
    asks = dict(await hooks.wait_asks(2))
    assert len(hooks.bridge.sessions) == 2
    await hooks.answer(asks[hooks.conv_id("s2")], {"option": "deny"}, request_id="a2")
    assert await asyncio.wait_for(two, 10) == (200, decision(DENY))
    assert not one.done()
    await hooks.answer(asks[hooks.conv_id("s1")], {"option": "allow"}, request_id="a1")
    assert await asyncio.wait_for(one, 10) == (200, decision({"behavior": "allow"}))


async def test_a_phone_message_is_given_at_the_next_stop(hooks: Hooks) -> None:
    assert await hooks.post(hooks.body("UserPromptSubmit")) == (200, {})
    conv = hooks.conv_id()
    assert (await hooks.say(conv, "Also update the changelog"))["outcome"] == "accepted"
    await hooks.wait_text(conv, "notice", mapping.QUEUED.format(client="Claude Code"))
    expected = {"decision": "block", "reason": "Also update the changelog"}
    assert await hooks.post(hooks.body("Stop")) == (200, expected)
    assert mapping.SENT.format(client="Claude Code") in await hooks.texts(conv, "notice")
    assert await hooks.post(hooks.body("Stop")) == (200, {})  # given once


async def test_session_end_closes_the_conversation(hooks: Hooks) -> None:
    assert await hooks.post(hooks.body("UserPromptSubmit")) == (200, {})
    conv = hooks.conv_id()
    assert await hooks.post(hooks.body("SessionEnd")) == (200, {})
    found = await hooks.bridge.agent.conversation(conv)
    assert found is not None
    assert found.closed
    assert "s1" not in hooks.bridge.sessions


async def test_notification_says_it_is_waiting(hooks: Hooks) -> None:
    assert await hooks.post(hooks.body("Notification")) == (200, {})
    said = mapping.WAITING.format(client="Claude Code", folder="shop")
    assert said in await hooks.texts(hooks.conv_id(), "notice")


async def test_codex_permission_in_its_vocabulary(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest", client="codex"), client="codex")
    [(conv, ask)] = await hooks.wait_asks(1)
    assert conv.startswith("codex-")
    assert hooks.bridge.agent._open_asks[ask].ask.title.startswith("Codex · Bash:")
    await hooks.answer(ask, {"option": "allow"})
    assert await asyncio.wait_for(held, 10) == (200, decision({"behavior": "allow"}))


async def test_bad_inputs_are_refused_and_the_rest_goes_on(
    hooks: Hooks, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridges.hooks.bridge")
    body = hooks.body("PermissionRequest")
    assert (await hooks.post(b"not json"))[0] == 400
    assert (await hooks.post({"hook_event_name": "Stop"}))[0] == 400
    assert (await hooks.post({**body, "tool_input": None}))[0] == 400
    missing = {k: v for k, v in body.items() if k != "tool_name"}
    assert (await hooks.post(missing))[0] == 400
    big = {**body, "tool_input": {"command": "x" * 5_000_000}}
    status, _ = await hooks.post(big)
    assert status == 413
    assert (await hooks.post(body, secret=""))[0] == 401
    assert (await hooks.post(body, secret="guessed"))[0] == 401
    assert (await hooks.post(body, client="codex", secret="secret-of-claude"))[0] == 401
    refused = [r.getMessage() for r in caplog.records if "hook refused" in r.getMessage()]
    assert len(refused) == 8
    assert hooks.open_asks() == []
    held = hooks.hold(body)
    [(_, ask)] = await hooks.wait_asks(1)
    await hooks.answer(ask, {"option": "allow"})
    assert (await asyncio.wait_for(held, 10))[0] == 200


async def test_the_held_request_dropped_ends_the_card(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(conv, _)] = await hooks.wait_asks(1)
    held.cancel()  # the hook timed out: Claude Code closes the connection
    await hooks.wait_asks(0)
    gone = "Claude Code stopped waiting for this card (the session ended or the hook timed out)."
    await hooks.wait_text(conv, "notice", gone)


async def test_a_restart_drops_held_requests_and_their_cards_end_decided(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest"))
    [(conv, ask)] = await hooks.wait_asks(1)
    await hooks.rig.stop("claude-code")
    await hooks.bridge.close()
    assert await asyncio.wait_for(held, 5) == (200, {})  # no decision: the desk asks
    hooks.bridge = await start_bridge(hooks.rig)
    await hooks.wait_asks(0)
    restarted = mapping.RESTARTED.format(client="Claude Code")
    await hooks.wait_text(conv, "notice", restarted)
    late = await hooks.answer(ask, {"option": "allow"}, request_id="late")
    assert late["outcome"] == "decided"
    again = hooks.hold(hooks.body("PermissionRequest"))  # the session goes on, same chat
    [(conv2, ask2)] = await hooks.wait_asks(1)
    assert conv2 == conv
    assert ask2 != ask
    await hooks.answer(ask2, {"option": "deny"}, request_id="again")
    assert await asyncio.wait_for(again, 10) == (200, decision(DENY))


async def test_a_permission_prompt_notification_is_not_said_while_its_card_shows(
    hooks: Hooks,
) -> None:
    hooks.hold(hooks.body("PermissionRequest"))
    [(conv, _)] = await hooks.wait_asks(1)
    body = {**hooks.body("Notification"), "notification_type": "permission_prompt"}
    assert await hooks.post(body) == (200, {})
    assert await hooks.texts(conv, "notice") == []


async def test_codex_gets_the_queued_message_at_its_stop(hooks: Hooks) -> None:
    held = hooks.hold(hooks.body("PermissionRequest", client="codex"), client="codex")
    [(conv, _)] = await hooks.wait_asks(1)
    await hooks.say(conv, "Then run the linter")
    await hooks.wait_text(conv, "notice", mapping.QUEUED.format(client="Codex"))
    stop = hooks.body("Stop", client="codex")
    expected = {"decision": "block", "reason": "Then run the linter"}
    assert await hooks.post(stop, client="codex") == (200, expected)
    assert await asyncio.wait_for(held, 5) == (200, {})  # the Stop: Codex went on without it
