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
import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import msgspec
from cryptography.hazmat.primitives.asymmetric import ec

from collie_gateway.core.cleaning import TITLE_LIMIT, clean
from collie_gateway.core.push_plan import Facts, Plan, decide
from collie_gateway.core.texts import MaskedAsks
from collie_gateway.services.notify import Health, OwedWebhooks, Withdrawals, withdrawal_note
from collie_gateway.services.phonebus import Publish
from collie_gateway.services.targets import PushTargets, TargetsFactory
from collie_gateway.store.protocols import NotifyStore, PushesStore
from collie_gateway.store.values import VAPID_KEY, Decision, LogEntry, OnceFacts, Owe
from collie_gateway.strings import Catalogues, canonical
from collie_gateway.views.chat import SAY_PREFIX
from push import (
    AskNotification,
    Content,
    Delivery,
    Device,
    Dispatcher,
    Environment,
    ManyAsksNotification,
    NoticeNotification,
    Notification,
    Outcome,
    PingNotification,
    Provider,
    PushLimiter,
    WebhookTarget,
    WebPushClient,
    WebPushKeys,
    Withdrawal,
    check_endpoint,
    notice_key,
    once_key,
    subscription_keys,
    valid_apns_token,
    vapid,
    webhook_id,
)
from wire.messages import Ask, Item
from wire.tasks import cancel_late

Clock = Callable[[], datetime]

log = logging.getLogger(__name__)

PRESENCE_TTL = timedelta(seconds=45)  # ours: a screen not confirmed for this long is stale
PUSH_GRACE = 2.0  # ours: at a stop, all pending pushes together get this long
RESOLVED = "the ask was resolved before its push was delivered"
VAPID_SUBJECT = "mailto:collie@localhost"  # ours: COLLIE_VAPID_SUBJECT names a real contact
WITHDRAWN = "withdrawn"  # push_log.outcome of a withdrawal a device's service took
PING_DEADLINE = 30.0  # ours: a test notification's answer is waited for this long
CLAIM_RETRY = 0.5  # ours: seconds between two tries of a claim another worker holds
CLAIM_PATIENCE = 60.0  # ours: an ask found open waits this long for another worker's claim
NOTICES_KEPT = 16  # ours: an agent's last notices with a push kept by a worker not its holder


