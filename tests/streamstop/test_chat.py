"""streamstop.chat without a server: ChunkFilter, SSEFilter and truncate_response on named cases,
property tests against the reference ``truncate`` (tests/streamstop/reference.py), and the
``openai`` client's own chunk objects."""

from __future__ import annotations

import copy
import doctest
import importlib
import inspect
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletionChunk

from streamstop.chat import ChunkFilter, SSEFilter, truncate_response

from ..json_codecs import json_codec  # noqa: F401 (a fixture)
from ..public_api import public_definitions
from ..streamstop.reference import reference_truncate

# Every test runs with each JSON codec installed (the standard library's, orjson's).
pytestmark = pytest.mark.usefixtures("json_codec")

Chunk = dict[str, Any]


def chat(index: int, content: str | None, finish_reason: str | None = None, **delta: Any) -> Chunk:
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}],
    }


def legacy(index: int, text: str, finish_reason: str | None = None) -> Chunk:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}
        ],
    }


def content_of(chunk: Chunk | None, index: int = 0) -> str | None:
    assert chunk is not None
    for choice in chunk["choices"]:
        if choice["index"] == index:
            text = choice["delta"].get("content") if "delta" in choice else choice["text"]
            assert text is None or isinstance(text, str)
            return text
    return None


def finish_of(chunk: Chunk | None, index: int = 0) -> str | None:
    assert chunk is not None
    (choice,) = [c for c in chunk["choices"] if c["index"] == index]
    finish_reason = choice.get("finish_reason")
    assert finish_reason is None or isinstance(finish_reason, str)
    return finish_reason


# -- named cases -------------------------------------------------------------------------------


def test_unchanged_chunks_are_returned_as_they_are() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"])
    for chunk in (chat(0, "", role="assistant"), chat(0, "Hello"), chat(0, " world")):
        assert chunks.feed(chunk) is chunk


def test_held_text_goes_out_with_the_next_chunk() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"])
    assert content_of(chunks.feed(chat(0, "Hi<"))) == "Hi"
    assert chunks.held(0) == "<"
    assert content_of(chunks.feed(chat(0, "3"))) == "<3"
    assert chunks.stop_strings == {}


def test_a_chunk_whose_text_is_all_held_is_left_out() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"])
    assert chunks.feed(chat(0, "</")) is None
    assert content_of(chunks.feed(chat(0, "3"))) == "</3"
    with_role: ChunkFilter[Chunk] = ChunkFilter(["</s>"])
    out = with_role.feed(chat(0, "</", role="assistant"))  # the role still has to go out
    assert out is not None
    assert out["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    objects: ChunkFilter[ChatCompletionChunk] = ChunkFilter(["</s>"])
    assert objects.feed(openai_chunk(0, "</")) is None


def test_a_stop_split_across_chunks_ends_the_choice() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"], n=1)
    assert content_of(chunks.feed(chat(0, "Hi</"))) == "Hi"
    last = chunks.feed(chat(0, "s>junk"))
    assert content_of(last) == ""
    assert finish_of(last) == "stop"
    assert chunks.done
    assert chunks.stop_strings == {0: "</s>"}
    assert chunks.feed(chat(0, "more")) is None  # past the stop: dropped
    assert chunks.feed(chat(0, None, "length")) is None  # the upstream's own end too
    assert chunks.flush() == []


def test_a_stop_inside_one_chunk() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["\n\nUser:"])
    out = chunks.feed(chat(0, "Sure.\n\nUser: and more"))
    assert content_of(out) == "Sure."
    assert finish_of(out) == "stop"


def test_include_stop_keeps_the_stop() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"], include_stop=True)
    assert content_of(chunks.feed(chat(0, "Hi</"))) == "Hi</"
    assert content_of(chunks.feed(chat(0, "s>junk"))) == "s>"


def test_the_upstream_finish_releases_held_text_before_the_finish_reason() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["<|end|>"], n=1)
    assert content_of(chunks.feed(chat(0, "a <|e"))) == "a "
    out = chunks.feed(chat(0, None, "length"))
    assert content_of(out) == "<|e"
    assert finish_of(out) == "length"
    assert not chunks.done  # nothing was cut: the upstream ends by itself
    assert chunks.finished == {0}


