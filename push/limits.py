"""The push limits of spec P1 as a pure state machine: no I/O, no clock (``now`` is passed in).

Windows: a push sent at ``s`` counts against a window of length W at time ``now`` while
``now - s < W``; so the window is the half-open interval ``(now - W, now]`` and a push stops
counting exactly W after it was sent (at ``s + 60.000`` s it no longer counts). Only pushes
that were sent count (Send and Summary); an ask that stayed quiet counts nowhere.
Times are kept in integer milliseconds, so edges are exact to the millisecond.

Checks, in order, for one ask:
1. the agent is silenced (a Summary went out less than an hour ago) -> Quiet(AGENT_SILENCED);
2. the pane sent 3 pushes in the last minute                        -> Quiet(PANE_MINUTE);
3. the agent sent 10 pushes in the last minute                      -> Quiet(AGENT_MINUTE);
4. the agent sent 30 pushes in the last hour -> Summary, and silence for an hour from now;
5. otherwise                                                        -> Send.
A Summary is itself a push: it counts in the pane's and the agent's windows. So in any
half-open minute a pane has at most 3 pushes and an agent at most 10, and in any half-open
hour an agent has at most 30 Sends plus one Summary.

``now`` must be wall-clock unix seconds (``time.time()``), since the state outlives the
process (``to_state`` / ``from_state``). A clock stepped back keeps the pushes it saw
counted until it catches up: the error is toward fewer pushes, never more.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

PER_PANE_PER_MINUTE: Final = 3  # spec P1
PER_AGENT_PER_MINUTE: Final = 10  # spec P1
PER_AGENT_PER_HOUR: Final = 30  # spec P1
MINUTE_MS: Final = 60_000
HOUR_MS: Final = 3_600_000  # also the silence after a Summary (spec P1)
STATE_VERSION: Final = 1


class QuietReason(StrEnum):
    """Why an ask shows without a push."""

    PANE_MINUTE = "pane_minute"
    AGENT_MINUTE = "agent_minute"
    AGENT_SILENCED = "agent_silenced"


@dataclass(frozen=True, slots=True)
class Send:
    """Push the ask."""


@dataclass(frozen=True, slots=True)
class Quiet:
    """Show the ask with no push."""

    reason: QuietReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Push the string ``key`` with ``host`` instead of the ask; the agent is silent until
    ``until`` (unix seconds)."""

    host: str
    until: float
    key: str = "push_many"


Decision = Send | Quiet | Summary

SEND: Final = Send()
_QUIET_PANE: Final = Quiet(QuietReason.PANE_MINUTE)
_QUIET_AGENT: Final = Quiet(QuietReason.AGENT_MINUTE)
_QUIET_SILENCED: Final = Quiet(QuietReason.AGENT_SILENCED)


class _Agent:
    __slots__ = ("hour", "minute", "silenced_until")

    def __init__(self) -> None:
        self.minute: deque[int] = deque()
        self.hour: deque[int] = deque()
        self.silenced_until = 0


def _expire(times: deque[int], horizon: int) -> None:
    while times and times[0] <= horizon:
        times.popleft()


class PushLimiter:
    """Decides, per ask, whether it pushes (spec P1). Keys are opaque strings: a pane key
    must be unique across machines and agents; an agent key names one durable agent on one
    machine.

    Usage::

        limiter = PushLimiter.from_state(saved) if saved else PushLimiter()
        decision = limiter.decide(pane_key, agent_key, host, time.time())
        if not isinstance(decision, Quiet):
            save(limiter.to_state())        # the state changed; persist it
    """

    def __init__(
        self,
        *,
        per_pane_minute: int = PER_PANE_PER_MINUTE,
        per_agent_minute: int = PER_AGENT_PER_MINUTE,
        per_agent_hour: int = PER_AGENT_PER_HOUR,
    ) -> None:
        self._pane_max = per_pane_minute
        self._minute_max = per_agent_minute
        self._hour_max = per_agent_hour
        self._panes: dict[str, deque[int]] = {}
        self._agents: dict[str, _Agent] = {}

    def decide(self, pane_key: str, agent_key: str, host: str, now: float) -> Decision:
        """The decision for one ask raised at ``now``; records it when it pushes."""
        t = round(now * 1000)
        agent = self._agents.get(agent_key)
        if agent is None:
            agent = self._agents[agent_key] = _Agent()
        elif t < agent.silenced_until:
            return _QUIET_SILENCED
        pane = self._panes.get(pane_key)
        if pane is None:
            pane = self._panes[pane_key] = deque()
        else:
            _expire(pane, t - MINUTE_MS)
            if len(pane) >= self._pane_max:
                return _QUIET_PANE
        minute = agent.minute
        _expire(minute, t - MINUTE_MS)
        if len(minute) >= self._minute_max:
            return _QUIET_AGENT
        hour = agent.hour
        _expire(hour, t - HOUR_MS)
        pane.append(t)
        minute.append(t)
        hour.append(t)
        if len(hour) > self._hour_max:
            agent.silenced_until = t + HOUR_MS
            return Summary(host=host, until=agent.silenced_until / 1000)
        return SEND

    def prune(self, now: float) -> None:
        """Forget panes and agents with nothing left in their windows."""
        t = round(now * 1000)
        for key, pane in list(self._panes.items()):
            _expire(pane, t - MINUTE_MS)
            if not pane:
                del self._panes[key]
        for key, agent in list(self._agents.items()):
            _expire(agent.minute, t - MINUTE_MS)
            _expire(agent.hour, t - HOUR_MS)
            if not agent.hour and not agent.minute and t >= agent.silenced_until:
                del self._agents[key]

    def to_state(self, now: float | None = None) -> bytes:
        """The state as JSON bytes, to persist; pruned first when ``now`` is given."""
        if now is not None:
            self.prune(now)
        state = {
            "v": STATE_VERSION,
            "panes": {k: list(q) for k, q in self._panes.items() if q},
            "agents": {
                k: {
                    "minute": list(a.minute),
                    "hour": list(a.hour),
                    "silenced_until": a.silenced_until,
                }
                for k, a in self._agents.items()
            },
        }
        return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_state(
        cls,
        data: bytes | str,
        *,
        per_pane_minute: int = PER_PANE_PER_MINUTE,
        per_agent_minute: int = PER_AGENT_PER_MINUTE,
        per_agent_hour: int = PER_AGENT_PER_HOUR,
    ) -> PushLimiter:
        """A limiter restored from ``to_state``'s bytes.

        Raises:
            ValueError: the data is not a state of this version.
        """
        limiter = cls(
            per_pane_minute=per_pane_minute,
            per_agent_minute=per_agent_minute,
            per_agent_hour=per_agent_hour,
        )
        try:
            state = json.loads(data)
            if state["v"] != STATE_VERSION:
                raise ValueError(f"limiter state version {state['v']!r}")
            for key, times in state["panes"].items():
                limiter._panes[str(key)] = deque(_times(times))
            for key, raw in state["agents"].items():
                agent = _Agent()
                agent.minute = deque(_times(raw["minute"]))
                agent.hour = deque(_times(raw["hour"]))
                silenced = raw["silenced_until"]
                if type(silenced) is not int:
                    raise ValueError("silenced_until is not an integer")
                agent.silenced_until = silenced
                limiter._agents[str(key)] = agent
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"malformed limiter state: {exc}") from None
        return limiter


def _times(raw: object) -> list[int]:
    if not isinstance(raw, list) or not all(type(x) is int for x in raw):
        raise ValueError("times must be a list of integers")
    return sorted(raw)
