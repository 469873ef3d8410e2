"""Make an agent's text safe to show: drop what can hide or reorder text, then cut (spec A6).

Pure, in core: the views, the chats and the notes clean with it. The limits are ours: the spec
sets none for what the agent shows.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import datetime
from typing import Final, NamedTuple

from collie_gateway.core.redact import LiveMask

# Ours: how many characters each place on the phone shows, the "…" included.
TITLE_LIMIT: Final = 200
TEXT_LIMIT: Final = 2000
LABEL_LIMIT: Final = 80  # option labels, field labels, progress labels, the tool name

ELLIPSIS: Final = "…"

Redact = Callable[[str], str]

# Line breaks become "\n" (multi-line) or a space (single-line); nothing is lost, so this is
# not "cleaning" in the A6 sense.
_BREAKS: Final = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029]")

# Invisible characters that can hide, join or reorder text: C0 and C1 controls and DEL (but
# "\t" and "\n", which line breaks were turned into), bidi embeddings, overrides, isolates and
# marks, zero-width space, word joiner, BOM, and ours: the Mongolian vowel separator, the
# invisible math operators, tag characters ("ASCII smuggling"), lone surrogates (not even
# encodable as JSON).
_DROP: Final = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f"
    r"\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
    r"\u200b\u2060\ufeff\u180e\u2061-\u2064"
    r"\U000e0000-\U000e007f\ud800-\udfff]+"
)
# Zero-width non-joiner and joiner are kept between two characters of scripts that need them
# (emoji sequences, Arabic, Indic…): there they change how the text looks, so they hide
# nothing. Between Latin, Greek or Cyrillic letters they are invisible, so they go.
_JOINER: Final = re.compile(r"[\u200c\u200d]")
_JOINER_SCRIPTS_FROM: Final = 0x0590
# Emoji variation selectors and skin tones may stand between an emoji and its joiner.
_SKIP_BACK: Final = frozenset("\ufe0e\ufe0f") | {chr(c) for c in range(0x1F3FB, 0x1F400)}


class Cleaned(NamedTuple):
    """A cleaned text; ``shortened`` is true when anything was cut, removed or redacted."""

    text: str
    shortened: bool


def clean(
    text: str, limit: int, *, multiline: bool = False, redact: Redact | None = None
) -> Cleaned:
    """Clean ``text`` and cut it to at most ``limit`` characters, a final "…" included.

    Single-line text gets its line breaks and tabs as spaces; multi-line text keeps "\\n" and
    "\\t". ``redact`` runs after cleaning and before cutting; if it changes anything the text
    counts as shortened, since the person no longer sees all of it.

    Raises:
        ValueError: ``limit`` is less than 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    text = _BREAKS.sub("\n", text)
    if not multiline:
        text = text.replace("\n", " ").replace("\t", " ")
    kept = _strip_invisible(text)
    shortened = len(kept) != len(text)
    if redact is not None:
        masked = redact(kept)
        shortened = shortened or masked != kept
        kept = masked
    if len(kept) > limit:
        return Cleaned(kept[: limit - 1] + ELLIPSIS, True)
    return Cleaned(kept, shortened)


def _strip_invisible(text: str) -> str:
    text = _DROP.sub("", text)
    if "\u200c" in text or "\u200d" in text:
        text = _JOINER.sub(lambda m: m[0] if _joins_visibly(m.string, m.start()) else "", text)
    return text


def _joins_visibly(text: str, i: int) -> bool:
    before = i - 1
    while before >= 0 and text[before] in _SKIP_BACK:
        before -= 1
    after = i + 1
    return (
        before >= 0
        and after < len(text)
        and _needs_joiners(text[before])
        and _needs_joiners(text[after])
    )


def _needs_joiners(ch: str) -> bool:
    return ord(ch) >= _JOINER_SCRIPTS_FROM and unicodedata.category(ch)[0] in "LMS"


_JOINERS: Final = frozenset("\u200c\u200d")


