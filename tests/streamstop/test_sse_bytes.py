"""The bytes a client gets from the stream filters, literally: an event the filter leaves alone
is the upstream's own bytes (whatever its JSON formatting); an event it changes (held text, a
cut, text released at the end, the usage after a cut) is re-encoded, compact, with the upstream's
values and key order. Every case runs with each JSON codec installed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop import _json
from streamstop._families import FAMILIES
from streamstop._family import FamilyStream
from streamstop.chat import SSEFilter

from ..json_codecs import json_codec  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("json_codec")


def filtered(reads: list[bytes], stops: list[str], **options: Any) -> list[bytes]:
    """What the filter sends for each read, then at the end."""
    sse = SSEFilter(stops, **options)
    return [sse.feed(read) for read in reads] + [sse.flush()]


# Events whose text passes whole: out as they came, byte for byte.
UNCHANGED: dict[str, bytes] = {
    "no space after the colon, spaces around, keys in another order": (
        b'data:{"choices" : [ {"delta":{"content":"Hi"} ,"index":0 ,"finish_reason":null} ] ,'
        b' "id":"x"}\n\n'
    ),
    "escaped non-ASCII and slash": (
        b'data: {"choices":[{"index":0,"delta":{"content":"\\u00e9\\/"}}]}\n\n'
    ),
    "raw UTF-8": 'data: {"choices":[{"index":0,"delta":{"content":"été 😀"}}]}\n\n'.encode(),
    "CRLF line ends, id and event fields": (
        b'id: 7\r\nevent: chunk\r\ndata: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\r\n\r\n'
    ),
    "data over two lines": b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"ok"}}]}\n\n',
    "trailing spaces": b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}   \n\n',
    "NaN, a big int, a lone surrogate": (
        b'data: {"x":NaN,"n":123456789012345678901234567890,'
        b'"choices":[{"index":0,"delta":{"content":"\\ud83d"}}]}\n\n'
    ),
    "a float in the logprobs": (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},'
        b'"logprobs":{"content":[{"token":"a","logprob":-2.5e-05}]}}]}\n\n'
    ),
    "a comment": b": keep-alive\n\n",
    "a role chunk": (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    ),
}


@pytest.mark.parametrize("case", UNCHANGED)
def test_an_event_left_alone_is_the_upstreams_bytes(case: str) -> None:
    event = UNCHANGED[case]
    assert filtered([event], ["</s>"]) == [event, b""]
    assert filtered([event, b"data: [DONE]\n\n"], ["</s>"], n=1) == [
        event,
        b"data: [DONE]\n\n",
        b"",
    ]


def chat(text: str, **fields: Any) -> bytes:
    return (
        b"data: "
        + json.dumps({**fields, "choices": [{"index": 0, "delta": {"content": text}}]}).encode()
        + b"\n\n"
    )


def test_held_text_changes_two_events_and_only_them() -> None:
    reads = [
        chat("one "),
        b'data: {"id" : "x", "choices":[{"delta":{"content":"a \\u00e9</"},"index":0}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "3"}}]}\n\n',
        chat("two"),
    ]
    assert filtered(reads, ["</s>"]) == [
        reads[0],
        'data: {"id":"x","choices":[{"delta":{"content":"a é"},"index":0}]}\n\n'.encode(),
        b'data: {"choices":[{"index":0,"delta":{"content":"</3"}}]}\n\n',
        reads[3],
        b"",
    ]


def test_a_cut_and_the_done_after_it() -> None:
    reads = [chat("a</"), b'data: {"choices": [{"index": 0, "delta": {"content": "s>junk"}}]}\n\n']
    assert filtered(reads, ["</s>"], n=1) == [
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n",
        b"",
    ]


def test_an_event_all_held_is_dropped_and_its_text_comes_at_the_end() -> None:
    reads = [
        b'data: {"choices": [{"index": 0, "delta": {"content": "<"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    assert filtered(reads, ["</s>"]) == [
        b"",
        b'data: {"choices":[{"index":0,"delta":{"content":"<"},"finish_reason":null,'
        b'"logprobs":null}]}\n\ndata: [DONE]\n\n',
        b"",
    ]


def test_the_usage_after_a_cut() -> None:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m"}
    assert filtered([chat("x</s>y", **head)], ["</s>"], n=1, include_usage=True) == [
        b'data: {"id":"c1","object":"chat.completion.chunk","created":5,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b'data: {"id":"c1","object":"chat.completion.chunk","created":5,"model":"m",'
        b'"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":1,"total_tokens":null}}'
        b"\n\ndata: [DONE]\n\n",
        b"",
    ]


def test_a_changed_event_keeps_the_values_the_standard_library_keeps() -> None:
    event = (
        b'data: {"x":NaN,"n":123456789012345678901234567890,'
        b'"choices":[{"index":0,"delta":{"content":"\\ud83d<"}}]}\n\n'
    )
    # A lone surrogate cannot be UTF-8: the event is written ASCII-escaped, as before.
    assert filtered([event], ["</s>"])[0] == (
        b'data: {"x":NaN,"n":123456789012345678901234567890,'
        b'"choices":[{"index":0,"delta":{"content":"\\ud83d"}}]}\n\n'
    )


def test_a_changed_events_float_in_each_codecs_notation() -> None:
    event = (
        b'data: {"choices":[{"index":0,"delta":{"content":"a<"},'
        b'"logprobs":{"content":[{"token":"a<","logprob":-2.5e-05}]}}]}\n\n'
    )
    number = b"-2.5e-05" if _json.backend() == "json" else b"-0.000025"
    assert filtered([event], ["</s>"])[0] == (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},'
        b'"logprobs":{"content":[{"token":"a<","logprob":' + number + b"}]}}]}\n\n"
    )


# Text without any character of the stops, laid out any way json.dumps can.
free_text = st.text(st.characters(exclude_characters="</s>", exclude_categories=["Cs"]))
layouts = st.sampled_from(
    [{}, {"separators": (",", ":")}, {"indent": 1}, {"ensure_ascii": False}, {"sort_keys": True}]
)


@given(st.lists(st.tuples(free_text, layouts), max_size=8))
def test_any_layout_of_text_that_passes_is_forwarded_byte_for_byte(
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    reads = []
    for text, layout in events:
        payload = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "x": 1.5e-7}]}
        lines = json.dumps(payload, **layout).split("\n")
        reads.append("".join(f"data: {line}\n" for line in lines).encode() + b"\n")
    reads.append(b"data: [DONE]\n\n")
    assert filtered(reads, ["</s>"]) == [*reads, b""]


# -- the other API families ----------------------------------------------------------------------


def family_filtered(name: str, reads: list[bytes]) -> list[bytes]:
    stream = FamilyStream(FAMILIES[name], ["</s>"], n=1)
    return [stream.feed(read) for read in reads] + [stream.flush()]


def test_family_events_left_alone_are_the_upstreams_bytes() -> None:
    ollama = (
        b'{"model" : "m", "message":{"role":"assistant","content":"Hi \\u00e9"}, "done":false}\n'
    )
    assert family_filtered("ollama-chat", [ollama]) == [ollama, b""]
    anthropic = (
        b"event: content_block_delta\n"
        b'data: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": "Hi"}}\n\n'
    )
    assert family_filtered("anthropic", [anthropic]) == [anthropic, b""]


def test_family_events_changed_are_re_encoded() -> None:
    reads = [
        b'{"model" : "m", "message":{"content":"a \\u00e9</"}, "done":false}\n',
        b'{"model" : "m", "message":{"content":"s>junk"}, "done":false}\n',
    ]
    assert family_filtered("ollama-chat", reads) == [
        '{"model":"m","message":{"content":"a é"},"done":false}\n'.encode(),
        b'{"model":"m","message":{"content":""},"done":true,"done_reason":"stop"}\n',
        b"",
    ]
