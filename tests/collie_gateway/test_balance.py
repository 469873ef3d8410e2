"""The balance of leases among workers (``core/balance.py``): each worker's own plan, from the
same survey, brings N workers to at most ⌈A/N⌉ agents each, every agent followed."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.core.balance import Plan, plan, share

AGENTS = [f"agent-{n:02}" for n in range(30)]


def rounds(
    workers: list[str],
    holders: dict[str, str],
    rng: random.Random,
    agents: list[str] = AGENTS,
    times: int = 6,
) -> dict[str, str]:
    """Workers taking turns in a random order, each applying its plan at once (a take of a
    lease held by then fails), as the leases table would."""
    holders = dict(holders)
    for _ in range(times):
        for me in rng.sample(workers, len(workers)):
            p = plan(me, workers, agents, holders)
            for agent in p.give_back:
                del holders[agent]
            for agent in p.take:
                holders.setdefault(agent, me)
    return holders


def counts(holders: dict[str, str], workers: list[str]) -> list[int]:
    return sorted(sum(1 for h in holders.values() if h == w) for w in workers)


def test_the_share_is_the_ceiling() -> None:
    assert [share(30, n) for n in (1, 2, 3, 4, 7)] == [30, 15, 10, 8, 5]
    assert share(0, 3) == 0
    assert share(5, 0) == 5  # no live worker seen yet: this one alone


def test_one_worker_alone_takes_every_agent() -> None:
    assert sorted(plan("w1", [], AGENTS, {}).take) == AGENTS
    assert plan("w1", ["w1"], AGENTS, {a: "w1" for a in AGENTS}) == Plan()


def test_a_worker_joining_gets_its_share_by_hand_over() -> None:
    everything = {a: "w1" for a in AGENTS}
    p = plan("w1", ["w1", "w2", "w3"], AGENTS, everything)
    assert p.give_back == tuple(AGENTS[10:])
    assert p.take == ()
    assert plan("w2", ["w1", "w2", "w3"], AGENTS, everything) == Plan()  # nothing free yet
    settled = rounds(["w1", "w2", "w3"], everything, random.Random(1))
    assert counts(settled, ["w1", "w2", "w3"]) == [10, 10, 10]
    assert sorted(a for a, h in settled.items() if h == "w1") == AGENTS[:10]  # w1 kept its own


def test_a_worker_leaving_has_its_agents_spread_over_the_rest() -> None:
    holders = {a: f"w{n % 3 + 1}" for n, a in enumerate(AGENTS)}
    gone = {a: h for a, h in holders.items() if h != "w3"}  # w3 died: its leases ran out
    settled = rounds(["w1", "w2"], gone, random.Random(2))
    assert counts(settled, ["w1", "w2"]) == [15, 15]
    moved = [a for a in AGENTS if holders[a] != "w3" and settled[a] != holders[a]]
    assert moved == []  # only the dead worker's agents moved


def test_leases_of_a_worker_not_live_are_left_to_run_out() -> None:
    holders = {a: "dead" for a in AGENTS[:10]}
    p = plan("w1", ["w1", "w2"], AGENTS, holders)
    assert not set(p.take) & set(AGENTS[:10])
    assert len(p.take) == 15


@given(
    st.integers(1, 6),
    st.integers(0, 40),
    st.lists(st.integers(0, 7), max_size=40),
    st.randoms(use_true_random=False),
)
def test_any_start_settles_within_the_share_and_every_agent_is_followed(
    n: int, a: int, owners: list[int], rng: random.Random
) -> None:
    workers = [f"w{i}" for i in range(n)]
    agents = AGENTS[: min(a, 30)]
    holders = {
        agent: f"w{owner}" for agent, owner in zip(agents, owners, strict=False) if owner < n
    }
    for me in workers:  # no plan takes a worker past its share
        p = plan(me, workers, agents, holders)
        mine = sum(1 for h in holders.values() if h == me)
        assert mine + len(p.take) <= max(mine, share(len(agents), n))
        assert not (p.take and p.give_back)
    settled = rounds(workers, holders, rng, agents)
    assert sorted(settled) == sorted(agents)
    assert max(counts(settled, workers)) <= share(len(agents), n)
