"""Where pushes go: senders per provider and webhook targets, built once the loop runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric import ec

from push import Content, Provider, PushSender, WebhookTarget

#: Builds the Web Push sender from the gateway's VAPID key (kept in its store).
WebPushFactory = Callable[[ec.EllipticCurvePrivateKey], PushSender]


@dataclass(frozen=True, slots=True)
class PushTargets:
    """Where pushes go: senders per provider, webhook targets (S6), and how the Web Push
    sender is built (None: with the defaults, trusting the system's CAs)."""

    senders: Mapping[Provider, PushSender] = field(default_factory=dict)
    webhooks: Sequence[WebhookTarget] = ()
    webpush: WebPushFactory | None = None


#: Builds the targets once the event loop runs (clients open sessions).
TargetsFactory = Callable[[Content], PushTargets]
