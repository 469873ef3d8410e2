"""Which language a phone request is answered in. Pure: header text in, a language tag out.

The order: the request's ``Accept-Language`` (RFC 9110 §12.5.4, quality values honoured),
else its ``?lang=``, else the gateway's default. A tag matches a language the gateway speaks
exactly (any case), else by its primary subtag: ``it-IT`` is ``it``, ``pt`` and ``pt-PT`` are
``pt-BR``. A header or query naming nothing the gateway speaks (``fr``, ``*``) falls through;
bad input never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

MAX_HEADER: Final = 1024  # ours: longer headers are read this far
MAX_RANGES: Final = 32  # ours: ranges read from one header


def canonical(tag: str, known: Sequence[str]) -> str | None:
    """The tag of ``known`` that ``tag`` names, or None.

    Usage: ``canonical("it-IT", ("en", "it")) == "it"``.
    """
    wanted = tag.strip().replace("_", "-").lower()
    if not wanted or len(wanted) > 35:
        return None
    for lang in known:
        if lang.lower() == wanted:
            return lang
    primary = wanted.split("-", 1)[0]
    for lang in known:
        if lang.lower().split("-", 1)[0] == primary:
            return lang
    return None


def ranges(header: str) -> list[str]:
    """The language ranges of an ``Accept-Language`` value, most wanted first (equal
    qualities keep their order; ``q=0`` and unreadable entries are dropped)."""
    weighted: list[tuple[float, int, str]] = []
    for index, part in enumerate(header[:MAX_HEADER].split(",")[:MAX_RANGES]):
        tag, _, params = part.partition(";")
        tag = tag.strip()
        quality = _quality(params)
        if tag and quality is not None and quality > 0:
            weighted.append((-quality, index, tag))
    return [tag for _, _, tag in sorted(weighted)]


def _quality(params: str) -> float | None:
    """The ``q`` of a range's parameters (1 when absent), None when unreadable."""
    for param in params.split(";"):
        name, sep, value = param.strip().partition("=")
        if sep and name.strip().lower() == "q":
            try:
                quality = float(value.strip())
            except ValueError:
                return None
            return quality if 0 <= quality <= 1 else None
    return 1.0


def choose_language(
    accept_language: str | None, query_lang: str | None, known: Sequence[str], default: str
) -> str:
    """The language to answer in (see the module docstring); ``default`` is one of ``known``.

    Usage: ``choose_language("fr, it;q=0.5", None, ("en", "it"), "en") == "it"``.
    """
    for tag in ranges(accept_language or ""):
        found = canonical(tag, known)
        if found is not None:
            return found
    if query_lang:
        found = canonical(query_lang, known)
        if found is not None:
            return found
    return default
