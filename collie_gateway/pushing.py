"""Push, wired into the gateway: devices, presence, once per ask, limits, the delivery log.

An ask raised by an agent may push (spec P1–P3): once per machine, agent and tool call; not
while a phone shows that conversation; within the limits, whose state is stored so a restart
does not reset the hour. Sending happens in the background: a push never fails or delays an ask.
Every decision and delivery is logged in SQLite and visible in the phone API.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import secrets
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from collie_gateway.strings import canonical
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
    webhook_id,
)
from wire.messages import Ask, Option

if TYPE_CHECKING:
    from collie_gateway.gateway import Gateway

log = logging.getLogger(__name__)

PRESENCE_TTL = timedelta(seconds=45)  # ours: a screen not confirmed for this long is stale
PUSH_GRACE = 2.0  # ours: at a stop, all pending pushes together get this long (issue 10)
OWED, DONE = "owed", "done"  # push_once.state (P3)
SENT = "sent"
ALREADY_PUSHED = "already pushed for this ask (P3)"
NO_DEVICE = "no device registered"
NOT_DELIVERED = "no device took it (gone or refused)"
RESOLVED = "the ask was resolved before its push was delivered"
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
        lang: Optional: the language tag its pushes are worded in (e.g. `it`, `pt-BR`); without
            it, the language the request's `Accept-Language` names, else the gateway's default.
    """

    provider: Provider
    token: str
    environment: Environment | None = None  # None: the gateway's COLLIE_APNS_ENVIRONMENT
    key: str | None = None  # base64 of the phone's own 32-byte key: private content
    lang: str | None = None  # the language of its pushes


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


_DEVICES = (
    "SELECT id, provider, token, environment, key, registered_at, lang FROM devices"
    " ORDER BY registered_at"
)
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8}){0,4}", re.ASCII)


def _device(row: Sequence[Any]) -> Device:
    return Device(
        id=str(row[0]),
        provider=Provider(str(row[1])),
        token=str(row[2]),
        environment=Environment(str(row[3])),
        key=bytes(row[4]) if row[4] is not None else None,
        registered_at=float(row[5]),
        lang=str(row[6]) if row[6] is not None else None,
    )


def _settle(key: str, now: datetime, reason: str) -> Callable[[sqlite3.Connection], object]:
    """A lasting decision about the ask's push, to store: no later run pushes it (P3)."""
    return lambda conn: conn.execute(
        "INSERT INTO push_once(key, at, state, reason) VALUES (?, ?, 'done', ?)"
        " ON CONFLICT(key) DO UPDATE SET state = 'done', reason = excluded.reason",
        (key, now.timestamp(), reason),
    )


def _finish(conn: sqlite3.Connection, key: str) -> bool:
    """Mark the ask done unless a registered device still waits for its push (P3); whether
    it is done."""
    waiting = conn.execute(
        "SELECT 1 FROM push_delivered p JOIN devices d ON d.id = p.device"
        " WHERE p.key = ? AND p.outcome = 'pending' LIMIT 1",
        (key,),
    ).fetchone()
    if waiting is not None:
        return False
    sent = conn.execute(
        "SELECT 1 FROM push_delivered WHERE key = ? AND outcome = 'sent' LIMIT 1", (key,)
    ).fetchone()
    conn.execute(
        "UPDATE push_once SET state = 'done', reason = ? WHERE key = ? AND state = 'owed'",
        (SENT if sent else NOT_DELIVERED, key),
    )
    return True


def lasting(delivery: Delivery) -> bool:
    """Whether a device's outcome is final for its ask: sent, the token gone, or refused for
    good (4xx but 429; a payload too large). A push cancelled, timed out, throttled or met
    with 5xx through every try stays owed: the next run (or the agent's next snapshot)
    sends it again to that device only."""
    if delivery.outcome in (Outcome.SENT, Outcome.GONE):
        return True
    if delivery.outcome is Outcome.THROTTLED:
        return False
    if delivery.reason == "PayloadTooLarge":
        return True
    status = delivery.status
    return status is not None and 400 <= status < 500 and status != 429


