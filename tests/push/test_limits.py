"""Spec P1 limits: each edge exactly, the hour's summary, restarts, and hypothesis."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from push import PushLimiter, Quiet, QuietReason, Send, Summary
from push.limits import Decision

T = 1_700_000_000.123  # not a whole second: edges must still be exact
HOST = "studio"
PANE_QUIET = Quiet(QuietReason.PANE_MINUTE)
AGENT_QUIET = Quiet(QuietReason.AGENT_MINUTE)
SILENCED = Quiet(QuietReason.AGENT_SILENCED)


def test_P1_pane_3rd_push_in_a_minute_sends_the_4th_does_not() -> None:
    lim = PushLimiter()
    assert [lim.decide("p", "a", HOST, T + i) for i in range(3)] == [Send()] * 3
    assert lim.decide("p", "a", HOST, T + 3) == PANE_QUIET
    assert lim.decide("p", "a", HOST, T + 59.999) == PANE_QUIET
    assert lim.decide("p", "a", HOST, T + 60.000) == Send()  # the first push left the window
    assert lim.decide("p", "a", HOST, T + 60.999) == PANE_QUIET
    assert lim.decide("p", "a", HOST, T + 61.000) == Send()


def test_P1_pane_limit_is_per_pane() -> None:
    lim = PushLimiter()
    for i in range(3):
        lim.decide("p1", "a", HOST, T + i)
    assert lim.decide("p2", "a", HOST, T + 3) == Send()


def test_P1_agent_10th_push_in_a_minute_sends_the_11th_does_not() -> None:
    lim = PushLimiter()
    panes = [f"p{i}" for i in range(11)]
    assert [lim.decide(panes[i], "a", HOST, T + i) for i in range(10)] == [Send()] * 10
    assert lim.decide(panes[10], "a", HOST, T + 10) == AGENT_QUIET
    assert lim.decide(panes[10], "a", HOST, T + 59.999) == AGENT_QUIET
    assert lim.decide(panes[10], "a", HOST, T + 60) == Send()
    assert lim.decide("other", "b", HOST, T + 30) == Send()  # another agent is unaffected


def _thirty(lim: PushLimiter, agent: str = "a") -> float:
    """Thirty pushes in 3 minutes from fresh panes; the time of the last."""
    t = T
    for i in range(30):
        t = T + (i // 10) * 60 + (i % 10)
        assert lim.decide(f"{agent}-p{i}", agent, HOST, t) == Send()
    return t


def test_P1_31st_in_an_hour_pushes_the_summary_then_an_hour_of_silence() -> None:
    lim = PushLimiter()
    _thirty(lim)
    t31 = T + 1800
    decision = lim.decide("fresh", "a", HOST, t31)
    assert decision == Summary(host=HOST, until=round((t31 + 3600) * 1000) / 1000)
    assert isinstance(decision, Summary)
    assert decision.key == "push_many"
    assert lim.decide("fresh2", "a", HOST, t31 + 1) == SILENCED
    assert lim.decide("fresh3", "a", HOST, t31 + 3599.999) == SILENCED
    assert lim.decide("fresh4", "a", HOST, t31 + 3600) == Send()
    assert lim.decide("other", "b", HOST, t31 + 1) == Send()  # another agent is unaffected


def test_P1_hour_edge_is_exact() -> None:
    lim = PushLimiter()
    _thirty(lim)
    # The first push at T leaves the hour at T + 3600.000 exactly.
    assert isinstance(lim.decide("q", "a", HOST, T + 3599.999), Summary)
    lim2 = PushLimiter()
    _thirty(lim2)
    assert lim2.decide("q", "a", HOST, T + 3600.000) == Send()


def test_P1_summary_waits_for_the_minute_limits_and_counts_as_a_push() -> None:
    lim = PushLimiter()
    _thirty(lim)  # the last ten in the minute starting T + 120
    assert lim.decide("late", "a", HOST, T + 121) == AGENT_QUIET
    summary = lim.decide("late", "a", HOST, T + 180)
    assert isinstance(summary, Summary)
    state = json.loads(lim.to_state())
    assert len(state["agents"]["a"]["hour"]) == 31  # the summary is the 31st push
    assert state["panes"]["late"] == [round((T + 180) * 1000)]


def test_P1_quiet_asks_do_not_count() -> None:
    lim = PushLimiter()
    for i in range(3):
        lim.decide("p", "a", HOST, T + i)
    for i in range(100):
        assert lim.decide("p", "a", HOST, T + 3 + i * 0.1) == PANE_QUIET
    assert [lim.decide(f"q{i}", "a", HOST, T + 20 + i) for i in range(7)] == [Send()] * 7


def test_P1_restart_keeps_the_hour_and_the_silence() -> None:
    lim = PushLimiter()
    _thirty(lim)
    restored = PushLimiter.from_state(lim.to_state())
    assert isinstance(restored.decide("fresh", "a", HOST, T + 1800), Summary)
    again = PushLimiter.from_state(restored.to_state(T + 1801))
    assert again.decide("fresh2", "a", HOST, T + 1801) == SILENCED
    assert again.decide("fresh2", "a", HOST, T + 5400) == Send()


def test_P1_restart_keeps_the_minute() -> None:
    lim = PushLimiter()
    for i in range(3):
        lim.decide("p", "a", HOST, T + i)
    restored = PushLimiter.from_state(lim.to_state())
    assert restored.decide("p", "a", HOST, T + 59.999) == PANE_QUIET
    assert restored.decide("p", "a", HOST, T + 60) == Send()


def test_prune_forgets_only_what_left_every_window() -> None:
    lim = PushLimiter()
    lim.decide("p", "a", HOST, T)
    lim.prune(T + 60)
    assert b'"p"' not in lim.to_state()  # the pane's minute is over
    assert b'"a"' in lim.to_state()  # the agent's hour is not
    lim.prune(T + 3600)
    assert lim.to_state() == b'{"v":1,"panes":{},"agents":{}}'


def test_a_clock_stepped_back_errs_toward_fewer_pushes() -> None:
    lim = PushLimiter()
    for i in range(3):
        lim.decide("p", "a", HOST, T + i)
    assert lim.decide("p", "a", HOST, T - 3600) == PANE_QUIET


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"v":2,"panes":{},"agents":{}}',
        b'{"v":1,"panes":[],"agents":{}}',
        b'{"v":1,"panes":{"p":[1.5]},"agents":{}}',
        b'{"v":1,"panes":{},"agents":{"a":{"minute":[],"hour":[]}}}',
        b'{"v":1,"panes":{},"agents":{"a":{"minute":[],"hour":[],"silenced_until":"x"}}}',
        b"\xff",
    ],
)
def test_malformed_state_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="malformed limiter state"):
        PushLimiter.from_state(data)


# --- hypothesis --------------------------------------------------------------------------------


@dataclass
class Model:
    """P1 by brute force: count the recorded pushes in each window."""

    pushes: list[tuple[int, str, str, bool]] = field(default_factory=list)
    silenced_until: dict[str, int] = field(default_factory=dict)

    def decide(self, pane: str, agent: str, t: int) -> Decision:
        if t < self.silenced_until.get(agent, -1):
            return SILENCED
        self.pushes = [x for x in self.pushes if t - x[0] < 3_600_000]

        def count(window: int, *, pane_: str | None = None) -> int:
            return sum(
                1
                for (s, p, a, _) in self.pushes
                if t - s < window and (p == pane_ if pane_ else a == agent)
            )

        if count(60_000, pane_=pane) >= 3:
            return PANE_QUIET
        if count(60_000) >= 10:
            return AGENT_QUIET
        if count(3_600_000) >= 30:
            self.silenced_until[agent] = t + 3_600_000
            self.pushes.append((t, pane, agent, True))
            return Summary(host=HOST, until=(t + 3_600_000) / 1000)
        self.pushes.append((t, pane, agent, False))
        return Send()


def _gap(k: int) -> int:
    """Milliseconds between asks: mostly short (so the limits bind), some at the edges,
    a few an hour long."""
    if k < 750:
        return [0, 1, 7, 250, 999, 1_000][k % 6]
    if k < 950:
        return [1_500, 2_000, 3_000][k % 3]
    if k < 995:
        return [30_000, 59_999, 60_000, 60_001][k % 4]
    return [600_000, 3_599_999, 3_600_000][k % 3]


steps = st.lists(
    st.tuples(
        st.integers(0, 999).map(_gap),
        st.integers(0, 4),  # pane within the agent
        st.integers(0, 2),  # agent
    ),
    min_size=50,
    max_size=400,
)


@settings(max_examples=200, deadline=None)
@given(steps=steps, agents=st.integers(1, 3), restart_at=st.integers(0, 400))
def test_P1_hypothesis_matches_the_model_and_never_exceeds_the_limits(
    steps: list[tuple[int, int, int]], agents: int, restart_at: int
) -> None:
    lim, model = PushLimiter(), Model()
    t = 1_700_000_000_000
    sent: dict[str, list[tuple[int, str, bool]]] = {}
    for i, (dt_ms, pane_i, agent_i) in enumerate(steps):
        if i == restart_at:
            lim = PushLimiter.from_state(lim.to_state(t / 1000))
        t += dt_ms
        agent = f"a{agent_i % agents}"
        pane = f"{agent}/p{pane_i}"
        got = lim.decide(pane, agent, HOST, t / 1000)
        assert got == model.decide(pane, agent, t)
        event(type(got).__name__ if not isinstance(got, Quiet) else got.reason.value)
        if not isinstance(got, Quiet):
            sent.setdefault(agent, []).append((t, pane, isinstance(got, Summary)))
    for pushes in sent.values():
        times = [s for s, _, _ in pushes]
        sends = [s for s, _, summary in pushes if not summary]
        summaries = [s for s, _, summary in pushes if summary]
        assert all(b - a >= 60_000 for a, b in zip(times, times[10:], strict=False))
        assert all(b - a >= 3_600_000 for a, b in zip(sends, sends[30:], strict=False))
        assert all(b - a >= 3_600_000 for a, b in itertools.pairwise(summaries))
        for pane in {p for _, p, _ in pushes}:
            mine = [s for s, p, _ in pushes if p == pane]
            assert all(b - a >= 60_000 for a, b in zip(mine, mine[3:], strict=False))
