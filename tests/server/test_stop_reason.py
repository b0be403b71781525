"""Which stop fired, on the OpenAI API: a choice cut by a stop carries ``stop_reason``, the stop
(vLLM's field), beside ``finish_reason: "stop"``; a choice not cut is left as the upstream
sent it, its own ``stop_reason`` included.

One table of named cases, each a stream of chunks, replayed through every path: ChunkFilter on
dicts and on the ``openai`` client's objects, SSEFilter on the body whole, one event per read
and one byte at a time, and the same choices as one whole response (cut_response, and the
middleware's JSON path). A property test against the reference match; then the ``openai``
client, through the live proxy (legacy completions of several prompts, ``n`` of 2) and client
side (ChunkStream, SyncChunkStream).
"""

from __future__ import annotations

import doctest
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletionChunk

from streamstop.chat import ChunkFilter, ChunkStream, SSEFilter, SyncChunkStream, truncate_response
from streamstop.server import StopMiddleware

from ..json_codecs import json_codec  # noqa: F401 (a fixture)
from ..streamstop.reference import reference_match, reference_truncate
from .conftest import Client, LiveServer, client_for, http_scope, user

Chunk = dict[str, Any]
# What a choice says in the end: its text, its finish_reason, its stop_reason (ABSENT: no
# such field). A choice that never finished has finish_reason None.
Outcome = tuple[str, Any, Any]
ABSENT = "<no stop_reason>"


def chat(index: int, text: str | None, finish: str | None = None, **fields: Any) -> Chunk:
    delta = {} if text is None else {"content": text}
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish, **fields}
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }


def legacy(index: int, text: str, finish: str | None = None, **fields: Any) -> Chunk:
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish, **fields}
    return {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


# name: (the upstream's chunks, stops, options, {choice index: outcome})
CASES: dict[str, tuple[list[Chunk], list[str], dict[str, Any], dict[int, Outcome]]] = {
    "a stop inside one chunk": (
        [chat(0, "Hi</s>junk")],
        ["</s>"],
        {"n": 1},
        {0: ("Hi", "stop", "</s>")},
    ),
    "a stop split across chunks": (
        [chat(0, "Hi</"), chat(0, "s>junk"), chat(0, "never")],
        ["</s>"],
        {"n": 1},
        {0: ("Hi", "stop", "</s>")},
    ),
    "the stop that ends first fires": (
        [chat(0, "a<|im_"), chat(0, "end|>")],
        ["<|im_end|>", "im"],
        {"n": 1},
        {0: ("a<|", "stop", "im")},
    ),
    "of two stops ending together, the longest fires": (
        [chat(0, "xa"), chat(0, "by")],
        ["b", "ab"],
        {"n": 1},
        {0: ("x", "stop", "ab")},
    ),
    "include_stop: the stop stays in the text and is named": (
        [chat(0, "Hi</"), chat(0, "s>junk")],
        ["</s>"],
        {"n": 1, "include_stop": True},
        {0: ("Hi</s>", "stop", "</s>")},
    ),
    "a stop that JSON escapes": (
        [chat(0, "Sure.\n"), chat(0, "\nUser: more")],
        ["\n\nUser:", "</s>"],
        {"n": 1},
        {0: ("Sure.", "stop", "\n\nUser:")},
    ),
    "a stop beyond ASCII": (
        [chat(0, "答案<｜end▁of"), chat(0, "▁sentence｜>x")],
        ["<｜end▁of▁sentence｜>"],
        {"n": 1},
        {0: ("答案", "stop", "<｜end▁of▁sentence｜>")},
    ),
    "n of 2: each choice names its own stop": (
        [chat(0, "x"), chat(1, "yB"), chat(0, "A"), chat(1, "never")],
        ["A", "B"],
        {"n": 2},
        {0: ("x", "stop", "A"), 1: ("y", "stop", "B")},
    ),
    "n of 2: one cut, one finished by the upstream": (
        [chat(0, "xA"), chat(1, "y"), chat(1, None, "length")],
        ["A"],
        {"n": 2},
        {0: ("x", "stop", "A"), 1: ("y", "length", ABSENT)},
    ),
    "legacy completions, two prompts of two choices": (
        [
            legacy(0, "a###"),
            legacy(1, "b#"),
            legacy(2, "c"),
            legacy(3, "d</s>"),
            legacy(1, "##"),
            legacy(2, "", "length"),
        ],
        ["###", "</s>"],
        {"n": 4},
        {
            0: ("a", "stop", "###"),
            1: ("b", "stop", "###"),
            2: ("c", "length", ABSENT),
            3: ("d", "stop", "</s>"),
        },
    ),
    "the upstream's own stop and stop_reason are kept (vLLM, a token id)": (
        [chat(0, "done", stop_reason=None), chat(0, None, "stop", stop_reason=128009)],
        ["</s>"],
        {"n": 1},
        {0: ("done", "stop", 128009)},
    ),
    "the upstream's own stop string is kept (vLLM, forward_stop)": (
        [chat(0, "done", stop_reason=None), chat(0, "", "stop", stop_reason="Observation:")],
        ["</s>"],
        {"n": 1},
        {0: ("done", "stop", "Observation:")},
    ),
    "vLLM's stop_reason null is set by the cut": (
        [chat(0, "a", stop_reason=None), chat(0, "b</s>", stop_reason=None)],
        ["</s>"],
        {"n": 1},
        {0: ("ab", "stop", "</s>")},
    ),
    "held text released by the upstream's finish: not a cut": (
        [chat(0, "a</"), chat(0, None, "length")],
        ["</s>"],
        {"n": 1},
        {0: ("a</", "length", ABSENT)},
    ),
    "a stop in the chunk the upstream finished: the stop's finish": (
        [chat(0, "a</s>b", "length")],
        ["</s>"],
        {"n": 1},
        {0: ("a", "stop", "</s>")},
    ),
    "no finish at all: held text at the end, no stop_reason": (
        [chat(0, "a"), chat(0, "b<")],
        ["</s>"],
        {},
        {0: ("ab<", None, ABSENT)},
    ),
}


def outcomes(choices: list[Any]) -> dict[int, Outcome]:
    """What each choice of a list of chunk choices (as dicts) came to."""
    result: dict[int, Outcome] = {}
    for choice in choices:
        index = choice["index"]
        text = choice["delta"].get("content") if "delta" in choice else choice["text"]
        before, finish, stop_reason = result.get(index, ("", None, ABSENT))
        assert finish is None, f"choice {index} went on after its finish_reason"
        if choice.get("finish_reason") is not None:
            finish = choice["finish_reason"]
            stop_reason = choice.get("stop_reason", ABSENT)
        else:
            assert choice.get("stop_reason") is None, choice
        result[index] = (before + (text or ""), finish, stop_reason)
    return result


def sse_body(chunks: list[Chunk]) -> bytes:
    events = [
        b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n" for chunk in chunks
    ]
    return b"".join(events) + b"data: [DONE]\n\n"


def sse_choices(body: bytes) -> list[Any]:
    choices: list[Any] = []
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            choices.extend(json.loads(event[6:])["choices"])
    return choices


def via_chunks(chunks: list[Chunk], stops: list[str], options: dict[str, Any]) -> list[Any]:
    chunk_filter: ChunkFilter[Chunk] = ChunkFilter(stops, **options)
    out = [chunk_filter.feed(chunk) for chunk in chunks]
    return [
        c for chunk in [*out, *chunk_filter.flush()] if chunk is not None for c in chunk["choices"]
    ]


def as_openai_object(chunk: Chunk) -> Any:
    if chunk["object"] == "chat.completion.chunk":
        return ChatCompletionChunk.model_validate(chunk)
    # As the client builds a streamed legacy chunk: without validation (a streamed choice has
    # no finish_reason yet, which Completion's validation would refuse).
    choices = [CompletionChoice.model_construct(**choice) for choice in chunk["choices"]]
    return Completion.model_construct(**{**chunk, "choices": choices})


def via_openai_objects(chunks: list[Chunk], stops: list[str], options: dict[str, Any]) -> list[Any]:
    chunk_filter: ChunkFilter[Any] = ChunkFilter(stops, **options)
    out = [chunk_filter.feed(as_openai_object(chunk)) for chunk in chunks]
    kept = [chunk for chunk in [*out, *chunk_filter.flush()] if chunk is not None]
    assert all(type(chunk).__name__ in ("ChatCompletionChunk", "Completion") for chunk in kept)
    return [choice.to_dict(exclude_unset=False) for chunk in kept for choice in chunk.choices]


def via_sse(pieces: Callable[[bytes], list[bytes]]) -> Callable[..., list[Any]]:
    def run(chunks: list[Chunk], stops: list[str], options: dict[str, Any]) -> list[Any]:
        sse = SSEFilter(stops, **options)
        body = b"".join(sse.feed(piece) for piece in pieces(sse_body(chunks))) + sse.flush()
        return sse_choices(body)

    return run


def events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


RUNNERS: dict[str, Callable[[list[Chunk], list[str], dict[str, Any]], list[Any]]] = {
    "ChunkFilter": via_chunks,
    "ChunkFilter, openai objects": via_openai_objects,
    "SSEFilter, whole": via_sse(lambda body: [body]),
    "SSEFilter, one event per read": via_sse(events),
    "SSEFilter, one byte at a time": via_sse(
        lambda body: [body[i : i + 1] for i in range(len(body))]
    ),
}


@pytest.mark.usefixtures("json_codec")
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case", CASES)
def test_streamed(case: str, runner: str) -> None:
    chunks, stops, options, expected = CASES[case]
    assert outcomes(RUNNERS[runner](chunks, stops, options)) == expected


@pytest.mark.parametrize("case", CASES)
def test_sse_bytes_are_the_same_however_the_body_is_read(case: str) -> None:
    chunks, stops, options, _ = CASES[case]
    body = sse_body(chunks)
    sent = []
    for pieces in ([body], events(body), [body[i : i + 1] for i in range(len(body))]):
        sse = SSEFilter(stops, **options)
        sent.append(b"".join(sse.feed(piece) for piece in pieces) + sse.flush())
    assert sent[1:] == sent[:1] * 2


def whole_response(chunks: list[Chunk]) -> Chunk:
    """The response a server would give whole for the choices streamed as ``chunks``."""
    texts: dict[int, str] = {}
    fields: dict[int, Chunk] = {}
    chat_kind = chunks[0]["object"] == "chat.completion.chunk"
    for chunk in chunks:
        (choice,) = chunk["choices"]
        index = choice["index"]
        text = choice["delta"].get("content") if chat_kind else choice["text"]
        texts[index] = texts.get(index, "") + (text or "")
        fields[index] = {
            key: value for key, value in choice.items() if key not in ("delta", "text")
        }
    choices = []
    for index in sorted(texts):
        body = (
            {"message": {"role": "assistant", "content": texts[index]}}
            if chat_kind
            else {"text": texts[index]}
        )
        choices.append({**fields[index], **body})
    return {
        "id": "c",
        "object": "chat.completion" if chat_kind else "text_completion",
        "choices": choices,
    }


def whole_outcomes(response: Chunk) -> dict[int, Outcome]:
    result: dict[int, Outcome] = {}
    for choice in response["choices"]:
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        stop_reason = choice.get("stop_reason", ABSENT)
        if choice["finish_reason"] is None:
            assert stop_reason in (None, ABSENT)
            stop_reason = ABSENT
        result[choice["index"]] = (text, choice["finish_reason"], stop_reason)
    return result


@pytest.mark.parametrize("case", CASES)
def test_whole(case: str) -> None:
    chunks, stops, options, expected = CASES[case]
    response = whole_response(chunks)
    before = json.dumps(response)
    cut = truncate_response(response, stops, include_stop=options.get("include_stop", False))
    assert json.dumps(response) == before  # not modified
    assert whole_outcomes(cut) == expected
    for choice, sent in zip(cut["choices"], response["choices"], strict=True):
        if expected[choice["index"]][2] in (ABSENT, sent.get("stop_reason")):
            assert choice == sent  # not cut: as the upstream sent it


class JSONApp:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


@pytest.mark.anyio
@pytest.mark.parametrize("case", CASES)
async def test_whole_through_the_middleware(case: str) -> None:
    chunks, stops, options, expected = CASES[case]
    response = whole_response(chunks)
    path = "/v1/chat/completions" if response["object"] == "chat.completion" else "/v1/completions"
    client = Client(json.dumps({"model": "m", "stop": stops}).encode())
    app = StopMiddleware(
        JSONApp(json.dumps(response).encode()), include_stop=options.get("include_stop", False)
    )
    await app(http_scope(path), client.receive, client.send)
    assert client.status == 200
    assert whole_outcomes(json.loads(client.body)) == expected


# -- property: the stop named is the reference's first match, streamed and whole --------------

ALPHABET = "ab<>/ \n"
texts = st.text(alphabet=ALPHABET, max_size=30)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=5)


