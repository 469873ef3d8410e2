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
from collections.abc import Callable, Iterator, Mapping
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
# Providers' documentation marks its example keys so (AWS: AKIAIOSFODNN7EXAMPLE); random
# characters spell it in upper case almost never.
_DOCUMENTED: Final = "EXAMPLE"
_PASSWORD_KEYS: Final = frozenset({"pass", "password", "passwd", "passphrase", "pwd"})
# Words (lower, Capitalised, UPPER, CamelCase) joined by "-", "_", "." or spaces.
_WORD = r"(?:[A-Za-z][a-z]*|[A-Z]+|(?:[A-Z][a-z]+)+)"
_WORDS = re.compile(rf"{_WORD}(?:[-_. ]+{_WORD})*")
_PLACEHOLDER = re.compile(r"x{3}|\*{3}|\.{3}|\$\{|\{\{|%\(|<|your[-_]|example|redacted", re.I)
# A token whose random part holds these is a documented placeholder (sk_test_xxxx…, ghp_…),
# not a key: four x or X in a row come by chance about once in a million random characters.
_FILLER = re.compile(r"[xX]{4}|\.{3}|…")
# A shell, CI or Windows variable stands for a secret and is none (Bearer $OPENAI_API_KEY).
_VARIABLE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^}\s]*\}|%[A-Za-z_][A-Za-z0-9_]*%")
# Passwords of documentation and local defaults (postgres://user:password@localhost/db,
# Docker Hub's mysecretpassword, GitHub's x-oauth-basic); a password equal to its user name
# (guest:guest, postgres:postgres) is one too.
_PLACEHOLDER_PASSWORD = re.compile(
    r"(?i)(?:my|your)?(?:secret)?(?:password|passwd|pass|pwd|pw|secret|changeme|changeit"
    r"|example|test|dummy)[0-9]{0,4}|x-oauth-basic"
)
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
    return bool(
        _WORDS.fullmatch(s)
        or _PLACEHOLDER.search(s)
        or _NOT_SECRET.fullmatch(s)
        or _VARIABLE.fullmatch(s)
    )


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
    """One secret shape: group ``s`` (else the match) is masked, group ``k`` is kept.

    ``needles``: lower-case strings one of which every match holds; a text holding none is
    not searched (most text holds no secret, and a substring test is far cheaper than a scan).
    ``start``: for a case-blind pattern, where a match may begin, found in the lower-cased
    text (a case-blind search tries each position slowly; a case-sensitive one skips ahead).
    """

    name: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None
    needles: tuple[str, ...] = ()
    start: re.Pattern[str] | None = None


def _generic_check(m: re.Match[str]) -> bool:
    value = _value(m)
    if m.group("kw").lower() not in _PASSWORD_KEYS:
        # A token with a space is a scheme and a token ("FlyV1 fm2_…"): the token's own
        # rule masks it, and the scheme stays.
        return " " not in value.strip() and _random_looking(value)
    # A quoted passphrase of several words is still a password.
    quoted_words = m.group("s_2") is None and " " in value.strip()
    if quoted_words and len(value) >= 6 and not _PLACEHOLDER.search(value):
        return True
    return _password_like(value)


_NAME_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def _assignment_check(m: re.Match[str]) -> bool:
    """The keyword ends a name of at most 40 more characters, not one right after "://";
    then the value as ``_generic_check``."""
    text = m.string
    start = m.start()
    while start > 0 and text[start - 1] in _NAME_CHARS:
        start -= 1
        if m.start() - start > 40:
            return False
    return not text.endswith("://", 0, start) and _generic_check(m)


def _argument_check(m: re.Match[str]) -> bool:
    """A flag's value after a space: not a variable, not the next flag, then as assigned."""
    return not _value(m).startswith(("$", "-")) and _generic_check(m)


def _credential(s: str) -> bool:
    """Whether the password half of ``user:password`` is one (not ``$PASS``, not a gid)."""
    return not s.startswith("$") and _password_like(s)


# A port mapping glued to docker's -p (-p3306:3306) on a line naming mysql is no password.
_PORTS = re.compile(r"[0-9.]*:[0-9.:]+(?:/(?:tcp|udp))?")


def _given_password(s: str) -> bool:
    """Whether the value of a command's password flag is one: any but a variable or a
    placeholder (after ``sshpass -p`` even a word is the password)."""
    return (
        len(s) >= 4
        and not s.startswith("$")
        and not _VARIABLE.fullmatch(s)
        and not _PLACEHOLDER.search(s)
        and not _PLACEHOLDER_PASSWORD.fullmatch(s)
    )


