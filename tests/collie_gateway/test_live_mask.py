"""A text masked while it is written (X1, issue 9.10): however a secret is split into
pieces, none of its characters shows before its mask does, and the text ends as masked whole
(so the live chat, the read and the final text agree: C2)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collie_gateway.core.cleaning import ShownText
from collie_gateway.core.redact import (
    _RULES,
    MASK,
    SPANNING_RULES,
    LiveMask,
    Redactor,
    _may_need_mask,
)
from fixtures.redaction.corpus import HELD_OUT

CORPUS = Path(__file__).parents[2] / "fixtures" / "redaction"
SECRETS: list[dict[str, str]] = json.loads((CORPUS / "secrets.json").read_text("utf-8"))
HELD: list[dict[str, list[dict[str, str]]]] = [
    json.loads((CORPUS / name).read_text("utf-8")) for name in HELD_OUT
]
CLEAN: list[dict[str, str]] = json.loads((CORPUS / "clean.json").read_text("utf-8"))
ON = Redactor()
ALL_SECRETS = [*SECRETS, *(c for h in HELD for c in h["secrets"])]
EVERY = [*ALL_SECRETS, *CLEAN, *(c for h in HELD for c in h["clean"])]
MASKED = [c for c in ALL_SECRETS if ON.mask(c["input"]) != c["input"]]


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def secret_body(case: dict[str, str]) -> str:
    """The part of the secret that must never show: after its kept prefix; for a private
    key, its key material (the header and END lines are no secret)."""
    secret = case["secret"]
    if "-----BEGIN" in secret:
        start = secret.index("-----", secret.index("BEGIN")) + 5
        end = secret.find("-----END", start)
        return secret[start : end if end > 0 else None]
    return secret[len(case["kept"]) :]


def leaks(case: dict[str, str], text: str, shown: str) -> list[str]:
    """Runs of 6 characters of the secret's body that show (and are not elsewhere in the
    text, as "AAAAAA" might be, nor in the text masked whole: a kept prefix)."""
    body = secret_body(case)
    rest = text.replace(case["secret"], "") + ON.mask(text)
    runs = {body[i : i + 6] for i in range(len(body) - 5)}
    return [r for r in runs if r.strip() == r and "--" not in r and r in shown and r not in rest]


def stream(text: str, cuts: list[int]) -> tuple[LiveMask, list[str]]:
    """Feed ``text`` in pieces as a phone follows it: it appends what each piece adds, or
    replaces its text when the shown text changed whole. Returns each state the phone had."""
    live = LiveMask(ON.mask)
    phone = ""
    seen = []
    for piece in pieces(text, cuts):
        change = live.feed(piece)
        phone = live.text if change is None else phone + change
        assert phone == live.text  # the phone shows what a read shows
        seen.append(phone)
    change = live.done()
    phone = live.text if change is None else phone + change
    assert phone == live.text
    seen.append(phone)
    return live, seen


def test_X1_the_quick_test_finds_every_text_the_rules_mask() -> None:
    """Where ``_may_need_mask`` is false, masking changes nothing: the stream skips it."""
    inputs = [c["input"] for c in EVERY]
    assert len(inputs) > 300
    for text in inputs:
        if ON.mask(text) != text:
            assert _may_need_mask(text), text


def test_X1_only_the_rules_the_quick_test_knows_have_no_needles() -> None:
    """A rule without needles must be one ``_may_need_mask`` covers by itself."""
    assert [r.name for r in _RULES if not r.needles] == ["discord-bot-token", "twilio-auth-token"]


def test_X1_every_rule_that_may_span_whitespace_is_known_to_the_stream() -> None:
    """A rule whose match may hold a space or a line break can straddle a committed
    boundary: ``LiveMask`` must keep such a tail open (``SPANNING_RULES`` lists them)."""
    spanning = {
        r.name for r in _RULES if any(p in r.pattern.pattern for p in ("\\s", "[^\\n]", " ", ".*"))
    }
    assert spanning == SPANNING_RULES


# Characters and parts of secrets, to build texts that hold some by chance.
PARTS = [*("sk-", "ghp_", "eyJ", "AKIA", "hvs.", "token", "PASS", "Bearer ", "://", "x" * 20)]
PARTS += ["AbC9", "=", ": ", "secret", "u:", "@h", "MTk4NjIyNDgzNDcxOTI1MjQ4", ".", "curl -u a:"]
NEEDLY = st.text(
    alphabet=st.sampled_from(list("aAbsSkKeyEYJghpuMNO0123456789_-.:/=?& \n\"'")), max_size=60
) | st.lists(
    st.sampled_from(PARTS),
    max_size=12,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(NEEDLY)
def test_X1_the_quick_test_misses_no_secret(text: str) -> None:
    if ON.mask(text) != text:
        assert _may_need_mask(text)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(MASKED),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=40),
    st.sampled_from(["", "Here it is: ", "line one\n"]),
    st.sampled_from(["", " and more words.", "\nnext line "]),
)
def test_X1_a_secret_streamed_in_any_pieces_never_shows(
    case: dict[str, str], cuts: list[int], before: str, after: str
) -> None:
    text = before + case["input"] + after
    _live, seen = stream(text, cuts)
    for shown in seen:
        assert leaks(case, text, shown) == [], shown
    assert seen[-1] == ON.mask(text)  # it ends as the whole text masked at once


def test_X1_a_secret_streamed_character_by_character_never_shows() -> None:
    for case in MASKED:
        text = "Here: " + case["input"] + " done\n"
        _live, seen = stream(text, list(range(len(text))))
        for shown in seen:
            assert leaks(case, text, shown) == [], (case["description"], shown)
        assert seen[-1] == ON.mask(text)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([c["input"] for c in CLEAN]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_X1_ordinary_text_streams_as_it_is_written(text: str, cuts: list[int]) -> None:
    """No false alarm while written either: what shows is always the text so far, less at
    most its unfinished end, and all of it once done."""
    _live, seen = stream(text + " ", cuts)
    for shown in seen:
        assert (text + " ").startswith(shown)
    assert seen[-1] == text + " "


def test_X1_what_a_phone_sees_while_a_key_streams() -> None:
    """The shown text at each step: words as they end; a token only with its mask; a private
    key's header line until key material follows, then the mask."""
    live = LiveMask(ON.mask)
    steps: list[tuple[str, str | None]] = [
        ("Use sk_li", "Use "),
        ("ve_4eC39HqLyjWDarjtT1zdp7dc", "Use "),
        (" now", "Use sk_live_" + MASK + " "),
        ("\n-----BEGIN RSA ", "Use sk_live_" + MASK + " now\n-----BEGIN RSA "),
        ("PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4aV1b2c", None),
        ("D3eF\nabc", "Use sk_live_" + MASK + " now\n" + MASK),
        ("def\n-----END RSA PRIVATE KEY-----\nok ", "Use sk_live_" + MASK + " now\n" + MASK),
    ]
    steps[-1] = (steps[-1][0], f"{steps[-1][1]}\nok ")
    for piece, want in steps:
        live.feed(piece)
        if want is not None:
            assert live.text == want, piece


def test_X1_a_quoted_passphrase_shows_when_its_quote_closes() -> None:
    live = LiveMask(ON.mask)
    for piece in ['password = "correct ', "horse battery ", 'staple" then']:
        live.feed(piece)
        assert "correct" not in live.text
        assert "horse" not in live.text
    assert live.text == f'password = "{MASK}" '


def test_C2_shown_text_keeps_its_masked_text_as_pieces_come() -> None:
    """``ShownText.live``: asked once, then each piece sets ``live_change``; a text cut at
    its limit shows all it has (nothing more comes)."""
    shown = ShownText(60)
    shown.feed("token ghp_")
    assert shown.live(ON.mask) == "token "
    shown.feed("KBJHFhMpKYolVviUsb6QL4PC6TMF3ctIJnlg and")
    assert (shown.live_change, shown.live(ON.mask)) == ("ghp_" + MASK + " ", "token ghp_•••• ")
    shown.feed(" then a long tail")
    assert shown.cut
    assert shown.text.endswith("…")
    assert shown.live(ON.mask) == ON.mask(shown.text) == "token ghp_" + MASK + " and then a lo…"