def test_held_text_at_the_end_of_the_upstream_is_synthesized() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["<|end|>"])
    template = chat(0, "a <|e")
    template["usage"] = None
    template["system_fingerprint"] = "fp"
    chunks.feed(template)
    (out,) = chunks.flush()
    assert out == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp",
        "usage": None,
        "choices": [
            {"index": 0, "delta": {"content": "<|e"}, "finish_reason": None, "logprobs": None}
        ],
    }
    assert chunks.flush() == []
    with pytest.raises(RuntimeError, match="after flush"):
        chunks.feed(chat(0, "x"))


def test_text_free_chunks_pass_in_order() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"], n=1)
    role = chat(0, "", role="assistant")
    tool = chat(0, None, tool_calls=[{"index": 0, "function": {"arguments": "{"}}])
    usage: Chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {}}
    error: Chunk = {"error": {"message": "overloaded"}}
    for chunk in (role, tool, usage, error):
        assert chunks.feed(chunk) is chunk
    chunks.feed(chat(0, "x</s>"))
    assert chunks.feed(usage) is usage  # usage passes after the stop too


def test_n_choices_are_independent() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["STOP"], n=2)
    out0 = chunks.feed(chat(0, "aSTOPb"))
    assert content_of(out0, 0) == "a"
    assert finish_of(out0, 0) == "stop"
    assert not chunks.done  # choice 1 is still running
    assert chunks.feed(chat(1, "b ST")) is not None
    assert chunks.feed(chat(0, "dropped")) is None
    out1 = chunks.feed(chat(1, "OP"))
    assert content_of(out1, 1) == ""
    assert finish_of(out1, 1) == "stop"
    assert chunks.done
    assert chunks.stop_strings == {0: "STOP", 1: "STOP"}


def test_a_chunk_with_several_choices_loses_only_the_finished_ones() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["STOP"], n=3)
    chunks.feed(chat(0, "STOP"))
    both = chat(0, "late")
    both["choices"].append({"index": 1, "delta": {"content": "live"}, "finish_reason": None})
    out = chunks.feed(both)
    assert out is not None
    assert [c["index"] for c in out["choices"]] == [1]
    with_usage = chat(0, "late")
    with_usage["usage"] = {"total_tokens": 3}
    out = chunks.feed(with_usage)
    assert out is not None
    assert out["choices"] == []
    assert out["usage"] == {"total_tokens": 3}


def test_done_needs_n_and_a_cut() -> None:
    unknown: ChunkFilter[Chunk] = ChunkFilter(["STOP"])
    unknown.feed(chat(0, "STOP"))
    assert not unknown.done  # another choice might come
    natural: ChunkFilter[Chunk] = ChunkFilter(["STOP"], n=1)
    natural.feed(chat(0, "fine", "stop"))
    assert not natural.done  # the upstream ends by itself, usage and all


def test_legacy_completion_chunks() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["###"], n=1)
    assert content_of(chunks.feed(legacy(0, "x #"))) == "x "
    out = chunks.feed(legacy(0, "## y"))
    assert content_of(out) == ""
    assert finish_of(out) == "stop"
    held: ChunkFilter[Chunk] = ChunkFilter(["###"])
    held.feed(legacy(0, "x #"))
    (tail,) = held.flush()
    assert tail["choices"] == [{"index": 0, "text": "#", "logprobs": None, "finish_reason": None}]


def test_the_callers_chunks_are_not_modified() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"], n=2)
    inputs = [chat(0, "a</"), chat(1, "b"), chat(0, "s>c"), chat(1, "d", "stop"), chat(0, "e")]
    before = copy.deepcopy(inputs)
    for chunk in inputs:
        chunks.feed(chunk)
    chunks.flush()
    assert inputs == before


def test_odd_choices_pass_untouched() -> None:
    chunks: ChunkFilter[Chunk] = ChunkFilter(["</s>"])
    odd = {"choices": [{"index": "zero", "delta": {"content": "</s>"}}]}
    assert chunks.feed(odd) is odd
    no_index = {"choices": [{"delta": {"content": "a</s>"}}]}
    out = chunks.feed(no_index)
    assert out is not None
    assert out["choices"][0]["delta"]["content"] == "a"


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_bad_n(n: Any) -> None:
    with pytest.raises(ValueError, match="n must be"):
        ChunkFilter("x", n=n)


def test_bad_stops() -> None:
    with pytest.raises(TypeError, match="every stop must be a str"):
        ChunkFilter(["ok", 3])  # type: ignore[list-item]


def test_chunks_of_unknown_kind() -> None:
    chunks: ChunkFilter[object] = ChunkFilter("x")

    class Opaque:
        choices = [{"index": 0, "text": "x"}]  # noqa: RUF012

    with pytest.raises(TypeError, match="dicts or pydantic models"):
        chunks.feed(Opaque())


