"""The errors of the gateway.

GatewayError
├── SourcesError       sources.json is wrong; the gateway does not start
├── ConfigError        a setting is wrong (e.g. a public address without a token)
├── StoreError         the SQLite file cannot be used (a newer schema, not a database)
├── AgentUnreachable   the agent did not answer, or the transfer failed
├── AgentRejected      the agent answered with an error, or was refused (wire version)
├── AnswerConflict     the same request id came with a different answer
├── BadCursor          the agent refused a "Load more" cursor (400)
└── AnswerMisfit       an answer does not fit its ask (wire §8); nothing is sent or recorded
"""

from __future__ import annotations


class GatewayError(Exception):
    """Root of every gateway error."""


class SourcesError(GatewayError):
    """sources.json is wrong: the message names the file, the entry and the problem."""


class ConfigError(GatewayError):
    """A setting is wrong."""


class StoreError(GatewayError):
    """The SQLite file cannot be used as it is; it was left untouched."""


class AgentUnreachable(GatewayError):
    """The agent did not answer, or the transfer failed midway."""

    def __init__(self, message: str, *, timed_out: bool = False, midway: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.midway = midway  # the agent had begun to answer: the transfer broke


class AgentRejected(GatewayError):
    """The agent answered with an error status, or the gateway refuses to talk to it."""

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class VersionRefused(AgentRejected):
    """The agent speaks wire version ``theirs``, not this gateway's (V1): nothing is sent."""

    def __init__(self, message: str, theirs: int) -> None:
        super().__init__(message, status=0, code="version_mismatch")
        self.theirs = theirs


class AnswerConflict(GatewayError):
    """The same request id came with a different answer; nothing was applied."""


class BadCursor(GatewayError):
    """The agent answered 400 to a closed-list read with a cursor: the cursor is not valid."""


class AnswerMisfit(GatewayError):
    """An answer does not fit its ask (wire §8): the message is the catalogue's reason."""
