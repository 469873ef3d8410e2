"""Push health: each provider's last success and last failure with its reason, so a silent
outage shows in a minute, not in months. Pure: times are passed in; the state is bytes to
store (it survives a restart).

Only the provider's own verdicts count: a device whose token is gone is the device's fault,
not the provider's, and counts as a success of the path (the provider answered).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

from push.models import Delivery, Outcome, Provider

VERSION: Final = 1
CANCELLED: Final = "cancelled"  # a push cut short by a stop says nothing about the provider


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment and, for a failure, why."""

    at: float
    reason: str | None = None


@dataclass(slots=True)
class ProviderHealth:
    """One provider's last success and last failure."""

    last_success: Mark | None = None
    last_failure: Mark | None = None
    ok: bool | None = None  # whether the latest verdict was a success (None: none yet)


@dataclass(slots=True)
class PushHealth:
    """Every provider's health.

    Usage::

        health = PushHealth.from_state(saved) if saved else PushHealth()
        health.record(Provider.APNS, delivery, time.time())
        save(health.to_state())
    """

    providers: dict[Provider, ProviderHealth] = field(default_factory=dict)

    def record(self, provider: Provider, delivery: Delivery, now: float) -> bool:
        """Note a delivery's verdict; whether anything changed (a cancelled push is none)."""
        if delivery.reason == CANCELLED:
            return False
        entry = self.providers.setdefault(provider, ProviderHealth())
        entry.ok = delivery.outcome in (Outcome.SENT, Outcome.GONE)
        if entry.ok:
            entry.last_success = Mark(now)
        else:
            entry.last_failure = Mark(now, delivery.reason or delivery.outcome.value)
        return True

    def report(self, configured: list[Provider]) -> dict[str, object]:
        """What ``GET /api/v1/push/health`` shows: every configured provider (in order) and
        any other with a verdict, each with ``ok``, ``last_success`` and ``last_failure``."""
        names = [*configured, *(p for p in self.providers if p not in configured)]
        out: dict[str, object] = {}
        for provider in names:
            entry = self.providers.get(provider, ProviderHealth())
            out[provider.value] = {
                "configured": provider in configured,
                "ok": entry.ok,
                "last_success": _mark(entry.last_success),
                "last_failure": _mark(entry.last_failure),
            }
        return out

    def to_state(self) -> bytes:
        """The state to store."""
        body = {
            p.value: [_mark(h.last_success), _mark(h.last_failure), h.ok]
            for p, h in self.providers.items()
        }
        return json.dumps({"v": VERSION, "providers": body}, sort_keys=True).encode()

    @classmethod
    def from_state(cls, state: bytes) -> PushHealth:
        """The health stored by :meth:`to_state`.

        Raises:
            ValueError: not such a state.
        """
        try:
            obj = json.loads(state)
            if obj["v"] != VERSION:
                raise ValueError(f"version {obj['v']}")
            providers = {
                Provider(name): ProviderHealth(_unmark(row[0]), _unmark(row[1]), _verdict(row[2]))
                for name, row in obj["providers"].items()
            }
        except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a push health state: {exc}") from None
        return cls(providers)


def _mark(mark: Mark | None) -> dict[str, object] | None:
    if mark is None:
        return None
    return {"at": mark.at} if mark.reason is None else {"at": mark.at, "reason": mark.reason}


def _verdict(obj: object) -> bool | None:
    if obj is not None and not isinstance(obj, bool):
        raise TypeError("a verdict is true, false or null")
    return obj


def _unmark(obj: object) -> Mark | None:
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("at"), int | float):
        raise TypeError("a mark is {at, reason?}")
    reason = obj.get("reason")
    return Mark(float(obj["at"]), reason if isinstance(reason, str) else None)
