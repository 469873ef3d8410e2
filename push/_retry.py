"""The retry policy the senders share: capped, jittered backoff honouring Retry-After. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

_DELTA = re.compile(r"[0-9]{1,10}", re.ASCII)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """At most ``max_tries`` tries; before try n+1 wait ``min(cap, base * 2**(n-1))``
    scaled by a jitter in [0.5, 1), or the server's Retry-After when it gives one.

    A Retry-After longer than ``max_retry_after`` ends the tries at once: a push waits
    a bounded time or not at all.

    Usage: ``RetryPolicy(max_tries=3, base=0.5, cap=8.0)``.
    """

    max_tries: int = 3
    base: float = 0.5
    cap: float = 8.0
    max_retry_after: float = 30.0

    def delay(
        self, tries: int, retry_after: float | None, rng: Callable[[], float]
    ) -> float | None:
        """Seconds to wait after ``tries`` tries, or None to stop trying."""
        if tries >= self.max_tries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        backoff = min(self.cap, self.base * 2.0 ** (tries - 1))
        return backoff * (0.5 + rng() / 2)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds from ``now`` named by a Retry-After header (delta-seconds or HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    if _DELTA.fullmatch(value):
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)
