"""Notifications beyond the first push: withdrawals when an ask closes, webhooks owed across
a stop, and push health. Used by the push service (``services/pushing.py``).

Withdrawal: when an ask is answered (anywhere), decided or expired, every device that was sent
its push gets a silent message naming it (``push.Withdrawal``), once per device, never counted
against P1; a push delivered after its ask closed is withdrawn from that device too.
Webhooks: a delivery is kept in the store until the receiver took it (or refused it for
good); the next run sends what a stop or a crash cut short, once, under the same id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Final

from collie_gateway.store.protocols import NotifyStore
from collie_gateway.store.values import HEALTH_KEY, OwedWebhook
from push import (
    AskNotification,
    Delivery,
    Device,
    Dispatcher,
    PushHealth,
    WebhookTarget,
    Withdrawal,
)

log = logging.getLogger(__name__)

NOTIFIED_FOR: Final = 7 * 86400.0  # ours: an ask pushed this long ago is withdrawn no more
Clock = Callable[[], datetime]
#: Reports one withdrawal's delivery: (delivery, the withdrawal, the device's registration).
OnWithdrawn = Callable[[Delivery, Withdrawal, float | None], Awaitable[None]]


def withdrawal_note(note: AskNotification) -> bytes:
    """What the store keeps of an ask push to withdraw it later."""
    return json.dumps(asdict(Withdrawal.of(note)), sort_keys=True).encode()


class Withdrawals:
    """Which asks were pushed to a device, and their withdrawal when they close."""

    def __init__(
        self, repo: NotifyStore, dispatcher: Dispatcher, clock: Clock, report: OnWithdrawn
    ) -> None:
        self.repo = repo
        self.dispatcher = dispatcher
        self.clock = clock
        self.report = report
        self.notified: set[str] = set()  # once keys sent to a device, not yet withdrawn
        self.closed: set[str] = set()  # once keys whose ask closed in this run

    async def load(self) -> None:
        """The asks pushed in earlier runs that may still close."""
        since = self.clock().timestamp() - NOTIFIED_FOR
        self.notified = await self.repo.notified(since)

    def pushed(self, key: str) -> None:
        """A device was sent the push of ``key``'s ask."""
        self.notified.add(key)

    async def ask_closed(self, key: str) -> int:
        """The ask closed: withdraw its push from every device sent it; how many."""
        self.closed.add(key)
        if key not in self.notified:
            return 0
        self.notified.discard(key)
        return await self._send(key, None)

    async def sent_late(self, key: str, device: str) -> int:
        """A push reached ``device`` after its ask closed (it was on its way): withdraw it."""
        if key not in self.closed:
            return 0
        return await self._send(key, device)

    async def _send(self, key: str, device: str | None) -> int:
        due = await self.repo.due(key, self.clock().timestamp(), device)
        if due is None:
            return 0
        try:
            note = Withdrawal(**json.loads(due.note))
        except (ValueError, TypeError):
            log.warning("stored withdrawal of %s unreadable", key)
            return 0
        registered = {d.id: d.registered_at for d in due.devices}

        async def delivered(delivery: Delivery) -> None:
            at = self.clock().timestamp()
            await self.repo.withdrawn(key, delivery.device_id, delivery.outcome.value, at)
            await self.report(delivery, note, registered.get(delivery.device_id))

        return self.dispatcher.dispatch(due.devices, note, on_delivery=delivered)


def lasting_webhook(status: int | None, ok: bool) -> bool:
    """Whether a webhook delivery is done: taken (2xx), or refused for good (4xx but 429)."""
    return ok or (status is not None and 400 <= status < 500 and status != 429)


class OwedWebhooks:
    """Webhook deliveries kept until taken, and sent again by the next run."""

    def __init__(self, repo: NotifyStore, clock: Clock) -> None:
        self.repo = repo
        self.clock = clock
        self.tasks: set[asyncio.Task[None]] = set()

    async def post(
        self, hook: WebhookTarget, hook_id: str, body: bytes, *, stored: bool = False
    ) -> tuple[bool, str | None]:
        """Post (kept owed in the store first, unless it already is); whether it was taken,
        and why not."""
        owed = OwedWebhook(hook_id, hook.url, body)
        if not stored:
            await self.repo.owe_webhook(owed, self.clock().timestamp())
        result = await hook.post(body, webhook_id=hook_id)
        if lasting_webhook(result.status, result.ok):
            await self.repo.webhook_done(hook_id, hook.url)
        return result.ok, result.reason

    async def resend(self, hooks: Sequence[WebhookTarget]) -> None:
        """Send every delivery owed from an earlier run, once, under its own id."""
        by_url = {hook.url: hook for hook in hooks}
        for owed in await self.repo.owed_webhooks():
            hook = by_url.get(owed.url)
            if hook is None:
                continue  # a target no longer configured: kept, in case it comes back
            task = asyncio.create_task(self._resend(hook, owed), name="webhook-owed")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _resend(self, hook: WebhookTarget, owed: OwedWebhook) -> None:
        try:
            ok, reason = await self.post(hook, owed.id, owed.body, stored=True)
            log.info("webhook %s owed from before: %s (%s)", owed.id, ok, reason)
        except Exception:
            log.exception("webhook %s owed from before failed", owed.id)


class Health:
    """Push health (``push.PushHealth``), kept in the store after each change."""

    def __init__(self, repo: NotifyStore, clock: Clock) -> None:
        self.repo = repo
        self.clock = clock
        self.state = PushHealth()

    async def load(self) -> None:
        """The health stored by an earlier run."""
        raw = await self.repo.kv.get(HEALTH_KEY)
        if raw is not None:
            try:
                self.state = PushHealth.from_state(raw)
            except ValueError:
                log.warning("stored push health unreadable; starting afresh")

    async def record(self, devices: Sequence[Device], delivery: Delivery) -> None:
        """Note a delivery to one of ``devices``."""
        provider = next((d.provider for d in devices if d.id == delivery.device_id), None)
        if provider is None:
            return
        if self.state.record(provider, delivery, self.clock().timestamp()):
            await self.repo.kv.put(HEALTH_KEY, self.state.to_state())
