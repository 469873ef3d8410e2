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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec

from collie_gateway.core.push_plan import Facts, Plan, decide
from collie_gateway.services.phonebus import Publish
from collie_gateway.services.targets import PushTargets, TargetsFactory
from collie_gateway.store.protocols import PushesStore
from collie_gateway.store.pushes import LogEntry, Owe
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
    WebhookTarget,
    once_key,
    valid_apns_token,
    webhook_id,
)
from wire.messages import Ask, Option

Clock = Callable[[], datetime]

log = logging.getLogger(__name__)

PRESENCE_TTL = timedelta(seconds=45)  # ours: a screen not confirmed for this long is stale
PUSH_GRACE = 2.0  # ours: at a stop, all pending pushes together get this long
RESOLVED = "the ask was resolved before its push was delivered"


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
    environment: Environment | None = None  # None: the gateway's COLLIE_APNS_ENVIRONMENT
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


class Pushing:
    """The gateway's push service: devices, presence, and each ask's push."""

    def __init__(
        self,
        repo: PushesStore,
        publish: Publish,
        config: PushConfig,
        redact: Callable[[str], str],
        targets: PushTargets,
    ) -> None:
        self.repo = repo
        self.publish = publish
        self.config = config
        self.clock = config.clock
        self.machine = config.machine
        self.redact = redact
        self.targets = targets
        self.limiter = PushLimiter()
        self.presence: dict[str, Presence] = {}
        self.dispatcher = Dispatcher(targets.senders)
        self._busy: set[str] = set()  # once keys decided or being sent in this run
        self._owed: set[str] = set()  # once keys seen owed in this run (ask_resolved)
        self._hooks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        repo: PushesStore,
        publish: Publish,
        config: PushConfig,
        content: Content,
        factory: TargetsFactory | None,
    ) -> Pushing:
        """The service, with the limiter's stored state (P1 survives a restart)."""
        targets = factory(content) if factory is not None else PushTargets()
        service = cls(repo, publish, config, content.redact, targets)
        state = await repo.limiter_state()
        if state is not None:
            service._load_limiter(state)
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
        environment = body.environment or Environment(self.config.apns_environment)
        now = self.clock().timestamp()
        return await self.repo.register(body.provider, token, environment, key, now)

    async def remove(self, device_id: str) -> bool:
        """Forget a device; whether it was registered."""
        return await self.repo.remove(device_id)

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
        if key in self._busy or not await self.repo.claim(key):
            if not quiet:
                await self._log(agent, ask, "suppressed", "a push for this ask is on its way")
            return
        self._busy.add(key)
        dispatched = False
        try:
            dispatched = await self._plan(key, agent, ask, pane, quiet, member)
        finally:
            if not dispatched:
                await self._release(key)

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
        """Decide the ask's push (:func:`~collie_gateway.core.push_plan.decide`) and carry the
        plan out; whether a push was dispatched (``key`` is then released once every delivery
        is reported)."""
        now = self.clock()
        machine = member or self.machine
        stored = await self.repo.facts(key)
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
        # A member's chat on a lead's phone is the screen ``chat:<machine>/<agent>:<id>``.
        shown_as = agent if member is None else f"{member}/{agent}"
        showing = stored.state != "done" and self.showing(shown_as, ask.conversation)
        plan = decide(facts, self.limiter, showing, now)
        if stored.state != "done":
            self._owed.discard(key)  # set again below if it stays owed
        if plan.webhooks:
            for hook in self.targets.webhooks:
                self._spawn_hook(hook, key, agent, ask)
        if plan.finish:
            if not await self.repo.finish(key):
                self._owed.add(key)
            return False
        if not plan.send_to:
            if plan.outcome is not None:
                settle = (key, now.timestamp(), plan.settle) if plan.settle else None
                await self._log(agent, ask, plan.outcome, plan.reason, settle=settle)
            return False
        owe = Owe(
            key,
            now.timestamp(),
            tuple(d.id for d in plan.send_to),
            self.limiter.to_state(now.timestamp()),
        )
        await self._log(agent, ask, "dispatched", plan.reason, owe=owe)
        self._owed.add(key)
        note = self._notification(key, plan, machine, agent, ask, pane)
        return self._dispatch(key, list(plan.send_to), note, agent, ask)

    def _notification(
        self, key: str, plan: Plan, machine: str, agent: str, ask: Ask, pane: str | None
    ) -> Notification:
        if plan.summary is not None:
            return ManyAsksNotification(
                machine=machine, agent=agent, host=plan.summary.host, push_id=key
            )
        # Masked before it is cut (X1): a token cut in half is no longer recognised.
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

    def owes(self, agent: str, ask: Ask, *, machine: str | None = None) -> bool:
        """Whether a push for the ask was seen owed in this run (:meth:`ask_resolved` then
        has something to write; else the caller need not start it)."""
        if not self._owed:
            return False  # the common case, without building the key
        return self._key(agent, ask, machine) in self._owed

    async def ask_resolved(self, agent: str, ask: Ask, *, machine: str | None = None) -> None:
        """The ask was answered, expired or withdrawn: a push still owed for it is not sent
        in any later run (a lasting reason, logged). Never raises. ``machine``: as
        :meth:`ask_raised`."""
        if not self.owes(agent, ask, machine=machine):
            return  # nothing owed for it in this run: no write on the answer path
        key = self._key(agent, ask, machine)
        self._owed.discard(key)
        try:
            if await self.repo.resolved(key, RESOLVED):
                await self._log(agent, ask, "suppressed", RESOLVED)
        except Exception:
            log.exception("push state of a resolved ask of %s not written", agent)

    async def _delivered(
        self, delivery: Delivery, agent: str, ask: Ask, registered_at: float | None
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

    def _spawn_hook(self, hook: WebhookTarget, key: str, agent: str, ask: Ask) -> None:
        task = asyncio.create_task(self._webhook(hook, key, agent, ask), name="webhook")
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    async def _webhook(self, hook: WebhookTarget, key: str, agent: str, ask: Ask) -> None:
        # Every text of the ask leaves the machine masked (X1): option labels, form field
        # labels and the labels of a select's options too.
        shown = masked_ask(ask, self.redact)
        body = msgspec.json.encode({"machine": self.machine, "agent": agent, "ask": shown})
        try:
            # The same id on every try, derived from the ask: a receiver drops duplicates.
            result = await hook.post(body, webhook_id=webhook_id(key))
            outcome = "sent" if result.ok else "failed"
            await self._write_log(self._entry(agent, ask, "webhook", outcome, result.reason))
        except Exception:
            log.exception("webhook for an ask of %s failed", agent)

    def _entry(
        self, agent: str, ask: Ask, device: str | None, outcome: str, reason: str | None
    ) -> LogEntry:
        at = self.clock().isoformat()
        return LogEntry(at, agent, ask.conversation, ask.id, device, outcome, reason)

    async def _log(
        self,
        agent: str,
        ask: Ask,
        outcome: str,
        reason: str | None,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        log.info("push %s/%s: %s (%s)", agent, ask.id, outcome, reason)
        entry = self._entry(agent, ask, None, outcome, reason)
        await self._write_log(entry, settle=settle, owe=owe)

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


def masked_ask(ask: Ask, mask: Callable[[str], str]) -> Ask:
    """The ask with every text masked (X1), as a webhook sends it."""
    return msgspec.structs.replace(
        ask,
        title=mask(ask.title),
        text=mask(ask.text),
        push_title=mask(ask.push_title) if ask.push_title else None,
        push_line=mask(ask.push_line) if ask.push_line else None,
        options=[_masked_option(o, mask) for o in ask.options],
        fields=[
            msgspec.structs.replace(
                f, label=mask(f.label), options=[_masked_option(o, mask) for o in f.options]
            )
            for f in ask.fields
        ],
    )


def _masked_option(option: Option, mask: Callable[[str], str]) -> Option:
    return msgspec.structs.replace(option, label=mask(option.label))