class Pushing:
    """The gateway's push service."""

    def __init__(self, gateway: Gateway, targets: PushTargets) -> None:
        self.gw = gateway
        self.targets = targets
        self.machine = gateway.settings.machine
        self.limiter = PushLimiter()
        self.presence: dict[str, Presence] = {}
        self.dispatcher = Dispatcher(targets.senders)
        self._busy: set[str] = set()  # once keys decided or being sent in this run
        self._owed: set[str] = set()  # once keys seen owed in this run (ask_resolved)
        self._hooks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, gateway: Gateway, factory: TargetsFactory | None) -> Pushing:
        """The service, with the limiter's stored state (P1 survives a restart)."""
        settings = gateway.settings
        languages = settings.languages
        content = Content(
            strings=settings.catalogue,
            redact=gateway.redact,
            default_ttl=settings.push_ttl,
            languages={tag: languages.get(tag) for tag in languages.languages},
        )
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

    async def close(self, grace: float = PUSH_GRACE) -> None:
        """Give every pending push and webhook one shared ``grace`` (not one each), cancel
        the rest (their asks stay owed: the next run sends them), then close the senders."""

        async def hooks() -> None:
            if not self._hooks:
                return
            _, late = await asyncio.wait(list(self._hooks), timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

        await asyncio.gather(self.dispatcher.aclose(grace), hooks())
        for sender in self.targets.senders.values():
            await sender.aclose()
        for hook in self.targets.webhooks:
            await hook.aclose()

    # --- devices -------------------------------------------------------------------------

    async def register(self, body: DeviceIn, asked: str | None = None) -> str:
        """Register or refresh a token; the device id (the same for the same token). Its
        pushes are worded in ``body.lang``, else ``asked`` (the language its request named),
        else the default language.

        Raises:
            DeviceError: a malformed token, key or language tag.
        """
        lang = self._language(body.lang) if body.lang is not None else asked
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
        environment = body.environment or Environment(self.gw.settings.apns_environment)
        now = self.gw.settings.clock().timestamp()
        async with self.gw.store.transaction() as db:
            async with db.execute(
                "SELECT id FROM devices WHERE provider = ? AND token = ?",
                (body.provider.value, token),
            ) as cur:
                row = await cur.fetchone()
            device_id = str(row[0]) if row else "d-" + secrets.token_hex(8)
            await db.execute(
                "INSERT INTO devices(id, provider, token, environment, key, registered_at, lang)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                " environment=excluded.environment, key=excluded.key,"
                " registered_at=excluded.registered_at, lang=excluded.lang",
                (device_id, body.provider.value, token, environment.value, key, now, lang),
            )
        return device_id

    def _language(self, tag: str) -> str:
        """A registered language tag as the gateway spells it (``it-IT``: ``it``); a tag of a
        language it does not speak is kept as given (its pushes read the default language).

        Raises:
            DeviceError: not a language tag.
        """
        if len(tag) > 35 or _LANGUAGE_TAG.fullmatch(tag) is None:
            raise DeviceError("lang must be a language tag such as it or pt-BR")
        return canonical(tag, self.gw.settings.languages.languages) or tag

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
        async with self.gw.store.db.execute(_DEVICES) as cur:
            rows = await cur.fetchall()
        return [_device(r) for r in rows]

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
        self,
        agent: str,
        ask: Ask,
        pane: str | None,
        *,
        from_snapshot: bool = False,
        machine: str | None = None,
    ) -> None:
        """Decide and send the push for one raised ask; never raises. ``from_snapshot``: the
        ask was found open in a snapshot (raised while the gateway was away); one already
        pushed is then passed over without a log line. ``machine``: the crew member the agent
        runs on (W4: the lead pushes members' asks under its own limits, P3's key naming the
        member); None is this gateway's own machine."""
        try:
            await self._ask_raised(agent, ask, pane, from_snapshot, machine)
        except Exception:
            log.exception("push for an ask of %s failed", agent)

    async def _ask_raised(
        self, agent: str, ask: Ask, pane: str | None, quiet: bool, member: str | None = None
    ) -> None:
        key = once_key(
            member or self.machine,
            agent,
            tool_call=ask.tool.call_id if ask.tool else None,
            ask=ask.id,
        )
        if key in self._busy:
            # Decided or being sent in this run (e.g. raised, then seen again in a snapshot).
            if not quiet:
                await self._log(agent, ask, None, "suppressed", "a push for this ask is on its way")
            return
        self._busy.add(key)
        dispatched = False
        try:
            dispatched = await self._decide(key, agent, ask, pane, quiet, member)
        finally:
            if not dispatched:
                self._busy.discard(key)

    async def _decide(
        self,
        key: str,
        agent: str,
        ask: Ask,
        pane: str | None,
        quiet: bool,
        member: str | None = None,
    ) -> bool:
        """Push the ask unless it was pushed, or it is decided not to (a lasting reason,
        stored and logged); whether a push was dispatched (``key`` is then released once
        every delivery is reported)."""
        now = self.gw.settings.clock()
        machine = member or self.machine
        # A member's chat on a lead's phone is the screen ``chat:<machine>/<agent>:<id>``.
        shown_as = agent if member is None else f"{member}/{agent}"

        def read(
            conn: sqlite3.Connection,
        ) -> tuple[str | None, str | None, set[str], list[Device]]:
            # One round trip: this runs for every ask raised (bench/answer_bench.py).
            row = conn.execute(
                "SELECT state, reason FROM push_once WHERE key = ?", (key,)
            ).fetchone()
            if row is not None and row[0] == DONE:
                return DONE, row[1], set(), []
            pending = {
                str(r[0])
                for r in conn.execute(
                    "SELECT device FROM push_delivered WHERE key = ? AND outcome = 'pending'",
                    (key,),
                )
            }
            devices = [_device(r) for r in conn.execute(_DEVICES)]
            return (str(row[0]) if row else None), None, pending, devices

        state, reason, pending, devices = await self.gw.store.run(read)
        if state == DONE:
            if not quiet:
                why = f"not pushed earlier: {reason}" if reason not in (None, SENT) else None
                await self._log(agent, ask, None, "suppressed", why or ALREADY_PUSHED)
            return False
        owed = state == OWED  # decided in an earlier run (or try), not delivered everywhere
        self._owed.discard(key)  # set again below if it stays owed
        if not owed and member is None:
            # Webhooks (S6) go once, with the first decision; a member sends its own.
            for hook in self.targets.webhooks:
                self._spawn_hook(hook, key, agent, ask, pane)
        if self.showing(shown_as, ask.conversation):
            why = "a phone is showing this chat"
            await self._log(agent, ask, None, "suppressed", why, also=_settle(key, now, why))
            return False
        if not devices:
            # Lasting: the phone that registers next shows the ask on its dashboard at once
            # (it registers from the app), so a push then would only buzz (README, issue 10).
            settle = _settle(key, now, NO_DEVICE)
            await self._log(agent, ask, None, "suppressed", NO_DEVICE, also=settle)
            return False
        # Owed: to the devices it went to that have no lasting outcome yet (a phone that
        # registered since is not pushed an older ask, as above).
        todo = [d for d in devices if d.id in pending] if owed else devices
        if not todo:
            if not await self.gw.store.run(lambda conn: _finish(conn, key)):
                self._owed.add(key)
            return False
        pane_key = f"{machine}/{agent}/{ask.conversation}"
        # A push owed from before counts again: the limits hold in every window (P1), at
        # the cost of one slot for a push cut short.
        decision = self.limiter.decide(pane_key, f"{machine}/{agent}", machine, now.timestamp())
        if isinstance(decision, Quiet):
            held = _settle(key, now, f"rate limited ({decision.reason.value})")
            await self._log(agent, ask, None, "rate_limited", decision.reason.value, also=held)
            return False
        limiter_state = self.limiter.to_state(now.timestamp())

        def owe(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO push_once(key, at, state) VALUES (?, ?, 'owed')"
                " ON CONFLICT(key) DO NOTHING",
                (key, now.timestamp()),
            )
            conn.executemany(
                "INSERT OR IGNORE INTO push_delivered(key, device, outcome, at)"
                " VALUES (?, ?, 'pending', ?)",
                [(key, d.id, now.timestamp()) for d in todo],
            )
            conn.execute(
                "INSERT OR REPLACE INTO kv(key, value) VALUES ('push_limiter', ?)",
                (limiter_state,),
            )

        deadline = ask.deadline.timestamp() if ask.deadline else None
        note: Notification
        if isinstance(decision, Summary):
            note = ManyAsksNotification(
                machine=machine, agent=agent, host=decision.host, push_id=key
            )
        else:
            # Masked before it is cut (X1): a token cut in half is no longer recognised.
            pane_name = clean(pane or agent, TITLE_LIMIT, redact=self.gw.redact).text
            note = AskNotification(
                machine=machine,
                agent=agent,
                conversation=ask.conversation,
                ask=ask.id,
                pane_key=pane_key,
                pane=pane_name,
                title=ask.push_title or ask.title or None,
                line=ask.push_line or None,
                deadline=deadline,
                push_id=key,
            )
        kind = "summary" if isinstance(decision, Summary) else "ask"
        why = f"{kind}, owed from before" if owed else kind
        await self._log(agent, ask, None, "dispatched", why, also=owe)
        self._owed.add(key)
        return self._dispatch(key, todo, note, agent, ask)

    def _dispatch(
        self, key: str, devices: list[Device], note: Notification, agent: str, ask: Ask
    ) -> bool:
        """Send in the background; each delivery is logged against its ask, and the ask is
        done once every device has a lasting outcome. Whether anything was scheduled."""
        registered = {d.id: d.registered_at for d in devices}
        left = len(devices)

        async def delivered(delivery: Delivery) -> None:
            nonlocal left
            try:
                await self._delivered(delivery, agent, ask, registered.get(delivery.device_id))
                if lasting(delivery):
                    await self._mark_delivered(key, delivery)
            finally:
                left -= 1
                if left == 0:
                    self._busy.discard(key)

        return self.dispatcher.dispatch(devices, note, on_delivery=delivered) > 0

    async def _mark_delivered(self, key: str, delivery: Delivery) -> None:
        """Note a device's lasting outcome; the ask is done when no device it is owed to
        (and still registered) is left without one."""
        at = self.gw.settings.clock().timestamp()

        def write(conn: sqlite3.Connection) -> bool:
            conn.execute(
                "UPDATE push_delivered SET outcome = ?, at = ? WHERE key = ? AND device = ?",
                (delivery.outcome.value, at, key, delivery.device_id),
            )
            return _finish(conn, key)

        if await self.gw.store.run(write):
            self._owed.discard(key)

    def owes(self, agent: str, ask: Ask, *, machine: str | None = None) -> bool:
        """Whether a push for the ask was seen owed in this run (:meth:`ask_resolved` then
        has something to write; else the caller need not start it)."""
        if not self._owed:
            return False  # the common case, without building the key
        key = once_key(
            machine or self.machine,
            agent,
            tool_call=ask.tool.call_id if ask.tool else None,
            ask=ask.id,
        )
        return key in self._owed

    async def ask_resolved(self, agent: str, ask: Ask, *, machine: str | None = None) -> None:
        """The ask was answered, expired or withdrawn: a push still owed for it is not sent
        in any later run (a lasting reason, logged). Never raises. ``machine``: as
        :meth:`ask_raised`."""
        if not self.owes(agent, ask, machine=machine):
            return  # nothing owed for it in this run: no write on the answer path
        key = once_key(
            machine or self.machine,
            agent,
            tool_call=ask.tool.call_id if ask.tool else None,
            ask=ask.id,
        )
        self._owed.discard(key)

        def settle(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE push_once SET state = 'done', reason = ? WHERE key = ? AND state = 'owed'",
                (RESOLVED, key),
            )
            return cur.rowcount > 0

        try:
            if await self.gw.store.run(settle):
                await self._log(agent, ask, None, "suppressed", RESOLVED)
        except Exception:
            log.exception("push state of a resolved ask of %s not written", agent)

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

    def _spawn_hook(
        self, hook: WebhookTarget, key: str, agent: str, ask: Ask, pane: str | None
    ) -> None:
        task = asyncio.create_task(self._webhook(hook, key, agent, ask, pane), name="webhook")
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    async def _webhook(
        self, hook: WebhookTarget, key: str, agent: str, ask: Ask, pane: str | None
    ) -> None:
        mask = self.gw.redact
        # Every text of the ask leaves the machine: option labels, form field labels and the
        # labels of a select's options too (X1, issue 9.10).
        shown = msgspec.structs.replace(
            ask,
            title=mask(ask.title),
            text=mask(ask.text),
            push_title=mask(ask.push_title) if ask.push_title else None,
            push_line=mask(ask.push_line) if ask.push_line else None,
            options=[_masked_option(o, mask) for o in ask.options],
            fields=[
                msgspec.structs.replace(
                    f,
                    label=mask(f.label),
                    options=[_masked_option(o, mask) for o in f.options],
                )
                for f in ask.fields
            ],
        )
        # The keys stay English; ``text`` adds Collie's words in the default language (P2).
        cat = self.gw.settings.catalogue
        pane_name = clean(pane or agent, TITLE_LIMIT, redact=mask).text
        text = {"headline": cat.fmt("push_permission", pane=pane_name)}
        body = msgspec.json.encode(
            {"machine": self.machine, "agent": agent, "ask": shown, "lang": cat.lang, "text": text}
        )
        try:
            # The same id on every try, derived from the ask: a receiver drops duplicates.
            result = await hook.post(body, webhook_id=webhook_id(key))
            outcome = "sent" if result.ok else "failed"
            await self._write_log(
                agent, ask.conversation, ask.id, "webhook", outcome, result.reason
            )
        except Exception:
            log.exception("webhook for an ask of %s failed", agent)

    async def _log(
        self,
        agent: str,
        ask: Ask,
        device: str | None,
        outcome: str,
        reason: str | None,
        also: Callable[[sqlite3.Connection], object] | None = None,
    ) -> None:
        log.info("push %s/%s: %s (%s)", agent, ask.id, outcome, reason)
        await self._write_log(agent, ask.conversation, ask.id, device, outcome, reason, also=also)

    async def _write_log(
        self,
        agent: str | None,
        conversation: str | None,
        ask: str | None,
        device: str | None,
        outcome: str,
        reason: str | None,
        provider_id: str | None = None,
        also: Callable[[sqlite3.Connection], object] | None = None,
    ) -> None:
        """Append to the delivery log (and run ``also`` in the same transaction)."""
        at = self.gw.settings.clock().isoformat()
        row = (at, agent, conversation, ask, device, outcome, reason, provider_id)

        def write(conn: sqlite3.Connection) -> None:
            if also is not None:
                also(conn)
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


def _masked_option(option: Option, mask: Callable[[str], str]) -> Option:
    return msgspec.structs.replace(option, label=mask(option.label))