@given(texts, stop_lists, st.lists(st.integers(0, 30), max_size=6), st.booleans())
def test_the_stop_named_is_the_first_to_complete(
    text: str, stops: list[str], cuts: list[int], include_stop: bool
) -> None:
    points = sorted({cut % (len(text) + 1) for cut in cuts})
    pieces = [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)])]
    stream = [chat(0, piece) for piece in pieces] + [chat(0, None, "length")]
    match = reference_match(text, stops)
    expected = (
        reference_truncate(text, stops, include_stop),
        "length" if match is None else "stop",
        ABSENT if match is None else match[2],
    )
    options = {"n": 1, "include_stop": include_stop}
    assert outcomes(via_chunks(stream, stops, options)) == {0: expected}
    assert outcomes(via_sse(events)(stream, stops, options)) == {0: expected}
    whole = truncate_response(whole_response(stream), stops, include_stop=include_stop)
    assert whole_outcomes(whole) == {0: expected}


# -- the openai client: through the live proxy, and client side -------------------------------

TEXT = "one two three. four ### five </s> six"
STOPS = ["\n\nUser:", "<|im_end|>", "</s>", "###", "Observation:", "four"]  # more than 4


@pytest.mark.asyncio
async def test_legacy_completions_of_several_prompts_through_the_proxy(
    proxy_server: LiveServer,
) -> None:
    # Two prompts, n=2: four choices, each cut by the first of its stops.
    prompts = [TEXT, "a </s> b four"]
    async with client_for(proxy_server) as client:
        whole = await client.completions.create(model="echo", prompt=prompts, stop=STOPS, n=2)
        stream = await client.completions.create(
            model="echo", prompt=prompts, stop=STOPS, n=2, stream=True
        )
        finishing = [
            choice async for chunk in stream for choice in chunk.choices if choice.finish_reason
        ]
    expected = {0: "four", 1: "four", 2: "</s>", 3: "</s>"}
    assert {c.index: (c.finish_reason, c.model_extra) for c in whole.choices} == {
        index: ("stop", {"stop_reason": stop}) for index, stop in expected.items()
    }
    assert {c.index: (c.finish_reason, c.model_extra) for c in finishing} == {
        index: ("stop", {"stop_reason": stop}) for index, stop in expected.items()
    }


