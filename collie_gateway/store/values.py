"""The values the repositories take and give (beside the core's), and the store keys the
services name: what ``store/protocols.py`` speaks in, the same on either engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from push import Device

VAPID_KEY: Final = "vapid_key"  # kv: the gateway's VAPID private key (PEM), made once
HEALTH_KEY: Final = "push_health"  # kv: PushHealth's state
SENT: Final = "sent"  # a once-key done: a device took its push
NOT_DELIVERED: Final = "no device took it (gone or refused)"  # done: none did


@dataclass(frozen=True, slots=True)
class OnceFacts:
    """What the store knows of one once-key, read in one round trip."""

    state: str | None  # None (never decided), "owed" or "done"
    reason: str | None  # why it is done, when it is
    pending: frozenset[str]  # devices still owed the push
    devices: tuple[Device, ...]  # every registered device (empty when done)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the delivery log."""

    at: str
    agent: str | None
    conversation: str | None
    ask: str | None
    device: str | None
    outcome: str
    reason: str | None
    provider_id: str | None = None


@dataclass(slots=True)
class LimiterTurn:
    """One push decision's turn at the limiter: its stored state (None when this process's
    own limiter is the truth), and the state to store when the turn ends."""

    shared: bool = False  # other workers decide too: read and store the limiter each turn
    state: bytes | None = None
    kept: bytes | None = None

    def keep(self, state: bytes) -> None:
        """Store ``state`` when the turn ends (where the store shares the limiter)."""
        self.kept = state


@dataclass(frozen=True, slots=True)
class Owe:
    """A push decided: owed to ``devices`` until each has a lasting outcome."""

    key: str
    at: float
    devices: tuple[str, ...]
    limiter_state: bytes
    note: bytes | None = None  # the ask push's withdrawal (JSON), kept for when it closes


@dataclass(frozen=True, slots=True)
class Decision:
    """What a push decision stores, in the transaction that read its facts: a log line (with
    a lasting decision, ``settle``: key, time, reason; or a push owed, ``owe``), and/or the
    key finished (``finish``)."""

    entry: LogEntry | None = None
    settle: tuple[str, float, str] | None = None
    owe: Owe | None = None
    finish: bool = False


@dataclass(frozen=True, slots=True)
class WithdrawalDue:
    """An ask push to take back: its stored withdrawal (JSON) and the devices that were sent
    the push and have not been sent its withdrawal."""

    note: bytes
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class OwedWebhook:
    """A webhook delivery not yet taken: sent again by the next run under the same id."""

    id: str
    url: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Lease:
    """An agent's lease held by one worker: its agent, holder and epoch (the fencing
    token)."""

    agent: str
    holder: str
    epoch: int


#: The prefix of a worker's heartbeat row among the leases (``~worker/<host>:<pid>``); a
#: name with ``/`` is never an agent's (sources.py refuses it).
WORKER_ROW: Final = "~worker/"


@dataclass(frozen=True, slots=True)
class Taken:
    """A lease just taken, and the worker that gave it back (a clean hand-over: all it wrote
    as the holder is in the log), else None (a first take, or a lease that ran out)."""

    lease: Lease
    given_by: str | None = None


@dataclass(frozen=True, slots=True)
class Holding:
    """A live row of the leases table: an agent's or a duty's lease, or a worker's heartbeat
    (``WORKER_ROW``); ``expires_at`` is the database's clock, in seconds since the epoch."""

    name: str
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One entry to write to the workers' shared log: a phone event, or (``type`` starting
    with ``~``) what a link read; ``agent`` and ``epoch`` fence an entry written as the
    agent's lease holder."""

    type: str
    data: bytes
    agent: str | None = None
    epoch: int | None = None
    words: bytes | None = None  # the event's JSON in other languages (a JSON object)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One entry of the shared log as every worker reads it."""

    seq: int
    type: str
    data: bytes
    agent: str | None = None
    epoch: int | None = None
    words: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Heard:
    """What one write to the shared log announced: its last number (None: not understood,
    read the log), and its entries when the announcement carried them (a reader right before
    them needs no read)."""

    last: int | None
    entries: list[StoredEvent] | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    """What one write to the shared log did: the numbers given (None: an entry dropped),
    the agents whose lease the writer no longer holds."""

    seqs: list[int | None]
    lost: set[tuple[str, int]]
