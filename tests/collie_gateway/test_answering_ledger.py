"""The answer ledger across a restart, on a real SQLite file (T1, issue 16).

Memory holds only an index of the ledger's unsettled taps; these tests close the store and
open it again (as a restart does) and check that what the ledger promises still happens:
the agent's word settles a tap left pending, a pending tap is sent again with its request id,
and a settled one is never sent again. And the store's small transactions, committed on the
event loop's own connection, reach the database file itself (checkpointed), not only its WAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collie_gateway.core.answers import Outcome, Tap
from collie_gateway.errors import AgentUnreachable
from collie_gateway.services.answering import Answering
from collie_gateway.store.database import CHECKPOINT_EVERY, Database
from collie_gateway.store.ledger import LedgerRepo


def clock() -> datetime:
    return datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


TAP = Tap("tap-1", "desk", "a1", 1, b'{"option":"allow"}')


@contextlib.asynccontextmanager
async def ledger(path: Path) -> AsyncIterator[Answering]:
    """The gateway's ledger on ``path``, as a run opens it (index read from the file)."""
    store = await Database.open(path)
    answering = Answering(LedgerRepo(store), clock)
    try:
        await answering.load()
        yield answering
    finally:
        await store.close()


class Agent:
    """Stands for the agent's reply endpoint: counts each send of each request id."""

    def __init__(self, outcome: str | None) -> None:
        self.outcome = outcome  # None: the answer never comes back
        self.sent: list[str] = []

    async def __call__(self, tap: Tap) -> tuple[str, str | None]:
        self.sent.append(tap.request_id)
        if self.outcome is None:
            raise AgentUnreachable("no answer came back")
        return self.outcome, None


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    """A gateway file left by a run that sent tap-1 and never learnt its outcome."""
    db = tmp_path / "gateway.db"
    async with ledger(db) as run:
        result = await run.tap(TAP, Agent(outcome=None))
        assert result.outcome is Outcome.UNCERTAIN
    assert stored(db, "tap-1") == (0, "uncertain")
    return db


def stored(path: Path, request_id: str) -> tuple[int, str | None]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        row = conn.execute(
            "SELECT settled, outcome FROM answers WHERE request_id = ?", (request_id,)
        ).fetchone()
    return int(row[0]), row[1]


async def test_T1_a_tap_left_pending_is_settled_by_the_agents_word_after_a_restart(
    db: Path,
) -> None:
    async with ledger(db) as second:  # a new run: the index comes from the file
        assert second.may_settle("desk", "a1", "tap-1")
        # The agent's ask.resolved (answered, tap-1) arrives on the new run's link.
        settled = await second.settle_accepted("desk", "a1", "tap-1")
        assert settled is not None
        assert settled.outcome is Outcome.ACCEPTED
        assert not second.may_settle("desk", "a1", "tap-1")
        again = Agent(outcome="accepted")
        assert await second.resend_pending("desk", again) == []
        assert again.sent == []  # settled by the agent's word: never sent again
    assert stored(db, "tap-1") == (1, "accepted")


async def test_T1_a_pending_tap_is_sent_again_once_with_its_request_id_after_a_restart(
    db: Path,
) -> None:
    async with ledger(db) as second:
        agent = Agent(outcome="accepted")
        [result] = await second.resend_pending("desk", agent)
        assert result.outcome is Outcome.ACCEPTED
        assert agent.sent == ["tap-1"]
        assert await second.resend_pending("desk", agent) == []
        assert agent.sent == ["tap-1"]
    async with ledger(db) as third:  # and it stays settled in the run after
        agent = Agent(outcome="accepted")
        assert await third.resend_pending("desk", agent) == []
        retry = await third.tap(TAP, agent)  # the phone's Retry: the ledger answers
        assert retry.outcome is Outcome.ACCEPTED
        assert agent.sent == []


async def test_T1_the_agents_word_for_an_unknown_or_other_tap_settles_nothing(
    db: Path,
) -> None:
    async with ledger(db) as answering:
        # Answered straight at the agent (another request id), or naming tap-1 on another ask.
        assert await answering.settle_accepted("desk", "a1", "phone-2") is None
        assert await answering.settle_accepted("desk", "a2", "tap-1") is None
        assert await answering.settle_accepted("other", "a1", "tap-1") is None
    assert stored(db, "tap-1") == (0, "uncertain")


async def test_the_loops_small_transactions_are_checkpointed_into_the_database_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "gateway.db"
    store = await Database.open(db)
    try:
        for n in range(CHECKPOINT_EVERY):

            def put(conn: sqlite3.Connection, key: str = f"k{n}") -> None:
                conn.execute("INSERT INTO kv(key, value) VALUES (?, ?)", (key, b"v"))

            await store.run(put)
        checkpoint = store._checkpoint
        assert checkpoint is not None  # started by the last commit
        async with asyncio.timeout(10):
            await checkpoint
        # ``immutable=1`` reads the database file alone, never its WAL.
        with contextlib.closing(sqlite3.connect(f"file:{db}?immutable=1", uri=True)) as conn:
            (count,) = conn.execute("SELECT count(*) FROM kv").fetchone()
        assert count == CHECKPOINT_EVERY
    finally:
        await store.close()
