"""Secret masking for text that leaves the machine (spec X1): titles, subtitles, logs, pushes.

Pure: no I/O. Rules follow the shapes of gitleaks' rules (the regexes are our own). A match
is masked as a whole: its public, fixed prefix is kept so the person can tell the kind
(``ghp_••••``, ``AKIA••••``, ``sk-ant-••••``) and everything after it becomes ``MASK``.
Shapes without such a prefix (JWTs, PEM blocks, passwords, bearer values) become ``MASK``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["ELLIPSIS", "ENV_VAR", "MASK", "Redactor", "redactor_from_env"]

MASK: Final = "••••"
ELLIPSIS: Final = "…"
ENV_VAR: Final = "COLLIE_REDACT"
_OFF: Final = frozenset({"0", "false", "off", "no"})

# Lookbehind used by most token rules: a token starts a word (so "task-…" is not "sk-…").
_START = r"(?<![A-Za-z0-9])"
# Unquoted values end at whitespace, a quote or a delimiter; never at the mask character, so
# a kept prefix followed by MASK can never be read as a new value (idempotence).
_VALUE = r"[^\s\"'`,;&<>()\[\]{}•]"
_VALUE_END = r"(?=[\s\"'`,;&<>)\[\]{}]|\Z)"  # not "(": a value before "(" is a call
_PASSWORD_KEYS: Final = frozenset({"pass", "password", "passwd", "passphrase", "pwd"})
# Words (lower, Capitalised, UPPER, CamelCase) joined by "-", "_", "." or spaces.
_WORD = r"(?:[A-Za-z][a-z]*|[A-Z]+|(?:[A-Z][a-z]+)+)"
_WORDS = re.compile(rf"{_WORD}(?:[-_. ]+{_WORD})*")
_PLACEHOLDER = re.compile(r"x{3}|\*{3}|\.{3}|\$\{|\{\{|%\(|<|your[-_]|example|redacted", re.I)
# A path or an address given as a value is not itself the secret (a URL password has its rule).
_NOT_SECRET = re.compile(
    r"(?:~|\.\.?)?/[A-Za-z0-9_./-]*|[A-Za-z][A-Za-z0-9+.-]*://\S*"
    r"|[A-Za-z_]+(?:\.[A-Za-z_]+)+"  # a dotted name in code: settings.API_TOKEN
)


def _entropy(s: str) -> float:
    """Shannon entropy of ``s`` in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _mixed(s: str) -> bool:
    """Whether ``s`` has a digit and upper and lower case letters, as random tokens do."""
    return (
        any(c.isdigit() for c in s) and any(c.isupper() for c in s) and any(c.islower() for c in s)
    )


def _ordinary(s: str) -> bool:
    """Whether a value is words, a placeholder, a path or an address rather than a secret."""
    return bool(_WORDS.fullmatch(s) or _PLACEHOLDER.search(s) or _NOT_SECRET.fullmatch(s))


def _random_looking(s: str) -> bool:
    """Whether a value after "Bearer" or a token-like key reads as random rather than words."""
    if len(s) < 12 or _ordinary(s):
        return False
    has_digit = any(c.isdigit() for c in s)
    has_alpha = any(c.isalpha() for c in s)
    return (has_digit and has_alpha and _entropy(s) >= 3.0) or _entropy(s) >= 4.0


def _password_like(s: str) -> bool:
    """Whether a value given to a password key is a password rather than a word or a number."""
    return len(s) >= 6 and not _ordinary(s)


@dataclass(frozen=True, slots=True)
class _Rule:
    """One secret shape: group ``s`` (else the match) is masked, group ``k`` is kept."""

    name: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None


def _generic_check(m: re.Match[str]) -> bool:
    value = _value(m)
    if m.group("kw").lower() not in _PASSWORD_KEYS:
        return _random_looking(value)
    # A quoted passphrase of several words is still a password.
    quoted_words = m.group("s_2") is None and " " in value.strip()
    if quoted_words and len(value) >= 6 and not _PLACEHOLDER.search(value):
        return True
    return _password_like(value)


def _quoted_or_bare(name: str) -> str:
    """A value: in double, single or back quotes (may hold spaces), or bare up to a delimiter."""
    return (
        rf"(?:\"(?P<{name}>[^\"\n•]{{4,200}})\""
        rf"|'(?P<{name}_1>[^'\n•]{{4,200}})'"
        rf"|(?P<{name}_2>{_VALUE}{{4,200}}){_VALUE_END})"
    )


