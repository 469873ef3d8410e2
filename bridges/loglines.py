"""A child process's log line, passed on at its own level with one timestamp: the level a line
names (Python's ``INFO:root:…``, ``2026-… WARNING name: …``, ``[error] …``) is kept and its
timestamp dropped (the parent's log adds its own)."""

from __future__ import annotations

import logging
import re

_LINE = re.compile(
    r"""\s*
    (?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+)?  # a time
    \[?(?P<level>debug|info|warn|warning|error|critical|fatal)\]?                     # a level
    (?::(?P<name>[\w.]+):|:?\s+)                                                       # then
    (?P<rest>.*)""",
    re.IGNORECASE | re.VERBOSE | re.DOTALL,
)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def split_level(line: str, default: int) -> tuple[int, str]:
    """The level ``line`` names (else ``default``) and the line without its time and level.

    >>> split_level("INFO:root:Received initialize request", logging.WARNING)
    (20, 'root: Received initialize request')
    >>> split_level("2026-12-04 17:52:38,678 ERROR bridges.acp: gone", logging.INFO)
    (40, 'bridges.acp: gone')
    >>> split_level("Traceback (most recent call last):", logging.WARNING)
    (30, 'Traceback (most recent call last):')
    """
    match = _LINE.fullmatch(line)
    if match is None:
        return default, line
    rest = match["rest"]
    if match["name"]:
        rest = f"{match['name']}: {rest}"
    return _LEVELS[match["level"].lower()], rest
