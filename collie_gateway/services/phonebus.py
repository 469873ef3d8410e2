"""The phone's live stream: numbered events, a ring for ``Last-Event-ID`` replay.

Event ids are ``<boot>-<seq>``: a phone that reconnects after the gateway restarted (another
boot) or that fell out of the ring gets a ``reset`` and reads its screens again.

Streams are written at most once a frame, on one clock for every phone (bench/chat_bench.py):
an event is encoded once, queued on each stream, and the streams are written together — after
the callbacks already queued when a frame was quiet (what one read of an agent's stream
publishes goes out in one write), else at the frame's end — so a streamed reply costs one
timer a frame, not one per phone. Each stream's frames go straight to its connection when it
has nothing left to send, with no task woken per phone (bench/workers_bench.py); a busy one's
reader writes them (and waits for the phone to read).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
from collections import Counter, deque
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import msgspec

_encoder = msgspec.json.Encoder()

#: Set while a worker applies what another worker's link read (services/following.py): the
#: services update what they keep, and tell the phones nothing (the holder of the agent's
#: lease does, once, through the shared log).
QUIET: ContextVar[bool] = ContextVar("collie_quiet", default=False)

#: An event's payload in the language a tag names (for events that carry the phone's words).
Localize = Callable[[str], object]

#: One event a worker would have told: (type, payload, how to word it in another language).
Untold = tuple[str, object, Localize | None]

#: Set (with :data:`QUIET`) while a worker applies another worker's link event: what it would
#: have told the phones is kept there, to be told if the holder dies before it did
#: (services/following.py).
KEPT: ContextVar[list[Untold] | None] = ContextVar("collie_kept", default=None)


class Publish(Protocol):
    """Tells the phones one event (``PhoneBus.publish``): its type, its JSON payload in the
    default language and, for an event that carries the phone's words, how to word it in
    another language."""

    def __call__(
        self, type_: str, payload: object, localize: Localize | None = None, /
    ) -> object: ...


@dataclass(frozen=True, slots=True)
class PhoneEvent:
    """One event on the phone's stream; ``data`` is its JSON in the default language, and
    ``words`` its JSON in each other language phones used when it was published."""

    id: str
    type: str
    data: bytes
    words: Mapping[str, bytes] | None = None

    @property
    def frame(self) -> bytes:
        """The event as the stream carries it (``id:``, ``event:``, ``data:``)."""
        return self.frame_in(None)

    def frame_in(self, lang: str | None) -> bytes:
        """The event's frame in ``lang`` (None, or a language it was not worded in: the
        default language)."""
        data = self.data if lang is None or self.words is None else self.words.get(lang)
        return b"id: %s\nevent: %s\ndata: %s\n\n" % (
            self.id.encode(),
            self.type.encode(),
            self.data if data is None else data,
        )


class Subscription:
    """One phone's stream: the encoded frames not yet written, bounded; a phone that falls too
    far behind is reset. :attr:`ready` is set when its frames are due (the bus's frame clock)
    or once the stream is ended."""

    def __init__(self, bus: PhoneBus, limit: int, lang: str | None = None) -> None:
        self._bus = bus
        self.lang = lang  # the phone's language; None: the gateway's default
        self._frames: deque[bytes] = deque()
        self._limit = limit
        self.after = 0  # events numbered up to this one were seen elsewhere: not sent
        self.overflowed = False
        self.ready = asyncio.Event()
        self.ended = False
        #: Writes frames at once, in the bus's wake, with no task woken for them; returns
        #: False when it cannot now (its connection is busy or closing): the reader does.
        self.writer: Callable[[bytes], bool] | None = None

    def end(self) -> None:
        """End the stream: frames waiting still go out, then its reader stops."""
        if not self.ended:
            self.ended = True
            self.ready.set()

    def push(self, frame: bytes) -> None:
        """Queue a frame; the bus wakes the reader when the frame is due."""
        if len(self._frames) >= self._limit:
            self.overflowed = True
            return
        self._frames.append(frame)

    def write_now(self) -> bool:
        """The waiting frames written by :attr:`writer` at once; False when they wait for the
        stream's reader (no writer, an overflow, the end, or the writer cannot now)."""
        if self.writer is None or self.overflowed or self.ended:
            return False
        if not self.writer(b"".join(self._frames)):
            return False
        self._frames.clear()
        return True

    @property
    def pending(self) -> int:
        """Frames waiting to be written."""
        return len(self._frames)

    def take(self, most: int) -> list[bytes]:
        """Up to ``most`` waiting frames, oldest first."""
        frames = self._frames
        if len(frames) <= most:
            taken = list(frames)
            frames.clear()
        else:
            taken = [frames.popleft() for _ in range(most)]
        if not frames and not self.ended:
            self.ready.clear()
        return taken

    def close(self) -> None:
        self._bus._drop(self)


class PhoneBus:
    """Fan-out of phone events with replay from a ring of the newest ``ring`` events."""

    def __init__(self, ring: int = 10_000, frame: float = 0.0) -> None:
        self.boot = secrets.token_hex(4)
        self.frame = frame  # seconds between two wakes of the streams (0: at each event)
        self._last_wake = -math.inf  # loop time of the last wake
        self._timer: asyncio.Handle | None = None
        self._seq = 0
        self._ring: deque[tuple[int, PhoneEvent]] = deque(maxlen=ring)
        self._covered = 0  # the ring can replay every event numbered after this
        self._subs: set[Subscription] = set()
        self._langs: Counter[str] = Counter()  # streams by language, but the default's
        self._ring_size = ring
        self.closed = False

    def close(self) -> None:
        """End every stream, now and any opened later (the gateway is stopping)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for sub in list(self._subs):
            sub.end()

    def reopen(self) -> None:
        """Take streams again: the HTTP server was stopped and started while this gateway ran
        on (the same boot, so phones resume with ``Last-Event-ID``)."""
        self.closed = False

    @property
    def last_id(self) -> str:
        """The id of the newest event (``<boot>-0`` before any)."""
        return f"{self.boot}-{self._seq}"

    def publish(self, type_: str, payload: object, localize: Localize | None = None) -> PhoneEvent:
        """Number, keep and fan out one event; ``localize`` words it in each language a
        stream uses now (``payload`` is the default language's)."""
        self._seq += 1
        words = None
        if localize is not None and self._langs:
            words = {lang: _encoder.encode(localize(lang)) for lang in self._langs}
        event = PhoneEvent(f"{self.boot}-{self._seq}", type_, _encoder.encode(payload), words)
        self._fan_out(self._seq, event)
        return event

    def _fan_out(self, seq: int, event: PhoneEvent) -> None:
        """Keep event number ``seq`` in the ring and queue it on every stream."""
        ring = self._ring
        if ring.maxlen is not None and len(ring) == ring.maxlen and ring:
            self._covered = ring[0][0]  # the oldest falls out
        ring.append((seq, event))
        if self._subs:
            frames: dict[str | None, bytes] = {None: event.frame}  # once per language
            for sub in self._subs:
                if seq <= sub.after:
                    continue
                frame = frames.get(sub.lang)
                if frame is None:
                    frame = frames[sub.lang] = event.frame_in(sub.lang)
                sub.push(frame)
            if self._timer is None and any(not sub.ready.is_set() for sub in self._subs):
                self._wake_soon()

    def _wake_soon(self) -> None:
        """Wake the streams now if a frame has passed since the last wake, else at its end."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test of the bus alone): nothing to wait with
            self._wake()
            return
        due = self._last_wake + self.frame
        if loop.time() >= due:
            # After what is already queued to run: the events the same agent read publishes
            # next (its chat and row, the push's log line) go out in the same write.
            self._timer = loop.call_soon(self._wake)
        else:
            self._timer = loop.call_at(due, self._wake)

    def _wake(self) -> None:
        """Write or wake every stream with frames waiting (the events since the last wake):
        written at once where the stream's connection takes them, else its reader woken."""
        self._timer = None
        with contextlib.suppress(RuntimeError):
            self._last_wake = asyncio.get_running_loop().time()
        for sub in self._subs:
            if sub.pending and not sub.ready.is_set() and not sub.write_now():
                sub.ready.set()

    def subscribe(
        self, last_event_id: str | None, lang: str | None = None
    ) -> tuple[Subscription, list[PhoneEvent] | None]:
        """A new subscription in ``lang`` (None: the default language), and the events to
        replay first (``None``: the phone must reset).

        No ``last_event_id`` means a fresh phone: nothing to replay.
        """
        sub = Subscription(self, self._ring_size, lang)
        self._subs.add(sub)
        if lang is not None:
            self._langs[lang] += 1
        if self.closed:
            sub.end()
        if last_event_id is None:
            return sub, []
        return sub, self.replay_after(last_event_id)

    async def open(
        self, last_event_id: str | None, lang: str | None = None
    ) -> tuple[Subscription, list[PhoneEvent] | None]:
        """:meth:`subscribe`, for a stream opening (a shared bus may read its log first)."""
        return self.subscribe(last_event_id, lang)

    def number(self, last_event_id: str) -> int | None:
        """The number in an event id of this bus (``<boot>-<seq>``), else None."""
        boot, _, seq_text = last_event_id.partition("-")
        if boot != self.boot or not seq_text.isascii() or not seq_text.isdigit():
            return None
        return int(seq_text)

    def replay_after(self, last_event_id: str) -> list[PhoneEvent] | None:
        """Events after ``last_event_id``, or ``None`` when they can't all be replayed."""
        seq = self.number(last_event_id)
        if seq is None or seq > self._seq or seq < self._covered:
            return None
        if seq == self._seq:
            return []
        return [event for n, event in self._ring if n > seq]

    def _drop(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.discard(sub)
            if sub.lang is not None:
                self._langs[sub.lang] -= 1
                if self._langs[sub.lang] <= 0:
                    del self._langs[sub.lang]

    @property
    def subscribers(self) -> int:
        """Phones connected now."""
        return len(self._subs)
