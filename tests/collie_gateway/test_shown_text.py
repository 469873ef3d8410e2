"""A chat item's text cleaned piece by piece equals it cleaned at once (issue 9.2, C2)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from collie_gateway.core.cleaning import ShownText, clean

# The characters that make cleaning depend on neighbours, and ordinary ones.
TRICKY = "ab\r\n\x00\x07\ufeff\u200b\u202e\x7f\x85\u2028\u200c\u200d\ufe0f\U0001f3fd"
TRICKY += "\u0915\u094d\u0627\U0001f468\U0001f469 \t"
texts = st.text(alphabet=st.sampled_from(TRICKY), max_size=60)


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(texts, st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_C2_pieces_cleaned_one_by_one_equal_the_whole(text: str, cuts: list[int]) -> None:
    whole = ShownText.of(text, 10**6)
    assert whole.text == clean(text, 10**6, multiline=True).text  # the same cleaning
    streamed = ShownText(10**6)
    added = [streamed.feed(p) for p in pieces(text, cuts)]
    assert "".join(added) == streamed.text == whole.text


@settings(max_examples=200, deadline=None)
@given(texts, st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_C2_a_cut_is_the_first_characters_then_an_ellipsis(text: str, cuts: list[int]) -> None:
    limit = 7
    whole = ShownText.of(text, limit)
    full = clean(text, 10**6, multiline=True).text
    if len(full) > limit:
        assert (whole.text, whole.cut) == (full[:limit] + "…", True)
    else:
        assert (whole.text, whole.cut) == (full, False)
    streamed = ShownText(limit)
    added = [streamed.feed(p) for p in pieces(text, cuts)]
    assert "".join(added) == whole.text
    assert streamed.cut is whole.cut


def test_C2_a_split_crlf_is_one_break() -> None:
    shown = ShownText(100)
    assert [shown.feed(p) for p in ["one\r", "", "\ntwo\r", "\r\n"]] == [
        "one\n",
        "",
        "two\n",
        "\n",
    ]
