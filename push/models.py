"""The data the push package works on: devices, notifications, delivery outcomes. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from push.errors import DeviceGone, ProviderError, PushError, Throttled

ENVELOPE_KEY_BYTES: Final = 32  # AES-256


class Provider(StrEnum):
    """The push service a device token belongs to."""

    APNS = "apns"
    FCM = "fcm"


class Environment(StrEnum):
    """The APNs environment a token was issued in (stored per token)."""

    PRODUCTION = "production"
    SANDBOX = "sandbox"


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """A phone registered for pushes.

    ``id`` is the gateway's id for the registration; it is the envelope's associated data.
    ``registered_at`` is unix seconds of the token's last registration (APNs 410 rule).
    ``key``, when set, is the phone's own 32-byte key: its pushes carry content only
    inside an AES-256-GCM envelope. ``lang`` is the language tag the phone registered its
    pushes in (None: the gateway's default).
    """

    id: str
    provider: Provider
    token: str
    registered_at: float
    environment: Environment = Environment.PRODUCTION
    key: bytes | None = None
    lang: str | None = None

    def __post_init__(self) -> None:
        if self.key is not None and len(self.key) != ENVELOPE_KEY_BYTES:
            raise ValueError(f"a device key has {ENVELOPE_KEY_BYTES} bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class AskNotification:
    """An ask that may push (spec P2): the texts are raw; payloads clean, mask and cut them.

    ``pane_key`` identifies the pane (collapse id); ``pane`` is its name as shown.
    ``deadline`` is the ask's deadline in unix seconds, if it has one. ``push_id``, when
    set, names this push across the sender's runs: it is sent again with the same
    ``apns-id`` per device (``push.payloads.apns_id``).
    """

    machine: str
    agent: str
    conversation: str
    ask: str
    pane_key: str
    pane: str
    title: str | None = None
    line: str | None = None
    deadline: float | None = None
    push_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ManyAsksNotification:
    """The one push "A durable agent on {host} is raising many asks" (spec P1)."""

    machine: str
    agent: str
    host: str
    deadline: float | None = None
    push_id: str | None = None


Notification = AskNotification | ManyAsksNotification


class Outcome(StrEnum):
    """How a push ended."""

    SENT = "sent"
    GONE = "gone"  # the token is gone: remove the device
    THROTTLED = "throttled"  # 429 through every try
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """The outcome of one push to one device, with the provider's ids and reason."""

    device_id: str
    outcome: Outcome
    reason: str | None = None
    status: int | None = None
    provider_id: str | None = None  # apns-id, or the FCM message name
    attempts: int = 0

    @classmethod
    def of(
        cls,
        device: Device,
        outcome: Outcome,
        reason: str | None = None,
        status: int | None = None,
        provider_id: str | None = None,
        attempts: int = 0,
    ) -> Delivery:
        """A delivery to ``device``."""
        return cls(
            device_id=device.id,
            outcome=outcome,
            reason=reason,
            status=status,
            provider_id=provider_id,
            attempts=attempts,
        )

    @property
    def ok(self) -> bool:
        """Whether the service accepted the push."""
        return self.outcome is Outcome.SENT

    def error(self) -> PushError | None:
        """The error matching this outcome, or None when sent."""
        text = self.reason or self.outcome.value
        match self.outcome:
            case Outcome.SENT:
                return None
            case Outcome.GONE:
                return DeviceGone(text)
            case Outcome.THROTTLED:
                return Throttled(text)
            case _:
                return ProviderError(text)

    def raise_for_outcome(self) -> None:
        """Raise the matching error unless sent.

        Raises:
            DeviceGone, Throttled, ProviderError: per the outcome.
        """
        err = self.error()
        if err is not None:
            raise err
