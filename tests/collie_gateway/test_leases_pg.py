"""Agent leases on PostgreSQL (issue 23, ``store/pg/leases.py``): one holder per agent, an
epoch that fences writes, expiry on the database's clock. Each worker here is its own pool
on the test's own database, as separate gateway processes would be."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from collie_gateway.store.kv import KvRepo as PgKvRepo
from collie_gateway.store.pg.database import PgDatabase
from collie_gateway.store.pg.leases import Leases, StaleEpoch
from collie_gateway.store.values import Lease


@contextlib.asynccontextmanager
async def worker(url: str, name: str, seconds: float = 5.0) -> AsyncIterator[Leases]:
    db = await PgDatabase.open(url)
    try:
        yield Leases(db, name, seconds)
    finally:
        await db.close()


async def write(leases: Leases, lease: Lease, value: bytes) -> None:
    """A write made as the agent's holder (a kv row stands for it)."""
    async with leases.fenced(lease) as conn:
        await conn.execute(
            "INSERT INTO kv(key, value) VALUES ('desk', %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (value,),
        )


async def test_one_holder_per_agent_among_three_workers_racing(pg_url: str) -> None:
    async with worker(pg_url, "w1") as w1, worker(pg_url, "w2") as w2, worker(pg_url, "w3") as w3:
        agents = [f"agent-{n}" for n in range(20)]
        taken = await asyncio.gather(*(w.take(a) for a in agents for w in (w1, w2, w3)))
        held = [lease for lease in taken if lease is not None]
        assert sorted(lease.agent for lease in held) == sorted(agents)
        assert {lease.epoch for lease in held} == {1}
        by_name = {"w1": w1, "w2": w2, "w3": w3}
        assert [await by_name[lease.holder].renew(lease) for lease in held] == [True] * 20
        assert not await w1.renew(Lease("agent-0", "w1", 2))  # an epoch never given


async def test_an_expired_lease_is_taken_with_a_new_epoch_and_fences_the_old_holder(
    pg_url: str,
) -> None:
    async with worker(pg_url, "w1", seconds=0.3) as w1, worker(pg_url, "w2") as w2:
        first = await w1.take("desk")
        assert first == Lease("desk", "w1", 1)
        assert await w2.take("desk") is None
        await write(w1, first, b"w1")
        await asyncio.sleep(0.4)  # w1 paused past its lease time (the database's clock)
        second = await w2.take("desk")
        assert second == Lease("desk", "w2", 2)
        assert not await w1.renew(first)  # w1 must drop the agent now
        with pytest.raises(StaleEpoch, match="agent desk: epoch 1 no longer holds"):
            await write(w1, first, b"w1 late")
        await write(w2, second, b"w2")
        assert await PgKvRepo(w2.db).get("desk") == b"w2"


async def test_a_lease_given_back_is_taken_at_once(pg_url: str) -> None:
    async with worker(pg_url, "w1") as w1, worker(pg_url, "w2") as w2:
        first = await w1.take("desk")
        assert first is not None
        await w1.give_back(first)
        assert await w2.take("desk") == Lease("desk", "w2", 2)
        assert await w1.take("desk") is None


async def test_the_mirror_flush_of_a_worker_that_lost_the_lease_writes_nothing(
    pg_url: str,
) -> None:
    from collie_gateway.core.mirror import LinkState
    from collie_gateway.store.mirrors import MirrorsRepo as PgMirrorsRepo

    async with worker(pg_url, "w1") as w1:
        repo = PgMirrorsRepo(w1.db)
        held: dict[str, int] = {}
        repo.fence = held.get
        [mirror] = (await repo.load_mirrors(["desk"])).values()
        lease = await w1.take("desk")
        assert lease is not None
        held["desk"] = lease.epoch
        mirror.state, mirror.last_event_id = LinkState.READY, "7"
        repo.mark("desk")
        await repo.flush()
        [again] = (await PgMirrorsRepo(w1.db).load_mirrors(["desk"])).values()
        assert again.last_event_id == "7"
        await w1.give_back(lease)  # another worker may take it now: this one is fenced off
        mirror.last_event_id = "8"
        repo.mark("desk")
        await repo.flush()
        [stale] = (await PgMirrorsRepo(w1.db).load_mirrors(["desk"])).values()
        assert stale.last_event_id == "7"


async def test_a_lease_taken_over_says_who_gave_it_back_and_heartbeats_are_surveyed(
    pg_url: str,
) -> None:
    from collie_gateway.store.values import WORKER_ROW, Taken

    async with worker(pg_url, "w1", seconds=0.3) as w1, worker(pg_url, "w2") as w2:
        first = await w1.take_over("desk")
        assert first == Taken(Lease("desk", "w1", 1), None)  # nobody held it before
        await w1.give_back(first.lease)
        assert await w2.take_over("desk") == Taken(Lease("desk", "w2", 2), "w1")
        await asyncio.sleep(0.4)  # w2's lease is 5 s: still its own
        assert await w1.take_over("desk") is None
        await w1.heartbeat()
        await w2.heartbeat()
        rows = {h.name: (h.holder, h.epoch) for h in await w2.survey()}
        assert rows == {
            "desk": ("w2", 2),
            WORKER_ROW + "w1": ("w1", 1),
            WORKER_ROW + "w2": ("w2", 1),
        }
        await asyncio.sleep(0.4)  # w1's heartbeat (0.3 s) ran out; w2 quits
        await w2.quit()
        assert [h.name for h in await w1.survey()] == ["desk"]
        taken = await w1.take_over("ran-out")
        assert taken is not None
        await asyncio.sleep(0.4)
        assert await w2.take_over("ran-out") == Taken(Lease("ran-out", "w2", 2), None)
