"""Push, wired into the gateway: devices, presence, once per ask, limits, the delivery log.

An ask raised by an agent may push (spec P1–P3): once per machine, agent and tool call; not
while a phone shows that conversation; within the limits, whose state is stored so a restart
does not reset the hour. Sending happens in the background: a push never fails or delays an ask.
Every decision and delivery is logged in SQLite and visible in the phone API.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from collie_gateway.views.text import TITLE_LIMIT, clean
from push import (
    AskNotification,
    Content,
    Delivery,
    Device,
    Dispatcher,
    Environment,
    ManyAsksNotification,
    Notification,
    Outcome,
    Provider,
    PushLimiter,
    PushSender,
    Quiet,
    Summary,
    WebhookTarget,
    once_key,
    valid_apns_token,
)
from wire.messages import Ask

if TYPE_CHECKING:
    from collie_gateway.gateway import Gateway

log = logging.getLogger(__name__)

PRESENCE_TTL = timedelta(seconds=45)  # ours: a screen not confirmed for this long is stale
LOG_KEPT = 10_000  # ours: delivery log rows kept


@dataclass(frozen=True, slots=True)
class PushTargets:
    """Where pushes go: senders per provider, and webhook targets (S6)."""

    senders: Mapping[Provider, PushSender] = field(default_factory=dict)
    webhooks: Sequence[WebhookTarget] = ()


#: Builds the targets once the event loop runs (clients open sessions).
TargetsFactory = Callable[[Content], PushTargets]


class DeviceIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/devices``: register (or refresh) a phone's token.

    Attributes:
        provider: `apns` or `fcm`.
        token: The provider's push token for this phone.
        environment: `production` or `sandbox` (APNs only).
        key: Optional: 32 bytes, base64, to encrypt push content for this device (private content).
    """

    provider: Provider
    token: str
    environment: Environment = Environment.PRODUCTION
    key: str | None = None  # base64 of the phone's own 32-byte key: private content


class PresenceIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/presence``: the screen a phone's stream shows (refreshes it).

    Attributes:
        stream_id: The live stream's id (its `stream` event).
        screen: What the phone shows, e.g. `chat:desk:c1`; null: nothing the gateway cares about.
    """

    stream_id: str
    screen: str | None = None


class DeviceError(ValueError):
    """A device registration the gateway refuses (the message says why)."""


@dataclass(slots=True)
class Presence:
    """What one live stream says its phone shows, until when that is believed."""

    screen: str | None
    fresh_until: datetime


class Pushing:
    """The gateway's push service."""

    def __init__(self, gateway: Gateway, targets: PushTargets) -> None:
        self.gw = gateway
        self.targets = targets
        self.machine = gateway.settings.machine
        self.limiter = PushLimiter()
        self.presence: dict[str, Presence] = {}
        self._dispatchers: set[Dispatcher] = set()

    @classmethod
    async def open(cls, gateway: Gateway, factory: TargetsFactory | None) -> Pushing:
        """The service, with the limiter's stored state (P1 survives a restart)."""
        content = Content(strings=gateway.settings.catalogue, redact=gateway.redact)
        targets = factory(content) if factory is not None else PushTargets()
        service = cls(gateway, targets)
        async with gateway.store.db.execute(
            "SELECT value FROM kv WHERE key = 'push_limiter'"
        ) as cur:
            row = await cur.fetchone()
        if row is not None:
            try:
                service.limiter = PushLimiter.from_state(bytes(row[0]))
            except ValueError:
                log.warning("stored push limiter state unreadable; starting afresh")
        return service

    async def close(self) -> None:
        """Let pending pushes finish (briefly), then close the senders."""
        for dispatcher in list(self._dispatchers):
            await dispatcher.aclose(grace=2.0)
        for sender in self.targets.senders.values():
            await sender.aclose()
        for hook in self.targets.webhooks:
            await hook.aclose()

    # --- devices -------------------------------------------------------------------------

    async def register(self, body: DeviceIn) -> str:
        """Register or refresh a token; the device id (the same for the same token).

        Raises:
            DeviceError: a malformed token or key.
        """
        token = body.token.strip()
        if not token or len(token) > 4096:
            raise DeviceError("the token is empty or too long")
        if body.provider is Provider.APNS and not valid_apns_token(token):
            raise DeviceError("an APNs token is 64 or more hexadecimal digits")
        key: bytes | None = None
        if body.key is not None:
            try:
                key = base64.b64decode(body.key, validate=True)
            except (binascii.Error, ValueError):
                raise DeviceError("the key is not base64") from None
            if len(key) != 32:
                raise DeviceError("the key must be 32 bytes (AES-256)")
        now = self.gw.settings.clock().timestamp()
        async with self.gw.store.transaction() as db:
            async with db.execute(
                "SELECT id FROM devices WHERE provider = ? AND token = ?",
                (body.provider.value, token),
            ) as cur:
                row = await cur.fetchone()
            device_id = str(row[0]) if row else "d-" + secrets.token_hex(8)
            await db.execute(
                "INSERT INTO devices(id, provider, token, environment, key, registered_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                " environment=excluded.environment, key=excluded.key,"
                " registered_at=excluded.registered_at",
                (device_id, body.provider.value, token, body.environment.value, key, now),
            )
        return device_id

    async def remove(self, device_id: str) -> bool:
        """Forget a device; whether it was registered."""
        async with self.gw.store.transaction() as db:
            cur = await db.execute("DELETE FROM devices WHERE id = ?", (device_id,))
            removed = cur.rowcount > 0
            await cur.close()
        return removed

    async def _remove_gone(self, device_id: str, registered_at: float | None) -> bool:
        """Forget a device whose token is gone, unless it registered again since the push."""
        if registered_at is None:
            return await self.remove(device_id)
        async with self.gw.store.transaction() as db:
            cur = await db.execute(
                "DELETE FROM devices WHERE id = ? AND registered_at <= ?",
                (device_id, registered_at),
            )
            removed = cur.rowcount > 0
            await cur.close()
        return removed

    async def devices(self) -> list[Device]:
        """Every registered device."""
        async with self.gw.store.db.execute(
            "SELECT id, provider, token, environment, key, registered_at FROM devices"
            " ORDER BY registered_at"
        ) as cur:
            rows = await cur.fetchall()
        return [
            Device(
                id=str(r[0]),
                provider=Provider(str(r[1])),
                token=str(r[2]),
                environment=Environment(str(r[3])),
                key=bytes(r[4]) if r[4] is not None else None,
                registered_at=float(r[5]),
            )
            for r in rows
        ]

    # --- presence ------------------------------------------------------------------------

    def stream_opened(self, stream_id: str, screen: str | None) -> None:
        """A phone's live stream opened, showing ``screen`` (e.g. ``chat:desk:c1``)."""
        self.presence[stream_id] = Presence(screen, self.gw.settings.clock() + PRESENCE_TTL)

    def stream_closed(self, stream_id: str) -> None:
        """A phone's live stream closed."""
        self.presence.pop(stream_id, None)

    def confirm(self, body: PresenceIn) -> bool:
        """A phone says which screen its stream shows now; whether the stream is known."""
        entry = self.presence.get(body.stream_id)
        if entry is None:
            return False
        entry.screen = body.screen
        entry.fresh_until = self.gw.settings.clock() + PRESENCE_TTL
        return True

    def showing(self, agent: str, conversation: str) -> bool:
        """Whether a phone shows this chat now. Stale or unknown presence counts as not
        showing (fail open: it never swallows a push)."""
        screen = f"chat:{agent}:{conversation}"
        now = self.gw.settings.clock()
        return any(p.screen == screen and p.fresh_until > now for p in self.presence.values())

    # --- asks -----------------------------------------------------------------------------

    async def ask_raised(
        self, agent: str, ask: Ask, pane: str | None, *, from_snapshot: bool = False
    ) -> None:
        """Decide and send the push for one raised ask; never raises. ``from_snapshot``: the
        ask was found open in a snapshot (raised while the gateway was away); one already
        pushed is then passed over without a log line."""
        try:
            await self._ask_raised(agent, ask, pane, from_snapshot)
        except Exception:
            log.exception("push for an ask of %s failed", agent)

    async def _ask_raised(self, agent: str, ask: Ask, pane: str | None, quiet: bool) -> None:
        now = self.gw.settings.clock()
        key = once_key(
            self.machine, agent, tool_call=ask.tool.call_id if ask.tool else None, ask=ask.id
        )

        def claim_once(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO push_once(key, at) VALUES (?, ?)", (key, now.timestamp())
            )
            return cur.rowcount == 1

        first = await self.gw.store.run(claim_once)
        if not first:
            if not quiet:
                await self._log(agent, ask, None, "suppressed", "already pushed for this ask (P3)")
            return
        for hook in self.targets.webhooks:
            self.gw.spawn(self._webhook(hook, agent, ask), "webhook")
        if self.showing(agent, ask.conversation):
            await self._log(agent, ask, None, "suppressed", "a phone is showing this chat")
            return
        devices = await self.devices()
        if not devices:
            await self._log(agent, ask, None, "suppressed", "no device registered")
            return
        pane_key = f"{self.machine}/{agent}/{ask.conversation}"
        decision = self.limiter.decide(
            pane_key, f"{self.machine}/{agent}", self.machine, now.timestamp()
        )
        if isinstance(decision, Quiet):
            await self._log(agent, ask, None, "rate_limited", decision.reason.value)
            return
        await self._save_limiter(now)
        deadline = ask.deadline.timestamp() if ask.deadline else None
        note: Notification
        if isinstance(decision, Summary):
            note = ManyAsksNotification(
                machine=self.machine, agent=agent, host=decision.host, deadline=None
            )
        else:
            # Masked before it is cut (X1): a token cut in half is no longer recognised.
            pane_name = clean(pane or agent, TITLE_LIMIT, redact=self.gw.redact).text
            note = AskNotification(
                machine=self.machine,
                agent=agent,
                conversation=ask.conversation,
                ask=ask.id,
                pane_key=pane_key,
                pane=pane_name,
                title=ask.push_title or ask.title or None,
                line=ask.push_line or None,
                deadline=deadline,
            )
        kind = "summary" if isinstance(decision, Summary) else "ask"
        await self._log(agent, ask, None, "dispatched", kind)
        self._dispatch(devices, note, agent, ask)

    def _dispatch(self, devices: list[Device], note: Notification, agent: str, ask: Ask) -> None:
        """Send in the background; each delivery is logged against its ask."""

        registered = {d.id: d.registered_at for d in devices}

        async def delivered(delivery: Delivery) -> None:
            await self._delivered(delivery, agent, ask, registered.get(delivery.device_id))
            if dispatcher.pending <= 1:
                self._dispatchers.discard(dispatcher)

        dispatcher = Dispatcher(self.targets.senders, on_delivery=delivered)
        self._dispatchers.add(dispatcher)
        if not dispatcher.dispatch(devices, note):
            self._dispatchers.discard(dispatcher)

    async def _save_limiter(self, now: datetime) -> None:
        state = self.limiter.to_state(now.timestamp())
        await self.gw.store.run(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO kv(key, value) VALUES ('push_limiter', ?)", (state,)
            )
        )

    async def _delivered(
        self, delivery: Delivery, agent: str, ask: Ask, registered_at: float | None
    ) -> None:
        outcome = delivery.outcome.value
        reason = delivery.reason
        if delivery.outcome is Outcome.GONE:
            # Only the registration the push went to: a phone that registered again while
            # the push was out has a newer token than the one the service reports gone.
            if await self._remove_gone(delivery.device_id, registered_at):
                reason = f"token gone, device removed ({reason})" if reason else "token gone"
            else:
                reason = f"token gone, but the phone registered again ({reason})"
        await self._write_log(
            agent,
            ask.conversation,
            ask.id,
            delivery.device_id,
            outcome,
            reason,
            delivery.provider_id,
        )

    async def _webhook(self, hook: WebhookTarget, agent: str, ask: Ask) -> None:
        mask = self.gw.redact
        shown = msgspec.structs.replace(
            ask,
            title=mask(ask.title),
            text=mask(ask.text),
            push_title=mask(ask.push_title) if ask.push_title else None,
            push_line=mask(ask.push_line) if ask.push_line else None,
        )
        body = msgspec.json.encode({"machine": self.machine, "agent": agent, "ask": shown})
        result = await hook.post(body)
        outcome = "sent" if result.ok else "failed"
        await self._write_log(agent, ask.conversation, ask.id, "webhook", outcome, result.reason)

    async def _log(
        self, agent: str, ask: Ask, device: str | None, outcome: str, reason: str | None
    ) -> None:
        log.info("push %s/%s: %s (%s)", agent, ask.id, outcome, reason)
        await self._write_log(agent, ask.conversation, ask.id, device, outcome, reason)

    async def _write_log(
        self,
        agent: str | None,
        conversation: str | None,
        ask: str | None,
        device: str | None,
        outcome: str,
        reason: str | None,
        provider_id: str | None = None,
    ) -> None:
        at = self.gw.settings.clock().isoformat()
        row = (at, agent, conversation, ask, device, outcome, reason, provider_id)

        def write(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "INSERT INTO push_log(at, agent, conversation, ask, device, outcome, reason,"
                " provider_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            if cur.lastrowid is not None and cur.lastrowid % 1000 == 0:
                conn.execute("DELETE FROM push_log WHERE id <= ?", (cur.lastrowid - LOG_KEPT,))

        await self.gw.store.run(write)
        self.gw.bus.publish(
            "push.logged",
            {"agent": agent, "ask": ask, "device": device, "outcome": outcome, "reason": reason},
        )

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the delivery log, newest first."""
        async with self.gw.store.db.execute(
            "SELECT at, agent, conversation, ask, device, outcome, reason, provider_id"
            " FROM push_log ORDER BY id DESC LIMIT ?",
            (limit,),
        ) as cur:
            rows = await cur.fetchall()
        names = ("at", "agent", "conversation", "ask", "device", "outcome", "reason", "provider_id")
        return [dict(zip(names, row, strict=True)) for row in rows]
