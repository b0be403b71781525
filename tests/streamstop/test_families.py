"""The filter core of every API family, sans-I/O: one table of cases, run for each family.

Each family has a writer (the upstream's bytes for a list of text pieces, as the real server
frames them) and a reader (what a client makes of the filtered bytes: the text, the stop that
ended it, the end marker). Every case runs on the whole input and again fed one byte at a time,
through the filter the family makes (``Family.stream_filter``: a FamilyStream, or OpenAI's
SSEFilter).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstop import StopAutomaton
from streamstop._families import FAMILIES
from streamstop._family import FamilyStream, NDJSONDecoder
from streamstop._sse import SSEDecoder, SSEFrameTooLarge
from streamstop._stream_filter import StreamFilter

from ..json_codecs import json_codec  # noqa: F401 (a fixture)

# Every test runs with each JSON codec installed (the standard library's, orjson's).
pytestmark = pytest.mark.usefixtures("json_codec")


@dataclass
class Read:
    """What a client reads from a filtered stream."""

    text: str
    stop: str | None  # the stop the end marker names (None: the model's own end, or none)
    ended: bool  # the family's end marker was seen
    error: bool = False
    order: list[str] = field(default_factory=list)


def _sse(payloads: Sequence[tuple[str | None, dict[str, Any]]], space: bool = True) -> bytes:
    out = b""
    for name, payload in payloads:
        if name is not None:
            out += f"event: {name}\n".encode()
        out += (b"data: " if space else b"data:") + json.dumps(payload).encode() + b"\n\n"
    return out


def _sse_payloads(data: bytes) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    events = decoder.feed(data)
    last = decoder.flush()
    if last is not None:
        events.append(last)
    out = []
    for event in events:
        for name, value in event.fields():
            if name == b"data":
                out.append(json.loads(value))
    return out


# -- writers ---------------------------------------------------------------------------------


def anthropic_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {"id": "m", "content": []}}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for part in parts:
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": part},
                },
            )
        )
    if error:
        events.append(
            ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}})
        )
    elif end:
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 3},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    return _sse(events)


def anthropic_read(data: bytes) -> Read:
    read = Read("", None, False)
    for payload in _sse_payloads(data):
        kind = payload["type"]
        read.order.append(kind)
        if kind == "content_block_delta" and payload["delta"]["type"] == "text_delta":
            read.text += payload["delta"]["text"]
        elif kind == "message_delta":
            if payload["delta"]["stop_reason"] == "stop_sequence":
                read.stop = payload["delta"]["stop_sequence"]
        elif kind == "message_stop":
            read.ended = True
        elif kind == "error":
            read.error = True
    if read.stop is not None:
        # A cut ends in the API's order: the block, then the message.
        assert read.order[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    return read


def _ollama_bytes(key: str) -> Callable[..., bytes]:
    def write(parts: list[str], end: bool = True, error: bool = False) -> bytes:
        def line(text: str, done: bool) -> dict[str, Any]:
            out: dict[str, Any] = {"model": "m", "created_at": "2024-01-01T00:00:00Z"}
            if key == "message":
                out["message"] = {"role": "assistant", "content": text}
            else:
                out["response"] = text
            out["done"] = done
            if done:
                out["done_reason"] = "stop"
                out["eval_count"] = len(parts)
            return out

        lines = [line(part, False) for part in parts]
        if error:
            lines.append({"error": "model crashed"})
        elif end:
            lines.append(line("", True))
        return b"".join(json.dumps(item).encode() + b"\n" for item in lines)

    return write


def _ollama_read(key: str) -> Callable[[bytes], Read]:
    def read(data: bytes) -> Read:
        assert data == b"" or data.endswith(b"\n")
        out = Read("", None, False)
        for raw in data.splitlines():
            line = json.loads(raw)
            if "error" in line:
                out.error = True
                continue
            assert not out.ended, "nothing after the done line"
            out.text += line["message"]["content"] if key == "message" else line["response"]
            if line["done"]:
                out.ended = True
                if "eval_count" not in line:  # written by the filter: a cut
                    assert line["done_reason"] == "stop"
                    out.stop = "<cut>"
        return out

    return read


def llamacpp_partial(n: int, content: str, index: int = 0, **more: Any) -> dict[str, Any]:
    """llama.cpp's event of the ``n``-th token (server_task_result_cmpl_partial's
    to_json_non_oaicompat): no model, truncated or tokens_cached; timings only if asked."""
    return {"index": index, "content": content, "tokens": [100 + n], "stop": False,
            "id_slot": index, "tokens_predicted": n, "tokens_evaluated": 7, **more}  # fmt: skip


def llamacpp_final(n: int, index: int = 0, **more: Any) -> dict[str, Any]:
    """llama.cpp's last event of a stream (server_task_result_cmpl_final): its content is
    empty (the text came before), and it alone has the server's fields."""
    return {
        "index": index, "content": "", "tokens": [], "id_slot": index, "stop": True,
        "model": "qwen2-0.5b.gguf", "tokens_predicted": n, "tokens_evaluated": 7,
        "generation_settings": {"n_predict": -1}, "prompt": "Once", "has_new_line": False,
        "truncated": False, "stop_type": "eos", "stopping_word": "", "tokens_cached": 7 + n,
        "timings": {"prompt_n": 7, "predicted_n": n}, **more,
    }  # fmt: skip


