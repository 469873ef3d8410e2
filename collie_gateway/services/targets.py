"""Where pushes go: senders per provider and webhook targets, built once the loop runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from push import Content, Provider, PushSender, WebhookTarget


@dataclass(frozen=True, slots=True)
class PushTargets:
    """Where pushes go: senders per provider, and webhook targets (S6)."""

    senders: Mapping[Provider, PushSender] = field(default_factory=dict)
    webhooks: Sequence[WebhookTarget] = ()


#: Builds the targets once the event loop runs (clients open sessions).
TargetsFactory = Callable[[Content], PushTargets]
