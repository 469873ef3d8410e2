"""Phones, the shell: pairs a phone with a code, checks each request's credential, revokes
(the token at once, the phone's open streams within a second, its push registrations), and
remembers when and from where each phone was last seen. The rules are
:mod:`collie_gateway.core.phones`; the SQL is :mod:`collie_gateway.store.phones`.

A token is never logged: the log names the phone's id and name.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final, Protocol

from collie_gateway.core.phones import (
    ADMIN,
    CODE_TTL,
    Caller,
    Effect,
    FailureLimiter,
    Pairing,
    Phone,
    Scope,
    check_number,
    code_hash,
    new_code,
    new_id,
    new_token,
    token_hash,
    token_matches,
    token_phone,
)
from collie_gateway.services.tasks import cancelled
from collie_gateway.store.protocols import PhonesStore

log = logging.getLogger(__name__)

SEEN_EVERY: Final = timedelta(minutes=1)  # ours: a phone's last_seen is written this often
WATCH_EVERY: Final = 0.5  # seconds: a phone revoked from the CLI (in the file) is noticed


class Ending(Protocol):
    """An open live stream: ``end`` makes it finish what it is writing and close."""

    def end(self) -> None: ...


@dataclass(frozen=True, slots=True)
class NewCode:
    """A pairing code just made (the code itself is shown once, never kept)."""

    pairing_id: str
    code: str
    scope: Scope
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Paired:
    """A phone that paired: its token (shown to it once) and the check number."""

    phone: Phone
    token: str
    check: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A pairing refused: ``effect`` names why (wrong, used, expired), or ``retry_after``
    seconds when the address failed too often."""

    effect: Effect
    retry_after: int | None = None


