"""Regex and gated stops through the streams and the chunk filters: every token goes through the
buffer (the streams' shortcut for a token that passes the literal stops must not skip the
patterns or the marker), on asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from streamstop import StopAutomaton, StopStream, SyncStopStream
from streamstop.chat import ChunkFilter, truncate_response

pytestmark = pytest.mark.anyio

# "hello" passes the literal stop at the root (and so takes the streams' shortcut once the
# automaton has seen it): only the pattern can cut it.
TOKENS = ["hello", " wor", "ld", " hello", "</s>"]


async def source(tokens: list[str]) -> AsyncIterator[str]:
    for token in tokens:
        yield token


async def test_a_pattern_cuts_tokens_the_literal_stops_pass() -> None:
    automaton = StopAutomaton("</s>")
    warm = StopStream(source(TOKENS), automaton)
    assert [piece async for piece in warm] == ["hello", " wor", "ld", " hello"]
    stream = StopStream(source(TOKENS), automaton, regex=r"wor\w")
    assert [piece async for piece in stream] == ["hello", " "]
    assert (stream.stop_string, stream.stop_pattern) == ("worl", r"wor\w")


async def test_a_marker_arms_the_stops_in_a_stream() -> None:
    tokens = ["<think>", "a</s>", "</th", "ink>", "b</s>c"]
    stream = StopStream(source(tokens), "</s>", arm_after="</think>")
    assert "".join([piece async for piece in stream]) == "<think>a</s></think>b"
    assert stream.stop_string == "</s>"


def test_the_sync_stream() -> None:
    stream = SyncStopStream(iter(TOKENS), "</s>", regex=r"o w", max_match_chars=None)
    assert list(stream) == ["hell"]
    assert stream.stop_pattern == "o w"


def chunk(index: int, content: str) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": {"content": content}, "finish_reason": None}]}


def test_the_chunk_filter_with_two_choices() -> None:
    chunks: ChunkFilter[dict[str, Any]] = ChunkFilter("</s>", n=2, regex=r"\d{2}", arm_after="|")
    sent = [
        chunks.feed(chunk(0, "a 1")),
        chunks.feed(chunk(1, "12 | 3")),
        chunks.feed(chunk(0, "2 | 34")),
        chunks.feed(chunk(1, "4 x")),
    ]
    texts = [
        "".join(
            c["choices"][0]["delta"]["content"] for c in sent if c and c["choices"][0]["index"] == i
        )
        for i in (0, 1)
    ]
    assert texts == ["a 12 | ", "12 | "]
    assert chunks.stop_strings == {0: "34", 1: "34"}
    assert chunks.stop_patterns == {0: r"\d{2}", 1: r"\d{2}"}
    assert chunks.done


def test_a_whole_response() -> None:
    response = {"choices": [{"index": 0, "message": {"content": "x1</t>y22z"}}]}
    cut = truncate_response(response, None, regex=r"\d{2}", arm_after="</t>")
    assert cut["choices"][0]["message"]["content"] == "x1</t>y"
