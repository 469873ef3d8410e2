"""The retry policy the senders share: capped, jittered backoff honouring Retry-After, and the
one loop of tries the APNs, FCM and Web Push senders run with it. No I/O of its own: the
sleep and the random numbers are passed in."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from push.models import Delivery, Device, Outcome

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


@dataclass(frozen=True, slots=True)
class Again:
    """A try that failed in a way another try may mend: why, the HTTP ``status`` if one came
    and the server's Retry-After in seconds. ``resend``: a credential was renewed, so the
    request goes again at once and does not count as a try."""

    reason: str
    status: int | None = None
    retry_after: float | None = None
    resend: bool = False


GiveUp = Callable[[Outcome, Again], Delivery]


@dataclass(frozen=True, slots=True)
class Tries:
    """Runs a sender's tries under ``policy``; ``name`` is the sender's in ``log``'s lines."""

    name: str
    log: logging.Logger
    policy: RetryPolicy
    sleep: Callable[[float], Awaitable[None]]
    rng: Callable[[], float]

    async def run(
        self, device: Device, attempt: Callable[[], Awaitable[Delivery | Again]], give_up: GiveUp
    ) -> Delivery:
        """Try until ``attempt`` returns a delivery or the policy stops; then ``give_up``
        says what the last failure was (THROTTLED after a 429, else FAILED)."""
        tries = 0
        while True:
            result = await attempt()
            if isinstance(result, Delivery):
                return result
            if result.resend:
                continue
            tries += 1
            delay = self.policy.delay(tries, result.retry_after, self.rng)
            if delay is None:
                outcome = Outcome.THROTTLED if result.status == 429 else Outcome.FAILED
                return give_up(outcome, result)
            reason = result.reason
            self.log.debug(
                "%s retry device=%s after %s in %.2fs", self.name, device.id, reason, delay
            )
            await self.sleep(delay)
