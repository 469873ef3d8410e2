"""Workers on one PostgreSQL share one log (``store/pg/events.py``): every phone event and
everything an agent's link read goes there, and every worker reads it back in order.

- :class:`SharedBus` is the phone bus of a worker: ``publish`` writes the event to the log
  (worded in every language the gateway speaks, since a phone of any language may read it on
  any worker); what reaches this worker's phones is what the log gives back, so an event id
  (``<store>-<number>``) means the same on every worker and ``Last-Event-ID`` resumes on
  any of them. A screen's ``event_id`` is the last number this worker applied.
- :class:`SharedLog` writes in order (one queue, batched into transactions) and reads after
  the last number it applied, woken by a ``NOTIFY`` or a poll (a lost one costs at most one
  poll's wait); a ``NOTIFY`` that carries its entries, right after the last number applied,
  is applied without a read; what it wrote itself right after the last number it applied it
  applies at once, without reading it back. Entries whose type starts with ``~`` are an
  agent link's reads, handed to ``on_record`` (services/following.py); the rest are phone
  events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Final

import msgspec

from collie_gateway.services.phonebus import (
    KEPT,
    QUIET,
    Localize,
    PhoneBus,
    PhoneEvent,
    Subscription,
)
from collie_gateway.services.tasks import cancelled
from collie_gateway.store.protocols import EventLogStore
from collie_gateway.store.values import Appended, Heard, StoredEvent
from collie_gateway.store.values import LogRecord as Record

log = logging.getLogger(__name__)

POLL: Final = 0.5  # ours: seconds between two reads of the log without a hint
PRUNE_EVERY: Final = 30.0  # ours: seconds between two prunings of the log
BATCH: Final = 500  # ours: entries written in one transaction at most
KEEP_FACTOR: Final = 4  # the log keeps this many rings' worth of entries

#: (agent, epoch) of the lease a phone event is published under: set while the holder
#: applies its own link's reads, so what it tells the phones is fenced as the link's writes.
ORIGIN: ContextVar[tuple[str, int] | None] = ContextVar("collie_origin", default=None)

_encoder = msgspec.json.Encoder()
_words = msgspec.json.Decoder(dict[str, msgspec.Raw])


class SharedBus(PhoneBus):
    """A phone bus whose events go through the workers' shared log."""

    def __init__(
        self,
        ring: int,
        frame: float,
        store_id: str,
        languages: Sequence[str],
        write: Callable[[Record], None],
        latest: Callable[[], Awaitable[int]],
    ) -> None:
        super().__init__(ring, frame)
        self.boot = store_id
        self.languages = tuple(languages)  # every language but the default's
        self._write = write
        self._latest = latest  # the log's last number now

    def publish(  # type: ignore[override]
        self, type_: str, payload: object, localize: Localize | None = None
    ) -> None:
        """Write one phone event to the log (nothing while :data:`QUIET`: kept in
        :data:`KEPT` if set); the phones hear it when the log gives it back."""
        if QUIET.get():
            kept = KEPT.get()
            if kept is not None:
                kept.append((type_, payload, localize))
            return
        words = None
        if localize is not None and self.languages:
            words = _encoder.encode({lang: msgspec.Raw(_encoder.encode(localize(lang)))
                                     for lang in self.languages})  # fmt: skip
        origin = ORIGIN.get()
        agent, epoch = origin if origin is not None else (None, None)
        self._write(Record(type_, _encoder.encode(payload), agent, epoch, words))

    def deliver(self, entry: StoredEvent) -> None:
        """The log's next entry, in order: a phone event goes to this worker's phones."""
        self._seq = entry.seq
        if entry.type.startswith("~"):
            return
        words = None
        if entry.words is not None:
            words = {lang: bytes(raw) for lang, raw in _words.decode(entry.words).items()}
        event = PhoneEvent(f"{self.boot}-{entry.seq}", entry.type, entry.data, words)
        self._fan_out(entry.seq, event)

    def fell_behind(self) -> None:
        """Entries this worker had not read were pruned: every stream is told ``reset``."""
        for sub in list(self._subs):
            sub.overflowed = True
            sub.ready.set()

    def preload(self, entries: Sequence[StoredEvent], covered: int, last: int) -> None:
        """At start: the ring from the log's newest ``entries``; it replays every event
        after ``covered``; this worker applies what comes after ``last``."""
        self._covered = covered
        for entry in entries:
            self.deliver(entry)
        self._seq = last

    async def open(
        self, last_event_id: str | None, lang: str | None = None
    ) -> tuple[Subscription, list[PhoneEvent] | None]:
        """A stream; an id this worker has not applied yet (seen on a worker ahead of it) is
        checked against the log, and the stream skips what it names."""
        seq = None if last_event_id is None else self.number(last_event_id)
        if seq is not None and seq > self._seq and seq <= await self._latest():
            sub, _ = self.subscribe(None, lang)
            sub.after = seq
            return sub, []
        return self.subscribe(last_event_id, lang)


