"""The answer ledger shared by two running workers on PostgreSQL (T1, issue 23): a tap one
worker took and left unsettled (its send got no answer, then the worker died) is known to
the other without a restart — the agent's word settles it there, or a resend there (the new
holder of the agent's lease) reads the ledger and sends it again with its request id, once."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from collie_gateway.core.answers import Outcome
from collie_gateway.services.answering import Answering
from collie_gateway.store.stores import open_stores
from tests.collie_gateway.test_answering_ledger import TAP, Agent, clock


@contextlib.asynccontextmanager
async def worker(url: str) -> AsyncIterator[Answering]:
    """A running worker's ledger (the index read at its start)."""
    stores = await open_stores(Path("unused.db"), url)
    answering = Answering(stores.ledger, clock, shared=stores.shared)
    try:
        await answering.load()
        yield answering
    finally:
        await stores.close()


async def test_T1_a_tap_another_worker_left_pending_is_sent_again_by_a_resend(
    pg_url: str,
) -> None:
    async with worker(pg_url) as first, worker(pg_url) as second:
        lost = await first.tap(TAP, Agent(outcome=None))
        assert lost.outcome is Outcome.UNCERTAIN
        agent = Agent(outcome="accepted")
        # Started before the tap, it reads the agent's unsettled taps from the ledger.
        [result] = await second.resend_pending("desk", agent)
        assert (result.outcome, agent.sent) == (Outcome.ACCEPTED, ["tap-1"])
        await first.refresh()
        assert await first.resend_pending("desk", agent) == []
        assert agent.sent == ["tap-1"]


async def test_T1_the_agents_word_settles_a_tap_another_worker_took(pg_url: str) -> None:
    async with worker(pg_url) as first, worker(pg_url) as second:
        await first.tap(TAP, Agent(outcome=None))
        assert second.may_settle("desk", "a1", "tap-1")
        settled = await second.settle_accepted("desk", "a1", "tap-1")
        assert settled is not None
        assert settled.outcome is Outcome.ACCEPTED
        assert await second.settle_accepted("desk", "a1", "tap-1") is None
        record = await first.lookup("tap-1")
        assert record is not None
        assert (record.settled, record.outcome) == (True, Outcome.ACCEPTED)
        assert await second.settle_accepted("desk", "a2", "phone-2") is None
