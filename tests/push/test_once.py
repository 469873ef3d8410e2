"""Spec P3: an ask pushes once per machine, durable agent and tool call, across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import pytest

from push import SqliteOnce, once_key


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


async def test_P3_first_time_once_then_never(tmp_db: Path) -> None:
    async with aiosqlite.connect(tmp_db) as db:
        once = await SqliteOnce.create(db)
        key = once_key("m1", "desk", tool_call="call-1", ask="ask-1")
        assert await once.first_time(key) is True
        assert await once.first_time(key) is False
        assert await once.first_time(once_key("m1", "desk", tool_call="call-2", ask="ask-1"))


async def test_P3_an_ask_raised_again_after_a_gateway_restart_does_not_push(tmp_db: Path) -> None:
    key = once_key("m1", "desk", tool_call="call-1", ask="ask-1")
    async with aiosqlite.connect(tmp_db) as db:
        assert await (await SqliteOnce.create(db)).first_time(key)
    async with aiosqlite.connect(tmp_db) as db:  # the gateway restarted
        assert not await (await SqliteOnce.create(db)).first_time(key)


async def test_P3_racing_callers_get_true_once(tmp_db: Path) -> None:
    async with aiosqlite.connect(tmp_db) as db:
        once = await SqliteOnce.create(db)
        results = await asyncio.gather(*(once.first_time("k") for _ in range(20)))
    assert results.count(True) == 1


async def test_forget_before(tmp_db: Path) -> None:
    async with aiosqlite.connect(tmp_db) as db:
        once = await SqliteOnce.create(db, table="once_v1")
        await once.first_time("old", now=100.0)
        await once.first_time("new", now=200.0)
        assert await once.forget_before(150.0) == 1
        assert await once.first_time("old", now=300.0)
        assert not await once.first_time("new", now=300.0)


def test_table_name_is_checked() -> None:
    with pytest.raises(ValueError, match="table"):
        SqliteOnce(None, table="x; DROP TABLE y")  # type: ignore[arg-type]