def llamacpp_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, llamacpp_partial(n, part)) for n, part in enumerate(parts, 1)
    ]
    if error:
        events.append((None, {"error": {"code": 500, "message": "x", "type": "server_error"}}))
    elif end:
        events.append((None, llamacpp_final(len(parts))))
    return _sse(events)


def llamacpp_read(data: bytes) -> Read:
    out = Read("", None, False)
    for payload in _sse_payloads(data):
        if "error" in payload:
            out.error = True
            continue
        assert not out.ended
        out.text += payload["content"]
        if payload["stop"]:
            out.ended = True
            if payload["stop_type"] == "word":
                out.stop = payload["stopping_word"]
    return out


def tgi_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    events: list[tuple[str | None, dict[str, Any]]] = []
    for i, part in enumerate(parts):
        token = {"id": i, "text": part, "logprob": -0.1, "special": False}
        events.append((None, {"index": i, "token": token, "generated_text": None, "details": None}))
    if error:
        events.append((None, {"error": "x", "error_type": "generation"}))
    elif end:
        token = {"id": 2, "text": "</s>", "logprob": -0.1, "special": True}
        details = {"finish_reason": "eos_token", "generated_tokens": len(parts) + 1, "seed": None}
        text = "".join(parts)
        events.append(
            (
                None,
                {"index": len(parts), "token": token, "generated_text": text, "details": details},
            )
        )
    return _sse(events, space=False)


def tgi_read(data: bytes) -> Read:
    out = Read("", None, False)
    for payload in _sse_payloads(data):
        if "error" in payload:
            out.error = True
            continue
        assert not out.ended
        if not payload["token"]["special"]:
            out.text += payload["token"]["text"]
        if payload["generated_text"] is not None:
            out.ended = True
            assert payload["generated_text"] == out.text
            if payload["details"]["finish_reason"] == "stop_sequence":
                out.stop = "<cut>"
    return out


# A reasoning summary holding the stops of the table: it must reach the client untouched.
SUMMARY = "Hm: </s> <> STOP . c x bcd s1"


