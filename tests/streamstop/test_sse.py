"""The SSE framing (streamstop._sse): named cases, then any split of the input against the whole
and against a simple reference (normalize line ends, split on blank lines)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop._sse import (
    EventSplitter,
    RawEvent,
    SSEDecoder,
    SSEFrameTooLarge,
    encode_event,
)

from ..json_codecs import json_codec  # noqa: F401 (a fixture)

# Every test runs with each JSON codec installed (the standard library's, orjson's).
pytestmark = pytest.mark.usefixtures("json_codec")


def reference_events(body: bytes) -> list[tuple[bytes, ...]]:
    """The lines of each complete event: line ends normalized, events split on blank lines."""
    text = re.sub(rb"\r\n|\r", b"\n", body)
    blocks = text.split(b"\n\n")[:-1]  # the last block is not complete
    return [tuple(line for line in block.split(b"\n") if line) for block in blocks]


def decode(pieces: list[bytes]) -> list[RawEvent]:
    decoder = SSEDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


sse_bodies = st.lists(
    st.sampled_from([b"data: x", b"data: {}", b": c", b"id: 1", b"\n", b"\r", b"\r\n", b"d"]),
    max_size=30,
).map(b"".join)


@given(sse_bodies, st.lists(st.integers(0, 400), max_size=10))
def test_any_split_decodes_as_the_reference(body: bytes, cuts: list[int]) -> None:
    events = decode(split(body, cuts))
    # A "\r" at the very end may still become "\r\n": the reference must not count on it.
    expected = reference_events(body[:-1] if body.endswith(b"\r") else body)
    assert [event.lines for event in events if event.lines] == [e for e in expected if e]
    assert b"".join(event.raw for event in events) == body[: len(b"".join(e.raw for e in events))]


@given(sse_bodies, st.lists(st.integers(0, 400), max_size=10))
def test_the_splitter_forwards_whole_events_only(body: bytes, cuts: list[int]) -> None:
    splitter = EventSplitter()
    out = b"".join(splitter.feed(piece) for piece in split(body, cuts))
    assert out + splitter.pending == body
    # What was forwarded ends at a blank line, and the rest holds no complete event with data.
    assert out == b"" or re.search(rb"(\r\n|\r|\n)(\r\n|\r|\n)$", out)
    pending = splitter.pending
    assert not [e for e in reference_events(pending.rstrip(b"\r")) if e]


def test_one_byte_at_a_time_equals_whole() -> None:
    body = b"data: a\r\n\r\nid: 2\rdata: b\r\r: c\n\ndata: d\n\n"
    assert decode([body[i : i + 1] for i in range(len(body))]) == decode([body])
    assert [event.lines for event in decode([body])] == [
        (b"data: a",),
        (b"id: 2", b"data: b"),
        (b": c",),
        (b"data: d",),
    ]


def test_a_long_line_is_searched_once() -> None:
    # 1 MB in 1 KB reads: the search resumes where it stopped (see the benchmark for the time).
    decoder = SSEDecoder()
    for _ in range(1024):
        assert decoder.feed(b"x" * 1024) == []
    assert decoder._search == 1024 * 1024
    (event,) = decoder.feed(b"\n\n")
    assert len(event.raw) == 1024 * 1024 + 2


# (the decoder's limits, the reads, what is over its limit, the limit)
CAP_CASES: dict[str, tuple[dict[str, int], list[bytes], str, int]] = {
    "line": ({"max_line_bytes": 10}, [b"data: 1234", b"5"], "line", 10),
    "line in one read": ({"max_line_bytes": 10}, [b"data: 123456\n"], "line", 10),
    "event": ({"max_event_bytes": 20}, [b"id: 1\nid: 2\nid: 3\nid: 4\n"], "event", 20),
}


@pytest.mark.parametrize("case", CAP_CASES)
def test_frames_over_their_cap_raise(case: str) -> None:
    limits, pieces, what, limit = CAP_CASES[case]
    decoder = SSEDecoder(**limits)
    for piece in pieces[:-1]:
        assert decoder.feed(piece) == []
    with pytest.raises(SSEFrameTooLarge) as raised:
        decoder.feed(pieces[-1])
    assert (raised.value.what, raised.value.limit) == (what, limit)
    assert str(raised.value) == f"an SSE {what} longer than {limit} bytes (the limit)"


def test_events_completed_before_the_cap_are_kept_on_the_error() -> None:
    decoder = SSEDecoder(max_line_bytes=10)
    with pytest.raises(SSEFrameTooLarge) as raised:
        decoder.feed(b"data: a\n\ndata: 0123456789")
    assert [event.raw for event in raised.value.events] == [b"data: a\n\n"]


def test_the_splitter_caps_the_unfinished_line_and_event() -> None:
    with pytest.raises(SSEFrameTooLarge, match="line longer than 10"):
        EventSplitter(max_line_bytes=10).feed(b"data: a\n\ndata: 0123456789")
    with pytest.raises(SSEFrameTooLarge, match="event longer than 10"):
        EventSplitter(max_event_bytes=10).feed(b"id: 1\nid: 2\n")


def test_the_splitter_keeps_the_whole_events_before_a_frame_over_its_limit() -> None:
    splitter = EventSplitter(max_line_bytes=10)
    with pytest.raises(SSEFrameTooLarge) as raised:
        splitter.feed(b"data: a\n\ndata: b\n\ndata: 0123456789")
    assert raised.value.raw == b"data: a\n\ndata: b\n\n"


def test_flush_completes_a_last_event_without_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.flush() == RawEvent(b"data: a\r\n\n", (b"data: a",))
    assert decoder.flush() is None


def test_the_encoder() -> None:
    assert encode_event({"a": "é"}) == b'data: {"a":"\xc3\xa9"}\n\n'
    assert encode_event({"a": "\ud83d"}, [b"id: 1"]) == b'id: 1\ndata: {"a":"\\ud83d"}\n\n'


def _events_or_error(decoder: SSEDecoder, pieces: list[bytes]) -> list[object]:
    out: list[object] = []
    for piece in pieces:
        try:
            out += decoder.feed(piece)
        except SSEFrameTooLarge as error:
            return [*out, *error.events, (error.what, error.limit)]
    return out


@given(
    st.lists(sse_bodies.map(lambda body: body + b"\n\n"), max_size=6),
    # One limit at a time: with both, which one a scan reports first depends on the reads.
    st.tuples(st.none(), st.none())
    | st.tuples(st.integers(1, 40), st.none())
    | st.tuples(st.none(), st.integers(1, 80)),
)
def test_whole_events_read_at_once_decode_as_byte_by_byte(
    reads: list[bytes], limits: tuple[int | None, int | None]
) -> None:
    # Reads that end at a blank line take the decoder's and the splitter's shortcut; fed one
    # byte at a time the same bytes take the scan: same events, same errors, same output.
    max_line, max_event = limits

    def decoder() -> SSEDecoder:
        return SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_event)

    body = b"".join(reads)
    assert _events_or_error(decoder(), reads) == _events_or_error(
        decoder(), [body[i : i + 1] for i in range(len(body))]
    )
    splitter = EventSplitter()
    assert b"".join(splitter.feed(read) for read in reads) == body
    assert splitter.pending == b""


def test_one_event_per_read_is_split_into_its_lines() -> None:
    decoder = SSEDecoder(max_line_bytes=100, max_event_bytes=100)
    assert decoder.feed(b"id: 1\ndata: {}\n\n") == [
        RawEvent(b"id: 1\ndata: {}\n\n", (b"id: 1", b"data: {}"))
    ]
    assert decoder.feed(b"\n\n") == [RawEvent(b"\n", ()), RawEvent(b"\n", ())]
    assert decoder.feed(bytearray(b"data: a\r\n\n")) == [RawEvent(b"data: a\r\n\n", (b"data: a",))]
    with pytest.raises(SSEFrameTooLarge, match="line longer than 10"):
        SSEDecoder(max_line_bytes=10).feed(b"data: 123456\n\n")


@given(st.lists(sse_bodies.map(lambda body: body + b"\n\n"), max_size=6), st.integers(1, 40))
def test_data_line_takes_only_one_event_of_one_data_line(reads: list[bytes], limit: int) -> None:
    # Fed the same reads, a decoder that tries data_line first and one that only feeds return
    # the same events: data_line answers exactly when feed would give one data-line event.
    quick, plain = SSEDecoder(max_line_bytes=limit), SSEDecoder(max_line_bytes=limit)
    for read in reads:
        expected = _events_or_error(plain, [read])
        value = quick.data_line(read)
        if value is None:
            assert _events_or_error(quick, [read]) == expected
        else:
            assert expected == [RawEvent(read, (b"data: " + value,))]
        if expected and not isinstance(expected[-1], RawEvent):
            return  # over the limit: the stream ends here


@given(
    st.lists(sse_bodies.map(lambda body: body.replace(b"\n", b"\r\n") + b"\r\n\r\n"), max_size=6),
    st.integers(1, 40),
)
def test_data_line_takes_only_one_event_of_one_data_line_with_crlf(
    reads: list[bytes], limit: int
) -> None:
    # The same, for reads whose lines end with CRLF, as Gemini's do.
    quick, plain = SSEDecoder(max_line_bytes=limit), SSEDecoder(max_line_bytes=limit)
    for read in reads:
        expected = _events_or_error(plain, [read])
        value = quick.data_line(read)
        if value is None:
            assert _events_or_error(quick, [read]) == expected
        else:
            assert expected == [RawEvent(read, (b"data: " + value,))]
        if expected and not isinstance(expected[-1], RawEvent):
            return  # over the limit: the stream ends here


@pytest.mark.parametrize(
    ("read", "value"),
    [
        (b'data: {"a":1}\n\n', b'{"a":1}'),
        (b"data: a\r\n\n", None),  # CRLF: the scan's
        (b"data: a\r\n\r\n", b"a"),  # CRLF throughout (Gemini's): the usual read too
        (b"data: a\rb\r\n\r\n", None),  # a lone CR ends a line: two lines
        (b"data: a\r\n\r\ndata: b\r\n\r\n", None),  # two events
        (b"data: a\n\r\n\r\n", None),
        (b"data:a\n\n", None),  # no space: parse_field's
        (b"id: 1\ndata: a\n\n", None),  # two lines
        (b"data: a\n\ndata: b\n\n", None),  # two events
        (b"data: a\n", None),  # not whole
        (bytearray(b"data: a\n\n"), None),  # not bytes
    ],
)
def test_data_line_cases(read: bytes, value: bytes | None) -> None:
    assert SSEDecoder().data_line(read) == value
    assert SSEDecoder(max_line_bytes=5).data_line(b"data: abcdef\n\n") is None
    pending = SSEDecoder()
    pending.feed(b"data: a")
    assert pending.data_line(b'data: {"a":1}\n\n') is None