@pytest.mark.asyncio
async def test_chat_n2_through_the_proxy_streamed_and_whole(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        whole = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS, n=2
        )
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS, n=2, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert [(c.message.content, c.model_extra) for c in whole.choices] == [
        ("one two three. ", {"stop_reason": "four"})
    ] * 2
    finishing = [choice for chunk in chunks for choice in chunk.choices if choice.finish_reason]
    assert sorted((c.index, c.finish_reason, c.model_extra) for c in finishing) == [
        (0, "stop", {"stop_reason": "four"}),
        (1, "stop", {"stop_reason": "four"}),
    ]
    others = [choice for chunk in chunks for choice in chunk.choices if not choice.finish_reason]
    assert all(choice.model_extra == {} for choice in others)


@pytest.mark.asyncio
async def test_chunk_stream_client_side(upstream_server: LiveServer) -> None:
    # Client side, against the bare echo model (a backend without stops).
    async with client_for(upstream_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stream=True
        )
        async with ChunkStream(stream, STOPS, n=1) as chunks:
            received = [chunk async for chunk in chunks]
    last = received[-1].choices[0]
    assert (last.finish_reason, last.stop_reason) == ("stop", "four")  # type: ignore[attr-defined]
    assert received[-1].model_dump()["choices"][0]["stop_reason"] == "four"
    assert json.loads(received[-1].model_dump_json())["choices"][0]["stop_reason"] == "four"
    assert all(not c.choices[0].model_extra for c in received[:-1] if c.choices)


def test_sync_chunk_stream_client_side(upstream_server: LiveServer) -> None:
    with openai.OpenAI(base_url=upstream_server.url, api_key="unused", max_retries=0) as client:
        stream = client.completions.create(
            model="echo", prompt=[TEXT, "x </s> y"], stream=True, n=2
        )
        with SyncChunkStream(stream, STOPS, n=4) as chunks:
            finishing = [
                choice for chunk in chunks for choice in chunk.choices if choice.finish_reason
            ]
    assert sorted((c.index, (c.model_extra or {}).get("stop_reason")) for c in finishing) == [
        (0, "four"),
        (1, "four"),
        (2, "</s>"),
        (3, "</s>"),
    ]


def test_the_handbook_page_runs() -> None:
    page = Path(__file__).parents[2] / "docs" / "stop-reason.md"
    result = doctest.testfile(str(page), module_relative=False)
    assert result.failed == 0
    assert result.attempted >= 40
