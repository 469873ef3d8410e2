"""A sans-I/O server-sent-events parser (WHATWG "event stream interpretation") and encoder.

Bytes in, events out: no sockets, no clock. Limits bound memory whatever the peer sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from wire.errors import BodyTooLarge, LocalWireError
from wire.messages import MAX_EVENT

MAX_LINE: Final = MAX_EVENT + 64  # wire/SPEC.md, Limits: one SSE line
COMMENT_PING: Final = b": ping\n\n"

_BOM: Final = b"\xef\xbb\xbf"
_EOL: Final = re.compile(rb"[\r\n]")
_LF: Final = 0x0A
_CR: Final = 0x0D
# The shape every wire v1 event has (wire/SPEC.md §9): parsed by one match, not line by line.
_CANONICAL: Final = re.compile(rb"id: ?([^\r\n\x00]*)\nevent: ?([^\r\n]*)\ndata: ?([^\r\n]*)")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``id`` is the stream's last event id when the event was dispatched, as WHATWG defines
    ``lastEventId``: it carries over from an earlier event that set it; ``None`` until an
    ``id:`` field was seen.
    """

    id: str | None
    event: str
    data: str


class SSEParser:
    """Turns the bytes of a ``text/event-stream`` into :class:`SSEEvent`.

    Usage::

        parser = SSEParser(max_line=MAX_LINE)
        for chunk in chunks:
            for event in parser.feed(chunk):
                ...

    Lines may end in CRLF, LF or CR, split anywhere across feeds; a UTF-8 BOM at the start
    of the stream is dropped; invalid UTF-8 is replaced, as a browser does. After it raised,
    the parser stays failed: every later :meth:`feed` raises again.
    """

    def __init__(self, *, max_line: int = MAX_LINE, max_data: int = MAX_EVENT) -> None:
        self.max_line = max_line
        self.max_data = max_data
        self.last_event_id: str | None = None
        self.retry: int | None = None  # the reconnection time the stream asked for, in ms
        self._buf = bytearray()
        self._scanned = 0  # bytes at the start of _buf known to hold no CR or LF
        self._at_start = True
        self._skip_lf = False
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0
        self._failed: BodyTooLarge | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse ``data`` and return the events it completes.

        Raises:
            BodyTooLarge: a line, or one event's data, is over its limit.
        """
        if self._failed is not None:
            raise BodyTooLarge(str(self._failed))
        try:
            return self._feed(data)
        except BodyTooLarge as exc:
            self._failed = exc
            self._buf.clear()
            raise

    def _feed(self, data: bytes) -> list[SSEEvent]:
        buf = self._buf
        buf += data
        if self._at_start:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # maybe a BOM still arriving
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._at_start = False
        events: list[SSEEvent] = []
        pos = 0
        whole = 0  # where a whole event may start (-1: no blank line follows)
        while True:
            if 0 <= whole <= pos and not self._data and not self._event and not self._skip_lf:
                # At the start of an event: one in the canonical shape (id, event, data, blank
                # line; each field once) is taken whole; any other goes line by line below.
                end = buf.find(b"\n\n", pos)
                if end < 0:
                    whole = -1
                elif (m := _CANONICAL.fullmatch(buf, pos, end)) is not None and (
                    end - pos <= self.max_line and len(m[3]) <= self.max_data
                ):
                    self.last_event_id = m[1].decode("utf-8", "replace")
                    name = m[2].decode("utf-8", "replace")
                    events.append(
                        SSEEvent(
                            self.last_event_id, name or "message", m[3].decode("utf-8", "replace")
                        )
                    )
                    pos = end + 2
                    self._scanned = 0
                    continue
                else:
                    whole = end + 2  # this one goes line by line
            if self._skip_lf and pos < len(buf):
                self._skip_lf = False
                if buf[pos] == _LF:
                    pos += 1
            found = _EOL.search(buf, max(pos, self._scanned))
            if found is None:
                break
            end = found.start()
            self._line(bytes(buf[pos:end]), events)
            pos = end + 1
            self._scanned = 0
            if buf[end] == _CR:
                self._skip_lf = True
        del buf[:pos]
        self._scanned = len(buf)
        if len(buf) > self.max_line:
            raise BodyTooLarge(f"an event-stream line is over {self.max_line} bytes")
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if len(line) > self.max_line:
            raise BodyTooLarge(f"an event-stream line is over {self.max_line} bytes")
        if not line:
            self._dispatch(events)
            return
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data_size += len(value) + 1
            if self._data_size - 1 > self.max_data:
                raise BodyTooLarge(f"an event's data is over {self.max_data} bytes")
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self.last_event_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry = int(value)

    def _dispatch(self, events: list[SSEEvent]) -> None:
        data, event = self._data, self._event
        self._data, self._event, self._data_size = [], "", 0
        if data:
            events.append(SSEEvent(self.last_event_id, event or "message", "\n".join(data)))


_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


def encode_event(id: int | str | None, event: str | None, data: str) -> bytes:
    """Encode one event: ``id:``, ``event:``, one ``data:`` line per line of ``data``.

    Raises:
        LocalWireError: ``id`` or ``event`` holds a line break (or ``id`` a NUL), or any part
            a lone surrogate, which the stream cannot carry.
    """
    parts: list[str] = []
    if id is not None:
        text = str(id)
        if _LINE_BREAK.search(text) or "\x00" in text:
            raise LocalWireError("an event id cannot hold a line break or NUL")
        parts.append(f"id: {text}\n")
    if event is not None:
        if _LINE_BREAK.search(event):
            raise LocalWireError("an event type cannot hold a line break")
        parts.append(f"event: {event}\n")
    parts.extend(f"data: {line}\n" for line in _LINE_BREAK.split(data))
    parts.append("\n")
    try:
        return "".join(parts).encode()
    except UnicodeEncodeError:
        raise LocalWireError("an event cannot carry a lone surrogate") from None


__all__ = ["COMMENT_PING", "MAX_LINE", "SSEEvent", "SSEParser", "encode_event"]