def responses_events(
    parts: list[str], end: bool = True, error: bool = False
) -> list[tuple[str | None, dict[str, Any]]]:
    """The Responses API's events for a reasoning item, then a message of ``parts``, numbered
    as the API numbers them (fields as in the openai SDK's types/responses)."""
    response: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "in_progress",
        "model": "o4-mini",
        "output": [],
        "usage": None,
    }
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    summary = {"type": "summary_text", "text": SUMMARY}
    where = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    message = {
        "id": "msg_1",
        "type": "message",
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    rs = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {"type": "response.reasoning_summary_part.added", **rs, "part": {**summary, "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **rs, "delta": SUMMARY},
        {"type": "response.reasoning_summary_text.done", **rs, "text": SUMMARY},
        {"type": "response.reasoning_summary_part.done", **rs, "part": summary},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**reasoning, "summary": [summary]},
        },
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
        },
    ]
    for part in parts:
        events.append(
            {
                "type": "response.output_text.delta",
                **where,
                "delta": part,
                "logprobs": [],
                "obfuscation": "x7Q",
            }
        )
    text = "".join(parts)
    if error:
        # As the live API sends it (the SDK's ResponseErrorEvent has the fields at the top).
        events.append(
            {
                "type": "error",
                "error": {
                    "type": "server_error",
                    "code": "server_error",
                    "message": "x",
                    "param": None,
                },
            }
        )
    elif end:
        done_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        done_message = {**message, "status": "completed", "content": [done_part]}
        usage = {
            "input_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": 14,
        }
        events += [
            {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": done_part},
            {"type": "response.output_item.done", "output_index": 1, "item": done_message},
            {
                "type": "response.completed",
                "response": {
                    **response,
                    "status": "completed",
                    "usage": usage,
                    "output": [{**reasoning, "summary": [summary]}, done_message],
                },
            },
        ]
    return [
        (event["type"], {**event, "sequence_number": number}) for number, event in enumerate(events)
    ]


def responses_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    return _sse(responses_events(parts, end, error))


def _sse_events(data: bytes) -> list[tuple[bytes | None, dict[str, Any]]]:
    """Each event's ``event:`` name and its data."""
    decoder = SSEDecoder()
    events = decoder.feed(data)
    last = decoder.flush()
    if last is not None:
        events.append(last)
    out = []
    for event in events:
        fields = dict(event.fields())
        out.append((fields.get(b"event"), json.loads(fields[b"data"])))
    return out


def responses_read(data: bytes) -> Read:
    """A client of the Responses API: the text of the message, checked against every event
    that repeats it, the stop named in ``response.completed``'s ``stop_reason``."""
    read = Read("", None, False)
    for number, (name, payload) in enumerate(_sse_events(data)):
        kind = payload["type"]
        assert name == kind.encode()  # the event name is the type, as the API writes it
        assert payload["sequence_number"] == number  # consecutive, from 0
        assert not read.ended, "nothing after the end"
        assert not read.error, "nothing after an error"
        read.order.append(kind)
        if kind == "response.output_text.delta":
            read.text += payload["delta"]
        elif kind == "response.output_text.done":
            assert payload["text"] == read.text
        elif kind == "response.content_part.done":
            assert payload["part"]["text"] == read.text
        elif kind == "response.reasoning_summary_text.done":
            assert payload["text"] == SUMMARY  # not text of a message: untouched
        elif kind == "response.output_item.done" and payload["item"]["type"] == "message":
            assert payload["item"]["status"] == "completed"
            assert [part["text"] for part in payload["item"]["content"]] == [read.text]
        elif kind == "response.completed":
            read.ended = True
            response = payload["response"]
            assert response["status"] == "completed"
            reasoning, message = response["output"]
            assert reasoning["summary"][0]["text"] == SUMMARY
            assert message["content"][0]["text"] == read.text
            read.stop = response.get("stop_reason")
        elif kind == "error":
            read.error = True
            assert isinstance(payload["error"]["message"], str)
    if read.stop is not None:
        # A cut ends in the API's order: the text, the part, the item, the response.
        assert read.order[-4:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    return read


def _gemini_chunk(parts: list[dict[str, Any]], **candidate: Any) -> dict[str, Any]:
    """A GenerateContentResponse as the API streams it: one candidate, usage on every chunk
    (the count of candidate tokens only on the last), the model's version, the response's id."""
    usage: dict[str, Any] = {"promptTokenCount": 4, "totalTokenCount": 4}
    if candidate.get("finishReason"):
        usage = {"promptTokenCount": 4, "candidatesTokenCount": 5, "totalTokenCount": 9}
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, **candidate}],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }


def _gemini_sse(payloads: Sequence[dict[str, Any]]) -> bytes:
    # The API ends its lines with CRLF.
    return b"".join(b"data: " + json.dumps(p).encode() + b"\r\n\r\n" for p in payloads)


def gemini_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    chunks = [_gemini_chunk([{"text": part}]) for part in parts]
    if error:
        chunks.append({"error": {"code": 500, "message": "x", "status": "INTERNAL"}})
    elif end:
        chunks.append(_gemini_chunk([{"text": ""}], finishReason="STOP"))
    return _gemini_sse(chunks)


def gemini_read(data: bytes) -> Read:
    out = Read("", None, False)
    for payload in _sse_payloads(data):
        if "error" in payload:
            assert set(payload["error"]) >= {"code", "message", "status"}
            out.error = True
            continue
        assert not out.ended, "nothing after the candidate's end"
        (candidate,) = payload["candidates"]
        out.text += "".join(
            part["text"] for part in candidate["content"]["parts"] if not part.get("thought")
        )
        if candidate.get("finishReason"):
            out.ended = True
            assert candidate["finishReason"] == "STOP"
            if "candidatesTokenCount" not in payload["usageMetadata"]:  # written by the filter
                out.stop = "<cut>"
    return out


