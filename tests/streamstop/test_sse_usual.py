"""The usual event's fast paths, pinned: a read of one ``data:`` line of one chunk of one live
choice with text (SSEDecoder.data_line, then ChunkFilter's usual chunk), and every shape next to
it that must take the general path instead. Literal expected bytes; each case runs with one
event per read (the usual read), the body whole, split in two at every byte, and one byte at a
time: the bytes sent are the same. Every case runs with each JSON codec installed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamstop import _json
from streamstop._chunks import ChunkFilter
from streamstop._sse_filter import SSEFilter

from ..json_codecs import json_codec  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("json_codec")

STOPS = ["</s>", "<|im_end|>", "\n\nUser:"]


def usual(text: str, index: int = 0, id: str = "c") -> bytes:
    """The usual event, as vLLM and OpenAI write it (compact JSON, one choice)."""
    return (
        b'data: {"id":"%s","object":"chat.completion.chunk","choices":[{"index":%d,'
        b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}]}\n\n'
        % (id.encode(), index, text.encode())
    )


def changed(
    text: str, index: int = 0, finish: bytes = b"null", id: str = "c", stop: str | None = None
) -> bytes:
    """:func:`usual` re-encoded with ``text`` (and ``finish_reason``); also what is sent at
    the end for text still held, built from the last event of its choice. With ``stop``, the
    event of a choice that ``stop`` cut: ``finish_reason: "stop"`` and ``stop_reason``."""
    if stop is not None:
        finish = b'"stop","stop_reason":' + json.dumps(stop).encode()
    return (
        b'data: {"id":"%s","object":"chat.completion.chunk","choices":[{"index":%d,'
        b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}]}\n\n'
        % (id.encode(), index, text.encode(), finish)
    )


DONE = b"data: [DONE]\n\n"

# name: (events, options, what the client gets in all)
CASES: dict[str, tuple[list[bytes], dict[str, Any], bytes]] = {
    "usual events pass byte for byte": (
        [usual("Hel"), usual("lo"), DONE],
        {},
        usual("Hel") + usual("lo") + DONE,
    ),
    # Read whole, these are one read of many events, split at its blank lines (the batch
    # path): a blank line of its own, two in a row, between usual events.
    "blank lines of their own between usual events": (
        [usual("a"), b"\n", usual("b"), b"\n\n", usual("c"), DONE],
        {},
        usual("a") + b"\n" + usual("b") + b"\n\n" + usual("c") + DONE,
    ),
    "a stop split across usual events": (
        [usual("a</"), usual("s>junk"), usual("never")],
        {"n": 1},
        changed("a") + changed("", stop="</s>") + DONE,
    ),
    "held text released by the next usual event": (
        [usual("x<"), usual("3"), usual("y")],
        {},
        changed("x") + changed("<3") + usual("y"),
    ),
    "an event all held is dropped, its text sent at the end": (
        [usual("a"), usual("<"), usual("|im")],
        {},
        usual("a") + changed("<|im"),
    ),
    "held text at the end comes from the last event of its choice": (
        [usual("<", id="1"), usual("3", id="2"), usual("b", id="3"), usual("c<", id="4")],
        {},
        changed("<3", id="2") + usual("b", id="3") + changed("c", id="4") + changed("<", id="4"),
    ),
    "an unchanged event that leaves text held": (
        # "<" then "<": the first "<" goes out, the second is held; the text sent is the
        # event's own, so it passes byte for byte, and the end is built from it.
        [usual("a<", id="1"), usual("<", id="2")],
        {},
        changed("a", id="1") + usual("<", id="2") + changed("<", id="2"),
    ),
    "released, nothing held at the end": (
        [usual("<"), usual("3"), usual("b")],
        {},
        changed("<3") + usual("b"),
    ),
    "include_stop: the stop goes out, nothing held": (
        [usual("a</"), usual("s>junk")],
        {"n": 1, "include_stop": True},
        usual("a</") + changed("s>", stop="</s>") + DONE,
    ),
    "a stop inside one usual event": (
        [usual("a</s>b")],
        {"n": 1},
        changed("a", stop="</s>") + DONE,
    ),
    "CRLF line ends: the general path, passed byte for byte": (
        [usual("a").replace(b"\n", b"\r\n"), usual("b").replace(b"\n", b"\r\n")],
        {},
        usual("a").replace(b"\n", b"\r\n") + usual("b").replace(b"\n", b"\r\n"),
    ),
    "CRLF line ends, text held": (
        [usual("a<").replace(b"\n", b"\r\n"), usual("b").replace(b"\n", b"\r\n")],
        {},
        changed("a") + changed("<b"),
    ),
    "id and event fields kept in a re-encoded event": (
        [b"id: 7\nevent: chunk\n" + usual("a<"), b"id: 8\n" + usual("b")],
        {},
        b"id: 7\nevent: chunk\n" + changed("a") + b"id: 8\n" + changed("<b"),
    ),
    "data over two lines": (
        [
            b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"a<"}}]}\n\n',
            usual("b"),
        ],
        {},
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n' + changed("<b"),
    ),
    "no space after data:": (
        [usual("a<").replace(b"data: ", b"data:"), usual("b")],
        {},
        changed("a") + changed("<b"),
    ),
    "two choices in one event": (
        [
            b'data: {"choices":[{"index":0,"delta":{"content":"a<"}},'
            b'{"index":1,"delta":{"content":"b"}}]}\n\n',
            usual("c", 1),
            usual("d", 0),
        ],
        {},
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}},'
        b'{"index":1,"delta":{"content":"b"}}]}\n\n' + usual("c", 1) + changed("<d"),
    ),
    "two choices in turns, one cut": (
        [usual("a", 0), usual("b", 1), usual("</s>", 0), usual("c", 1), usual("d", 0)],
        {"n": 2},
        usual("a", 0) + usual("b", 1) + changed("", 0, stop="</s>") + usual("c", 1),
    ),
    "the finish_reason releases held text": (
        [
            usual("a<"),
            b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
            b'"delta":{"content":"b"},"logprobs":null,"finish_reason":"length"}]}\n\n',
            DONE,
        ],
        {"n": 1},
        changed("a") + changed("<b", finish=b'"length"') + DONE,
    ),
    "no index: choice 0": (
        [b'data: {"choices":[{"delta":{"content":"a<"}}]}\n\n', usual("b")],
        {},
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' + changed("<b"),
    ),
    "index null: choice 0": (
        [b'data: {"choices":[{"index":null,"delta":{"content":"a<"}}]}\n\n', usual("b")],
        {},
        b'data: {"choices":[{"index":null,"delta":{"content":"a"}}]}\n\n' + changed("<b"),
    ),
    "index true is not a choice index: left alone": (
        [usual("a"), b'data: {"choices":[{"index":true,"delta":{"content":"</s>"}}]}\n\n'],
        {},
        usual("a") + b'data: {"choices":[{"index":true,"delta":{"content":"</s>"}}]}\n\n',
    ),
    "a legacy completion's text": (
        [
            b'data: {"choices":[{"index":0,"text":"a<"}]}\n\n',
            b'data: {"choices":[{"index":0,"text":"/s>b"}]}\n\n',
        ],
        {"n": 1},
        b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
        b'data: {"choices":[{"index":0,"text":"","finish_reason":"stop","stop_reason":"</s>"}]}\n\n'
        + DONE,
    ),
    "role and content in the delta": (
        [
            b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"<"}}]}\n\n',
            usual("b"),
        ],
        {},
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
        + changed("<b"),
    ),
    "empty content passes": (
        [usual("a<"), usual(""), usual("b")],
        {},
        changed("a") + usual("") + changed("<b"),
    ),
    "an error event drops the held text": (
        [usual("a<"), b'data: {"error":{"message":"boom"}}\n\n', usual("never")],
        {},
        changed("a") + b'data: {"error":{"message":"boom"}}\n\n',
    ),
    "an event with usage null": (
        [
            b'data: {"choices":[{"index":0,"delta":{"content":"<"}}],"usage":null}\n\n',
            usual("b"),
        ],
        {},
        changed("<b"),
    ),
    "an event all held but carrying usage is kept, without its choice": (
        [
            b'data: {"choices":[{"index":0,"delta":{"content":"<"}}],"usage":{"x":1}}\n\n',
            usual("b"),
        ],
        {},
        b'data: {"choices":[],"usage":{"x":1}}\n\n' + changed("<b"),
    ),
    "a comment between usual events": (
        [usual("a<"), b": ping\n\n", usual("b")],
        {},
        changed("a") + b": ping\n\n" + changed("<b"),
    ),
    # The usual path reads lossily (orjson: an integer beyond 64 bits as a float); what it
    # rewrites keeps the upstream's exact values.
    "an integer beyond 64 bits in a changed usual event": (
        [
            usual("a"),
            b'data: {"created":123456789012345678901234567890,"choices":[{"index":0,'
            b'"delta":{"content":"b<"},"logprobs":{"ids":[18446744073709551616]}}]}\n\n',
        ],
        {},
        usual("a") + b'data: {"created":123456789012345678901234567890,"choices":[{"index":0,'
        b'"delta":{"content":"b"},"logprobs":{"ids":[18446744073709551616]}}]}\n\n'
        + b'data: {"created":123456789012345678901234567890,"choices":[{"index":0,'
        b'"delta":{"content":"<"},"logprobs":null,"finish_reason":null}]}\n\n',
    ),
    "an integer beyond 64 bits in a usual event cut": (
        [
            usual("a"),
            b'data: {"n":-99999999999999999999,"choices":[{"delta":{"content":"</s>"}}]}\n\n',
        ],
        {"n": 1},
        usual("a") + b'data: {"n":-99999999999999999999,"choices":[{"delta":{"content":""},'
        b'"finish_reason":"stop","stop_reason":"</s>"}]}\n\n' + DONE,
    ),
    "a choice index beyond 64 bits is a choice": (
        [
            b'data: {"choices":[{"index":123456789012345678901,"delta":{"content":"a<"}}]}\n\n',
            b'data: {"choices":[{"index":123456789012345678901,"delta":{"content":"b"}}]}\n\n',
        ],
        {},
        b'data: {"choices":[{"index":123456789012345678901,"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[{"index":123456789012345678901,"delta":{"content":"<b"}}]}\n\n',
    ),
    "nineteen digits in the text": (
        [usual("1234567890123456789<"), usual("b")],
        {},
        changed("1234567890123456789") + changed("<b"),
    ),
    "include_usage after a cut": (
        [usual("a"), usual("b</s>")],
        {"n": 1, "include_usage": True},
        usual("a")
        + changed("b", stop="</s>")
        + b'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":'
        b'{"prompt_tokens":null,"completion_tokens":2,"total_tokens":null}}\n\n' + DONE,
    ),
}


def sent(reads: list[bytes], options: dict[str, Any]) -> bytes:
    sse = SSEFilter(STOPS, **options)
    return b"".join(sse.feed(read) for read in reads) + sse.flush()


@pytest.mark.parametrize("case", CASES)
def test_one_event_per_read(case: str) -> None:
    events, options, expected = CASES[case]
    assert sent(events, options) == expected


@pytest.mark.parametrize("case", CASES)
def test_the_body_whole_and_split_at_every_byte(case: str) -> None:
    events, options, expected = CASES[case]
    body = b"".join(events)
    assert sent([body], options) == expected
    assert sent([body[i : i + 1] for i in range(len(body))], options) == expected
    for cut in range(1, len(body)):
        assert sent([body[:cut], body[cut:]], options) == expected, cut


@pytest.mark.parametrize("case", CASES)
def test_a_usual_event_straddling_two_reads_then_usual_reads(case: str) -> None:
    # The first event cut in two, the rest one per read: the usual path resumes after it.
    events, options, expected = CASES[case]
    first = events[0]
    for cut in range(1, len(first)):
        assert sent([first[:cut], first[cut:], *events[1:]], options) == expected, cut


def test_the_usual_chunk_unchanged_is_the_same_object() -> None:
    chunks: ChunkFilter[Any] = ChunkFilter(STOPS)
    first = {"choices": [{"index": 0, "delta": {"content": "a"}}]}
    second = {"choices": [{"index": 0, "delta": {"content": "b"}}]}
    assert chunks.feed(first) is first
    assert chunks.feed(second) is second


def test_done_follows_the_choices() -> None:
    chunks: ChunkFilter[Any] = ChunkFilter(STOPS, n=2)
    chunks.feed({"choices": [{"index": 0, "delta": {"content": "a</s>"}}]})
    assert not chunks.done
    chunks.feed({"choices": [{"index": 1, "delta": {"content": "b"}}]})
    assert not chunks.done
    chunks.feed({"choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]})
    assert chunks.done


def test_done_after_flush() -> None:
    chunks: ChunkFilter[Any] = ChunkFilter(STOPS, n=2)
    chunks.feed({"choices": [{"index": 0, "delta": {"content": "a</s>"}}]})
    chunks.flush()
    assert not chunks.done  # choice 1 never came: only one choice is over
    chunks = ChunkFilter(STOPS, n=1)
    assert chunks.flush() == []
    assert not chunks.done  # nothing was cut


def test_feeding_after_flush_is_an_error_on_the_usual_path_too() -> None:
    chunks: ChunkFilter[Any] = ChunkFilter(STOPS)
    chunks.feed({"choices": [{"index": 0, "delta": {"content": "a"}}]})
    chunks.flush()
    with pytest.raises(RuntimeError, match="after flush"):
        chunks.feed({"choices": [{"index": 0, "delta": {"content": "b"}}]})


# -- the lossy read the usual path takes (streamstop._json) ----------------------------------------

LOSSY_CASES: dict[str, tuple[bytes, bool]] = {
    "the usual event": (usual("a")[6:-2], True),
    "18 digits": (b'{"n":123456789012345678}', True),
    "19 digits in a number": (b'{"n":1234567890123456789}', False),
    "19 digits in a string": (b'{"s":"1234567890123456789"}', False),
    "beyond 64 bits": (b'{"n":123456789012345678901234567890}', False),
    "NaN": (b'{"n":NaN}', True),
}


@pytest.mark.parametrize("case", LOSSY_CASES)
def test_loads_lossy_reads_as_loads_where_exact_says_so(case: str) -> None:
    document, exact = LOSSY_CASES[case]
    assert _json.exact(document) is (exact or _json.backend() == "json")
    if _json.exact(document):
        assert repr(_json.loads_lossy(document)) == repr(_json.loads(document))