# -- the openai client's objects ---------------------------------------------------------------


def openai_chunk(index: int, content: str | None, finish_reason: str | None = None) -> Any:
    return ChatCompletionChunk.model_validate(chat(index, content, finish_reason))


def test_openai_chat_chunks_are_rewritten_as_copies() -> None:
    chunks: ChunkFilter[ChatCompletionChunk] = ChunkFilter(["</s>"], n=1)
    first = openai_chunk(0, "Hi</")
    out = chunks.feed(first)
    assert isinstance(out, ChatCompletionChunk)
    assert out is not first
    assert out.choices[0].delta.content == "Hi"
    assert first.choices[0].delta.content == "Hi</"  # the original is intact
    unchanged = openai_chunk(0, "")
    assert chunks.feed(unchanged) is unchanged
    last = chunks.feed(openai_chunk(0, "s> and more"))
    assert last is not None
    assert last.choices[0].delta.content == ""
    assert last.choices[0].finish_reason == "stop"
    assert chunks.done


def test_openai_chunks_held_at_the_end_come_back_as_openai_chunks() -> None:
    chunks: ChunkFilter[ChatCompletionChunk] = ChunkFilter(["</s>"])
    start = ChatCompletionChunk.model_validate(chat(0, "", role="assistant"))
    chunks.feed(start)
    chunks.feed(openai_chunk(0, "ok </"))
    (tail,) = chunks.flush()
    assert isinstance(tail, ChatCompletionChunk)
    assert (tail.id, tail.model, tail.object) == ("chatcmpl-1", "m", "chat.completion.chunk")
    assert tail.choices[0].delta.content == "</"
    assert tail.choices[0].delta.role is None
    assert tail.choices[0].finish_reason is None


def openai_legacy(text: str) -> Completion:
    # The client builds stream chunks without validation: a streamed choice has no
    # finish_reason yet, which Completion's own validation would refuse.
    choice = CompletionChoice.model_construct(index=0, text=text, logprobs=None, finish_reason=None)
    return Completion.model_construct(
        id="cmpl-1", object="text_completion", created=1, model="m", choices=[choice]
    )


def test_openai_legacy_completion_chunks() -> None:
    chunks: ChunkFilter[Completion] = ChunkFilter(["###"])
    out = chunks.feed(openai_legacy("a ##"))
    assert isinstance(out, Completion)
    assert out.choices[0].text == "a "
    out = chunks.feed(openai_legacy("# b"))
    assert out is not None
    assert out.choices[0].text == ""
    assert out.choices[0].finish_reason == "stop"


# -- properties: any chunking, any interleaving, the text of the reference truncate() ------------