def openai_bytes(parts: list[str], end: bool = True, error: bool = False) -> bytes:
    # As the OpenAI API streams a chat completion (openai.types.chat.ChatCompletionChunk): a
    # role chunk, one chunk per piece, a last chunk with finish_reason, then data: [DONE].
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": part}) for part in parts]
    if error:
        chunks.append(
            {"error": {"message": "x", "type": "server_error", "param": None, "code": None}}
        )
    elif end:
        chunks.append(chunk({}, "stop"))
    out = _sse([(None, payload) for payload in chunks])
    return out + b"data: [DONE]\n\n" if end and not error else out


def openai_read(data: bytes) -> Read:
    out = Read("", None, False)
    decoder = SSEDecoder()
    events = decoder.feed(data)
    last = decoder.flush()
    for event in [*events, *([last] if last is not None else [])]:
        for name, value in event.fields():
            if name != b"data" or value.strip() == b"[DONE]":
                continue
            payload = json.loads(value)
            if "error" in payload:
                out.error = True
                continue
            assert not out.ended, "nothing after the choice's end"
            (choice,) = payload["choices"]
            out.text += choice["delta"].get("content") or ""
            if choice.get("finish_reason") is not None:
                out.ended = True
                assert choice["finish_reason"] == "stop"
                out.stop = choice.get("stop_reason")  # the stop, if the filter cut it
    return out


WRITERS: dict[str, tuple[Callable[..., bytes], Callable[[bytes], Read]]] = {
    "openai": (openai_bytes, openai_read),
    "gemini": (gemini_bytes, gemini_read),
    "anthropic": (anthropic_bytes, anthropic_read),
    "ollama-chat": (_ollama_bytes("message"), _ollama_read("message")),
    "ollama-generate": (_ollama_bytes("response"), _ollama_read("response")),
    "llama.cpp": (llamacpp_bytes, llamacpp_read),
    "tgi": (tgi_bytes, tgi_read),
    "responses": (responses_bytes, responses_read),
}
# Where the end marker names the stop that fired; the others only say a stop ended it.
NAMES_STOP = {"openai", "anthropic", "llama.cpp", "responses"}
# Where a stream must end with an event of its own (Family.unfinished): a body that ends before
# it is an upstream fault, so the text held back is dropped and an error event ends it.
ENDS_ITSELF = {"responses"}


def test_every_family_has_a_writer() -> None:
    assert set(WRITERS) == set(FAMILIES)


@dataclass(frozen=True)
class Case:
    name: str
    stops: tuple[str, ...]
    parts: tuple[str, ...]
    text: str
    stop: str | None
    end: bool = True
    error: bool = False
    include_stop: bool = False
    held: str = ""  # the end of text held back when the body ends (end=False)


CASES = [
    Case("stop split across events", ("</s>",), ("Hel", "lo<", "/s", ">junk"), "Hello", "</s>"),
    Case("stop inside one event", ("STOP",), ("abSTOPcd", "ef"), "ab", "STOP"),
    Case("stop in the first event", ("x",), ("xyz", "more"), "", "x"),
    Case("no stop: all of it", ("</s>",), ("a<b", "c</", "d"), "a<bc</d", None),
    Case("prefix held, then released", ("</s>",), ("Hi<", "3"), "Hi<3", None),
    Case("held text released at the model's end", ("</s>",), ("ab</",), "ab</", None),
    Case(
        "held text released when the body ends",
        ("</s>",),
        ("ab</",),
        "ab</",
        None,
        end=False,
        held="</",
    ),
    Case(
        "include_stop keeps the stop",
        ("</s>",),
        ("Hi</", "s>x"),
        "Hi</s>",
        "</s>",
        include_stop=True,
    ),
    Case("the stop that ends first wins", ("bcd", "c"), ("abcde",), "ab", "c"),
    Case("many stops", tuple(f"s{i}!" for i in range(200)), ("one s1", "99! two"), "one ", "s199!"),
    Case("an upstream error drops the held text", ("</s>",), ("Hi<", "/"), "Hi", None, error=True),
]


