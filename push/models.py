"""The data the push package works on: devices, notifications, delivery outcomes. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from push.errors import DeviceGone, ProviderError, PushError, Throttled

ENVELOPE_KEY_BYTES: Final = 32  # AES-256
P256DH_BYTES: Final = 65  # an uncompressed P-256 point (RFC 8291 §3.1)
AUTH_BYTES: Final = 16  # the authentication secret (RFC 8291 §3.2)


class Provider(StrEnum):
    """The push service a device token belongs to."""

    APNS = "apns"
    FCM = "fcm"
    WEBPUSH = "webpush"  # a browser's push service, or the relay (RFC 8030)


class Urgency(StrEnum):
    """RFC 8030 §5.3: how soon the push service should deliver a message."""

    VERY_LOW = "very-low"
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"


@dataclass(frozen=True, slots=True, kw_only=True)
class WebPushKeys:
    """A Web Push subscription's keys (``PushSubscription.toJSON().keys``, decoded): the
    receiver's P-256 public key and the 16-byte authentication secret."""

    p256dh: bytes
    auth: bytes

    def __post_init__(self) -> None:
        if len(self.p256dh) != P256DH_BYTES or self.p256dh[0] != 0x04:
            raise ValueError(f"p256dh is an uncompressed P-256 point ({P256DH_BYTES} bytes)")
        if len(self.auth) != AUTH_BYTES:
            raise ValueError(f"auth has {AUTH_BYTES} bytes")


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
    pushes in (None: the gateway's default). A Web Push device's ``token`` is its endpoint
    URL and ``webpush`` its subscription's keys.
    """

    id: str
    provider: Provider
    token: str
    registered_at: float
    environment: Environment = Environment.PRODUCTION
    key: bytes | None = None
    lang: str | None = None
    webpush: WebPushKeys | None = None

    def __post_init__(self) -> None:
        if self.key is not None and len(self.key) != ENVELOPE_KEY_BYTES:
            raise ValueError(f"a device key has {ENVELOPE_KEY_BYTES} bytes")
        if (self.provider is Provider.WEBPUSH) != (self.webpush is not None):
            raise ValueError("a webpush device, and only one, has subscription keys")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class PingNotification(ManyAsksNotification):
    """A test notification through the whole path to one device (``push_test``, naming
    ``host``): shaped as the many-asks push, with its own words and type ``test``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NoticeNotification:
    """A notice an agent asked to push (wire ``Item.push``; P1's limits, P2's lengths): its
    ``title`` raw (the agent's, else the notice's text), or ``words`` (a catalogue key and its
    arguments) worded in the device's language when its catalogue has the key; ``line`` raw.
    Payloads clean, mask and cut them. Its collapse id is the pane's notices', apart from its
    asks'."""

    machine: str
    agent: str
    conversation: str
    item: str
    pane_key: str
    pane: str
    title: str
    line: str | None = None
    words: tuple[str, tuple[tuple[str, str], ...]] | None = None
    deadline: float | None = None
    push_id: str | None = None


Notification = AskNotification | ManyAsksNotification | NoticeNotification


@dataclass(frozen=True, slots=True, kw_only=True)
class Withdrawal:
    """Take back the notification of an ask that was answered, decided or expired: a
    silent message naming the ask (APNs background push, FCM data message, Web Push at low
    urgency under the ask's Topic). ``pane_key`` names the notification's collapse id;
    ``push_id`` is the ask push's (its ids derive from it, so a withdrawal sent again by a
    later run has the same ones)."""

    machine: str
    agent: str
    conversation: str
    ask: str
    pane_key: str
    push_id: str | None = None

    @classmethod
    def of(cls, note: AskNotification) -> Withdrawal:
        """The withdrawal of ``note``."""
        return cls(
            machine=note.machine,
            agent=note.agent,
            conversation=note.conversation,
            ask=note.ask,
            pane_key=note.pane_key,
            push_id=note.push_id,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Forwarded:
    """A Web Push message the relay passes on unread: its ``aes128gcm`` body (ciphertext),
    its TTL in seconds, urgency and topic as the sender gave them. High and normal urgency
    alert (APNs mutable-content, FCM high priority); low and very-low are silent, as a
    withdrawal is."""

    body: bytes
    ttl: int
    urgency: Urgency = Urgency.NORMAL
    topic: str | None = None
    message_id: str | None = None  # the relay's id of the message (APNs apns-id: a UUID)

    @property
    def silent(self) -> bool:
        """Whether it is delivered without alerting (a withdrawal)."""
        return self.urgency in (Urgency.LOW, Urgency.VERY_LOW)


#: Everything a sender sends: a notification, a withdrawal, or a relayed message.
Message = Notification | Withdrawal | Forwarded


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