ALPHABET = "ab<>/s \n"
texts = st.text(alphabet=ALPHABET, max_size=40)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=6)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@given(
    st.lists(st.tuples(texts, st.lists(st.integers(0, 40), max_size=8)), min_size=1, max_size=3),
    stop_lists,
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_any_chunking_gives_truncate(
    choices: list[tuple[str, list[int]]],
    stops: list[str],
    upstream_finishes: bool,
    random: Any,
) -> None:
    # Interleave the choices' chunks at random, as a server with n > 1 does.
    queues = [
        [chat(i, piece) for piece in split(text, cuts)] for i, (text, cuts) in enumerate(choices)
    ]
    if upstream_finishes:
        for index, queue in enumerate(queues):
            queue.append(chat(index, None, "length"))
    stream: list[Chunk] = []
    while any(queues):
        queue = random.choice([q for q in queues if q])
        stream.append(queue.pop(0))
    chunks: ChunkFilter[Chunk] = ChunkFilter(stops, n=len(choices))
    out: list[Chunk] = []
    for chunk in stream:
        result = chunks.feed(chunk)
        if result is not None:
            out.append(result)
        if chunks.done:
            break
    out.extend(chunks.flush())
    for index, (text, _) in enumerate(choices):
        got = "".join(
            choice["delta"].get("content") or ""
            for chunk in out
            for choice in chunk["choices"]
            if choice["index"] == index
        )
        assert got == reference_truncate(text, stops)
        finishes = [
            choice["finish_reason"]
            for chunk in out
            for choice in chunk["choices"]
            if choice["index"] == index and choice["finish_reason"] is not None
        ]
        cut = any(stop in text for stop in stops)
        if cut:
            assert finishes == ["stop"]
        else:
            assert finishes == (["length"] if upstream_finishes else [])


# -- SSEFilter ---------------------------------------------------------------------------------


def sse_body(chunks: list[Chunk], *, separator: bytes = b"\n\n", done: bool = True) -> bytes:
    events = [b"data: " + json.dumps(chunk).encode() for chunk in chunks]
    if done:
        events.append(b"data: [DONE]")
    return b"".join(event + separator for event in events)


def run_sse(
    body: bytes, stops: list[str], pieces: Iterator[bytes] | None = None, **kw: Any
) -> bytes:
    sse = SSEFilter(stops, **kw)
    out = b"".join(sse.feed(piece) for piece in (pieces if pieces is not None else [body]))
    return out + sse.flush()


def parse_sse(body: bytes) -> list[Any]:
    events = []
    for raw in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n"):
        data = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
        if data:
            joined = b"\n".join(data)
            events.append("[DONE]" if joined == b"[DONE]" else json.loads(joined))
    return events


def sse_text(body: bytes, index: int = 0) -> str:
    return "".join(
        content_of(event, index) or ""
        for event in parse_sse(body)
        if event != "[DONE]" and any(c["index"] == index for c in event.get("choices", []))
    )


STREAM = [
    chat(0, "", role="assistant"),
    chat(0, "Hel"),
    chat(0, "lo</"),
    chat(0, "s>"),
    chat(0, "x"),
]


def test_sse_cut_and_done() -> None:
    out = run_sse(sse_body(STREAM), ["</s>"], n=1)
    events = parse_sse(out)
    assert events[-1] == "[DONE]"
    assert events.count("[DONE]") == 1
    assert sse_text(out) == "Hello"
    assert finish_of(events[-2]) == "stop"


@pytest.mark.parametrize("separator", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_sse_one_byte_at_a_time_equals_whole(separator: bytes) -> None:
    body = sse_body(STREAM, separator=separator) + b"data: after done\n\n"
    whole = run_sse(body, ["</s>"])
    one_by_one = run_sse(body, ["</s>"], iter([body[i : i + 1] for i in range(len(body))]))
    assert whole == one_by_one
    assert sse_text(whole) == "Hello"
    assert b"after done" not in whole  # nothing passes after [DONE]


def test_sse_unchanged_events_pass_byte_for_byte() -> None:
    body = (
        b": keep-alive comment\n\n"
        b"event: ping\ndata: not json\n\n"
        b'data: {"choices": [{"index": 0, "delta": {"content": "plain"}}]}\r\n\r\n'
    )
    assert run_sse(body, ["</s>"]) == body


def test_sse_rewritten_events_keep_their_other_fields() -> None:
    body = b'id: 7\nevent: chunk\ndata: {"choices":[{"index":0,"delta":{"content":"a</s>"}}]}\n\n'
    out = run_sse(body, ["</s>"])
    assert out.startswith(b"id: 7\nevent: chunk\ndata: {")
    assert sse_text(out) == "a"


def test_sse_done_releases_held_text_first() -> None:
    out = run_sse(sse_body([chat(0, "ok </")]), ["</s>"])
    events = parse_sse(out)
    assert [content_of(e) for e in events[:-1]] == ["ok ", "</"]
    assert events[-1] == "[DONE]"


def test_sse_an_error_event_ends_the_stream_and_drops_the_held_text() -> None:
    # "</" may be the start of "</s>": an upstream that failed there never lets it out.
    error = b'data: {"error": {"message": "overloaded"}}\n\n'
    body = sse_body([chat(0, "ok </")], done=False) + error + sse_body([chat(0, "late")])
    sse = SSEFilter(["</s>"])
    out = sse.feed(body) + sse.flush()
    assert out == (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"ok "},"finish_reason":null}]}\n\n' + error
    )
    assert sse.error == "upstream"


def test_sse_end_without_done_or_final_blank_line() -> None:
    body = sse_body([chat(0, "ok </")], done=False).rstrip(b"\n")
    assert sse_text(run_sse(body, ["</s>"])) == "ok </"
    assert run_sse(b"data: [DONE]\r", ["x"]) == b"data: [DONE]\r\n\n"


def test_sse_feed_after_done_and_bad_input() -> None:
    sse = SSEFilter("x", n=1)
    assert sse.feed(sse_body([chat(0, "x")], done=False)).endswith(b"data: [DONE]\n\n")
    assert sse.done
    assert sse.chunks.done
    assert sse.feed(b"data: more\n\n") == b""
    assert sse.flush() == b""
    with pytest.raises(TypeError, match="bytes"):
        SSEFilter("x").feed("data: str\n\n")  # type: ignore[arg-type]


