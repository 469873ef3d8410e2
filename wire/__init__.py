"""Wire v1: the protocol between a durable agent and the Collie gateway (sans-I/O core)."""

from wire.errors import (
    BodyTooLarge,
    LocalWireError,
    MalformedMessage,
    RemoteWireError,
    UnknownEvent,
    VersionMismatch,
    WireError,
)
from wire.messages import WIRE_VERSION, decode, decode_event, encode

__all__ = [
    "WIRE_VERSION",
    "BodyTooLarge",
    "LocalWireError",
    "MalformedMessage",
    "RemoteWireError",
    "UnknownEvent",
    "VersionMismatch",
    "WireError",
    "decode",
    "decode_event",
    "encode",
]