def _run(family: str, case: Case, data: bytes, bytewise: bool) -> tuple[Read, StreamFilter]:
    stream = FAMILIES[family].stream_filter(case.stops, n=1, include_stop=case.include_stop)
    if bytewise:
        out = b"".join(stream.feed(data[i : i + 1]) for i in range(len(data)))
    else:
        out = stream.feed(data)
    out += stream.flush()
    assert stream.flush() == b""
    return WRITERS[family][1](out), stream


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_table_for_every_family(family: str, case: Case, bytewise: bool) -> None:
    write, _ = WRITERS[family]
    data = write(list(case.parts), end=case.end, error=case.error)
    read, stream = _run(family, case, data, bytewise)
    unfinished = not case.end and family in ENDS_ITSELF
    assert read.text == (case.text.removesuffix(case.held) if unfinished else case.text)
    assert read.error == (case.error or unfinished)
    if case.stop is not None:
        assert read.ended
        assert read.stop == (case.stop if family in NAMES_STOP else "<cut>")
        assert stream.stop_strings == {0: case.stop}
        assert stream.done
        assert stream.cut
    else:
        assert read.stop is None
        assert stream.stop_strings == {}
        assert not stream.cut
        assert read.ended == (case.end and not case.error)
    if case.error:
        assert stream.error == "upstream"
    if unfinished:
        assert stream.error == "truncated"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_after_a_cut_later_bytes_are_dropped(family: str) -> None:
    write, read = WRITERS[family]
    data = write(["a.b", "c"])
    stream = FAMILIES[family].stream_filter(".")
    first = stream.feed(data)
    assert stream.done
    assert stream.feed(write(["more"])) == b""
    assert stream.flush() == b""
    result = read(first)
    assert (result.text, result.ended) == ("a", True)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_unchanged_stream_passes_byte_for_byte(family: str) -> None:
    write, _ = WRITERS[family]
    data = write(["Hello", " world"])
    stream = FAMILIES[family].stream_filter("</s>")
    assert stream.feed(data) + stream.flush() == data


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_frame_over_its_limit_ends_the_stream_in_error(family: str) -> None:
    write, read = WRITERS[family]
    data = write(["ab<", "x" * 500])
    stream = FAMILIES[family].stream_filter("<!", max_line_bytes=300, max_event_bytes=300)
    out = stream.feed(data) + stream.flush()
    assert stream.error == "too_large"
    result = read(out)
    assert result.error
    assert result.text == "ab"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_body_cut_off_mid_frame_is_an_error(family: str) -> None:
    write, read = WRITERS[family]
    data = write(["ab<", "cd"], end=False)
    stream = FAMILIES[family].stream_filter("<!")
    out = stream.feed(data[:-5]) + stream.flush()
    assert stream.error == "truncated"
    assert read(out).error


def test_anthropic_passes_other_blocks_untouched_and_cuts_text_blocks() -> None:
    def block(kind: str, index: int, **rest: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "index": index, **rest}

    def text(index: int, piece: str) -> tuple[str, dict[str, Any]]:
        return block("content_block_delta", index, delta={"type": "text_delta", "text": piece})

    thought = {"type": "thinking_delta", "thinking": "STOP here is no stop"}
    tool = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    thinking = [
        block("content_block_start", 0, content_block={"type": "thinking", "thinking": ""}),
        block("content_block_delta", 0, delta=thought),
        block("content_block_stop", 0),
        block("content_block_start", 1, content_block={"type": "text", "text": ""}),
        text(1, "ok ST"),
        text(1, "OP then"),
        block("content_block_stop", 1),
        block("content_block_start", 2, content_block=tool),
    ]
    data = _sse(thinking)
    stream = FamilyStream(FAMILIES["anthropic"], "STOP")
    out = stream.feed(data)
    payloads = _sse_payloads(out)
    assert payloads[1]["delta"]["thinking"] == "STOP here is no stop"
    texts = [p["delta"]["text"] for p in payloads if p.get("delta", {}).get("type") == "text_delta"]
    assert "".join(texts) == "ok "
    assert [p["type"] for p in payloads[-3:]] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert payloads[-3]["index"] == 1
    assert payloads[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    assert payloads[-2]["usage"]["output_tokens"] == 3
    assert b"tool_use" not in out
    assert b"event: message_delta\n" in out


def test_anthropic_held_text_goes_out_before_its_block_stop() -> None:
    stream = FamilyStream(FAMILIES["anthropic"], "STOP")
    out = stream.feed(anthropic_bytes(["ab ST"]))
    payloads = _sse_payloads(out)
    kinds = [p["type"] for p in payloads]
    stop_at = kinds.index("content_block_stop")
    assert payloads[stop_at - 1]["delta"]["text"] == "ST"
    assert anthropic_read(out).text == "ab ST"


def test_llamacpp_several_prompts_end_one_by_one() -> None:
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"index": 0, "content": "a.b", "stop": False}),
        (None, {"index": 1, "content": "cd", "stop": False}),
        (None, {"index": 0, "content": "zzz", "stop": False}),
        (None, {"index": 1, "content": "e.f", "stop": False}),
        (None, {"index": 1, "content": "more", "stop": False}),
    ]
    stream = FamilyStream(FAMILIES["llama.cpp"], ".", n=2)
    out = stream.feed(_sse(events[:3]))
    assert not stream.done
    payloads = _sse_payloads(out)
    assert payloads[0] == {
        "index": 0,
        "content": "a",
        "stop": True,
        "stop_type": "word",
        "stopping_word": ".",
    }
    assert payloads[1]["content"] == "cd"
    assert len(payloads) == 2  # index 0 is over: its later events are dropped
    out = stream.feed(_sse(events[3:]))
    assert stream.done
    assert stream.stop_strings == {0: ".", 1: "."}
    assert [p["content"] for p in _sse_payloads(out)] == ["e"]


