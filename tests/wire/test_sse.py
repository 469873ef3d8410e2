"""The server-sent-events parser and encoder (WHATWG event stream interpretation)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.errors import BodyTooLarge, LocalWireError, RemoteWireError
from wire.sse import COMMENT_PING, SSEEvent, SSEParser, encode_event

E = SSEEvent

VECTORS: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("one event", b"id: 1\nevent: item.delta\ndata: {}\n\n", [E("1", "item.delta", "{}")]),
    ("default type is message", b"data: x\n\n", [E(None, "message", "x")]),
    ("data lines joined with LF", b"data: a\ndata: b\ndata:\n\n", [E(None, "message", "a\nb\n")]),
    ("CRLF endings", b"id: 7\r\ndata: a\r\n\r\n", [E("7", "message", "a")]),
    ("CR endings", b"id: 7\rdata: a\rdata: b\r\r", [E("7", "message", "a\nb")]),
    ("mixed endings", b"data: a\r\ndata: b\rdata: c\n\r\n", [E(None, "message", "a\nb\nc")]),
    ("BOM at the start is dropped", b"\xef\xbb\xbfdata: a\n\n", [E(None, "message", "a")]),
    (
        "BOM later is an unknown field",
        b"data: a\n\n\xef\xbb\xbfdata: b\n\n",
        [E(None, "message", "a")],
    ),
    ("comments are skipped", b": ping\n\n: hi\ndata: a\n\n", [E(None, "message", "a")]),
    ("ping alone dispatches nothing", COMMENT_PING, []),
    ("an event without data is not dispatched", b"id: 3\nevent: x\n\n", []),
    (
        "the last id carries over",
        b"id: 3\nevent: x\n\ndata: a\n\n",
        [E("3", "message", "a")],
    ),
    ("an empty id clears it", b"id: 3\n\nid\ndata: a\n\n", [E("", "message", "a")]),
    ("an id with NUL is ignored", b"id: 4\n\nid: 5\x00\ndata: a\n\n", [E("4", "message", "a")]),
    ("only one space is dropped", b"data:  two\n\n", [E(None, "message", " two")]),
    ("no space is fine", b"data:x\nevent:y\n\n", [E(None, "y", "x")]),
    ("a field without colon", b"data\n\n", [E(None, "message", "")]),
    ("unknown fields are ignored", b"foo: bar\ndata: a\n\n", [E(None, "message", "a")]),
    (
        "the type resets per event",
        b"event: x\ndata: a\n\ndata: b\n\n",
        [
            E(None, "x", "a"),
            E(None, "message", "b"),
        ],
    ),
    ("an unfinished event is not dispatched", b"data: a\n\ndata: b\n", [E(None, "message", "a")]),
    ("invalid UTF-8 is replaced", b"data: \xff\n\n", [E(None, "message", "\ufffd")]),
    ("colon in the value", b'data: {"a": 1}\n\n', [E(None, "message", '{"a": 1}')]),
]


def feed_all(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent]:
    return [event for chunk in chunks for event in parser.feed(chunk)]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize(("description", "stream", "expected"), VECTORS)
def test_vectors_whole(description: str, stream: bytes, expected: list[SSEEvent]) -> None:
    assert SSEParser().feed(stream) == expected, description


@pytest.mark.parametrize(("description", "stream", "expected"), VECTORS)
def test_vectors_byte_by_byte(description: str, stream: bytes, expected: list[SSEEvent]) -> None:
    assert feed_all(SSEParser(), byte_by_byte(stream)) == expected, description


@pytest.mark.parametrize(("description", "stream", "expected"), VECTORS)
def test_vectors_split_anywhere(description: str, stream: bytes, expected: list[SSEEvent]) -> None:
    for cut in range(len(stream) + 1):
        assert feed_all(SSEParser(), [stream[:cut], stream[cut:]]) == expected, (description, cut)


def test_cr_then_lf_in_the_next_feed_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []  # the LF belongs to the CR: no blank line yet
    assert parser.feed(b"\r\n") == [E(None, "message", "a")]


def test_two_crs_end_the_event() -> None:
    assert SSEParser().feed(b"data: a\r\r") == [E(None, "message", "a")]


def test_retry_is_kept_when_digits() -> None:
    parser = SSEParser()
    parser.feed(b"retry: 2500\n\n")
    assert parser.retry == 2500
    parser.feed(b"retry: soon\nretry: 1x\nretry:\n\n")
    assert parser.retry == 2500
    parser.feed(b"retry: 10\n\n")
    assert parser.retry == 10


def test_last_event_id_survives_events() -> None:
    parser = SSEParser()
    parser.feed(b"id: 41\ndata: a\n\n")
    assert parser.last_event_id == "41"
    assert parser.feed(b"data: b\n\n") == [E("41", "message", "b")]


def test_bom_split_across_feeds() -> None:
    parser = SSEParser()
    assert feed_all(parser, [b"\xef", b"\xbb", b"\xbfdata: a\n\n"]) == [E(None, "message", "a")]


def test_line_at_the_limit_passes_one_over_raises() -> None:
    limit = 64
    ok = b"data: " + b"x" * (limit - 6) + b"\n\n"
    assert SSEParser(max_line=limit).feed(ok) == [E(None, "message", "x" * (limit - 6))]
    over = b"data: " + b"x" * (limit - 5) + b"\n\n"
    with pytest.raises(BodyTooLarge):
        SSEParser(max_line=limit).feed(over)


def test_line_over_the_limit_byte_by_byte() -> None:
    parser = SSEParser(max_line=64)
    with pytest.raises(BodyTooLarge):
        feed_all(parser, byte_by_byte(b"data: " + b"x" * 100 + b"\n\n"))


def test_endless_line_raises_once_past_the_limit() -> None:
    limit = 1000
    parser = SSEParser(max_line=limit)
    for _ in range(limit // 100):
        assert parser.feed(b"x" * 100) == []  # up to the limit: still a line being read
    with pytest.raises(BodyTooLarge):
        parser.feed(b"x")
    with pytest.raises(BodyTooLarge):  # a failed parser stays failed
        parser.feed(b"\n\n")


def test_event_data_over_its_limit_raises() -> None:
    parser = SSEParser(max_line=100, max_data=250)
    assert parser.feed(b"data: " + b"a" * 80 + b"\n" + b"data: " + b"b" * 80 + b"\n") == []
    with pytest.raises(BodyTooLarge):
        parser.feed(b"data: " + b"c" * 90 + b"\n")


def test_event_data_exactly_at_its_limit_passes() -> None:
    parser = SSEParser(max_line=100, max_data=9)
    assert parser.feed(b"data: abcd\ndata: efgh\n\n") == [E(None, "message", "abcd\nefgh")]


def test_default_limits_follow_the_spec() -> None:
    parser = SSEParser()
    line = b"data: " + b"x" * (1024 * 1024) + b"\n\n"
    assert parser.feed(line)[0].data == "x" * (1024 * 1024)
    with pytest.raises(BodyTooLarge):
        SSEParser().feed(b"data: " + b"x" * (1024 * 1024 + 64) + b"\n")


def test_encode_event() -> None:
    assert (
        encode_event(5, "item.delta", '{"a":1}') == b'id: 5\nevent: item.delta\ndata: {"a":1}\n\n'
    )
    assert encode_event(None, None, "a\nb") == b"data: a\ndata: b\n\n"


@pytest.mark.parametrize("bad", ["1\n2", "1\r", "a\x00"])
def test_encode_event_refuses_an_id_it_cannot_carry(bad: str) -> None:
    with pytest.raises(LocalWireError):
        encode_event(bad, "x", "{}")
    with pytest.raises(LocalWireError):
        encode_event(1, "x\ny", "{}")
    with pytest.raises(LocalWireError):
        encode_event(1, "x", "\ud800")


@given(
    event_id=st.integers(min_value=0, max_value=2**53) | st.none(),
    type_=st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1) | st.none(),
    data=st.text(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=5),
)
def test_encode_then_parse_round_trips(
    event_id: int | None, type_: str | None, data: str, cuts: list[int]
) -> None:
    stream = encode_event(event_id, type_, data)
    points = sorted(c for c in cuts if c <= len(stream))
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    events = feed_all(SSEParser(), chunks)
    assert events == [
        E(
            None if event_id is None else str(event_id),
            type_ or "message",
            re.sub(r"\r\n|\r", "\n", data),
        )
    ]


@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_any_bytes_parse_or_raise_a_remote_error(data: bytes, cuts: list[int]) -> None:
    """Garbage parses or raises RemoteWireError, nothing else; and how the bytes are split does
    not change what comes out."""
    whole = _outcome(SSEParser(max_line=64, max_data=128), [data])
    points = sorted(c for c in cuts if c <= len(data))
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    split = _outcome(SSEParser(max_line=64, max_data=128), chunks)
    assert split == whole


def _outcome(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent] | type[RemoteWireError]:
    """The events, or the type of the error (events before an error are not compared: a feed
    that raises returns none of its events)."""
    events: list[SSEEvent] = []
    try:
        for chunk in chunks:
            events += parser.feed(chunk)
    except RemoteWireError as exc:
        return type(exc)
    return events


_FIELD_LINES = st.sampled_from(
    [
        b"id: 7",
        b"id:8",
        b"id:  9",
        b"id: a\x00b",
        b"id: ",
        b"event: item.delta",
        b"event:",
        b"event:  x",
        b"data: {}",
        b"data:",
        b"data: two\r",
        b": ping",
        b"retry: 5",
        b"",
        b"\xef\xbb\xbf",
        b"data: " + b"x" * 140,
    ]
)


@given(
    events=st.lists(
        st.one_of(
            st.builds(
                lambda i, e, d: b"id: %d\nevent: %s\ndata: %s\n\n" % (i, e, d),
                st.integers(0, 99),
                st.sampled_from([b"item.delta", b"", b"x y"]),
                st.sampled_from([b"{}", b"", b"a b", b"x" * 100, b"x" * 130]),
            ),
            st.lists(_FIELD_LINES, max_size=5).map(lambda ls: b"\n".join(ls) + b"\n"),
        ),
        max_size=8,
    ),
    cuts=st.lists(st.integers(0, 800), max_size=4),
)
def test_whole_events_parse_as_line_by_line(events: list[bytes], cuts: list[int]) -> None:
    """Issue 16: the canonical event taken in one match gives what the line-by-line reading
    gives (a byte at a time never holds a whole event), however the stream is split."""
    data = b"".join(events)
    points = sorted(c for c in cuts if c <= len(data))
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    for max_line in (64, 96, 200):  # a line over its limit; an event's data over its limit
        one_by_one = _outcome(
            SSEParser(max_line=max_line, max_data=128), [bytes([b]) for b in data]
        )
        assert _outcome(SSEParser(max_line=max_line, max_data=128), chunks) == one_by_one
        assert _outcome(SSEParser(max_line=max_line, max_data=128), [data]) == one_by_one