def _url_password(user: str, password: str) -> bool:
    """Whether ``password`` in ``scheme://user:password@host`` is a secret, not a placeholder."""
    return (
        not _PLACEHOLDER.search(password)
        and not _PLACEHOLDER_PASSWORD.fullmatch(password)
        and password != user
    )


def _url_token_user(m: re.Match[str]) -> bool:
    """A random user name is a key unless a password follows that is the secret: then the
    user tells which credential it is and stays (only the password is masked)."""
    password = m.group("p")
    if password is not None and _url_password(m.group("s"), password):
        return False
    return _random_looking(m.group("s"))


# An AWS secret access key given after a key word: 40 base64 characters, or their mask (masking
# repeats to a fixed point, and the id must stay shown on the second round too).
_AWS_SECRET_AFTER = re.compile(
    r"(?i)(?:secret|key)[A-Za-z0-9_.-]{0,20}[\"']?(?:\s*(?::=|=>|[:=])\s*|(?<=key)[ \t]+)[\"']?"
    rf"(?:[A-Za-z0-9/+=]{{40}}(?![A-Za-z0-9/+=])|{MASK})"
)


def _aws_id_alone(m: re.Match[str]) -> bool:
    """An AWS access key id is masked unless its secret key follows on its line or the next:
    then the id tells which key leaked (to rotate it) and only the secret is masked."""
    text = m.string
    stop = text.find("\n", m.end())
    if stop >= 0:
        stop = text.find("\n", stop + 1)
    return _AWS_SECRET_AFTER.search(text, m.end(), len(text) if stop < 0 else stop) is None


def _fly_token(m: re.Match[str]) -> bool:
    """A Fly.io macaroon: random, and long unless after its "FlyV1" scheme."""
    body = m.group(0)[len(m.group("k")) :]
    after_scheme = m.string.endswith("FlyV1 ", 0, m.start())
    return (len(body) >= 40 or after_scheme) and _random_looking(body)


def _twilio_token(m: re.Match[str]) -> bool:
    """The account SID starts a word (so not the tail of another hex run)."""
    start = m.start()
    return start == 0 or not m.string[start - 1].isalnum()


def _prefixed(
    name: str,
    prefix: str,
    body: str,
    needles: tuple[str, ...],
    check: Callable[[re.Match[str]], bool] | None = None,
) -> _Rule:
    """A token that starts a word with a fixed kind ``prefix`` (kept), then ``body``."""
    return _Rule(name, re.compile(rf"{_START}(?P<k>{prefix}){body}"), check, needles)


def _quoted_or_bare(name: str) -> str:
    """A value: in double, single or back quotes (may hold spaces), or bare up to a delimiter."""
    return (
        rf"(?:\"(?P<{name}>[^\"\n•]{{4,200}})\""
        rf"|'(?P<{name}_1>[^'\n•]{{4,200}})'"
        rf"|(?P<{name}_2>{_VALUE}{{4,200}}){_VALUE_END})"
    )


def _value_rule(
    name: str, regex: str, check: Callable[[str], bool], needles: tuple[str, ...] = ()
) -> _Rule:
    """A rule whose value may be quoted; ``check`` decides on the value's text."""
    pattern = re.compile(regex)

    def run(m: re.Match[str]) -> bool:
        return check(_value(m))

    return _Rule(name, pattern, run, needles)


def _value(m: re.Match[str]) -> str:
    """The value of a rule with groups s, s_1 and s_2 (one per quoting): whichever matched."""
    return str(m.group("s") or m.group("s_1") or m.group("s_2"))


_KEYWORDS = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|secret[_-]?key|signing[_-]?key|encryption[_-]?key|auth|credentials?"
)

