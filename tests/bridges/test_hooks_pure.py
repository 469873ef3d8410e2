"""The hooks mapping, pure: hook bodies read and checked, answers in the clients' exact JSON,
transcript lines, the settings merge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridges.hooks import mapping, settings
from tests.bridges.hooks_rig import FIXTURES, sample


def hook(name: str, client: str = "claude-code") -> mapping.Hook:
    body = sample(client, name, "s1", Path("/home/ana/src/shop"), Path("/t.jsonl"))
    return mapping.parse(client, json.dumps(body).encode())


def test_every_fixture_parses_and_names_its_version() -> None:
    for name in ("claude-code-2.1.json", "codex-0.171.json"):
        found = json.loads((FIXTURES / name).read_text())
        assert found["version"]
        for event in found["hooks"]:
            client = found["client"]
            assert hook(event, client).session == "s1"


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"\xff", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"session_id": "s"}', "no hook_event_name"),
        (b'{"hook_event_name": "Stop", "session_id": ""}', "no session_id"),
        (b'{"hook_event_name": "UserPromptSubmit", "session_id": "s"}', "without prompt"),
    ],
)
def test_bad_bodies(raw: bytes, said: str) -> None:
    with pytest.raises(mapping.BadHook, match=said):
        mapping.parse("claude-code", raw)


def test_title_and_folder() -> None:
    assert mapping.title("Claude Code", "/home/ana/src/shop") == "Claude Code · shop"
    assert mapping.title("Codex", "/x/shop", "Fix it\nplease") == "Codex · shop · Fix it"
    assert mapping.title("Codex", "") == "Codex"


def test_the_same_call_has_one_key_whatever_the_order() -> None:
    assert mapping.call_key("Bash", {"a": 1, "b": 2}) == mapping.call_key("Bash", {"b": 2, "a": 1})
    assert mapping.call_key("Bash", {"a": 1}) != mapping.call_key("Edit", {"a": 1})


def test_no_answer_is_no_decision() -> None:
    assert mapping.permission_reply(hook("PermissionRequest"), None) == {}
    assert mapping.question_reply(hook("AskUserQuestion"), [["o0"], None]) == {}


def test_a_setmode_suggestion_is_said_on_the_card() -> None:
    body: dict[str, Any] = dict(hook("PermissionRequest").body)
    body["permission_suggestions"] = [{"type": "setMode", "mode": "acceptEdits"}]
    draft = mapping.permission_draft(mapping.parse("claude-code", json.dumps(body).encode()))
    [always] = [o for o in draft.options if o.role == "always"]
    assert always.label == "mode acceptEdits"


def test_transcript_lines_partial_and_broken() -> None:
    lines = mapping.Lines()
    assert lines.feed(b'{"a": 1}\n{"b"') == [{"a": 1}]
    assert lines.feed(b": 2}\nnot json\n[1]\n") == [{"b": 2}]
    assert lines.offset == len(b'{"a": 1}\n{"b": 2}\nnot json\n[1]\n')
    lines.restart()
    assert (lines.offset, lines.feed(b'{"c": 3}\n')) == (0, [{"c": 3}])


def test_transcript_entries() -> None:
    rows = [json.loads(x) for x in (FIXTURES / "transcript.jsonl").read_text().splitlines()]
    found = [e for row in rows for e in mapping.entries(row)]
    assert found == [
        mapping.Said("u-1", "user", "Clean the build and run the tests"),
        mapping.Said("u-2.0", "reply", "I'll remove the build folder first."),
        mapping.ToolUse(
            "toolu_01RmBuild",
            "Bash",
            {"command": "rm -rf build", "description": "Remove the build folder"},
        ),
        mapping.ToolResult("toolu_01RmBuild", "removed 12 files", False),
        mapping.Said("u-4.0", "reply", "The build folder is gone.\nTests next."),
    ]
    assert mapping.entries({"type": "user", "uuid": "m", "isMeta": True, "message": {}}) == []


def test_settings_uninstall_leaves_a_group_shared_with_another_hook() -> None:
    ours = settings.claude_hook("http://127.0.0.1:1/hooks/claude-code", "k", "Stop")
    theirs = {"type": "command", "command": "say done"}
    mixed = {"hooks": {"Stop": [{"hooks": [theirs, ours]}]}}
    assert settings.installed(mixed, "claude-code") == ["Stop"]
    assert settings.secret_in(mixed) == "k"
    assert settings.uninstall(mixed, "claude-code") == {"hooks": {"Stop": [{"hooks": [theirs]}]}}
    with pytest.raises(ValueError, match="not a list"):
        settings.install({"hooks": {"Stop": {}}}, "claude-code", {"Stop": ours})


def test_a_long_argument_is_cut_saying_so() -> None:
    body: dict[str, Any] = dict(hook("PermissionRequest").body)
    body["tool_name"] = "Write"
    body["tool_input"] = {"file_path": "/x/a.txt", "content": "y" * 300_000}
    draft = mapping.permission_draft(mapping.parse("claude-code", json.dumps(body).encode()))
    content = draft.arguments[1].value
    assert len(content) < 20_100
    assert content.endswith("(280000 more characters not kept)")
