"""Cleaning and cutting the agent's text (spec A6; limits are ours)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collie_gateway.core.cleaning import (
    LABEL_LIMIT,
    TEXT_LIMIT,
    TITLE_LIMIT,
    Cleaned,
    clean,
)


def test_limits_are_ours() -> None:
    assert (TITLE_LIMIT, TEXT_LIMIT, LABEL_LIMIT) == (200, 2000, 80)


def test_plain_text_is_untouched() -> None:
    assert clean("Run ls -la?", 200) == Cleaned("Run ls -la?", False)


@pytest.mark.parametrize(
    "char",
    [
        "\x00",
        "\x07",
        "\x1b",
        "\x7f",
        "\x9b",  # C1: CSI
        "\u202a",
        "\u202d",
        "\u202e",  # right-to-left override
        "\u2066",
        "\u2069",
        "\u200e",
        "\u200f",
        "\u061c",
        "\u200b",
        "\u2060",
        "\ufeff",
        "\U000e0041",  # tag LATIN CAPITAL LETTER A
        "\ud800",  # lone surrogate
    ],
)
def test_A6_hiding_characters_are_removed_and_flagged(char: str) -> None:
    assert clean(f"rm{char} -rf", 200) == Cleaned("rm -rf", True)
    assert clean(f"rm{char} -rf", 200, multiline=True) == Cleaned("rm -rf", True)


def test_single_line_turns_breaks_and_tabs_into_spaces_unflagged() -> None:
    assert clean("one\ntwo\r\nthree\rfour\tfive\u2028six", 200) == Cleaned(
        "one two three four five six", False
    )


def test_multi_line_keeps_newlines_and_tabs_unflagged() -> None:
    assert clean("one\r\ntwo\n\tthree\u2029", 200, multiline=True) == Cleaned(
        "one\ntwo\n\tthree\n", False
    )


def test_joiners_kept_where_they_show() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    rainbow = "\U0001f3f3\ufe0f\u200d\U0001f308"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # می‌خواهم
    text = f"{family} {rainbow} {persian}"
    assert clean(text, 200) == Cleaned(text, False)


def test_A6_joiners_between_latin_letters_are_removed() -> None:
    assert clean("pay\u200dpal\u200c.com", 200) == Cleaned("paypal.com", True)
    assert clean("\u200dstart end\u200d", 200) == Cleaned("start end", True)


def test_A6_cut_to_limit_with_ellipsis() -> None:
    assert clean("abcdef", 6) == Cleaned("abcdef", False)
    assert clean("abcdefg", 6) == Cleaned("abcde…", True)
    assert clean("ab", 1) == Cleaned("…", True)


def test_A6_redact_before_cutting() -> None:
    def redact(text: str) -> str:
        return text.replace("sk-SECRET", "sk-••••")

    # The secret straddles the limit: the redactor still sees it whole.
    assert clean("key sk-SECRET", 10, redact=redact) == Cleaned("key sk-••…", True)
    assert clean("key sk-SECRET", 200, redact=redact) == Cleaned("key sk-••••", True)
    assert clean("nothing here", 200, redact=redact) == Cleaned("nothing here", False)


def test_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        clean("x", 0)


_HIDING = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_HIDING |= set("\u200b\u2060\ufeff")


@given(text=st.text(), limit=st.integers(1, 300), multiline=st.booleans())
def test_clean_invariants(text: str, limit: int, multiline: bool) -> None:
    out = clean(text, limit, multiline=multiline)
    assert len(out.text) <= limit
    assert not _HIDING & set(out.text)
    assert all(ch in "\n\t" or not (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F) for ch in out.text)
    if not multiline:
        assert "\n" not in out.text
        assert "\t" not in out.text
    if not out.shortened:
        # Nothing removed: the same characters, line breaks aside.
        assert out.text.replace("\n", "").replace("\t", "").replace(" ", "") == "".join(
            ch for ch in text if ch not in "\r\n\t\v\f\x85\u2028\u2029 "
        )
    msgspec.json.encode(out.text)