def test_llamacpp_a_cut_ends_with_what_the_servers_last_event_has_where_known() -> None:
    # Two prompts, timings_per_token: prompt 0 ends by itself (its last event has the model),
    # prompt 1 is cut. Its end carries the model (the server's, of any prompt), its own last
    # timings, the stop; not prompt 0's truncated or tokens_cached, which are per prompt.
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, llamacpp_partial(1, "ab", index=0, timings={"predicted_n": 1})),
        (None, llamacpp_partial(1, "Hi", index=1, timings={"predicted_n": 1})),
        (None, llamacpp_final(1, index=0)),
        (None, llamacpp_partial(2, " th", index=1, timings={"predicted_n": 2})),
        (None, llamacpp_partial(3, "ere.", index=1, timings={"predicted_n": 3})),
    ]
    stream = FamilyStream(FAMILIES["llama.cpp"], ".", n=2)
    payloads = _sse_payloads(stream.feed(_sse(events)))
    assert stream.done
    assert payloads[-1] == {
        **llamacpp_partial(3, "ere", index=1),
        "stop": True,
        "model": "qwen2-0.5b.gguf",
        "timings": {"predicted_n": 3},
        "stop_type": "word",
        "stopping_word": ".",
    }
    # A prompt alone, without timings_per_token: nothing of the server's came, none is made up.
    alone = FamilyStream(FAMILIES["llama.cpp"], ".", n=1)
    (end,) = _sse_payloads(alone.feed(_sse([(None, llamacpp_partial(1, "a.b"))])))
    assert end == {
        **llamacpp_partial(1, "a"),
        "stop": True,
        "stop_type": "word",
        "stopping_word": ".",
    }
    assert not {"model", "truncated", "tokens_cached", "timings"} & set(end)


def test_llamacpp_a_cut_takes_the_fields_an_older_server_sent_with_its_text() -> None:
    # Before server_task_result_cmpl_final, a partial event could carry truncated and timings.
    old = llamacpp_partial(1, "a.b", truncated=False, timings={"predicted_n": 1})
    (end,) = _sse_payloads(FamilyStream(FAMILIES["llama.cpp"], ".").feed(_sse([(None, old)])))
    assert (end["truncated"], end["timings"], end["content"]) == (False, {"predicted_n": 1}, "a")


def test_llamacpp_the_last_prompt_ending_with_held_text_ends_the_stream() -> None:
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"index": 0, "content": "a.b", "stop": False}),
        (None, {"index": 1, "content": "c<", "stop": False}),
        (None, {"index": 1, "content": "", "stop": True, "stop_type": "eos"}),
    ]
    stream = FamilyStream(FAMILIES["llama.cpp"], [".", "<!"], n=2)
    out = stream.feed(_sse(events))
    assert stream.done
    assert [p["content"] for p in _sse_payloads(out)] == ["a", "c", "<"]


def test_llamacpp_a_prompt_that_ends_itself_counts_as_over() -> None:
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"index": 0, "content": "a.b", "stop": False}),
        (None, {"index": 1, "content": "cd", "stop": True, "stop_type": "eos"}),
        (None, {"index": 1, "content": "late", "stop": False}),
    ]
    stream = FamilyStream(FAMILIES["llama.cpp"], ".", n=2)
    stream.feed(_sse(events))
    assert stream.done


def test_ndjson_lines_are_bounded_and_split_anywhere() -> None:
    decoder = NDJSONDecoder(max_line_bytes=10)
    assert decoder.feed(b'{"a"') == []
    assert decoder.feed(b":1}\n\n{") == [b'{"a":1}']
    assert decoder.flush() == b"{"
    with pytest.raises(SSEFrameTooLarge):
        decoder.feed(b"x" * 11)