class Phones:
    """Paired phones for one gateway. ``await start()`` once the file is open; ``close``."""

    def __init__(
        self,
        repo: PhonesStore,
        *,
        admin_token: str | None,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float],
        code_ttl: timedelta = CODE_TTL,
        shared: bool = False,
    ) -> None:
        self.repo = repo
        self.shared = shared  # other workers pair phones in the same store
        self._admin = admin_token.encode() if admin_token else None
        self._clock = clock
        self._monotonic = monotonic
        self.code_ttl = code_ttl
        self.limiter = FailureLimiter()
        self._active: set[str] = set()
        self._streams: dict[str, set[Ending]] = {}
        self._seen: dict[str, tuple[datetime, str | None]] = {}
        self._written: dict[str, datetime] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Read which phones are paired, and notice from now on those revoked elsewhere."""
        self._active = await self.repo.active_ids()
        self._watcher = asyncio.create_task(self._watch(), name="phones-watch")

    async def close(self) -> None:
        """Stop watching; write when phones were last seen."""
        await cancelled(self._watcher)
        self._watcher = None
        await asyncio.gather(*self._writes, return_exceptions=True)
        await self._write_seen()

    @property
    def any_paired(self) -> bool:
        """Whether a phone is paired (then loopback, too, needs a credential)."""
        return bool(self._active)

    async def none_paired(self) -> bool:
        """Whether no phone is paired, as of now on every worker: with other workers
        (``shared``), while this one knows of none, the store is read, so a phone paired on
        another worker closes this one to a request without a credential at once (one
        revoked elsewhere keeps it closed until the next look, within ``WATCH_EVERY``)."""
        if self._active:
            return False
        if not self.shared:
            return True
        active = await self.repo.active_ids()
        self._active |= active
        return not active

    # --- pairing ---------------------------------------------------------------------------

    async def new_code(self, scope: Scope = Scope.ANSWER) -> NewCode:
        """Make a pairing code, valid for ``code_ttl`` and one phone."""
        code, now = new_code(), self._clock()
        pairing = Pairing(new_id("k-"), code_hash(code), scope, now, now + self.code_ttl)
        await self.repo.add_pairing(pairing)
        log.info(
            "pairing %s made (%s), valid until %s", pairing.pairing_id, scope, pairing.expires_at
        )
        return NewCode(pairing.pairing_id, code, scope, pairing.expires_at)

    def retry_after(self, address: str | None) -> int | None:
        """Seconds ``address`` must wait before it tries a code again, or None."""
        return self.limiter.retry_after(address, self._monotonic())

    def failed(self, address: str | None) -> None:
        """Count a failed pairing from ``address`` (a wrong code, or no code at all)."""
        self.limiter.failed(address, self._monotonic())

    async def pair(
        self,
        code: str,
        name: str,
        scope: Scope | None,
        public_key: str | None,
        address: str | None,
    ) -> Paired | Refused:
        """Pair a phone with a code from ``address``: at most the code's scope (a phone may
        ask for less), a new token, the check number; or why not."""
        wait = self.retry_after(address)
        if wait is not None:
            return Refused(Effect.NOTHING, retry_after=wait)
        # Counted as a failure before the code is looked up, so tries sent at once cannot all
        # pass the limit while each waits for the store; taken back if it pairs.
        tried = self._monotonic()
        self.limiter.failed(address, tried)
        made: list[tuple[str, str]] = []

        def make(pairing: Pairing) -> tuple[Phone, str | None, str]:
            phone_id = new_id("p-")
            token = new_token(phone_id)
            narrowed = Scope.READ if Scope.READ in (pairing.scope, scope) else Scope.ANSWER
            phone = Phone(phone_id, name, narrowed, self._clock(), token_hash(token))
            check = check_number(code, public_key)
            made.append((token, check))
            return phone, public_key, check

        effect, phone = await self.repo.redeem(code_hash(code), self._clock(), make)
        if phone is None:
            log.info("pairing refused from %s: %s", address, effect)
            return Refused(effect)
        self.limiter.forgive(address, tried)
        self._active.add(phone.phone_id)
        token, check = made[0]
        log.info("phone %s (%r, %s) paired from %s", phone.phone_id, name, phone.scope, address)
        return Paired(phone, token, check)

    # --- credentials -----------------------------------------------------------------------

    def is_admin(self, given: str) -> bool:
        """Whether ``given`` is the admin token (compared in constant time)."""
        if self._admin is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._admin)

    async def caller(self, given: str, address: str | None) -> Caller | None:
        """Whose credential ``given`` is (the admin token or a phone's token), or None."""
        if self.is_admin(given):
            return ADMIN
        phone_id = token_phone(given)
        if phone_id is None:
            return None
        phone = await self.repo.phone(phone_id)
        if phone is None or phone.revoked_at is not None:
            return None
        if not token_matches(given, phone.token_hash):
            return None
        self._saw(phone_id, address)
        return phone.caller

    def _saw(self, phone_id: str, address: str | None) -> None:
        now = self._clock()
        self._seen[phone_id] = (now, address)
        last = self._written.get(phone_id)
        if last is None or now - last >= SEEN_EVERY:
            self._written[phone_id] = now
            task = asyncio.create_task(self._write_seen(), name="phones-seen")
            self._writes.add(task)
            task.add_done_callback(self._written_seen)

    def _written_seen(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("writing when phones were last seen failed: %s", task.exception())

    async def _write_seen(self) -> None:
        seen, self._seen = self._seen, {}
        if seen:
            await self.repo.seen([(pid, when, addr) for pid, (when, addr) in seen.items()])

    # --- listing and revoking --------------------------------------------------------------

    async def phones(self) -> list[Phone]:
        """The phones paired and not revoked, with when and from where each was last seen
        (also what is not yet written)."""
        rows = await self.repo.phones()
        out = []
        for phone in rows:
            seen = self._seen.get(phone.phone_id)
            if seen is not None:
                phone = _with_seen(phone, *seen)
            out.append(phone)
        return out

    async def revoke(self, phone_id: str) -> bool:
        """Revoke a phone: its token answers 401 from now on, its push registrations go (the
        same transaction), its streams end; whether it was a phone not yet revoked."""
        revoked = await self.repo.revoke(phone_id, self._clock())
        self._gone(phone_id)
        if revoked:
            log.info("phone %s revoked", phone_id)
        return revoked

    def _gone(self, phone_id: str) -> None:
        self._active.discard(phone_id)
        self._seen.pop(phone_id, None)
        for stream in self._streams.pop(phone_id, set()):
            stream.end()

    def stream_opened(self, phone_id: str, stream: Ending) -> None:
        """A phone's live stream opened: it ends when the phone is revoked."""
        self._streams.setdefault(phone_id, set()).add(stream)

    def stream_closed(self, phone_id: str, stream: Ending) -> None:
        """A phone's live stream closed."""
        streams = self._streams.get(phone_id)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._streams[phone_id]

    async def _watch(self) -> None:
        """Notice phones revoked (or paired) by another process on the same file, e.g. the
        CLI: their streams end within a second."""
        version = await self.repo.data_version()
        while True:
            await asyncio.sleep(WATCH_EVERY)
            try:
                now = await self.repo.data_version()
                if now == version:
                    continue
                version = now
                active = await self.repo.active_ids()
            except Exception:  # the file is busy or gone: try again at the next turn
                log.exception("reading the phones failed; will retry")
                continue
            # A phone paired and revoked between two looks was never in ``_active``; its
            # streams end too.
            for phone_id in (self._active | self._streams.keys()) - active:
                self._gone(phone_id)
            self._active = active


def _with_seen(phone: Phone, when: datetime, address: str | None) -> Phone:
    return replace(phone, last_seen=when, last_address=address)