# Every keyword holds one of these, so a text holding none is not scanned for them.
_KEYWORD_NEEDLES: Final = ("pass", "pwd", "secret", "token", "key", "auth", "credential")

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
        needles=("-----begin",),
    ),
    _Rule(
        "jwt",
        re.compile(_START + r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"),
        needles=("eyj",),
    ),
    # GitHub's prefixes are distinctive enough to need no boundary: "xghp_…" glued to a word
    # is still a token (gitleaks' rule has none either).
    _Rule("github", re.compile(r"(?P<k>gh[pousr]_)[A-Za-z0-9]{30,}"), needles=("gh",)),
    _Rule(
        "github-fine-grained",
        re.compile(r"(?P<k>github_pat_)[A-Za-z0-9_]{30,}"),
        needles=("github_pat_",),
    ),
    # sk-ant-api03-, sk-ant-admin01-, sk-ant-oat01-: the kind stays visible.
    _Rule(
        "anthropic",
        re.compile(_START + r"(?P<k>sk-ant-(?:(?:api|admin|oat|sid)\d\d-)?)[A-Za-z0-9_-]{20,}"),
        needles=("sk-ant-",),
    ),
    _Rule(
        "openai",
        re.compile(_START + r"(?P<k>sk-(?:(?:proj|svcacct|admin)-)?)(?!ant-)[A-Za-z0-9_-]{20,}"),
        lambda m: _mixed(m.group(0)[len(m.group("k")) :]),
        needles=("sk-",),
    ),
    _Rule(
        "aws-access-key-id",
        re.compile(_START + r"(?P<k>AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        _aws_id_alone,
        needles=("akia", "asia", "abia", "acca"),
    ),
    # Families after gitleaks' pypi, azure-storage, discord, vault and digitalocean rules.
    _Rule("pypi", re.compile(_START + r"(?P<k>pypi-)AgE[A-Za-z0-9_-]{50,}"), needles=("pypi-",)),
    _Rule(
        "azure-storage-account-key",
        re.compile(r"(?i)AccountKey\s*=\s*(?P<s>[A-Za-z0-9+/]{80,100}={0,2})(?![A-Za-z0-9+/=])"),
        needles=("accountkey",),
    ),
    _Rule(
        # A shared access signature in a URL's query: percent-encoded base64.
        "azure-sas-signature",
        re.compile(r"[?&]sig=(?P<s>[A-Za-z0-9%+/=]{30,})(?![A-Za-z0-9%+/=])"),
        lambda m: _entropy(m.group("s")) >= 3.5,
        needles=("sig=",),
    ),
    _Rule(
        # Bot tokens: the bot's id in base64 ("M…"–"O…"), a timestamp, an HMAC.
        "discord-bot-token",
        re.compile(
            _START + r"[MNO][A-Za-z0-9_-]{22,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}"
            r"(?![A-Za-z0-9_-])"
        ),
    ),
    _Rule(
        "vault-token",
        re.compile(_START + r"(?P<k>hv[sbr]\.)[A-Za-z0-9_-]{24,}"),
        needles=("hvs.", "hvb.", "hvr."),
    ),
    _Rule(
        "digitalocean",
        re.compile(_START + r"(?P<k>do[opr]_v1_)[a-f0-9]{64}(?![a-f0-9])"),
        needles=("_v1_",),
    ),
    _Rule(
        "google-api-key", re.compile(_START + r"(?P<k>AIza)[A-Za-z0-9_-]{30,}"), needles=("aiza",)
    ),
    _Rule(
        "slack-token",
        re.compile(_START + r"(?P<k>xox[abeoprs]-)[A-Za-z0-9-]{10,}"),
        lambda m: any(c.isdigit() for c in m.group(0)),  # not "xoxo-hugs-and-kisses"
        needles=("xox",),
    ),
    _Rule(
        "slack-app-token",
        re.compile(_START + r"(?P<k>xapp-)[0-9]-[A-Za-z0-9-]{10,}"),
        needles=("xapp-",),
    ),
    _Rule(
        # Only the token: the workspace, channel or workflow ids before it (T…/B…) tell which
        # webhook leaked.
        "slack-webhook",
        re.compile(
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?:[A-Z0-9]{6,}/){2,3}"
            r"(?P<s>[A-Za-z0-9_+-]{16,})(?![A-Za-z0-9_+/-])"
        ),
        needles=("hooks.slack.com/",),
    ),
    _Rule(
        "stripe",
        re.compile(_START + r"(?P<k>(?:sk|rk)_(?:live|test|prod)_)[A-Za-z0-9]{16,}"),
        needles=("k_live_", "k_test_", "k_prod_"),
    ),
    _Rule(
        "stripe-webhook-secret",
        re.compile(_START + r"(?P<k>whsec_)[A-Za-z0-9]{24,}"),
        needles=("whsec_",),
    ),
    _Rule(
        "npm", re.compile(_START + r"(?P<k>npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])"), needles=("npm_",)
    ),
    _Rule(
        "gitlab",
        re.compile(
            _START + r"(?P<k>gl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent|ffct)-)[A-Za-z0-9_-]{20,}"
        ),
        needles=("gl",),
    ),
    _Rule(
        "twilio-api-key",
        re.compile(_START + r"(?P<k>SK)[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        needles=("sk",),
    ),
    _Rule(
        "sendgrid",
        re.compile(_START + r"(?P<k>SG\.)[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
        needles=("sg.",),
    ),
    _Rule(
        "huggingface",
        re.compile(_START + r"(?P<k>hf_)[A-Za-z0-9]{30,}"),
        lambda m: _mixed(m.group(0)) or _entropy(m.group(0)) >= 4.0,
        needles=("hf_",),
    ),
    # Families after gitleaks' rules of the same names (X1, second held-out set).
    _prefixed("linear", r"lin_(?:api|oauth)_", r"[A-Za-z0-9]{32,64}(?![A-Za-z0-9])", ("lin_",)),
    _Rule(
        # A 32-hex API key or 40-hex app key has the shape of an md5 or a commit, so it is
        # masked only where the line names Datadog ("datadog", "dd_", "dd-") before a key
        # named api/app key: a bare hex string is never taken for one.
        "datadog",
        re.compile(
            r"(?i)(?:datadog|(?<![a-z0-9])dd[_-])[^\n]{0,80}?"
            r"(?<![a-z0-9])(?:api|app(?:lication)?)[ _-]?key[\"']?"
            r"(?:\s*(?::=|=>|[:=])\s*|\s+(?:is\s+)?)[\"']?"
            r"(?P<s>[a-f0-9]{40}|[a-f0-9]{32})(?![a-z0-9])"
        ),
        needles=("datadog", "dd_", "dd-"),
    ),
    _Rule(
        "atlassian",
        re.compile(_START + r"ATATT3[A-Za-z0-9_=-]{150,250}(?![A-Za-z0-9_=-])"),
        needles=("atatt3",),
    ),
    _prefixed("shopify", r"shp(?:at|ca|pa|ss)_", r"[a-fA-F0-9]{32}(?![A-Za-z0-9])", ("shp",)),
    _Rule(
        # Keyed by the service's name: "key-" and 32 hex alone may be any cache key.
        "mailgun",
        re.compile(
            r"(?i)mailgun[^\n]{0,80}?(?<![a-z0-9])"
            r"(?P<s>key-[a-f0-9]{32}|[a-h0-9]{32}-[a-h0-9]{8}-[a-h0-9]{8})(?![a-z0-9-])"
        ),
        needles=("mailgun",),
    ),
    _prefixed(
        "huggingface-org",
        r"api_org_",
        r"[A-Za-z]{34}(?![A-Za-z0-9])",
        ("api_org_",),
        lambda m: _entropy(m.group(0)) >= 4.0,
    ),
    _prefixed("heroku", r"HRKU-AA", r"[A-Za-z0-9_-]{58}(?![A-Za-z0-9_-])", ("hrku-",)),
    _prefixed("grafana-cloud", r"glc_", r"[A-Za-z0-9+/]{32,400}={0,3}", ("glc_",)),
    _prefixed(
        "grafana-service-account",
        r"glsa_",
        r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}(?![A-Za-z0-9])",
        ("glsa_",),
    ),
    _Rule(
        # Legacy API keys: base64 of '{"k":"', no dots (so not a JWT).
        "grafana-api-key",
        re.compile(_START + r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}"),
        needles=("eyjrijoi",),
    ),
    _prefixed(
        "new-relic",
        r"NR(?:AK|II|JS)-",
        r"[A-Za-z0-9_-]{19,40}(?![A-Za-z0-9_-])",
        ("nrak-", "nrii-", "nrjs-"),
        lambda m: any(c.isdigit() for c in m.group(0)),
    ),
    _prefixed("sentry-token", r"sntry[us]_", r"[A-Za-z0-9+/=_]{40,400}", ("sntry",)),
    _prefixed("postman", r"PMAK-", r"[a-fA-F0-9]{24}-[a-fA-F0-9]{34}(?![A-Za-z0-9])", ("pmak-",)),
    _prefixed(
        # dp.st.<config>.<token> for service tokens.
        "doppler",
        r"dp\.(?:pt|st|sa|ct|scim|audit)\.",
        r"(?:[a-z0-9_-]{1,40}\.)?[A-Za-z0-9]{40,44}(?![A-Za-z0-9])",
        ("dp.",),
    ),
    _Rule(
        # <bot id>:AA<33>; the id is masked too (the token is the pair).
        "telegram-bot-token",
        re.compile(r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])"),
        needles=(":aa",),
    ),
    _prefixed("databricks", r"dapi", r"[a-f0-9]{32}(?:-[0-9])?(?![A-Za-z0-9])", ("dapi",)),
    _prefixed("notion", r"ntn_", r"[0-9]{11}[A-Za-z0-9]{35}(?![A-Za-z0-9])", ("ntn_",)),
    _prefixed(
        "google-oauth-client-secret",
        r"GOCSPX-",
        r"[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])",
        ("gocspx-",),
    ),
    _Rule(
        # Microsoft Entra (Azure AD) client secrets: three characters, a digit, "Q~", 31–34.
        "entra-client-secret",
        re.compile(
            r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}"
            r"(?![A-Za-z0-9_~.-])"
        ),
        needles=("q~",),
    ),
    _Rule(
        "age-secret-key",
        re.compile(r"(?P<k>AGE-SECRET-KEY-1)[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
        needles=("age-secret-key-1",),
    ),
    _prefixed("docker-hub", r"dckr_(?:pat|oat)_", r"[A-Za-z0-9_-]{27,}", ("dckr_",)),
    # Families found shown in full by an independent set (X1): each names the gitleaks rule
    # id or the trufflehog detector whose shape it follows.
    _Rule(
        # gitleaks okta-access-token, trufflehog okta: "00" and 40 more on a line naming Okta
        # (after the "SSWS" scheme, any token: the bearer rule).
        "okta-api-token",
        re.compile(
            r"(?i:okta)[^\n]{0,80}?(?<![A-Za-z0-9_-])(?P<s>00[A-Za-z0-9_-]{40})(?![A-Za-z0-9_-])"
        ),
        lambda m: _random_looking(m.group("s")),
        needles=("okta",),
    ),
    _Rule(
        # gitleaks cloudflare-global-api-key, trufflehog cloudflareglobalapikey: 37 hex (no
        # hash has that length) on a line naming X-Auth-Key, Cloudflare or CF_API_KEY.
        "cloudflare-global-api-key",
        re.compile(
            r"(?i:x-auth-key|cloudflare|(?<![a-z0-9])cf[_-]?api[_-]?key)[^\n]{0,80}?"
            r"(?<![A-Za-z0-9])(?P<s>[a-f0-9]{37})(?![A-Za-z0-9])"
        ),
        needles=("x-auth-key", "cloudflare", "cf_api", "cf-api", "cfapi"),
    ),
    # trufflehog supabasetoken's family: Supabase's secret API keys (sb_secret_…).
    _prefixed("supabase-secret-key", r"sb_secret_", r"[A-Za-z0-9_-]{20,}", ("sb_secret_",)),
    _prefixed(
        # gitleaks flyio-access-token: macaroons, one or several joined by commas after "FlyV1".
        "flyio-access-token",
        r"fm2_|fm1[ar]_",
        r"[A-Za-z0-9+/]{20,}={0,3}(?:,fm(?:2|1[ar])_[A-Za-z0-9+/]{40,}={0,3})*",
        ("fm2_", "fm1"),
        _fly_token,
    ),
    _prefixed(
        # trufflehog render: rnd_ and 32 (here 24–40) letters and digits, anywhere (a
        # positional argument has no key name beside it).
        "render-api-key",
        r"rnd_",
        r"[A-Za-z0-9]{24,40}(?![A-Za-z0-9])",
        ("rnd_",),
        lambda m: _random_looking(m.group(0)[4:]),
    ),
    _Rule(
        # trufflehog twilio: an account SID (AC and 32 hex), then the auth token as the next
        # argument, Client("AC…", "…"). The SID stays (it tells which account).
        "twilio-auth-token",
        re.compile(
            r"AC[0-9a-f]{32}[\"']?[ \t]*,[ \t]*(?:\r?\n[ \t]*)?[\"']?"
            r"(?P<s>[0-9a-f]{32})(?![A-Za-z0-9])"
        ),
        _twilio_token,
    ),
    _Rule(
        # trufflehog discordwebhook: the token after the webhook's id; the id stays.
        "discord-webhook",
        re.compile(
            r"https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api(?:/v[0-9]+)?/webhooks/"
            r"[0-9]{17,20}/(?P<s>[A-Za-z0-9_-]{60,80})(?![A-Za-z0-9_-])"
        ),
        needles=("/webhooks/",),
    ),
    _Rule(
        # mysql -pPASSWORD: the password glued to "-p" ("-p" alone asks for it; "-P" is the
        # port). gitleaks and trufflehog have no rule of this shape; it follows gitleaks'
        # curl-auth-user (a command's own password argument).
        "mysql-password-flag",
        re.compile(
            r"(?i:(?<![A-Za-z0-9_-])(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump))"
            rf"(?![A-Za-z0-9_-])[^\n]{{0,160}}?(?<![^\s])-p{_quoted_or_bare('s')}"
        ),
        lambda m: _given_password(_value(m)) and not _PORTS.fullmatch(_value(m)),
        needles=("mysql", "mariadb"),
    ),
    _Rule(
        # sshpass -p PASSWORD (or -pPASSWORD): whatever follows is the password, even a word.
        # As gitleaks' curl-auth-user; no gitleaks or trufflehog rule has this shape.
        "sshpass-password",
        re.compile(rf"\bsshpass\b[^\n]{{0,40}}?(?<![^\s])-p[ \t]*{_quoted_or_bare('s')}"),
        lambda m: _given_password(_value(m)),
        needles=("sshpass",),
    ),
    _Rule(
        # scheme://TOKEN@host: a random user with no password is a key (Sentry DSNs, tokens
        # in git remotes); a name ("alice", "x-access-token") is not.
        "url-token-user",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<s>[A-Za-z0-9_-]{20,})"
            r"(?=(?::(?P<p>[^\s/?#@•]*))?@[A-Za-z0-9\[])"
        ),
        _url_token_user,
        needles=("://",),
    ),
    _Rule(
        # curl -u user:PASSWORD, --user=user:PASSWORD: only the password. Only after "curl":
        # elsewhere "-u" is git's patch flag before HEAD:path, docker's uid:gid …
        "basic-auth-argument",
        re.compile(
            r"\bcurl\b[^\n]{0,200}?(?<![^\s])(?:-u|--user)(?:\s+|=)[\"']?[^\s:\"'/]+:"
            r"(?P<s>[^\s\"'•]+)"
        ),
        lambda m: _credential(m.group("s")),
        needles=("curl",),
    ),
    _Rule(
        # scheme://user:PASSWORD@host — only the password; it may hold a raw "@".
        "url-password",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<u>[^\s:/@?#•]*):"
            r"(?P<s>[^\s/?#•]+)@(?=[A-Za-z0-9\[])"
        ),
        lambda m: _url_password(m.group("u"), m.group("s")),
        needles=("://",),
    ),
    _Rule(
        "authorization-header",
        re.compile(
            r"(?i)authorization[\"']?\s*[:=]\s*[\"']?(?:basic|bearer|token|digest|ssws)\s+"
            rf"(?P<s>{_VALUE}{{8,}}){_VALUE_END}"
        ),
        lambda m: not _VARIABLE.fullmatch(m.group("s")) and not _PLACEHOLDER.search(m.group("s")),
        needles=("authorization",),
    ),
    _Rule(
        # Bearer, and Okta's SSWS scheme (gitleaks okta-access-token, trufflehog okta): the
        # scheme stays, the token after it is masked.
        "bearer",
        re.compile(rf"(?i){_START}(?:bearer|ssws)\s+(?P<s>{_VALUE}{{12,}}){_VALUE_END}"),
        lambda m: _random_looking(m.group("s")),
        needles=("bearer", "ssws"),
    ),
    _value_rule(
        "aws-secret-access-key",
        # "aws configure set aws_secret_access_key VALUE": a space may follow a name in "key".
        r"(?i)aws[A-Za-z0-9_.-]{0,20}?(?:secret|key)[A-Za-z0-9_.-]{0,20}[\"']?"
        r"(?:\s*(?::=|=>|[:=])\s*|(?<=key)[ \t]+)"
        r"(?:\"(?P<s>[A-Za-z0-9/+=]{40})\"|'(?P<s_1>[A-Za-z0-9/+=]{40})'"
        r"|(?P<s_2>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=]))",
        lambda v: _entropy(v) >= 3.0,
        ("aws",),
    ),
    _Rule(
        # --password VALUE, --api-key VALUE: a long flag named for a secret, then a space.
        "secret-flag",
        re.compile(
            rf"(?i)(?<![^\s])--[a-z0-9-]{{0,40}}?(?P<kw>{_KEYWORDS})\s+{_quoted_or_bare('s')}"
        ),
        _argument_check,
        needles=("--",),
        start=re.compile("--"),
    ),
    _Rule(
        # "-p" is a password only after "login" (docker login, az login); elsewhere a port.
        "login-password-flag",
        re.compile(rf"(?i)\blogin\b[^\n]{{0,120}}?(?<![^\s])-p\s+{_quoted_or_bare('s')}"),
        lambda m: not _value(m).startswith(("$", "-")) and _password_like(_value(m)),
        needles=("login",),
    ),
    _Rule(
        # KEY=value, "key": "value", key: value, --key=value, ?key=value: the key ends in a
        # keyword; the value must look like a password or a random token, not a word.
        "generic-assignment",
        re.compile(
            # The search starts at the keyword (far cheaper than at every name's start);
            # ``_assignment_check`` looks at the name before it.
            # "key:value" needs a space or quote after ":" (else it reads as an ARN or a URL).
            rf"(?i)(?P<kw>{_KEYWORDS})s?[\"']?\s*(?::=|=>|=|:(?=[\s\"'`]))\s*{_quoted_or_bare('s')}"
        ),
        _assignment_check,
        needles=_KEYWORD_NEEDLES,
        start=re.compile(_KEYWORDS),
    ),
)