def test_tgi_generated_text_is_the_text_sent() -> None:
    stream = FamilyStream(FAMILIES["tgi"], "</s>")
    out = stream.feed(tgi_bytes(["Hel", "lo</", "s>x"]))
    (*_, last) = _sse_payloads(out)
    assert last["generated_text"] == "Hello"
    assert last["details"]["finish_reason"] == "stop_sequence"
    assert last["details"]["generated_tokens"] == 3


# -- whole responses ---------------------------------------------------------------------------


def _whole(
    family: str, response: Any, stops: str = "STOP", include: bool = False
) -> tuple[Any, list[str]]:
    return FAMILIES[family].cut_whole(response, StopAutomaton.from_stops([stops]), include)


def test_whole_anthropic_message() -> None:
    message: dict[str, Any] = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "STOP no"},
            {"type": "text", "text": "hi STOP there"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
    }
    cut, fired = _whole("anthropic", message)
    assert fired == ["STOP"]
    assert cut["content"] == [message["content"][0], {"type": "text", "text": "hi "}]
    assert (cut["stop_reason"], cut["stop_sequence"]) == ("stop_sequence", "STOP")
    assert _whole("anthropic", message, include=True)[0]["content"][1]["text"] == "hi STOP"
    assert _whole("anthropic", {**message, "content": [message["content"][0]]})[1] == []


def test_whole_ollama_llamacpp_tgi() -> None:
    chat = {
        "message": {"role": "assistant", "content": "a STOP b"},
        "done": True,
        "done_reason": "length",
    }
    assert _whole("ollama-chat", chat)[0] == {
        **chat,
        "message": {"role": "assistant", "content": "a "},
        "done_reason": "stop",
    }
    generate = {"response": "a STOP b", "done": True, "done_reason": "length"}
    assert _whole("ollama-generate", generate)[0]["response"] == "a "
    many = [
        {"content": "xSTOPy", "stop": True, "stop_type": "limit"},
        {"content": "none", "stop": True},
    ]
    cut, fired = _whole("llama.cpp", many)
    assert fired == ["STOP"]
    assert cut[0] == {"content": "x", "stop": True, "stop_type": "word", "stopping_word": "STOP"}
    assert cut[1] == many[1]
    tgi = {"generated_text": "xSTOPy", "details": {"finish_reason": "length"}}
    assert _whole("tgi", tgi)[0] == {
        "generated_text": "x",
        "details": {"finish_reason": "stop_sequence"},
    }


# -- against a reference ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet="ab<>/s", max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
    family=st.sampled_from(sorted(FAMILIES)),
)
def test_any_split_gives_the_reference_cut(text: str, cuts: list[int], family: str) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    parts = [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    stream = FAMILIES[family].stream_filter(["</s>", "<>"])
    out = stream.feed(WRITERS[family][0](parts))
    out += stream.flush()
    read = WRITERS[family][1](out)
    positions = [i for i in (text.find("</s>"), text.find("<>")) if i >= 0]
    expected = text[: min(positions)] if positions else text
    assert read.text == expected


def test_module_all_and_doctests() -> None:
    import doctest

    import streamstop._families as adapters
    import streamstop._family as core
    import streamstop._family_gemini as gemini

    from ..public_api import public_definitions

    assert set(adapters.__all__) == public_definitions(adapters) | {
        "FAMILIES",
        "FAMILY_PATHS",
        "OPENAI_ALIASES",
    }
    assert set(core.__all__) == public_definitions(core)
    assert set(gemini.__all__) == public_definitions(gemini)
    for module in (adapters, core, gemini):
        assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_frame_that_is_not_json_ends_the_stream_in_error(family: str, bytewise: bool) -> None:
    # After the frame that leaves "<" held (a possible start of "<!"), a frame the client could
    # not parse: the stream ends with the family's error, the held "<" dropped.
    write, read = WRITERS[family]
    data = write(["ab<", "cd"])
    sse = FAMILIES[family].framing == "sse"
    blank = b"\r\n\r\n" if b"\r\n\r\n" in data else b"\n\n"  # Gemini ends lines with CRLF
    separator, broken = (blank, b"data: {not json" + blank) if sse else (b"\n", b"{not json\n")
    frames = data.split(separator)
    text_frame = next(i for i, frame in enumerate(frames) if b"ab<" in frame)
    head = separator.join(frames[: text_frame + 1]) + separator
    stream = FAMILIES[family].stream_filter("<!")
    body = head + broken
    pieces = [body[i : i + 1] for i in range(len(body))] if bytewise else [body]
    out = b"".join(stream.feed(piece) for piece in pieces) + stream.flush()
    assert stream.error == "upstream"
    assert stream.done
    result = read(out)
    assert result.error
    assert result.text == "ab"
    assert broken not in out
    assert b"not a JSON object" in out


def test_the_llamacpp_handbook_page_runs() -> None:
    # Its examples of where the proxy's stops and llama.cpp's own differ are streamstop's
    # real behaviour: each is a doctest of the filter on llama.cpp's events.
    import doctest
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "families" / "llamacpp.md"
    result = doctest.testfile(str(page), module_relative=False)
    assert result.failed == 0
    assert result.attempted >= 4  # one example per difference, at the least


# -- OpenAI's chat and completions: an adapter like the others, with a core of its own ----------


def test_every_family_makes_a_filter_of_the_one_protocol() -> None:
    from streamstop.chat import SSEFilter

    # Both cores are StreamFilters to mypy (these annotations) and at run time.
    cores: list[StreamFilter] = [SSEFilter("x"), FamilyStream(FAMILIES["anthropic"], "x")]
    made = {name: family.stream_filter("</s>") for name, family in FAMILIES.items()}
    assert all(isinstance(stream, StreamFilter) for stream in [*cores, *made.values()])
    assert type(made.pop("openai")) is SSEFilter  # its usual-event fast path kept
    assert {type(stream) for stream in made.values()} == {FamilyStream}


def test_the_openai_filter_is_made_with_every_option() -> None:
    sse = FAMILIES["openai"].stream_filter(
        ["</s>"], n=2, include_stop=True, include_usage=True, regex=r"\d\d", arm_after="|"
    )
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "12|a 34</s>"}}]}
    out = sse.feed(_sse([(None, chunk)]) + _sse([(None, {**chunk, "choices": []})]))
    (cut, *_) = _sse_payloads(out)
    assert cut["choices"][0]["delta"]["content"] == "12|a 34"  # the regex stop, kept
    assert cut["choices"][0]["stop_reason"] == "\\d\\d"
    assert not sse.done  # n=2: the other choice goes on


