"""Spec P3: an ask pushes once per machine, durable agent and tool call, across restarts."""

from __future__ import annotations

from push import once_key


def test_P3_key_is_machine_agent_and_tool_call() -> None:
    a = once_key("m1", "desk", tool_call="call-9", ask="ask-1")
    assert once_key("m1", "desk", tool_call="call-9", ask="ask-2") == a  # same tool call
    assert once_key("m2", "desk", tool_call="call-9", ask="ask-1") != a
    assert once_key("m1", "other", tool_call="call-9", ask="ask-1") != a
    assert once_key("m1", "desk", tool_call="call-8", ask="ask-1") != a


def test_P3_without_a_tool_the_ask_id_is_the_key() -> None:
    k = once_key("m1", "desk", tool_call=None, ask="ask-1")
    assert k == once_key("m1", "desk", tool_call="", ask="ask-1")
    assert k != once_key("m1", "desk", tool_call=None, ask="ask-2")
    assert k != once_key("m1", "desk", tool_call="ask-1", ask="x")  # a tool id never collides


def test_P3_keys_cannot_collide_through_separators() -> None:
    assert once_key("a,b", "c", tool_call="d", ask="x") != once_key(
        "a", "b,c", tool_call="d", ask="x"
    )
    assert once_key('a"', "b", tool_call="c", ask="x") != once_key(
        "a", '"b', tool_call="c", ask="x"
    )