class Subject(Protocol):
    """What a push is logged against: an ask, or a notice (``NoticeRef``)."""

    @property
    def conversation(self) -> str: ...

    @property
    def id(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class NoticeRef:
    """A notice's push in the log: its conversation, no ask."""

    conversation: str
    id: None = None


@dataclass(slots=True)
class _Made:
    """A push decision made in the transaction that read its facts, and what carrying it out
    needs once it is stored: the plan, the subject as sent (an ask masked, X1), the
    notification and the log line."""

    agent: str
    subject: Subject
    plan: Plan = field(default_factory=Plan)
    note: Notification | None = None
    entry: LogEntry | None = None


class WebPushKeysIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A Web Push subscription's keys, as ``PushSubscription.toJSON()`` gives them.

    Attributes:
        p256dh: The browser's P-256 public key (base64url).
        auth: The 16-byte authentication secret (base64url).
    """

    p256dh: str
    auth: str


_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8}){0,4}", re.ASCII)


class DeviceIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/devices``: register (or refresh) a phone's token, or a Web Push
    subscription (``PushSubscription.toJSON()`` plus the provider).

    Attributes:
        provider: `apns`, `fcm` or `webpush`.
        token: The provider's push token for this phone (APNs, FCM).
        environment: `production` or `sandbox` (APNs only).
        key: Optional: 32 bytes, base64, to encrypt push content for this device (private content).
        lang: Optional: the language tag its pushes are worded in (e.g. `it`, `pt-BR`); without
            it, the language the request's `Accept-Language` names, else the gateway's default.
        endpoint: The subscription's endpoint (Web Push): https, or http on loopback.
        keys: The subscription's keys (Web Push).
        expirationTime: As the browser gives it (ignored).
    """

    provider: Provider
    token: str | None = None
    environment: Environment | None = None  # None: the gateway's COLLIE_APNS_ENVIRONMENT
    key: str | None = None  # base64 of the phone's own 32-byte key: private content
    lang: str | None = None  # the language of its pushes
    endpoint: str | None = None
    keys: WebPushKeysIn | None = None
    expirationTime: float | None = None


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


@dataclass(frozen=True, slots=True)
class PushConfig:
    """What the push service needs of the settings."""

    machine: str
    apns_environment: str
    clock: Clock
    languages: Catalogues = field(default_factory=Catalogues.load)  # the default's: webhooks


class Pushing:
    """The gateway's push service: devices, presence, and each ask's push."""

    def __init__(
        self,
        repo: PushesStore,
        notify: NotifyStore,
        publish: Publish,
        config: PushConfig,
        redact: Callable[[str], str],
        targets: PushTargets,
        masked: MaskedAsks | None = None,
    ) -> None:
        self.repo = repo
        self.publish = publish
        self.config = config
        self.clock = config.clock
        self.machine = config.machine
        self.redact = redact
        self.masked = masked if masked is not None else MaskedAsks(redact)  # once (X1)
        self.targets = targets
        self.limiter = PushLimiter()
        self.presence: dict[str, Presence] = {}
        self.dispatcher = Dispatcher(targets.senders)
        self._busy: set[str] = set()  # once keys decided or being sent in this run
        self._waiting: set[str] = set()  # once keys waiting for another worker's claim
        self._owed: set[str] = set()  # once keys seen owed in this run (ask_resolved)
        #: Each agent's last notices with a push that its holder, another worker, decides:
        #: once key → (conversation, item, pane), for :meth:`taken_over`.
        self._notices: dict[str, dict[str, tuple[str, Item, str | None]]] = {}
        self._hooks: set[asyncio.Task[None]] = set()
        self.notify = notify
        self.withdrawals = Withdrawals(self.notify, self.dispatcher, self.clock, self._withdrawn)
        self.owed_hooks = OwedWebhooks(self.notify, self.clock)
        self.health = Health(self.notify, self.clock)
        self.vapid_public_key = ""

    @classmethod
    async def open(
        cls,
        repo: PushesStore,
        notify: NotifyStore,
        publish: Publish,
        config: PushConfig,
        content: Content,
        factory: TargetsFactory | None,
        masked: MaskedAsks | None = None,
    ) -> Pushing:
        """The service, with the limiter's stored state (P1 survives a restart), the Web Push
        sender on the stored VAPID key (made on the first start), the asks pushed earlier (to
        withdraw), push health, and the webhooks an earlier run owes sent again."""
        targets = factory(content) if factory is not None else PushTargets()
        key = await _vapid_key(notify)
        build = targets.webpush or (
            lambda k: WebPushClient(vapid_key=k, subject=VAPID_SUBJECT, content=content)
        )
        senders = {**targets.senders, Provider.WEBPUSH: build(key)}
        targets = dataclasses.replace(targets, senders=senders)
        service = cls(repo, notify, publish, config, content.redact, targets, masked)
        service.vapid_public_key = vapid.public_key(key)
        state = await repo.limiter_state()
        if state is not None:
            service._load_limiter(state)
        await service.withdrawals.load()
        await service.health.load()
        await service.owed_hooks.resend(targets.webhooks)
        return service

    async def close(self, grace: float = PUSH_GRACE) -> None:
        """Give every pending push and webhook one shared ``grace`` (not one each), cancel
        the rest (their asks stay owed: the next run sends them), then close the senders."""

        hooks = self._hooks | self.owed_hooks.tasks
        await asyncio.gather(self.dispatcher.aclose(grace), cancel_late(hooks, grace))
        for sender in self.targets.senders.values():
            await sender.aclose()
        for hook in self.targets.webhooks:
            await hook.aclose()

    # --- devices -------------------------------------------------------------------------

    async def register(
        self, body: DeviceIn, asked: str | None = None, phone: str | None = None
    ) -> str:
        """Register or refresh a token for ``phone`` (its id: revoking it removes the token);
        the device id (the same for the same token). Its pushes are worded in ``body.lang``,
        else ``asked`` (the language its request named), else the default language.

        Raises:
            DeviceError: a malformed token, key or language tag.
        """
        lang = self._language(body.lang) if body.lang is not None else asked
        token, webpush = _token(body)
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
        environment = body.environment or Environment(self.config.apns_environment)
        now = self.clock().timestamp()
        return await self.repo.register(
            body.provider, token, environment, key, now, lang, phone, webpush
        )

    def _language(self, tag: str) -> str:
        """A registered language tag as the gateway spells it (``it-IT``: ``it``); a tag of a
        language it does not speak is kept as given (its pushes read the default language).

        Raises:
            DeviceError: not a language tag.
        """
        if len(tag) > 35 or _LANGUAGE_TAG.fullmatch(tag) is None:
            raise DeviceError("lang must be a language tag such as it or pt-BR")
        return canonical(tag, self.config.languages.languages) or tag

    async def remove(self, device_id: str) -> bool:
        """Forget a device; whether it was registered."""
        return await self.repo.remove(device_id)

    async def ping(self, device_id: str) -> Delivery | None:
        """Send a test notification to one device through the whole path and wait for the
        outcome (logged, and counted in push health); None: no such device."""
        device = next((d for d in await self.repo.devices() if d.id == device_id), None)
        if device is None:
            return None
        sender = self.targets.senders.get(device.provider)
        note = PingNotification(machine=self.machine, agent="", host=self.machine)
        if sender is None:
            delivery = Delivery.of(device, Outcome.FAILED, f"no sender for {device.provider}")
        else:
            try:
                async with asyncio.timeout(PING_DEADLINE):
                    delivery = await sender.send(device, note)
            except TimeoutError:
                delivery = Delivery.of(device, Outcome.FAILED, "deadline")
        await self.health.record([device], delivery)
        if delivery.outcome is Outcome.GONE:
            await self.repo.remove(device.id, device.registered_at)
        at = self.clock().isoformat()
        reason = "test" if delivery.ok else f"test: {delivery.reason}"
        entry = LogEntry(at, None, None, None, device.id, delivery.outcome.value, reason)
        await self._write_log(dataclasses.replace(entry, provider_id=delivery.provider_id))
        return delivery

    async def devices(self) -> list[Device]:
        """Every registered device."""
        return await self.repo.devices()

    async def recent(self, limit: int = 100) -> list[dict[str, object]]:
        """The newest entries of the delivery log, newest first."""
        return await self.repo.recent(limit)

    # --- presence ------------------------------------------------------------------------

    def stream_opened(self, stream_id: str, screen: str | None) -> None:
        """A phone's live stream opened, showing ``screen`` (e.g. ``chat:desk:c1``)."""
        self.presence[stream_id] = Presence(screen, self.clock() + PRESENCE_TTL)

    def stream_closed(self, stream_id: str) -> None:
        """A phone's live stream closed."""
        self.presence.pop(stream_id, None)

    def confirm(self, body: PresenceIn) -> bool:
        """A phone says which screen its stream shows now; whether the stream is known."""
        entry = self.presence.get(body.stream_id)
        if entry is None:
            return False
        entry.screen = body.screen
        entry.fresh_until = self.clock() + PRESENCE_TTL
        return True

    def showing(self, agent: str, conversation: str) -> bool:
        """Whether a phone shows this chat now. Stale or unknown presence counts as not
        showing (fail open: it never swallows a push)."""
        screen = f"chat:{agent}:{conversation}"
        now = self.clock()
        return any(p.screen == screen and p.fresh_until > now for p in self.presence.values())

    # --- asks -----------------------------------------------------------------------------

    def _key(self, agent: str, ask: Ask, machine: str | None) -> str:
        tool_call = ask.tool.call_id if ask.tool else None
        return once_key(machine or self.machine, agent, tool_call=tool_call, ask=ask.id)

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
        self, agent: str, ask: Ask, pane: str | None, quiet: bool, member: str | None
    ) -> None:
        key = self._key(agent, ask, member)
        # Decided or being sent in this run (e.g. raised, then seen again in a snapshot), or
        # by another worker on the same database (P3: the store's claim on the key).
        if not await self._claim(key, patient=quiet):
            if not quiet:
                await self._log(agent, ask, "suppressed", "a push for this ask is on its way")
            return
        dispatched = False
        try:
            dispatched = await self._plan(key, agent, ask, pane, quiet, member)
        finally:
            if not dispatched:
                await self._release(key)

    async def _claim(self, key: str, *, patient: bool) -> bool:
        """Claim ``key`` for this decision (then it is busy here until released): False when
        it is busy here, or claimed by another worker. ``patient`` (an ask found open, not
        just raised): a claim held elsewhere is tried again every :data:`CLAIM_RETRY` s, up
        to :data:`CLAIM_PATIENCE` s, as the worker holding it may stop or die before it
        decides; once claimed, the stored state says whether anything is left to do."""
        if key in self._busy:
            return False
        claimed = await self.repo.claim(key)
        if not claimed and patient and key not in self._waiting:
            self._waiting.add(key)
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + CLAIM_PATIENCE
                while not claimed and loop.time() < deadline:
                    await asyncio.sleep(CLAIM_RETRY)
                    if key in self._busy:
                        return False
                    claimed = await self.repo.claim(key)
            finally:
                self._waiting.discard(key)
        if claimed:
            self._busy.add(key)
        return claimed

    async def _release(self, key: str) -> None:
        """The key's push is decided and sent: another decision (here or on another worker)
        may read it now."""
        self._busy.discard(key)
        await self.repo.release(key)

    async def _plan(
        self, key: str, agent: str, ask: Ask, pane: str | None, quiet: bool, member: str | None
    ) -> bool:
        """:meth:`_decide` in a turn at the limiter: on a store shared by several workers the
        limiter is read before and stored after each decision, one worker at a time (P1)."""
        async with self.repo.limiter_turn() as turn:
            if turn.state is not None:
                self._load_limiter(turn.state)
            dispatched = await self._decide(key, agent, ask, pane, quiet, member)
            if turn.shared:
                turn.keep(self.limiter.to_state(self.clock().timestamp()))
        return dispatched

    def _load_limiter(self, state: bytes) -> None:
        try:
            self.limiter = PushLimiter.from_state(state)
        except ValueError:
            log.warning("stored push limiter state unreadable; starting afresh")

    async def _decide(
        self, key: str, agent: str, ask: Ask, pane: str | None, quiet: bool, member: str | None
    ) -> bool:
        """Decide the ask's push (:func:`~collie_gateway.core.push_plan.decide`) in the
        transaction that reads its facts and stores the decision, then carry the plan out;
        whether a push was dispatched (``key`` is then released once every delivery is
        reported)."""
        now = self.clock()
        machine = member or self.machine
        # A member's chat on a lead's phone is the screen ``chat:<machine>/<agent>:<id>``.
        shown_as = agent if member is None else f"{member}/{agent}"
        made = _Made(agent, ask)

        def decided(stored: OnceFacts) -> Decision:
            facts = Facts(
                state=stored.state,
                reason=stored.reason,
                pending=stored.pending,
                devices=stored.devices,
                machine=machine,
                agent=agent,
                pane_key=f"{machine}/{agent}/{ask.conversation}",
                quiet=quiet,
                member=member is not None,
            )
            showing = stored.state != "done" and self.showing(shown_as, ask.conversation)
            plan = made.plan = decide(facts, self.limiter, showing, now)
            if stored.state != "done":
                self._owed.discard(key)  # set again below if it stays owed
            if plan.webhooks or plan.send_to:
                # Every text of the ask masked once (X1, core/texts.py), at any depth, for the
                # webhook and the notification alike (the copy the phones' stream got, when it
                # did); its ids are kept, so it serves the log too.
                made.subject = shown = self.masked(ask)
                if plan.send_to:
                    made.note = self._notification(key, plan, machine, agent, shown, pane)
            return self._stored(key, now, made, plan.reason, plan.reason)

        finished = await self.repo.decide(key, decided)
        plan = made.plan
        if plan.webhooks:
            shown = self.masked(ask)  # the copy masked above
            for hook in self.targets.webhooks:
                self._spawn_hook(hook, key, agent, shown, pane)
        if (plan.finish and not finished) or plan.send_to:
            self._owed.add(key)
        return self._carry_out(key, made)

    def _stored(
        self, key: str, now: datetime, made: _Made, reason: str | None, said: str | None
    ) -> Decision:
        """What ``made``'s plan stores: the key finished, a lasting outcome logged (with
        ``reason``), or the push owed to its devices, logged as dispatched (with ``said``)."""
        plan = made.plan
        if plan.finish:
            return Decision(finish=True)
        at = now.timestamp()
        if not plan.send_to:
            if plan.outcome is None:
                return Decision()
            made.entry = self._entry(made.agent, made.subject, None, plan.outcome, reason)
            return Decision(made.entry, settle=(key, at, plan.settle) if plan.settle else None)
        note = made.note
        withdrawal = withdrawal_note(note) if isinstance(note, AskNotification) else None
        ids = tuple(d.id for d in plan.send_to)
        owe = Owe(key, at, ids, self.limiter.to_state(at), withdrawal)
        made.entry = self._entry(made.agent, made.subject, None, "dispatched", said)
        return Decision(made.entry, owe=owe)

    def _carry_out(self, key: str, made: _Made) -> bool:
        """Once the decision is stored: tell the phones its log line and send the push;
        whether it was dispatched."""
        if made.entry is not None:
            self._told(made.entry)
            _say(made.entry)
        plan, note = made.plan, made.note
        if plan.finish or not plan.send_to or note is None:
            return False
        return self._dispatch(key, list(plan.send_to), note, made.agent, made.subject)

    # --- notices (wire ``Item.push``) ------------------------------------------------------

    def notice_seen(self, agent: str, conversation: str, item: Item, pane: str | None) -> None:
        """A notice with a push that the agent's holder (another worker) decides: kept (the
        agent's last :data:`NOTICES_KEPT`), so that this worker decides it if it takes the
        agent over from a holder that had not (:meth:`taken_over`)."""
        kept = self._notices.setdefault(agent, {})
        key = notice_key(self.machine, agent, conversation, item.id)
        kept.pop(key, None)
        kept[key] = (conversation, item, pane)
        if len(kept) > NOTICES_KEPT:
            del kept[next(iter(kept))]

    async def notice_pushed(
        self, agent: str, conversation: str, item: Item, pane: str | None, *, patient: bool = False
    ) -> None:
        """Decide and send the push an agent asked for with a notice (wire §7.11): once per
        item id (P3's store), not while a phone shows the chat, within P1's limits, which it
        shares with the asks of its pane and agent; never raises. ``patient``: as
        :meth:`_claim` (a notice an old holder left)."""
        key = notice_key(self.machine, agent, conversation, item.id)
        try:
            if not await self._claim(key, patient=patient):
                return
            dispatched = False
            try:
                async with self.repo.limiter_turn() as turn:
                    if turn.state is not None:
                        self._load_limiter(turn.state)
                    dispatched = await self._notice(key, agent, conversation, item, pane)
                    if turn.shared:
                        turn.keep(self.limiter.to_state(self.clock().timestamp()))
            finally:
                if not dispatched:
                    await self._release(key)
        except Exception:
            log.exception("push for a notice of %s failed", agent)

    async def _notice(
        self, key: str, agent: str, conversation: str, item: Item, pane: str | None
    ) -> bool:
        """The notice's push decided (``decide``, as an ask's, without webhooks) in the
        transaction that reads its facts and stores it, then sent; whether it was
        dispatched."""
        now, machine = self.clock(), self.machine
        pane_key = f"{machine}/{agent}/{conversation}"
        made = _Made(agent, NoticeRef(conversation))
        said = f"notice {item.id}"

        def decided(stored: OnceFacts) -> Decision:
            facts = Facts(
                stored.state, stored.reason, stored.pending, stored.devices, machine, agent,
                pane_key, quiet=stored.state == "done", member=True,
            )  # fmt: skip
            showing = stored.state != "done" and self.showing(agent, conversation)
            plan = made.plan = decide(facts, self.limiter, showing, now)
            if plan.send_to and plan.summary is not None:
                host = plan.summary.host
                made.note = ManyAsksNotification(
                    machine=machine, agent=agent, host=host, push_id=key
                )
            elif plan.send_to:
                where = (machine, agent, conversation)
                made.note = _notice_note(key, where, item, pane, self.redact)
            return self._stored(key, now, made, f"{said}: {plan.reason}", said)

        await self.repo.decide(key, decided)
        return self._carry_out(key, made)

    def _notification(
        self, key: str, plan: Plan, machine: str, agent: str, ask: Ask, pane: str | None
    ) -> Notification:
        if plan.summary is not None:
            return ManyAsksNotification(
                machine=machine, agent=agent, host=plan.summary.host, push_id=key
            )
        # ``ask`` comes masked (X1); the payload masks again as it cleans and cuts: a token cut
        # in half is no longer recognised.
        pane_name = clean(pane or agent, TITLE_LIMIT, redact=self.redact).text
        return AskNotification(
            machine=machine,
            agent=agent,
            conversation=ask.conversation,
            ask=ask.id,
            pane_key=f"{machine}/{agent}/{ask.conversation}",
            pane=pane_name,
            title=ask.push_title or ask.title or None,
            line=ask.push_line or None,
            deadline=ask.deadline.timestamp() if ask.deadline else None,
            push_id=key,
        )

    def _dispatch(
        self, key: str, devices: list[Device], note: Notification, agent: str, ask: Subject
    ) -> bool:
        """Send in the background; each delivery is logged against its ask, and the ask is
        done once every device has a lasting outcome. Whether anything was scheduled."""
        registered = {d.id: d.registered_at for d in devices}
        left = len(devices)

        async def delivered(delivery: Delivery) -> None:
            nonlocal left
            try:
                await self._delivered(delivery, agent, ask, registered.get(delivery.device_id))
                await self.health.record(devices, delivery)
                if lasting(delivery):
                    await self._mark_delivered(key, delivery)
                if delivery.ok and isinstance(note, AskNotification):
                    self.withdrawals.pushed(key)
                    await self.withdrawals.sent_late(key, delivery.device_id)
            finally:
                left -= 1
                if left == 0:
                    await self._release(key)

        return self.dispatcher.dispatch(devices, note, on_delivery=delivered) > 0

    async def _mark_delivered(self, key: str, delivery: Delivery) -> None:
        """Note a device's lasting outcome; the ask is done when no device it is owed to
        (and still registered) is left without one."""
        at = self.clock().timestamp()
        if await self.repo.delivered(key, delivery.device_id, delivery.outcome.value, at):
            self._owed.discard(key)

    async def owed_loop(
        self, interval: float, open_asks: Callable[[], list[tuple[str, Ask, str | None]]]
    ) -> None:
        """On a store shared by several workers, every ``interval`` s: an open ask whose push
        is owed and that no worker is sending (the one that was died) is sent now (P3), to
        the devices still owed it. ``open_asks``: (agent, ask, pane) of every open ask."""
        while True:
            await asyncio.sleep(interval)
            try:
                owed = await self.repo.owed()
                for agent, ask, pane in open_asks() if owed else []:
                    key = self._key(agent, ask, None)
                    if key in owed and key not in self._busy:
                        await self.ask_raised(agent, ask, pane, from_snapshot=True)
            except Exception:  # the store unreachable for now: the next round looks again
                log.exception("owed pushes not looked for")

    def left_by_holder(self, agent: str) -> bool:
        """Whether this worker kept notices of the agent its holder decides."""
        return bool(self._notices.get(agent))

    async def taken_over(self, agent: str, asks: Sequence[tuple[Ask, str | None]]) -> None:
        """An agent this worker took over without a snapshot (another worker stopped, or
        died, maybe with push decisions in flight): each of ``asks`` (ask, pane: the open
        asks the old holder left), and of the notices with a push seen as it held the agent
        (:meth:`notice_seen`), with no decision stored is decided now (the asks quietly);
        one another worker is deciding is waited out (:meth:`_claim`), then passed over if
        that worker decided it. Never raises."""
        keyed = {self._key(agent, ask, None): (ask, pane) for ask, pane in asks}
        notices = self._notices.pop(agent, {})
        try:
            left = await self.repo.undecided([*keyed, *notices]) if keyed or notices else set()
        except Exception:
            log.exception("push decisions left of %s not looked for", agent)
            return
        asks_left = [keyed[k] for k in sorted(left) if k in keyed]
        notices_left = [notices[k] for k in notices if k in left]
        await asyncio.gather(
            *(self.ask_raised(agent, *one, from_snapshot=True) for one in asks_left),
            *(self.notice_pushed(agent, *one, patient=True) for one in notices_left),
        )

    def owes(self, agent: str, ask: Ask, *, machine: str | None = None) -> bool:
        """Whether a push for the ask was seen owed in this run, or reached a device (then
        :meth:`ask_resolved` has something to write or withdraw; else the caller need not
        start it)."""
        if not self._owed and not self.withdrawals.notified:
            return False  # the common case, without building the key
        key = self._key(agent, ask, machine)
        return key in self._owed or key in self.withdrawals.notified

    async def ask_resolved(self, agent: str, ask: Ask, *, machine: str | None = None) -> None:
        """The ask was answered, expired or withdrawn: a push still owed for it is not sent
        in any later run (a lasting reason, logged), and every device that was sent it gets
        its withdrawal. Never raises. ``machine``: as :meth:`ask_raised`."""
        if not self.owes(agent, ask, machine=machine):
            return  # nothing owed for it in this run: no write on the answer path
        key = self._key(agent, ask, machine)
        owed = key in self._owed
        self._owed.discard(key)
        try:
            await self.withdrawals.ask_closed(key)
            if owed and await self.repo.resolved(key, RESOLVED):
                await self._log(agent, ask, "suppressed", RESOLVED)
        except Exception:
            log.exception("push state of a resolved ask of %s not written", agent)

    async def _withdrawn(
        self, delivery: Delivery, note: Withdrawal, registered_at: float | None
    ) -> None:
        """Log a withdrawal's delivery (a token gone removes the device, as for a push)."""
        outcome = WITHDRAWN if delivery.ok else delivery.outcome.value
        reason = "withdrawal" if delivery.ok else f"withdrawal: {delivery.reason}"
        if delivery.outcome is Outcome.GONE:
            await self.repo.remove(delivery.device_id, registered_at)
        at = self.clock().isoformat()
        entry = LogEntry(
            at, note.agent, note.conversation, note.ask, delivery.device_id, outcome, reason,
            delivery.provider_id,
        )  # fmt: skip
        await self._write_log(entry)

    async def _delivered(
        self, delivery: Delivery, agent: str, ask: Subject, registered_at: float | None
    ) -> None:
        reason = delivery.reason
        if delivery.outcome is Outcome.GONE:
            # Only the registration the push went to: a phone that registered again while
            # the push was out has a newer token than the one the service reports gone.
            if await self.repo.remove(delivery.device_id, registered_at):
                reason = f"token gone, device removed ({reason})" if reason else "token gone"
            else:
                reason = f"token gone, but the phone registered again ({reason})"
        entry = self._entry(agent, ask, delivery.device_id, delivery.outcome.value, reason)
        await self._write_log(dataclasses.replace(entry, provider_id=delivery.provider_id))

    def answered(
        self, agent: str, ask_id: str, request_id: str, phone: dict[str, str] | None
    ) -> None:
        """An answer the agent took: each webhook is told which phone gave it (no texts)."""
        answered = {"ask_id": ask_id, "request_id": request_id, "phone": phone}
        body = msgspec.json.encode({"machine": self.machine, "agent": agent, "answered": answered})
        for hook in self.targets.webhooks:
            task = asyncio.create_task(self._post_answered(hook, body, request_id), name="webhook")
            self._hooks.add(task)
            task.add_done_callback(self._hooks.discard)

    async def _post_answered(self, hook: WebhookTarget, body: bytes, request_id: str) -> None:
        try:
            # The same id on every try and for the same tap: a receiver drops duplicates.
            result = await hook.post(body, webhook_id=webhook_id("answered\0" + request_id))
            if not result.ok:
                log.info("webhook of answer %s failed: %s", request_id, result.reason)
        except Exception:
            log.exception("webhook of answer %s failed", request_id)

    def _spawn_hook(
        self, hook: WebhookTarget, key: str, agent: str, ask: Ask, pane: str | None
    ) -> None:
        task = asyncio.create_task(self._webhook(hook, key, agent, ask, pane), name="webhook")
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    async def _webhook(
        self, hook: WebhookTarget, key: str, agent: str, ask: Ask, pane: str | None
    ) -> None:
        # ``ask`` comes masked by _decide (X1). The keys stay English; ``text`` adds Collie's
        # words in the default language (P2).
        cat = self.config.languages.default
        pane_name = clean(pane or agent, TITLE_LIMIT, redact=self.redact).text
        text = {"headline": cat.fmt("push_permission", pane=pane_name)}
        body = msgspec.json.encode(
            {"machine": self.machine, "agent": agent, "ask": ask, "lang": cat.lang, "text": text}
        )
        try:
            # The same id on every try, derived from the ask: a receiver drops duplicates;
            # kept owed in the store until taken, so a stop or a crash does not lose it.
            ok, reason = await self.owed_hooks.post(hook, webhook_id(key), body)
            outcome = "sent" if ok else "failed"
            await self._write_log(self._entry(agent, ask, "webhook", outcome, reason))
        except Exception:
            log.exception("webhook for an ask of %s failed", agent)

    def _entry(
        self, agent: str, ask: Subject, device: str | None, outcome: str, reason: str | None
    ) -> LogEntry:
        at = self.clock().isoformat()
        return LogEntry(at, agent, ask.conversation, ask.id, device, outcome, reason)

    async def _log(
        self,
        agent: str,
        ask: Subject,
        outcome: str,
        reason: str | None,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        entry = self._entry(agent, ask, None, outcome, reason)
        await self._write_log(entry, settle=settle, owe=owe)
        _say(entry)

    async def _write_log(
        self,
        entry: LogEntry,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        """Append to the delivery log (with a decision to store, in the same transaction)
        and tell the phones."""
        await self.repo.log(entry, settle=settle, owe=owe)
        self._told(entry)

    def _told(self, entry: LogEntry) -> None:
        """A log line the store has: the phones are told."""
        self.publish(
            "push.logged",
            {
                "agent": entry.agent,
                "ask": entry.ask,
                "device": entry.device,
                "outcome": entry.outcome,
                "reason": entry.reason,
            },
        )


def _say(entry: LogEntry) -> None:
    """A decision's log line, once the store has it: a worker killed mid-decision never logs
    one it did not make."""
    log.info("push %s/%s: %s (%s)", entry.agent, entry.ask, entry.outcome, entry.reason)


def _notice_note(
    key: str,
    where: tuple[str, str, str],
    item: Item,
    pane: str | None,
    redact: Callable[[str], str],
) -> NoticeNotification:
    """A notice's push (P2): the agent's title, else the notice's words (a ``say_`` key, worded
    per device) or text; its line. The texts go raw: the payload cleans, masks and cuts them."""
    push, words = item.push, item.words
    assert push is not None
    said = None
    if words is not None and words.key.startswith(SAY_PREFIX) and push.title is None:
        said = (words.key, tuple(words.args.items()))
    machine, agent, conversation = where
    return NoticeNotification(
        machine=machine,
        agent=agent,
        conversation=conversation,
        item=item.id,
        pane_key="/".join(where),
        pane=clean(pane or agent, TITLE_LIMIT, redact=redact).text,
        title=push.title or item.text,
        line=push.line,
        words=said,
        push_id=key,
    )


def _token(body: DeviceIn) -> tuple[str, WebPushKeys | None]:
    """The device's token (a Web Push endpoint) and its subscription's keys.

    Raises:
        DeviceError: a field missing, or one that does not belong to the provider.
    """
    if body.provider is not Provider.WEBPUSH:
        if body.token is None or body.endpoint is not None or body.keys is not None:
            raise DeviceError(f"{body.provider.value} takes a token, not an endpoint or keys")
        return body.token.strip(), None
    if body.endpoint is None or body.keys is None or body.token is not None:
        raise DeviceError("webpush takes an endpoint and keys (PushSubscription.toJSON())")
    try:
        endpoint = check_endpoint(body.endpoint)
        keys = subscription_keys(body.keys.p256dh, body.keys.auth)
    except ValueError as exc:
        raise DeviceError(str(exc)) from None
    return endpoint, keys


async def _vapid_key(notify: NotifyStore) -> ec.EllipticCurvePrivateKey:
    """The gateway's VAPID key pair: made on the first start, then always the same."""
    stored = await notify.kv.get(VAPID_KEY)
    if stored is not None:
        try:
            return vapid.from_pem(stored)
        except ValueError:
            log.warning("stored VAPID key unreadable: a new one (Web Push devices re-subscribe)")
    key = vapid.generate()
    await notify.kv.put(VAPID_KEY, vapid.to_pem(key))
    return key