@pytest.mark.parametrize(
    ("request_", "slots"),
    [
        pytest.param({}, 1, id="no n"),
        pytest.param({"n": 3}, 3, id="n"),
        pytest.param({"prompt": "x", "n": 2}, 2, id="one prompt"),
        pytest.param({"prompt": [1, 2, 3]}, 1, id="one prompt in tokens"),
        pytest.param({"prompt": ["a", "b"], "n": 2}, 4, id="a batch of prompts: n each"),
        pytest.param({"prompt": [[1], [2]]}, 2, id="a batch of prompts in tokens"),
    ],
)
def test_openai_choices(request_: dict[str, Any], slots: int) -> None:
    assert FAMILIES["openai"].slots(request_) == slots


def test_openai_usage_only_when_asked() -> None:
    family = FAMILIES["openai"]
    assert family.include_usage({"stream_options": {"include_usage": True}})
    assert not family.include_usage({"stream_options": {"include_usage": "yes"}})
    assert not family.include_usage({"stream_options": None})
    assert not FAMILIES["anthropic"].include_usage({"stream_options": {"include_usage": True}})


def test_whole_openai_is_cut_response() -> None:
    from streamstop import StopRules
    from streamstop._chunks import cut_response

    chat = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "a STOP b"}},
            {"index": 1, "text": "x 12 y", "finish_reason": "length"},
        ]
    }
    assert _whole("openai", chat) == cut_response(chat, ["STOP"])
    assert _whole("openai", chat)[1] == ["STOP"]
    # As the middleware passes them: anything whose find is StopAutomaton.find's (cut_text).
    rules: Any = StopRules("STOP", regex=r"\d\d")
    assert FAMILIES["openai"].cut_whole(chat, rules, True) == cut_response(
        chat, "STOP", regex=r"\d\d", include_stop=True
    )
    assert FAMILIES["openai"].cut_whole(chat, rules, True)[1] == ["STOP", "12"]
    assert _whole("openai", [chat]) == ([chat], [])  # not an object: as it is


def test_openai_modules_all_and_doctests() -> None:
    import doctest

    import streamstop._family_openai as openai
    import streamstop._stream_filter as protocol

    from ..public_api import public_definitions

    assert set(openai.__all__) == public_definitions(openai) | {"OPENAI_ALIASES", "OPENAI_PATHS"}
    assert set(protocol.__all__) == public_definitions(protocol)
    for module in (openai, protocol):
        assert doctest.testmod(module).failed == 0