def _documented(rule: _Rule, text: str, start: int, end: int) -> bool:
    """Whether a match is a provider's documented example (AKIAIOSFODNN7EXAMPLE) or a
    placeholder of filler (sk_test_xxxx…): no secret. A private key keeps its mask even with
    an elision ("...") in its key material."""
    if _DOCUMENTED in text[start:end]:
        return True
    return rule.name != "pem-private-key" and _FILLER.search(text, start, end) is not None


def _matches(rule: _Rule, text: str, lower: str) -> Iterator[re.Match[str]]:
    """``rule.pattern.finditer(text)``, trying only where ``rule.start`` finds a beginning."""
    if rule.start is None or len(lower) != len(text):  # (lower-casing changed some lengths)
        yield from rule.pattern.finditer(text)
        return
    pos = 0
    while (begin := rule.start.search(lower, pos)) is not None:
        m = rule.pattern.match(text, begin.start())
        if m is None:
            pos = begin.start() + 1
        else:
            yield m
            pos = max(m.end(), begin.start() + 1)


def _spans(text: str) -> list[tuple[int, int, int]]:
    """Merged ``(start, end, kept)`` spans to mask; ``kept`` chars at ``start`` stay."""
    found: list[tuple[int, int, int]] = []
    lower = text.lower()
    for rule in _RULES:
        for needle in rule.needles:  # a loop, not any(): no generator per rule and text
            if needle in lower:
                break
        else:
            if rule.needles:
                continue
        for m in _matches(rule, text, lower):
            if rule.check is not None and not rule.check(m):
                continue
            start, end = m.span()
            for group in ("s", "s_1", "s_2"):
                if group in m.re.groupindex and m.group(group) is not None:
                    start, end = m.span(group)
                    break
            kept = len(m.group("k")) if "k" in m.re.groupindex else 0
            if _documented(rule, text, start + kept, end):
                continue
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
# part up to where the value starts, or any part of it that the text so far ends in; its end
# is where the value starts.
_VALUE_NEEDLES: Final = re.compile(
    rf"(?i:(?:{_KEYWORDS})s?[\"']?\s*(?:(?::=|=>|=|:(?=[\s\"'`]))\s*|\Z))"
    r"|(?i:authorization[\"']?\s*(?:[:=]\s*[\"']?(?:(?:basic|bearer|token|digest|ssws)(?:\s+|\Z))?"
    r"|\Z))"
    r"|(?i:(?<![A-Za-z0-9])bearer(?:\s+|\Z))"
    r"|(?i:(?<![A-Za-z0-9])ssws(?:\s+|\Z))"
    r"|(?i:aws[A-Za-z0-9_.-]{0,20}?(?:secret|key)[A-Za-z0-9_.-]{0,20}[\"']?"
    r"(?:\s*(?::=|=>|[:=])\s*|(?<=key)[ \t]+|\s*\Z))"
    r"|(?i:AccountKey\s*(?:=\s*|\Z))"
    rf"|(?i:(?<![^\s])--[a-z0-9-]{{0,40}}?(?:{_KEYWORDS})(?:\s+|\Z))"  # --password VALUE
    r"|(?i:(?<![^\s])-p(?:\s+|\Z))"  # login … -p VALUE
)
# Rules bounded by a line that may span it from a word far before their value (curl … -u,
# login … -p, Datadog … api key is): a line holding one is not committed before it ends.
_LINE_WORDS: Final = (
    *("curl", "login", "datadog", "dd_", "dd-", "mailgun", "okta", "x-auth-key", "cloudflare"),
    *("cf_api", "cf-api", "cfapi", "mysql", "mariadb", "sshpass"),
)
# A Twilio account SID: its auth token may follow on its line or the next.
_TWILIO_SID: Final = re.compile(r"AC[0-9a-f]{32}")
# An AWS access key id (whether it shows depends on its line and the next: ``_aws_id_alone``)
# or a Twilio SID: both lines are held until a third begins.
_TWO_LINES: Final = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}|AC[0-9a-f]{32}")
# Every rule whose match may hold whitespace, each handled above (by a value needle, a line
# word or the PEM states): a new one must be added here and there (a test checks the list).
SPANNING_RULES: Final = frozenset(
    {
        *("pem-private-key", "azure-storage-account-key", "datadog", "mailgun"),
        *("url-token-user", "basic-auth-argument", "url-password", "authorization-header"),
        *("bearer", "aws-secret-access-key", "secret-flag", "login-password-flag"),
        *("okta-api-token", "cloudflare-global-api-key", "twilio-auth-token"),
        *("mysql-password-flag", "sshpass-password", "generic-assignment"),
    }
)
# A PEM header: its start, and the whole header of a private key.
_PEM_START: Final = re.compile(r"-----BEGIN[ A-Z0-9]*")
_PEM_HEADER: Final = re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_KEY: Final = re.compile(r"(?:\s|\\[nr])*(?:[A-Za-z-]+:|[A-Za-z0-9+/]{8})")
_PEM_GAP: Final = re.compile(r"(?:\s|\\[nr])*")
_PEM_END: Final = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
# What every rule's match holds: the rules' own needles; for the two without, a Discord
# token's run and a Twilio SID (``_may_need_mask``).


