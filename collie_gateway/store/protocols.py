"""What the services ask of the store: one Protocol per repository, and what only a store
shared by several workers has (:class:`SharedStore`: the shared log and the leases).

One set of repositories (``store/*.py``) implements them on either engine: the SQLite file
(the default) or PostgreSQL (several workers on one database). The services and the
composition root see only these protocols and ``store/values.py``; the store's contract
tests (``tests/collie_gateway/test_store_contract.py``) run them on both.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from collie_gateway.core.answers import Record, Settlement, Tap, TapDecision
from collie_gateway.core.mirror import AgentMirror
from collie_gateway.core.notes import Note
from collie_gateway.core.phones import Effect, Pairing, Phone
from collie_gateway.store.values import (
    Appended,
    Decision,
    Heard,
    Holding,
    Lease,
    LimiterTurn,
    LogEntry,
    LogRecord,
    OnceFacts,
    Owe,
    OwedWebhook,
    StoredEvent,
    Taken,
    WithdrawalDue,
)
from push import Device, Environment, Provider, WebPushKeys


class KvStore(Protocol):
    """Bytes under text keys."""

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, if any."""
        ...

    async def put(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key`` (replacing what was there)."""
        ...

    async def with_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every value whose key starts with ``prefix``, by the rest of its key."""
        ...


class CrewStore(Protocol):
    """Each crew member's last rows, by machine (W1)."""

    async def saved_rows(self) -> dict[str, bytes]:
        """Every member's last rows, by machine."""
        ...

    async def save_rows(self, machine: str, rows: bytes) -> None:
        """Keep a member's rows as last read."""
        ...


class MirrorsStore(Protocol):
    """Agents and their open conversations, as last mirrored; written in batches."""

    #: The lease epoch this worker holds an agent under (None: not held), set where several
    #: workers share the store: an agent's rows are written only while its epoch is live.
    fence: Callable[[str], int | None] | None

    async def load_mirrors(self, names: Iterable[str]) -> dict[str, AgentMirror]:
        """The last stored mirror of each named agent (these objects are then flushed)."""
        ...

    def mark(self, agent: str, conversation_id: str | None = None) -> None:
        """Note that ``agent`` (and one of its conversations) changed; a flush follows."""
        ...

    def mark_all(self, agent: str) -> None:
        """Note that every conversation of ``agent`` may have changed (a new snapshot)."""
        ...

    def start_flusher(self, interval: float = 0.05) -> None:
        """Flush marked changes in the background."""
        ...

    async def flush(self) -> None:
        """Write every marked change now, one transaction."""
        ...


class LedgerStore(Protocol):
    """The answer ledger's records and claims (T1)."""

    async def take(self, tap: Tap, now: str) -> tuple[TapDecision, Record | None]:
        """Decide a tap and write the decision; also the record as it was."""
        ...

    async def settle(self, settlement: Settlement, now: str) -> None:
        """Write a send's result, releasing the ask's claim when it says so."""
        ...

    async def accept(self, agent: str, ask_id: str, request_id: str, now: str) -> Record | None:
        """Settle an unsettled tap of this ask as accepted; None when there is none."""
        ...

    async def refuse(self, tap: Tap, reason: str, now: str) -> Record:
        """Record a tap refused without a send; an existing record wins."""
        ...

    async def record(self, request_id: str) -> Record | None:
        """The record of a request id."""
        ...

    async def unsettled(self) -> dict[str, tuple[str, str]]:
        """Every unsettled tap: request id -> (agent, ask id)."""
        ...

    async def pending(self, agent: str) -> list[Record]:
        """Unsettled taps of ``agent``, oldest first."""
        ...

    async def tapped(self, agent: str, ask_id: str) -> bool:
        """Whether any tap was recorded for this ask."""
        ...


class NotesStore(Protocol):
    """The gateway's own lines of each conversation (R3, R4, C3)."""

    async def save(self, agent: str, conv_id: str, key: str, note: Note) -> None:
        """Keep a note; a second note under the same key is ignored."""
        ...

    async def load(self, agent: str, conv_id: str) -> list[Note]:
        """The notes of one conversation, oldest first."""
        ...


class PushesStore(Protocol):
    """Devices and the push state of every ask (P1, P3)."""

    async def register(
        self,
        provider: Provider,
        token: str,
        environment: Environment,
        key: bytes | None,
        now: float,
        lang: str | None = None,
        phone: str | None = None,
        webpush: WebPushKeys | None = None,
    ) -> str:
        """Register or refresh a token of ``phone`` (a Web Push endpoint with its keys); the
        device id (the same for the same token); its pushes worded in ``lang``."""
        ...

    async def remove(self, device_id: str, registered_at: float | None = None) -> bool:
        """Forget a device (only if not registered again since ``registered_at``)."""
        ...

    async def devices(self) -> list[Device]:
        """Every registered device, oldest registration first."""
        ...

    async def claim(self, key: str) -> bool:
        """Take the right to decide and send the push of ``key`` (P3 across workers): False
        while another worker holds it. Held until :meth:`release` or the worker's end."""
        ...

    async def release(self, key: str) -> None:
        """Give back the claim on ``key``."""
        ...

    async def owed(self) -> set[str]:
        """Every once-key whose push is owed (decided, not yet delivered everywhere)."""
        ...

    async def undecided(self, keys: Collection[str]) -> set[str]:
        """Those of ``keys`` with no push decision stored (neither owed nor done)."""
        ...

    async def limiter_state(self) -> bytes | None:
        """The limiter's stored state."""
        ...

    def limiter_turn(self) -> contextlib.AbstractAsyncContextManager[LimiterTurn]:
        """One push decision's turn at the limiter (P1 across workers): while it is held no
        other worker decides; ``state`` is the limiter as stored (None: this process's own
        limiter is the truth) and what is ``keep``-ed is stored when the turn ends."""
        ...

    async def facts(self, key: str) -> OnceFacts:
        """What is known of a once-key."""
        ...

    async def decide(self, key: str, decide: Callable[[OnceFacts], Decision]) -> bool:
        """Read what is known of a once-key, ``decide`` with it and store the decision, in
        one transaction; whether the decision's ``finish`` finished the key."""
        ...

    async def finish(self, key: str) -> bool:
        """Mark ``key`` done unless a registered device still waits; whether it is done."""
        ...

    async def delivered(self, key: str, device_id: str, outcome: str, at: float) -> bool:
        """Note a device's lasting outcome; whether the key is now done."""
        ...

    async def resolved(self, key: str, reason: str) -> bool:
        """An owed key whose ask closed: done, with ``reason``; whether it was owed."""
        ...

    async def log(
        self,
        entry: LogEntry,
        *,
        settle: tuple[str, float, str] | None = None,
        owe: Owe | None = None,
    ) -> None:
        """Append to the delivery log, with a lasting decision or a push owed."""
        ...

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the delivery log, newest first."""
        ...


class PhonesStore(Protocol):
    """Phones, their token hashes, and pairing codes (store/phones.py has the SQL's words)."""

    async def add_pairing(self, pairing: Pairing) -> None:
        """Keep a new pairing code (its hash); codes long over are forgotten meanwhile."""
        ...

    async def pairing(self, pairing_id: str) -> tuple[Pairing, Phone | None, str | None] | None:
        """A pairing code by id, the phone it paired and the check number both show."""
        ...

    async def redeem(
        self,
        code_hash: str,
        now: datetime,
        make: Callable[[Pairing], tuple[Phone, str | None, str]],
    ) -> tuple[Effect, Phone | None]:
        """Decide a phone's code and keep the phone ``make`` builds: one transaction."""
        ...

    async def add_phone(self, phone: Phone, public_key: str | None = None) -> None:
        """Keep a phone made without a code."""
        ...

    async def phone(self, phone_id: str) -> Phone | None:
        """A phone by id, revoked or not."""
        ...

    async def phones(self) -> list[Phone]:
        """The phones not revoked, oldest pairing first."""
        ...

    async def active_ids(self) -> set[str]:
        """The ids of the phones not revoked."""
        ...

    async def revoke(self, phone_id: str, now: datetime) -> bool:
        """Revoke a phone and remove its push registrations; whether it was not yet revoked."""
        ...

    async def data_version(self) -> int:
        """A number that moves when another process changed the phones."""
        ...

    async def seen(self, seen: list[tuple[str, datetime, str | None]]) -> None:
        """Write when and from where phones were last seen: (phone id, when, address)."""
        ...


class NotifyStore(Protocol):
    """Withdrawals, webhooks owed, and the small state of notifications (store/notify.py)."""

    @property
    def kv(self) -> KvStore:
        """Named values (the VAPID key, push health)."""
        ...

    async def notified(self, since: float) -> set[str]:
        """Keys of asks pushed since ``since`` and not yet withdrawn from every device."""
        ...

    async def due(self, key: str, at: float, device: str | None = None) -> WithdrawalDue | None:
        """The withdrawal of ``key`` to the devices still owed it, marked pending (once)."""
        ...

    async def withdrawn(self, key: str, device: str, outcome: str, at: float) -> None:
        """Note how a device's withdrawal ended."""
        ...

    async def owe_webhook(self, hook: OwedWebhook, at: float) -> None:
        """Keep a delivery until it is taken (or refused for good)."""
        ...

    async def webhook_done(self, hook_id: str, url: str) -> None:
        """The delivery was taken, or refused for good: not sent again."""
        ...

    async def owed_webhooks(self) -> list[OwedWebhook]:
        """Every delivery owed, oldest first."""
        ...


class EventLogStore(Protocol):
    """The workers' shared log: phone events and what agents' links read, in one sequence
    (commit order); entries written for an agent's link are fenced by its lease's epoch."""

    async def store_id(self) -> str:
        """This store's id: the first part of every event id."""
        ...

    async def publish(self, type_: str, data: bytes) -> int:
        """One phone event in a transaction of its own; its number."""
        ...

    async def write(self, records: Sequence[LogRecord]) -> Appended:
        """``records`` in one transaction, in order (fenced entries checked there)."""
        ...

    async def bounds(self) -> tuple[int, int]:
        """(the oldest number kept, the last number given)."""
        ...

    async def since(self, seq: int, limit: int = 1000) -> list[StoredEvent] | None:
        """The entries after ``seq``; None when ``seq`` is not a number this log can go on
        from (the phone must reset)."""
        ...

    async def after(self, seq: int, limit: int = 1000) -> list[StoredEvent]:
        """The entries after ``seq`` still kept, oldest first (at most ``limit``)."""
        ...

    async def last_read(self, agent: str, epoch: int) -> StoredEvent | None:
        """The last entry of what a link of ``agent`` read under ``epoch`` (``~link``,
        ``~snapshot``, ``~event`` or ``~sync``), if one is still kept."""
        ...

    async def prune(self, keep: int) -> None:
        """Keep only the newest ``keep`` entries."""
        ...

    def hints(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Heard]]:
        """What each write announced: its last number, its entries when they fit (one may
        be lost: read on a timer too)."""
        ...


class LeasesStore(Protocol):
    """Agents' leases: one holder per agent, an epoch as fencing token."""

    @property
    def seconds(self) -> float:
        """A lease's time, renewed before it runs out."""
        ...

    @property
    def holder(self) -> str:
        """This worker's name (``host:pid``)."""
        ...

    async def take(self, agent: str) -> Lease | None:
        """The agent's lease with a new epoch, if it is free or expired; else None."""
        ...

    async def take_over(self, agent: str) -> Taken | None:
        """As :meth:`take`, saying which worker gave the lease back, if one did."""
        ...

    async def heartbeat(self) -> None:
        """Say this worker is live for another lease's time."""
        ...

    async def survey(self) -> list[Holding]:
        """Every live lease and heartbeat, now."""
        ...

    async def quit(self) -> None:
        """This worker stops: its heartbeat ends now."""
        ...

    async def renew(self, lease: Lease) -> bool:
        """Extend a lease still held; False: it expired or was taken."""
        ...

    async def renew_all(self, leases: list[Lease]) -> set[str]:
        """Extend every lease still held; the agents whose lease was."""
        ...

    async def give_back(self, lease: Lease) -> None:
        """Free a lease at once, for another worker to take."""
        ...


class SharedStore(Protocol):
    """What only a store several workers share has (PostgreSQL): the shared log and the
    leases."""

    def event_log(self) -> EventLogStore:
        """The shared log."""
        ...

    def leases(self, holder: str, seconds: float) -> LeasesStore:
        """The leases, taken as ``holder`` for ``seconds`` at a time."""
        ...
