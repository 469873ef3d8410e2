"""A peer's ids and words fitted to the wire's limits: ids of unreserved characters, one-line
labels, long texts cut saying so, a tool call's arguments as text. Pure."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final

from wire.messages import MAX_LABEL

INPUT_LIMIT: Final = 20_000  # characters of a tool's arguments kept as its item's text
_SAFE = re.compile(r"[A-Za-z0-9._~-]{1,120}")


def safe_id(prefix: str, raw: str | int) -> str:
    """A wire id (unreserved characters, ≤ 200) for a peer's id: kept when already safe, else
    a digest of it."""
    text = str(raw)
    if _SAFE.fullmatch(text):
        return f"{prefix}-{text}"
    return f"{prefix}-h{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def label(text: str, limit: int = MAX_LABEL) -> str:
    """``text`` cut to a wire label (one line, ≤ ``limit`` code points, 2000 by default)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` code points, saying so."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters not kept)"


def tool_text(raw_input: Any) -> str:
    """A tool call's arguments as its item's text."""
    if raw_input is None:
        return ""
    if isinstance(raw_input, str):
        return cut(raw_input, INPUT_LIMIT)
    return cut(json.dumps(raw_input, ensure_ascii=False, indent=1, default=str), INPUT_LIMIT)