@given(st.lists(st.integers(0, 400), max_size=12), stop_lists)
def test_sse_any_split_equals_whole(cuts: list[int], stops: list[str]) -> None:
    body = sse_body(
        [chat(0, "", role="assistant"), chat(0, "ab</s"), chat(0, "> a<b"), chat(0, "</")],
        separator=b"\r\n\r\n",
    )
    whole = run_sse(body, stops, n=1)
    points = sorted({c % (len(body) + 1) for c in cuts})
    bounds = [0, *points, len(body)]
    pieces = iter([body[a:b] for a, b in itertools.pairwise(bounds)])
    assert run_sse(body, stops, pieces, n=1) == whole
    assert sse_text(whole) == reference_truncate("ab</s> a<b</", stops)


# -- truncate_response -------------------------------------------------------------------------


def test_truncate_response_chat_and_legacy() -> None:
    response = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "a</s>b"},
                "finish_reason": "length",
            },
            {
                "index": 1,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            },
            {
                "index": 2,
                "message": {"role": "assistant", "content": None},
                "finish_reason": "tool_calls",
            },
        ],
    }
    before = copy.deepcopy(response)
    cut = truncate_response(response, ["</s>"])
    assert response == before
    assert cut["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "a"},
        "finish_reason": "stop",
        "stop_reason": "</s>",
    }
    assert cut["choices"][1:] == response["choices"][1:]
    legacy_response = {"choices": [{"index": 0, "text": "a###b", "finish_reason": "length"}]}
    assert truncate_response(legacy_response, "###", include_stop=True)["choices"][0] == {
        "index": 0,
        "text": "a###",
        "finish_reason": "stop",
        "stop_reason": "###",
    }
    assert truncate_response({"error": {}}, "x") == {"error": {}}


# -- the public surface ------------------------------------------------------------------------


CHAT_MODULES = ["_chunks", "_sse", "_sse_filter", "_chunk_stream"]


def test_module_all_and_doctests() -> None:
    module = importlib.import_module("streamstop.chat")
    assert set(module.__all__) == {
        "ChunkFilter",
        "ChunkStream",
        "SSEFilter",
        "SyncChunkStream",
        "truncate_response",
    }
    tried = 0
    for name in CHAT_MODULES:
        part = importlib.import_module(f"streamstop.{name}")
        assert public_definitions(part) <= set(part.__all__), name
        for exported in part.__all__:
            assert hasattr(part, exported), exported
        result = doctest.testmod(part)
        assert result.failed == 0, name
        tried += result.attempted
    assert tried >= 8
    for cls in (ChunkFilter, SSEFilter):
        parameters = inspect.signature(cls).parameters
        assert parameters["n"].default is None
        assert parameters["include_stop"].kind is inspect.Parameter.KEYWORD_ONLY


# Events whose data is not a JSON object: the upstream's own named events pass, a chunk that is
# not one ends the stream in error with the held text dropped (the client could not parse it).
NOT_JSON_CASES = {
    "a named event passes": (b"event: ping\ndata: not json\n\n", True),
    "empty data passes": (b"data:\n\n", True),
    "a broken chunk": (b"data: {not json\n\n", False),
    "a JSON value that is not an object": (b"data: 42\n\n", False),
    "a broken chunk of two lines": (b"data: {\ndata: oops\n\n", False),
    "an event named message is a chunk": (b"event: message\ndata: nope\n\n", False),
}


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("name", sorted(NOT_JSON_CASES))
def test_sse_data_that_is_not_a_json_object(name: str, bytewise: bool) -> None:
    event, passes = NOT_JSON_CASES[name]
    body = sse_body([chat(0, "Hi<")], done=False) + event + sse_body([chat(0, "3")])
    pieces = iter([body[i : i + 1] for i in range(len(body))]) if bytewise else None
    out = run_sse(body, ["<!"], pieces)
    if passes:
        assert event in out
        assert sse_text(out.replace(event, b"")) == "Hi<3"
        return
    assert event not in out
    assert sse_text(out) == "Hi"  # the held "<" is dropped
    errors = [e for e in parse_sse(out) if e != "[DONE]" and "error" in e]
    assert [e["error"]["code"] for e in errors] == ["upstream_invalid_event"]
    assert b"[DONE]" not in out