class SharedLog:
    """Writes entries in order and reads the log back to the bus and ``on_record``."""

    def __init__(
        self,
        events: EventLogStore,
        ring: int,
        on_record: Callable[[StoredEvent], None],
        on_lost: Callable[[set[tuple[str, int]]], None],
        on_gap: Callable[[], None] = lambda: None,
    ) -> None:
        self.events = events
        self.ring = ring
        self.on_record = on_record
        self.on_lost = on_lost  # leases found lost at a write: their links are dropped
        self.on_gap = on_gap  # entries were pruned before this worker read them
        self.bus: SharedBus | None = None
        #: After each run of entries applied: what it tells, queued then, is written in one
        #: transaction with what the run told (services/following.py's ``~told``).
        self.on_applied: Callable[[], None] = lambda: None
        self._queue: list[Record] = []
        self._tied: list[bool] = []  # per entry queued: written with the next one
        self._wanted = asyncio.Event()
        self._hint = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._idle = asyncio.Event()
        self._idle.set()

    async def open_bus(self, frame: float, languages: Sequence[str]) -> SharedBus:
        """The bus, its ring loaded with the log's newest events."""
        store_id = await self.events.store_id()
        bus = SharedBus(self.ring, frame, store_id, languages, self.write, self.latest)
        oldest, last = await self.events.bounds()
        start = max(oldest - 1, last - self.ring)
        entries: list[StoredEvent] = []
        while True:
            batch = await self.events.after(entries[-1].seq if entries else start)
            batch = [e for e in batch if e.seq <= last]
            if not batch:
                break
            entries.extend(batch)
        bus.preload(entries, start, last)
        self.bus = bus
        return bus

    async def latest(self) -> int:
        """The log's last number now."""
        return (await self.events.bounds())[1]

    def write(self, record: Record) -> None:
        """Queue one entry; entries are written in the order queued."""
        self._queue.append(record)
        self._tied.append(False)
        self._idle.clear()
        self._wanted.set()

    def start(self) -> None:
        """Start the writer, the reader and the pruner."""
        loop = asyncio.get_running_loop()
        for run, name in ((self._writer, "log-writer"), (self._reader, "log-reader"),
                          (self._listener, "log-hints"), (self._pruner, "log-pruner")):  # fmt: skip
            self._tasks.append(loop.create_task(run(), name=name))

    async def drain(self, within: float = 5.0) -> None:
        """Wait until every queued entry is written (a stop), at most ``within`` s."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._idle.wait()

    async def close(self) -> None:
        """Stop reading and writing (call :meth:`drain` first to write what is queued)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            await cancelled(task)
        self._tasks.clear()

    async def _writer(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while self._queue:
                cut = min(BATCH, len(self._queue))
                while cut < len(self._queue) and self._tied[cut - 1]:
                    cut += 1  # what one run of entries told goes in one transaction
                batch, self._queue = self._queue[:cut], self._queue[cut:]
                tied, self._tied = self._tied[:cut], self._tied[cut:]
                try:
                    done: Appended = await self.events.write(batch)
                except Exception:
                    log.exception("the shared log was not written; trying again")
                    self._queue[:0], self._tied[:0] = batch, tied
                    await asyncio.sleep(1.0)
                    continue
                if done.lost:
                    self.on_lost(done.lost)
                written = [
                    StoredEvent(seq, r.type, r.data, r.agent, r.epoch, r.words)
                    for r, seq in zip(batch, done.seqs, strict=True)
                    if seq is not None
                ]
                if not written or self.bus is None or written[-1].seq <= self.bus._seq:
                    pass  # applied already (its NOTIFY came first), or nothing to apply
                elif written[0].seq <= self.bus._seq + 1:
                    # Nothing came between: apply them now, without reading them back.
                    self._apply(written)
                else:
                    self._hint.set()  # read it back at once
            self._idle.set()

    async def _listener(self) -> None:
        while True:
            try:
                async with self.events.hints() as hints:
                    async for heard in hints:
                        self._heard(heard)
            except Exception as exc:
                log.warning("the shared log's hints stopped (%s); listening again", exc)
                await asyncio.sleep(1.0)

    def _heard(self, heard: Heard) -> None:
        """A write announced: its entries applied at once when they come right after the
        last number applied (no read), else the log read."""
        bus = self.bus
        if bus is None or (heard.last is not None and heard.last <= bus._seq):
            return  # applied already (this worker's own write, or read meanwhile)
        if heard.entries and heard.entries[0].seq <= bus._seq + 1:
            self._apply(heard.entries)
        else:
            self._hint.set()

    async def _reader(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL):
                    await self._hint.wait()
            self._hint.clear()
            try:
                await self.catch_up()
            except Exception:
                log.exception("the shared log was not read; trying again")
                await asyncio.sleep(1.0)

    async def catch_up(self) -> None:
        """Read the log to its end now, and apply what this worker had not."""
        assert self.bus is not None  # opened before start
        bus = self.bus
        while True:
            entries = await self.events.after(bus._seq)
            if entries and entries[0].seq > bus._seq + 1:  # numbers have no holes
                log.warning("the shared log was pruned past this worker: reset")
                bus.fell_behind()
                self.on_gap()
            self._apply(entries)
            if len(entries) < 1000:
                return

    def _apply(self, entries: Sequence[StoredEvent]) -> None:
        """Apply entries in order, each once (the writer may have applied its own); what
        the run queues (the phone events it tells, then ``on_applied``'s) is tied: written
        in one transaction."""
        assert self.bus is not None  # opened before start
        start = len(self._queue)
        self._run(entries, self.bus)
        try:
            self.on_applied()
        except Exception:
            log.exception("what the shared log's entries told not marked")
        for i in range(start, len(self._queue) - 1):
            self._tied[i] = True

    def _run(self, entries: Sequence[StoredEvent], bus: SharedBus) -> None:
        for entry in entries:
            if entry.seq <= bus._seq:
                continue
            if entry.type.startswith("~"):
                bus._seq = entry.seq
                try:
                    self.on_record(entry)
                except Exception:
                    log.exception("entry %s of the shared log not applied", entry.seq)
            else:
                bus.deliver(entry)

    async def _pruner(self) -> None:
        while True:
            await asyncio.sleep(PRUNE_EVERY)
            try:
                await self.events.prune(self.ring * KEEP_FACTOR)
            except Exception:
                log.exception("the shared log was not pruned")