def _fewest(needles: tuple[str, ...]) -> tuple[str, ...]:
    """The needles that hold no other (a text holding "sk-ant-" holds "sk-")."""
    return tuple(n for n in needles if not any(m != n and m in n for m in needles))


_RULE_NEEDLES: Final = _fewest(tuple(dict.fromkeys(n for rule in _RULES for n in rule.needles)))
_NEEDLES_BY_FIRST: Final[dict[str, tuple[str, ...]]] = {
    first: tuple(n for n in _RULE_NEEDLES if n[0] == first)
    for first in {n[0] for n in _RULE_NEEDLES}
}
_NEEDLE_FIRSTS: Final = frozenset(_NEEDLES_BY_FIRST)
_DISCORD_RUN: Final = re.compile(r"[MNO][A-Za-z0-9_-]{22}")


def _may_need_mask(text: str) -> bool:
    """False only where no rule can match (then masking changes nothing): cheaper than
    masking, which runs the generic rule's scan on every text."""
    lower = text.lower()
    for first in _NEEDLE_FIRSTS.intersection(lower):  # a short text: only a few needles
        for needle in _NEEDLES_BY_FIRST[first]:
            if needle in lower:
                return True
    return len(text) >= 24 and (
        _DISCORD_RUN.search(text) is not None or _TWILIO_SID.search(text) is not None
    )


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

    __slots__ = (
        "_committed",
        "_joined",
        "_mask",
        "_pem_open",
        "_shown",
        "_tail",
        "_whole",
        "_word",
    )

    def __init__(self, mask: Callable[[str], str]) -> None:
        self._mask = mask
        self._committed: list[str] = []  # the text up to a safe boundary, masked
        self._joined = ""
        self._tail = ""  # the text after it up to its last break, as written
        self._shown = ""  # the part of the tail shown, masked
        self._pem_open = False  # the tail shows a private key's mask to its end
        self._word: list[str] = []  # the unfinished word after the tail, in pieces
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
        # Only text up to the last break is looked at: the unfinished word after it waits
        # in pieces (a long run written in small pieces costs no copy of it per piece).
        if self._whole:
            self._word.append(piece)
            words, self._word = "".join(self._word), []
        elif cut := max(piece.rfind(ch) for ch in _BREAK_CHARS) + 1:
            self._word.append(piece[:cut])
            words, self._word = "".join(self._word), [piece[cut:]] if cut < len(piece) else []
        else:
            if piece:
                self._word.append(piece)
            if not force:
                return ""  # only the unfinished word grew: nothing new to show
            words = ""
        old_end = len(self._tail)
        self._tail += words
        if self._pem_open and not self._whole:
            # A private key's mask runs to the end until its END line comes: nothing new.
            end = _PEM_END.search(self._tail, max(0, old_end - 64))
            if end is None or self._tail[end.end() : end.end() + 2] in ("", "\\"):
                return ""  # (a "\\n" escape after the END line belongs to the block)
            # The key ends: what shows up to it (ending in the mask) stays, as the rules
            # mask the whole block; the rest is worked out alone (not the block again).
            stop = end.end() + (2 if self._tail.startswith("\\n", end.end()) else 0)
            self._committed.append(self._shown)
            self._tail = self._tail[stop:]
            self._shown = ""
            self._pem_open = False
            return self.feed("", force=True)
        self._pem_open = False
        window = self._tail
        if _may_need_mask(window):
            settled, held = self._settled(window)
            window = window[:held]
            masked = self._mask(window)
        else:
            settled, held, masked = True, len(window), window  # the common case: plain words
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
        if _open_line(window):
            settled = False
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


def _open_line(window: str) -> bool:
    """Whether the window's last line with text names a line-bounded rule's word (while the
    lines after it are blank, its value may still come), or that line or the one before
    holds an AWS access key id or a Twilio SID (its secret may still come)."""
    end = len(window.rstrip())
    start = window.rfind("\n", 0, end) + 1
    line = window[start:].lower()
    if any(word in line for word in _LINE_WORDS):
        return True
    before = window[window.rfind("\n", 0, max(start - 1, 0)) + 1 :]
    return _TWO_LINES.search(before) is not None
