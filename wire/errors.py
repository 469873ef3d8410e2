"""The errors of the wire package.

WireError
├── LocalWireError        we are about to break the protocol (a bug on our side)
└── RemoteWireError       the peer broke it
    ├── MalformedMessage  not JSON, or not of the expected shape
    ├── BodyTooLarge      a body, an event or a line over its limit
    ├── UnknownEvent      an event type this side does not know (skip it: forward-compatible)
    └── VersionMismatch   the peer speaks another wire version
"""

from __future__ import annotations


class WireError(Exception):
    """Root of every wire error."""


class LocalWireError(WireError):
    """We were about to send something the protocol does not allow."""


class RemoteWireError(WireError):
    """The peer sent something the protocol does not allow."""


class MalformedMessage(RemoteWireError):
    """Not JSON, or not of the expected shape."""


class BodyTooLarge(RemoteWireError):
    """A body, an event or a line over its limit."""


class VersionMismatch(RemoteWireError):
    """The peer speaks another wire version."""

    def __init__(self, theirs: int, ours: int) -> None:
        super().__init__(f"peer speaks wire v{theirs}, we speak v{ours}")
        self.theirs = theirs
        self.ours = ours


class UnknownEvent(RemoteWireError):
    """An event whose type this side does not know; a reader skips it."""

    def __init__(self, type_: str) -> None:
        super().__init__(f"unknown event type {type_!r}")
        self.type = type_
