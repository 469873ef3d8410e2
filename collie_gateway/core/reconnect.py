"""When a follower of a peer's event stream asks again: one rule for agent links (wire §10)
and crew member links (W1).

After a failure: a capped, jittered backoff that doubles. After a stream that ended without an
error (closed, or ``reset``): at once when it lasted ``timing.stream_stable``, otherwise as a
failure, so a peer that keeps closing its streams is not asked again in a loop. Events do not
count: a peer that sends one event and closes is still a loop. The count starts again after a
stable stream.

Pure: the shell passes its monotonic clock in. Usage: ``r = Reconnect(timing, loop.time)``;
``r.following()`` once the stream is open; then ``await asyncio.sleep(r.ended())`` or
``await asyncio.sleep(r.failed())``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LinkTiming:
    """Timeouts and backoff of an agent link (seconds)."""

    connect: float = 5.0
    request: float = 10.0
    stream_read: float = 45.0  # three missed 15 s pings (wire/SPEC.md, Events)
    backoff_first: float = 0.5
    backoff_cap: float = 30.0
    # ours: a stream (a crew member's, W1; an agent's, wire §10) that ends cleanly sooner than
    # this counts for the backoff, so a peer that keeps closing its streams is not asked in a loop
    stream_stable: float = 10.0
    version_recheck: float = 60.0
    busy_read: float = 0.02  # ours: a delta stream read again within a quarter of this waits it
    # ours: at most this many agent links read their hello and open conversations at once
    # (a gateway starting with thousands of agents would otherwise time its own reads out)
    connecting: int = 64


_JITTER = random.Random()


class Reconnect:
    """The failure count and the delay before asking a peer again."""

    def __init__(
        self, timing: LinkTiming, now: Callable[[], float], rng: random.Random | None = None
    ) -> None:
        self.timing = timing
        self._now = now
        self.failures = 0
        self._rng = rng or _JITTER  # one generator for every link (its state is 2.5 KB)
        self._opened: float | None = None  # loop time the current stream was followed from

    def following(self) -> None:
        """The stream is open and followed from now."""
        self._opened = self._now()

    def stable(self) -> bool:
        """Whether the current stream was followed at least ``timing.stream_stable`` s."""
        opened = self._opened
        limit = self.timing.stream_stable
        return opened is not None and self._now() - opened >= limit

    def clear(self) -> None:
        """Start the count again (the peer answered, e.g. with another wire version)."""
        self.failures = 0
        self._opened = None

    def failed(self) -> float:
        """A failure: the seconds to wait (the first step again after a stable stream)."""
        self.failures = 1 if self.stable() else self.failures + 1
        self._opened = None
        growth = float(2 ** min(self.failures - 1, 16))
        cap = min(self.timing.backoff_cap, self.timing.backoff_first * growth)
        return cap / 2 + self._rng.uniform(0, cap / 2)

    def ended(self) -> float:
        """The stream ended without an error: 0 after a stable stream, else as a failure."""
        if self.stable():
            self.clear()
            return 0.0
        return self.failed()
