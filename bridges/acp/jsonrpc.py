"""JSON-RPC 2.0 over newline-delimited JSON, sans I/O: a line splitter with a size cap and the
message types (msgspec). The shell (``bridges.acp.process``) feeds bytes in and writes what
``encode_*`` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
from msgspec import UNSET, UnsetType

MAX_LINE: Final = 16 * 1024 * 1024  # one message; ACP carries whole files in diffs
NESTING: Final = 64

# JSON-RPC error codes (the spec's, and ACP's request cancellation).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
REQUEST_CANCELLED: Final = -32800

RequestId = int | str


class RpcError(msgspec.Struct, frozen=True, omit_defaults=True):
    """A JSON-RPC error object."""

    code: int
    message: str
    data: msgspec.Raw | UnsetType = UNSET


class Envelope(msgspec.Struct, frozen=True, omit_defaults=True):
    """Any JSON-RPC message, before it is told apart: a request has ``method`` and ``id``, a
    notification ``method`` only, a response ``id`` with ``result`` or ``error``."""

    jsonrpc: str = "2.0"
    id: RequestId | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw | UnsetType = UNSET
    result: msgspec.Raw | UnsetType = UNSET
    error: RpcError | UnsetType = UNSET


@dataclass(frozen=True, slots=True)
class Request:
    """The peer asks us something and waits for our answer."""

    id: RequestId
    method: str
    params: msgspec.Raw | None


@dataclass(frozen=True, slots=True)
class Notification:
    """The peer tells us something; no answer."""

    method: str
    params: msgspec.Raw | None


@dataclass(frozen=True, slots=True)
class Response:
    """The peer's answer to one of our requests: ``result`` or ``error``."""

    id: RequestId | None
    result: msgspec.Raw | None
    error: RpcError | None


@dataclass(frozen=True, slots=True)
class Invalid:
    """A line that is not a JSON-RPC message; ``id`` when one could be read (to answer it)."""

    reason: str
    id: RequestId | None = None


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line over the cap, dropped whole; ``size`` is how many bytes it had."""

    size: int


Incoming = Request | Notification | Response | Invalid | Oversized

_envelope = msgspec.json.Decoder(Envelope)
_encoder = msgspec.json.Encoder()


def parse(line: bytes) -> Request | Notification | Response | Invalid:
    """One line (without its newline) as a message."""
    try:
        env = _envelope.decode(line)
    except msgspec.DecodeError as exc:
        return Invalid(f"not a JSON-RPC message: {exc}")
    if env.jsonrpc != "2.0":
        return Invalid("jsonrpc is not 2.0", _id(env))
    params = None if isinstance(env.params, UnsetType) else env.params
    if not isinstance(env.method, UnsetType):
        if isinstance(env.id, UnsetType):
            return Notification(env.method, params)
        if env.id is None:
            return Invalid("a request's id is null")
        return Request(env.id, env.method, params)
    if isinstance(env.id, UnsetType):
        return Invalid("neither a method nor an id")
    has_result = not isinstance(env.result, UnsetType)
    has_error = not isinstance(env.error, UnsetType)
    if has_result == has_error:
        return Invalid("a response needs exactly one of result and error", _id(env))
    return Response(
        env.id,
        env.result if not isinstance(env.result, UnsetType) else None,
        env.error if not isinstance(env.error, UnsetType) else None,
    )


def _id(env: Envelope) -> RequestId | None:
    return None if isinstance(env.id, UnsetType) else env.id


def encode_request(id: RequestId, method: str, params: object) -> bytes:
    """A request as one line."""
    return _line({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


def encode_notification(method: str, params: object) -> bytes:
    """A notification as one line."""
    return _line({"jsonrpc": "2.0", "method": method, "params": params})


def encode_result(id: RequestId, result: object) -> bytes:
    """A successful response as one line."""
    return _line({"jsonrpc": "2.0", "id": id, "result": result})


def encode_error(id: RequestId | None, code: int, message: str) -> bytes:
    """An error response as one line."""
    return _line({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})


def _line(message: object) -> bytes:
    return _encoder.encode(message) + b"\n"


class LineSplitter:
    """Bytes in, complete lines out; a line over ``limit`` bytes is dropped whole (reported once
    as ``Oversized``) and the lines after it are read as usual.

    Usage::

        splitter = LineSplitter()
        for item in splitter.feed(chunk):
            ...  # bytes (one line, no newline) or Oversized
    """

    def __init__(self, limit: int = MAX_LINE) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self.limit = limit
        self._buf = bytearray()
        self._skipping = 0  # bytes of an oversized line dropped so far; 0 when not skipping

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        """Take ``data``; return the lines it completed, in order."""
        out: list[bytes | Oversized] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            self._take(data[start:nl], out, end=True)
            start = nl + 1
        if start < len(data):
            self._take(data[start:], out, end=False)
        return out

    def _take(self, part: bytes, out: list[bytes | Oversized], *, end: bool) -> None:
        if self._skipping:
            self._skipping += len(part) + (1 if end else 0)
            if end:
                out.append(Oversized(self._skipping - 1))
                self._skipping = 0
            return
        if len(self._buf) + len(part) > self.limit:
            self._skipping = len(self._buf) + len(part) + (1 if end else 0)
            self._buf.clear()
            if end:
                out.append(Oversized(self._skipping - 1))
                self._skipping = 0
            return
        if not end:
            self._buf += part
            return
        line = bytes(self._buf) + part if self._buf else bytes(part)
        self._buf.clear()
        line = line.rstrip(b"\r")
        if line.strip():
            out.append(line)

    def end(self) -> list[bytes | Oversized]:
        """The stream ended: a last line without a newline, if any."""
        if self._skipping:
            size, self._skipping = self._skipping, 0
            return [Oversized(size)]
        rest = bytes(self._buf).strip()
        self._buf.clear()
        return [rest] if rest else []