def _value_rule(name: str, regex: str, check: Callable[[str], bool]) -> _Rule:
    """A rule whose value may be quoted; ``check`` decides on the value's text."""
    pattern = re.compile(regex)

    def run(m: re.Match[str]) -> bool:
        return check(_value(m))

    return _Rule(name, pattern, run)


def _value(m: re.Match[str]) -> str:
    """The value of a rule with groups s, s_1 and s_2 (one per quoting): whichever matched."""
    return str(m.group("s") or m.group("s_1") or m.group("s_2"))


_KEYWORDS = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|secret[_-]?key|signing[_-]?key|encryption[_-]?key|auth|credentials?"
)

_RULES: Final[tuple[_Rule, ...]] = (
    _Rule(
        "pem-private-key",
        re.compile(
            # Only with key material after the header, so a mention of the header is no key.
            # Line breaks may be real or "\n" escapes (a key inside JSON: service accounts).
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?=(?:\s|\\[nr])*(?:[A-Za-z-]+:|[A-Za-z0-9+/]{8}))"
            r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:\\n)?|\Z)",
            re.S,
        ),
    ),
    _Rule(
        "jwt",
        re.compile(_START + r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"),
    ),
    # GitHub's prefixes are distinctive enough to need no boundary: "xghp_…" glued to a word
    # is still a token (gitleaks' rule has none either).
    _Rule("github", re.compile(r"(?P<k>gh[pousr]_)[A-Za-z0-9]{30,}")),
    _Rule("github-fine-grained", re.compile(r"(?P<k>github_pat_)[A-Za-z0-9_]{30,}")),
    # sk-ant-api03-, sk-ant-admin01-, sk-ant-oat01-: the kind stays visible.
    _Rule("anthropic", re.compile(_START + r"(?P<k>sk-ant-(?:[a-z]+\d\d-)?)[A-Za-z0-9_-]{20,}")),
    _Rule(
        "openai",
        re.compile(_START + r"(?P<k>sk-(?:(?:proj|svcacct|admin)-)?)(?!ant-)[A-Za-z0-9_-]{20,}"),
        lambda m: _mixed(m.group(0)[len(m.group("k")) :]),
    ),
    _Rule(
        "aws-access-key-id",
        re.compile(_START + r"(?P<k>AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ),
    # Families after gitleaks' pypi, azure-storage, discord, vault and digitalocean rules.
    _Rule("pypi", re.compile(_START + r"(?P<k>pypi-)AgE[A-Za-z0-9_-]{50,}")),
    _Rule(
        "azure-storage-account-key",
        re.compile(r"(?i)AccountKey\s*=\s*(?P<s>[A-Za-z0-9+/]{80,100}={0,2})(?![A-Za-z0-9+/=])"),
    ),
    _Rule(
        # A shared access signature in a URL's query: percent-encoded base64.
        "azure-sas-signature",
        re.compile(r"[?&]sig=(?P<s>[A-Za-z0-9%+/=]{30,})(?![A-Za-z0-9%+/=])"),
        lambda m: _entropy(m.group("s")) >= 3.5,
    ),
    _Rule(
        # Bot tokens: the bot's id in base64 ("M…"–"O…"), a timestamp, an HMAC.
        "discord-bot-token",
        re.compile(
            _START + r"[MNO][A-Za-z0-9_-]{22,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}"
            r"(?![A-Za-z0-9_-])"
        ),
    ),
    _Rule("vault-token", re.compile(_START + r"(?P<k>hv[sbr]\.)[A-Za-z0-9_-]{24,}")),
    _Rule("digitalocean", re.compile(_START + r"(?P<k>do[opr]_v1_)[a-f0-9]{64}(?![a-f0-9])")),
    _Rule("google-api-key", re.compile(_START + r"(?P<k>AIza)[A-Za-z0-9_-]{30,}")),
    _Rule(
        "slack-token",
        re.compile(_START + r"(?P<k>xox[abeoprs]-)[A-Za-z0-9-]{10,}"),
        lambda m: any(c.isdigit() for c in m.group(0)),  # not "xoxo-hugs-and-kisses"
    ),
    _Rule("slack-app-token", re.compile(_START + r"(?P<k>xapp-)[0-9]-[A-Za-z0-9-]{10,}")),
    _Rule(
        "slack-webhook",
        re.compile(
            r"(?P<k>https://hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_+-]{20,}"
        ),
    ),
    _Rule("stripe", re.compile(_START + r"(?P<k>(?:sk|rk)_(?:live|test)_)[A-Za-z0-9]{16,}")),
    _Rule("stripe-webhook-secret", re.compile(_START + r"(?P<k>whsec_)[A-Za-z0-9]{24,}")),
    _Rule("npm", re.compile(_START + r"(?P<k>npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    _Rule(
        "gitlab",
        re.compile(_START + r"(?P<k>gl(?:pat|dt|rt|ptt|cbt|oas|soat)-)[A-Za-z0-9_-]{20,}"),
    ),
    _Rule("twilio-api-key", re.compile(_START + r"(?P<k>SK)[0-9a-fA-F]{32}(?![A-Za-z0-9])")),
    _Rule(
        "sendgrid",
        re.compile(_START + r"(?P<k>SG\.)[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    ),
    _Rule(
        "huggingface",
        re.compile(_START + r"(?P<k>hf_)[A-Za-z0-9]{30,}"),
        lambda m: _mixed(m.group(0)) or _entropy(m.group(0)) >= 4.0,
    ),
    _Rule(
        # scheme://user:PASSWORD@host — only the password; it may hold a raw "@".
        "url-password",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@?#•]*:"
            r"(?P<s>[^\s/?#•]+)@(?=[A-Za-z0-9\[])"
        ),
        lambda m: not _PLACEHOLDER.search(m.group("s")),
    ),
    _Rule(
        "authorization-header",
        re.compile(
            r"(?i)authorization[\"']?\s*[:=]\s*[\"']?(?:basic|bearer|token|digest)\s+"
            rf"(?P<s>{_VALUE}{{8,}}){_VALUE_END}"
        ),
    ),
    _Rule(
        "bearer",
        re.compile(rf"(?i){_START}bearer\s+(?P<s>{_VALUE}{{12,}}){_VALUE_END}"),
        lambda m: _random_looking(m.group("s")),
    ),
    _value_rule(
        "aws-secret-access-key",
        r"(?i)aws[A-Za-z0-9_.-]{0,20}?(?:secret|key)[A-Za-z0-9_.-]{0,20}[\"']?\s*(?::=|=>|[:=])"
        r"\s*(?:\"(?P<s>[A-Za-z0-9/+=]{40})\"|'(?P<s_1>[A-Za-z0-9/+=]{40})'"
        r"|(?P<s_2>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=]))",
        lambda v: _entropy(v) >= 3.0,
    ),
    _Rule(
        # KEY=value, "key": "value", key: value, --key=value, ?key=value: the key ends in a
        # keyword; the value must look like a password or a random token, not a word.
        "generic-assignment",
        re.compile(
            r"(?i)(?<![A-Za-z0-9_.-])(?<!://)[A-Za-z0-9_.-]{0,40}?"
            # "key:value" needs a space or quote after ":" (else it reads as an ARN or a URL).
            rf"(?P<kw>{_KEYWORDS})s?[\"']?\s*(?::=|=>|=|:(?=[\s\"'`]))\s*{_quoted_or_bare('s')}"
        ),
        _generic_check,
    ),
)


def _spans(text: str) -> list[tuple[int, int, int]]:
    """Merged ``(start, end, kept)`` spans to mask; ``kept`` chars at ``start`` stay."""
    found: list[tuple[int, int, int]] = []
    for rule in _RULES:
        for m in rule.pattern.finditer(text):
            if rule.check is not None and not rule.check(m):
                continue
            start, end = m.span()
            for group in ("s", "s_1", "s_2"):
                if group in m.re.groupindex and m.group(group) is not None:
                    start, end = m.span(group)
                    break
            kept = len(m.group("k")) if "k" in m.re.groupindex else 0
            found.append((start, end, kept))
    found.sort(key=lambda s: (s[0], -s[1]))
    merged: list[tuple[int, int, int]] = []
    for start, end, kept in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kept))
    return merged


def _mask_once(text: str) -> str:
    spans = _spans(text)
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for start, end, kept in spans:
        out.append(text[pos : start + kept])
        out.append(MASK)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _cut(text: str, keep: int) -> str:
    """The first ``keep - 1`` characters and "…"."""
    return text[: keep - 1] + ELLIPSIS


@dataclass(frozen=True, slots=True)
class Redactor:
    """Masks secrets in text, or passes it through when ``enabled`` is false.

    ``mask("push with ghp_" + 36 letters)`` gives ``"push with ghp_••••"``. Build it once
    with ``redactor_from_env(os.environ)``; ``mask`` suits any ``Callable[[str], str]`` hook.
    """

    enabled: bool = True

    def mask(self, text: str) -> str:
        """Return ``text`` with every secret masked; masking the result again changes nothing."""
        if not self.enabled:
            return text
        # Repeat to a fixed point: a mask can change word boundaries around it. Each change
        # removes characters other than "•", so this ends.
        while (masked := _mask_once(text)) != text:
            text = masked
        return text

    def mask_cut(self, text: str, limit: int) -> str:
        """Mask, then cut to at most ``limit`` characters ending in "…" when cut.

        Masking comes first, so a secret straddling the cut leaves only mask behind.
        """
        if limit <= 0:
            return ""
        masked = self.mask(text)
        if len(masked) <= limit:
            return masked
        # A cut can expose a new word boundary, so the cut text is masked again; should that
        # lengthen it (a short URL password), cut shorter. At keep == 1 the result is "…".
        keep = limit
        while len(out := self.mask(_cut(masked, keep))) > limit:
            keep -= 1
        return out


def redactor_from_env(environ: Mapping[str, str]) -> Redactor:
    """Build the redactor from ``COLLIE_REDACT``: on unless "0", "false", "off" or "no"."""
    value = environ.get(ENV_VAR, "").strip().lower()
    return Redactor(enabled=value not in _OFF)


# --- masking a text while it is written (X1 on a streamed reply) ------------------------------
#
# A reply streams in small pieces; masking its whole text on each piece costs too much
# (tens of µs for a word, milliseconds for a page), and a secret's first characters must
# never reach the phone. ``LiveMask`` masks only the uncommitted tail of the text, holds back
# what a secret could still be written into, and commits the tail once no rule can match
# across its end. Its needles are necessary conditions of the rules above: where none is
# found, no rule matches and masking changes nothing (tested on the whole corpus).

# Rules whose match may hold whitespace: a keyword, then a value. Each needle is the rule's
# part up to where the value starts, or any part of it that the text so far ends in; group
# ``v`` ends where the value starts.
_VALUE_NEEDLES: Final = re.compile(
    rf"(?i:(?:{_KEYWORDS})s?[\"']?\s*(?:(?::=|=>|=|:(?=[\s\"'`]))\s*|\Z))"
    r"|(?i:authorization[\"']?\s*(?:[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)(?:\s+|\Z))?|\Z))"
    r"|(?i:(?<![A-Za-z0-9])bearer(?:\s+|\Z))"
    r"|(?i:aws[A-Za-z0-9_.-]{0,20}?(?:secret|key)[A-Za-z0-9_.-]{0,20}[\"']?\s*"
    r"(?:(?::=|=>|[:=])\s*|\Z))"
    r"|(?i:AccountKey\s*(?:=\s*|\Z))"
)
# A PEM header: its start, and the whole header of a private key.
_PEM_START: Final = re.compile(r"-----BEGIN[ A-Z0-9]*")
_PEM_HEADER: Final = re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_KEY: Final = re.compile(r"(?:\s|\\[nr])*(?:[A-Za-z-]+:|[A-Za-z0-9+/]{8})")
_PEM_GAP: Final = re.compile(r"(?:\s|\\[nr])*")
_PEM_END: Final = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
# Every rule, by a part no match of it lacks.
_NEEDLES: Final = re.compile(
    "|".join(
        (
            _VALUE_NEEDLES.pattern,
            r"-----BEGIN",
            r"eyJ",
            r"gh[pousr]_|github_pat_",
            r"sk-",
            r"AKIA|ASIA|ABIA|ACCA",
            r"pypi-",
            r"(?i:accountkey)",
            r"[?&]sig=",
            r"[MNO][A-Za-z0-9_-]{22,27}\.",
            r"hv[sbr]\.",
            r"do[opr]_v1_",
            r"AIza",
            r"xox[abeoprs]-|xapp-",
            r"[sr]k_(?:live|test)_|whsec_|npm_",
            r"gl(?:pat|dt|rt|ptt|cbt|oas|soat)-",
            r"SK[0-9a-fA-F]{32}",
            r"SG\.",
            r"hf_",
            r"://",
        )
    )
)
# A quicker test than ``_NEEDLES`` (a long alternation costs about 1 µs a character): every
# needle holds one of these strings (or, lower-cased, a keyword), or is a Discord token's run.
_NEEDLE_PARTS: Final = (
    *("-----BEGIN", "eyJ", "gh", "sk-", "AKIA", "ASIA", "ABIA", "ACCA", "pypi-", "sig="),
    *("hvs.", "hvb.", "hvr.", "_v1_", "AIza", "xox", "xapp-", "k_live_", "k_test_", "whsec_"),
    *("npm_", "glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-", "glsoat-", "SK", "SG."),
    *("hf_", "://"),
)
_NEEDLE_WORDS: Final = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "bearer")
_DISCORD_RUN: Final = re.compile(r"[MNO][A-Za-z0-9_-]{22}")


def _may_need_mask(text: str) -> bool:
    """False only where no needle, so no rule, can match (then masking changes nothing)."""
    for part in _NEEDLE_PARTS:
        if part in text:
            return True
    lower = text.lower()
    for word in _NEEDLE_WORDS:
        if word in lower:
            return True
    return len(text) >= 24 and _DISCORD_RUN.search(text) is not None


_BREAK_CHARS: Final = (" ", "\n", "\t")
_QUOTED_MAX: Final = 202  # a quoted value: at most 200 characters and its two quotes


class LiveMask:
    """A text being written, masked as it grows (X1): ``feed`` takes each new piece and
    returns what the shown text gains (``""`` for nothing), or ``None`` when masking changed
    text already shown (a token completed): then ``text`` is the whole shown text anew.

    What is shown lags the text: an unfinished word (a secret may be growing in it), a
    quoted value after a keyword until its quote closes, and anything after a private key's
    header once key material follows (shown as the mask). So a secret's characters are never
    shown, only its kept prefix and the mask; a private key's header line may show until its
    first line of key material arrives. ``done`` shows the rest (the text was cut: nothing
    more comes). Built for ``Redactor.mask``: its needles are that rule set's.
    """

    __slots__ = ("_committed", "_joined", "_mask", "_pem_open", "_shown", "_tail", "_whole")

    def __init__(self, mask: Callable[[str], str]) -> None:
        self._mask = mask
        self._committed: list[str] = []  # the text up to a safe boundary, masked
        self._joined = ""
        self._tail = ""  # the text after it, as written
        self._shown = ""  # the part of the tail shown, masked
        self._pem_open = False  # the tail shows a private key's mask to its end
        self._whole = False

    @property
    def text(self) -> str:
        """What is shown now."""
        if len(self._committed) > 1:
            self._joined = "".join(self._committed)
            self._committed = [self._joined]
        elif self._committed:
            self._joined = self._committed[0]
        return self._joined + self._shown

    def done(self) -> str | None:
        """No more text comes: show all of it. Returns as ``feed``."""
        self._whole = True
        return self.feed("", force=True)

    def feed(self, piece: str, *, force: bool = False) -> str | None:
        """Add a piece of (cleaned) text; return what the shown text gains, or ``None``."""
        if not piece and not force:
            return ""
        old_end = len(self._tail)
        self._tail += piece
        if self._pem_open:
            # A private key's mask runs to the end until its END line comes: nothing new.
            if "-----END" not in self._tail[max(0, old_end - 8) :] and not self._whole:
                return ""
            self._pem_open = False
        held = self._hold_point()
        window = self._tail[:held]
        if _may_need_mask(window):
            settled, held = self._settled(window)
            window = window[:held]
            masked = self._mask(window) if _NEEDLES.search(window) else window
        else:
            settled, masked = True, window  # the common case: plain words
        old = self._shown
        if settled and held:
            self._committed.append(masked)
            self._tail = self._tail[held:]
            self._shown = ""
        else:
            self._shown = masked
        if masked.startswith(old):
            return masked[len(old) :]
        return None

    def _hold_point(self) -> int:
        """Where the shown part of the tail ends: after its last break (an unfinished word
        may be the start of a secret), or at its end once no more text comes."""
        if self._whole:
            return len(self._tail)
        return max(self._tail.rfind(ch) for ch in _BREAK_CHARS) + 1

    def _settled(self, window: str) -> tuple[bool, int]:
        """Whether no rule can match across the window's end whatever comes next, and where
        the shown part ends (before a quoted value still open)."""
        if self._whole:
            return True, len(window)
        settled = True
        held = len(window)
        for m in _VALUE_NEEDLES.finditer(window):
            start = m.end()
            if start >= len(window):
                settled = False  # the value has not begun
            elif window[start] in "\"'":
                close = window.find(window[start], start + 1)
                line_end = window.find("\n", start + 1)
                if close < 0 and line_end < 0 and len(window) - start < _QUOTED_MAX:
                    settled = False  # a quoted value may be a passphrase: hold it whole
                    held = min(held, start)
        start = window.rfind("-----BEGIN")
        if start < 0:
            return settled, held
        header = _PEM_HEADER.match(window, start)
        if header is None:
            begun = _PEM_START.match(window, start)
            if begun is not None and begun.end() == len(window):
                settled = False  # a header still being written
        elif not _PEM_END.search(window, header.end()):
            gap = _PEM_GAP.match(window, header.end())
            assert gap is not None
            if _PEM_KEY.match(window, header.end()):
                settled = False
                self._pem_open = True
            elif gap.end() >= len(window) or not any(
                ch in window[gap.end() :] for ch in _BREAK_CHARS
            ):
                settled = False  # the next word decides whether key material follows
        return settled, held