class ShownText:
    """A chat item's text as the phone shows it, cleaned as it arrives in pieces (a streamed
    reply): ``feed`` returns what each raw piece adds, and the additions joined equal the
    whole raw text fed at once, however it was split (spec C2: the live chat
    equals the reloaded chat). Line breaks and invisible characters go as in ``clean``; past
    ``limit`` characters the text ends with "…" and ``cut`` is set (C2: "Text shortened").

    Split-independence needs a little state: a piece ending in "\\r" (a "\\n" next is the same
    break), the last visible character (a joiner is kept only between two characters of
    scripts that need it) and a joiner at the very end, held until the next character says
    whether it stays.
    """

    __slots__ = (
        "_cr",
        "_held",
        "_joined",
        "_live",
        "_masked",
        "_parts",
        "_prev",
        "cut",
        "limit",
        "live_change",
        "rendered",
        "rendered_at",
        "size",
    )

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.cut = False
        self._parts: list[str] = []
        self._joined: str | None = ""
        self._cr = False
        self._prev = ""  # the last character that is no variation selector or skin tone
        self._held = ""  # a joiner at the end whose next character has not come yet
        self._masked: tuple[str, str] | None = None  # (text, that text masked)
        self._live: LiveMask | None = None  # the text masked as it is written, once asked
        # What the last ``feed`` added to ``live``'s text; None: ``live`` changed whole.
        self.live_change: str | None = ""
        # A Markdown item being written: its text as last rendered for the phones (C2), and
        # when; None: not rendered yet.
        self.rendered: str | None = None
        self.rendered_at: datetime | None = None

    @classmethod
    def of(cls, text: str, limit: int) -> ShownText:
        """A whole text, cleaned at once."""
        shown = cls(limit)
        shown.feed(text)
        return shown

    @property
    def text(self) -> str:
        """Everything shown so far (joined once, then kept)."""
        if self._joined is None:
            self._joined = "".join(self._parts)
            self._parts = [self._joined]
        return self._joined

    def masked(self, redact: Redact) -> str:
        """The text with secrets masked (X1), kept until more text comes."""
        text = self.text
        if self._masked is None or self._masked[0] is not text:
            self._masked = (text, redact(text))
        return self._masked[1]

    def live(self, redact: Redact) -> str:
        """The text being written with secrets masked (X1), as it may show before its
        final text comes (``LiveMask``: an unfinished word and an open quoted value wait).
        From the first call on, each ``feed`` keeps it and sets ``live_change``.
        ``redact`` must be ``Redactor.mask`` (``LiveMask`` knows its rules)."""
        return self.keep_live(redact).text

    def keep_live(self, redact: Redact) -> LiveMask:
        """Start masking as ``live`` does (from the text so far), without joining it."""
        if self._live is None:
            self._live = LiveMask(redact)
            self._live.feed(self.text)
            if self.cut:
                self._live.done()
        return self._live

    def feed(self, raw: str) -> str:
        """Add a raw piece; return the cleaned text it adds to what is shown ("" for none)."""
        self.live_change = ""
        if not raw or self.cut:
            return ""
        if self._cr and raw[0] == "\n":
            raw = raw[1:]  # "\r" + "\n" across two pieces is one break
        self._cr = raw.endswith("\r")
        text = _DROP.sub("", _BREAKS.sub("\n", raw))
        if not text:
            return ""
        held, self._held = self._held, ""
        if held and _needs_joiners(text[0]):
            text = held + text
            start = 1
        else:
            start = 0
        if "\u200c" in text or "\u200d" in text:
            text = self._joiners(text, start)
        else:
            self._remember_prev(text)
        if self.size + len(text) > self.limit:
            text = text[: self.limit - self.size] + ELLIPSIS
            self.cut = True
        if text:
            self.size += len(text)
            self._parts.append(text)
            self._joined = None
            if self._live is not None:
                change = self._live.feed(text)
                if self.cut:  # nothing more comes: the rest shows
                    rest = self._live.done()
                    change = None if change is None or rest is None else change + rest
                self.live_change = change
        return text

    def _remember_prev(self, text: str) -> None:
        for ch in reversed(text):
            if ch not in _SKIP_BACK:
                self._prev = ch
                return

    def _joiners(self, text: str, start: int) -> str:
        """Keep each joiner from ``start`` on only between two characters that need it
        (as ``clean`` does); hold one at the end for the next piece to decide."""
        out = list(text[:start])
        prev = self._prev if start == 0 else text[0]
        last = len(text) - 1
        for i in range(start, len(text)):
            ch = text[i]
            if ch in _JOINERS:
                before = bool(prev) and _needs_joiners(prev)
                if i < last:
                    if before and _needs_joiners(text[i + 1]):
                        out.append(ch)
                elif before:
                    self._held = ch
                prev = ch
            else:
                out.append(ch)
                if ch not in _SKIP_BACK:
                    prev = ch
        self._prev = prev
        return "".join(out)
