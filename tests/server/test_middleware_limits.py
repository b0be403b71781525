"""StopMiddleware against hostile requests and faulty apps: limits, malformed bodies, framing,
compression, usage after a cut, and the request record. Expected outputs are literal bytes."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from starlette.middleware.gzip import GZipMiddleware

import streamstop.server._middleware as middleware_module
from streamstop import StopAutomaton, Stops
from streamstop.server import Scope, StopMiddleware
from streamstop.server._limits import RequestLimits
from streamstop.server._record import RECORD_KEY, RequestRecord

from .conftest import Client, http_scope
from .test_middleware import App, request, run, sse, text_of

pytestmark = pytest.mark.anyio

LIMITS = RequestLimits(max_stops=3, max_stop_length=5, max_stop_chars=8, max_json_depth=4)


def error_of(client: Client) -> dict[str, Any]:
    payload = json.loads(client.body)
    assert set(payload) == {"error"}
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = payload["error"]
    return error


# -- limits on the stops (issue 9, item 3) ------------------------------------------------------

STOP_LIMIT_CASES = {
    "too many stops": (
        ["a", "b", "c", "d"],
        "Too many stops: 4 stop strings, over the limit max_stops=3, set by the server's "
        "--max-stops or STREAMSTOP_MAX_STOPS.",
        "max_stops_exceeded",
    ),
    "one stop too long": (
        ["abcdef"],
        "Too many stops: a stop string of 6 characters ('abcdef'), over the limit "
        "max_stop_length=5, set by the server's --max-stop-length or STREAMSTOP_MAX_STOP_LENGTH.",
        "max_stop_length_exceeded",
    ),
    "too many characters": (
        ["abcde", "fghi"],
        "Too many stops: 9 characters of stops, over the limit max_stop_chars=8, set by the "
        "server's --max-stop-chars or STREAMSTOP_MAX_STOP_CHARS.",
        "max_stop_chars_exceeded",
    ),
}


@pytest.mark.parametrize("case", STOP_LIMIT_CASES)
async def test_a_stop_set_over_a_limit_is_a_400_naming_it(case: str) -> None:
    stops, message, code = STOP_LIMIT_CASES[case]
    app = App([sse("never")])
    client = Client(request(stops))
    await run(app, client, limits=LIMITS)
    assert client.status == 400
    assert error_of(client) == {
        "message": message,
        "type": "invalid_request_error",
        "param": "stop",
        "code": code,
    }
    assert app.request_body == b""  # the app never ran


async def test_hundreds_of_stops_pass_by_default() -> None:
    stops = [f"<stop{i}>" for i in range(500)]
    app = App([sse("a <stop4", "99> b")])
    client = Client(request(stops))
    await run(app, client)
    assert client.status == 200
    assert text_of(client.body) == "a "


# -- malformed bodies (issue 9, item 5) ---------------------------------------------------------

BAD_BODIES: dict[str, tuple[bytes, str | None, str]] = {
    "not json": (b"{", None, "could not parse"),
    "invalid utf-8": (b'{"model": "\xff"}', None, "could not parse"),
    "an array": (b"[1, 2]", None, "must be an object, got [1, 2]"),
    "a string": (b'"hi"', None, "must be an object, got 'hi'"),
    "nested past the parser": (b"[" * 3000 + b"]" * 3000, None, "max_json_depth=4"),
    "nested past the limit": (
        b'{"messages": [{"content": [{"a": [1]}]}]}',
        None,
        "max_json_depth=4, set by the server's --max-json-depth or STREAMSTOP_MAX_JSON_DEPTH.",
    ),
    "stop of numbers": (b'{"stop": [1, 2]}', "stop", "got [1, 2]"),
    "stop an object": (b'{"stop": {"a": 1}}', "stop", "got {'a': 1}"),
    "stop a lone surrogate": (b'{"stop": ["\\ud800"]}', "stop", "lone surrogate"),
    "n a string": (b'{"n": "2"}', "n", "got '2'"),
    "n zero": (b'{"n": 0}', "n", "got 0"),
    "n true": (b'{"n": true}', "n", "got True"),
    "stream a string": (b'{"stream": "yes"}', "stream", "got 'yes'"),
    "stream_options a list": (b'{"stream_options": []}', "stream_options", "got []"),
    "include_usage a number": (
        b'{"stream_options": {"include_usage": 1}}',
        "stream_options.include_usage",
        "got 1",
    ),
    "prompt a number": (b'{"prompt": 3}', "prompt", "got 3"),
    "prompt mixed": (b'{"prompt": ["a", {"b": 1}]}', "prompt", "got ['a', {'b': 1}]"),
    "messages an object": (b'{"messages": {"role": "user"}}', "messages", "got {'role'"),
}


@pytest.mark.parametrize("case", BAD_BODIES)
async def test_malformed_bodies_are_a_400_naming_the_field(case: str) -> None:
    body, param, fragment = BAD_BODIES[case]
    app = App([])
    client = Client(body)
    await run(app, client, limits=LIMITS)
    assert client.status == 400
    error = error_of(client)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert app.request_body == b""


async def test_a_body_of_empty_containers_is_refused_before_it_is_parsed() -> None:
    # json.loads would turn these 600 KB into about 12 MB of dicts.
    body = b'{"messages": [' + b"{}," * 200_000 + b"{}]}"
    client = Client(body)
    await run(App([]), client)
    assert client.status == 400
    assert error_of(client)["code"] == "json_too_complex"


async def test_a_body_over_the_limit_is_a_413() -> None:
    client = Client([b'{"stop": "', b"x" * 100, b'"}'])
    await run(App([]), client, limits=RequestLimits(max_body_bytes=64))
    assert client.status == 413
    assert error_of(client) == {
        "message": "Request body too large: the limit is max_body_bytes=64 bytes, set by the "
        "server's --max-body-bytes or STREAMSTOP_MAX_BODY_BYTES.",
        "type": "invalid_request_error",
        "param": None,
        "code": "max_body_bytes_exceeded",
    }


async def test_a_lone_surrogate_elsewhere_reaches_the_app_escaped() -> None:
    app = App([sse("ok")])
    client = Client(b'{"stop": "x", "stream": true, "messages": [{"content": "\\udc00"}]}')
    await run(app, client)
    assert client.status == 200
    # Re-encoded by the one codec (streamstop._json): compact, the surrogate escaped.
    assert app.request_body == b'{"stream":true,"messages":[{"content":"\\udc00"}]}'


# -- no stalls: large stop sets are built off the loop (issue 9, item 4) ------------------------


class _ThreadRecordingAutomaton(StopAutomaton):
    threads: ClassVar[list[int]] = []

    @classmethod
    def from_stops(cls, stops: Stops | StopAutomaton) -> StopAutomaton:
        cls.threads.append(threading.get_ident())
        return StopAutomaton.from_stops(stops)


@pytest.mark.parametrize(("count", "in_thread"), [(3, False), (200, True)])
async def test_large_stop_sets_are_built_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch, count: int, in_thread: bool
) -> None:
    monkeypatch.setattr(_ThreadRecordingAutomaton, "threads", [])
    monkeypatch.setattr(middleware_module, "StopAutomaton", _ThreadRecordingAutomaton)
    stops = [f"{i:08d}" for i in range(count)]  # 3 or 200 stops of 8 characters
    client = Client(request(stops))
    await run(App([sse("a 00000001 b")]), client)
    assert text_of(client.body) == "a "
    (thread,) = _ThreadRecordingAutomaton.threads
    assert (thread != threading.get_ident()) is in_thread


# -- SSE by framing, caps, surrogates ----------------------------------------------------------


@pytest.mark.parametrize("content_type", [b"text/plain", b"", b"application/octet-stream"])
async def test_a_requested_stream_is_filtered_whatever_its_content_type(
    content_type: bytes,
) -> None:
    client = Client(request())
    await run(App([sse("Hi </", "s> junk")], content_type=content_type), client)
    assert client.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi "},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n"
    )


async def test_a_requested_stream_answered_in_json_is_cut_as_json() -> None:
    whole = {"choices": [{"index": 0, "message": {"content": "Hi</s>x"}, "finish_reason": None}]}
    client = Client(request())
    await run(App([json.dumps(whole).encode()], content_type=b"application/json"), client)
    assert client.body == (
        b'{"choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}'
    )


async def test_a_line_over_its_cap_ends_the_stream_with_an_error_and_no_held_text() -> None:
    limits = RequestLimits(max_sse_line_bytes=100)
    pieces = [sse("ok </", done=False), b"data: " + b"x" * 60, b"y" * 60]
    client = Client(request())
    await run(App(pieces, hang=True), client, limits=limits)
    assert client.complete
    assert client.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"ok "},"finish_reason":null}]}\n\n'
        b'data: {"error":{"message":"The upstream sent an SSE line longer than 100 bytes '
        b'(the limit).","type":"server_error","param":null,"code":"upstream_event_too_large"}}'
        b"\n\n"
    )


async def test_an_event_over_its_cap_ends_the_stream() -> None:
    limits = RequestLimits(max_sse_event_bytes=50)
    client = Client(request())
    await run(App([b"id: 1\n" * 20], hang=True), client, limits=limits)
    assert client.complete
    assert b'"code":"upstream_event_too_large"' in client.body
    assert b"SSE event longer than 50 bytes" in client.body


async def test_a_surrogate_pair_split_across_events_and_reads_comes_out_whole() -> None:
    # An upstream that sends each half of U+1F600 as its own JSON escape, split mid-event.
    first = b'data: {"choices":[{"index":0,"delta":{"content":"a\\ud83d"}}]}\n\n'
    second = b'data: {"choices":[{"index":0,"delta":{"content":"\\ude00<"}}]}\n\n'
    body = first + second + b"data: [DONE]\n\n"
    client = Client(request("<x"))
    await run(App([body[:20], body[20:70], body[70:]]), client)
    assert client.body == (
        first
        + b'data: {"choices":[{"index":0,"delta":{"content":"\\ude00"}}]}\n\n'
        + b'data: {"choices":[{"index":0,"delta":{"content":"<"},"finish_reason":null,'
        b'"logprobs":null}]}\n\n' + b"data: [DONE]\n\n"
    )
    assert text_of(client.body).encode("utf-16", "surrogatepass").decode("utf-16") == "a\U0001f600<"


async def test_utf8_split_across_reads_comes_out_whole() -> None:
    body = sse("héllo 😀 </s>")
    client = Client(request())
    await run(App([body[i : i + 1] for i in range(len(body))]), client)
    assert text_of(client.body) == "héllo 😀 "


# -- usage after a cut (issue 10, item 8) -------------------------------------------------------


def _chunk(content: str, *, usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


async def test_a_cut_stream_that_asked_for_usage_still_gets_a_usage_chunk() -> None:
    client = Client(request(stream_options={"include_usage": True}))
    await run(App([_chunk("one "), _chunk("two </"), _chunk("s> three")], hang=True), client)
    assert client.body == (
        _chunk("one ")
        + _chunk("two ")
        + b'data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b'data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m",'
        b'"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":3,"total_tokens":null}}'
        b"\n\n"
        b"data: [DONE]\n\n"
    )


async def test_usage_after_a_cut_takes_the_upstreams_prompt_tokens() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12}
    client = Client(request(stream_options={"include_usage": True}))
    await run(App([_chunk("one", usage=usage), _chunk("</s>")], hang=True), client)
    assert client.body.endswith(
        b'"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}'
        b"\n\n"
        b"data: [DONE]\n\n"
    )


async def test_no_usage_chunk_unless_asked() -> None:
    client = Client(request())
    await run(App([_chunk("one </s>")], hang=True), client)
    assert b"usage" not in client.body


# -- compression (issue 10, item 7) -------------------------------------------------------------

WHOLE = {"choices": [{"index": 0, "message": {"content": "Hi</s>" + "x" * 2000}}]}
WHOLE_CUT = (
    b'{"choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop",'
    b'"stop_reason":"</s>"}]}'
)


def _gzip_scope() -> Scope:
    scope = http_scope()
    scope["headers"] = [*scope["headers"], (b"accept-encoding", b"gzip")]
    return scope


class _JSONApp(App):
    def __init__(self) -> None:
        super().__init__([json.dumps(WHOLE).encode()], content_type=b"application/json")


async def test_gzip_inside_the_middleware_is_asked_for_identity() -> None:
    inner = _JSONApp()
    app = StopMiddleware(GZipMiddleware(inner, minimum_size=10))
    client = Client(request(stream=False))
    await app(_gzip_scope(), client.receive, client.send)
    assert dict(inner.scope["headers"])[b"accept-encoding"] == b"identity"
    assert b"content-encoding" not in client.headers
    assert client.body == WHOLE_CUT


async def test_gzip_outside_the_middleware_compresses_the_cut_response() -> None:
    app = GZipMiddleware(StopMiddleware(_JSONApp()), minimum_size=10)
    client = Client(request(stream=False))
    await app(_gzip_scope(), client.receive, client.send)
    assert client.headers[b"content-encoding"] == b"gzip"
    assert gzip.decompress(client.body) == WHOLE_CUT


# -- the request record -------------------------------------------------------------------------


async def test_the_record_gets_the_model_stops_and_the_stop_that_fired() -> None:
    record = RequestRecord(request_id="r1")
    client = Client(request(["</s>", "##"], n=2))
    body = (
        b'data: {"choices":[{"index":1,"delta":{"content":"a##"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"b</s>"}}]}\n\n'
    )
    await run(App([body], hang=True), client, _scope_with(record))
    observed = (record.model, record.stops, record.stop_fired, record.choices_cut)
    assert observed == ("m", 2, "</s>", 2)
    assert record.upstream_error is None


async def test_the_record_of_a_cut_json_response_and_of_an_oversized_event() -> None:
    record = RequestRecord(request_id="r2")
    client = Client(request(stream=False))
    await run(_JSONApp(), client, _scope_with(record))
    assert (record.stop_fired, record.choices_cut) == ("</s>", 1)
    record = RequestRecord(request_id="r3")
    client = Client(request())
    scope = _scope_with(record)
    await run(App([b"data: " + b"x" * 200], hang=True), client, scope, limits=LIMITS_SSE)
    assert record.upstream_error == "too_large"


LIMITS_SSE = RequestLimits(max_sse_line_bytes=100)


def _scope_with(record: RequestRecord) -> Scope:
    scope = http_scope()
    scope[RECORD_KEY] = record
    return scope


async def test_an_app_that_fails_mid_stream_never_lets_the_held_text_out() -> None:
    client = Client(request())
    with pytest.raises(RuntimeError, match="the model crashed"):
        await run(App([sse("ok </", done=False)], fail=True), client)
    assert client.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"ok "},"finish_reason":null}]}\n\n'
    )


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [(b"gzip", gzip.compress), (b"deflate", zlib.compress)],
)
async def test_an_app_that_compresses_anyway_is_inflated_and_cut(
    encoding: bytes, compress: Callable[[bytes], bytes]
) -> None:
    compressed = compress(sse("a</s>b"))
    client = Client(request())
    headers = [(b"content-encoding", encoding), (b"content-length", b"999")]
    await run(App([compressed[:10], compressed[10:]], headers=headers), client)
    assert b"content-encoding" not in client.headers
    assert b"content-length" not in client.headers
    assert client.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    page = compress(b"<p>a</s>b</p>")
    client = Client(request(stream=False))
    await run(App([page], content_type=b"text/html", headers=headers), client)
    assert client.body == b"<p>a</s>b</p>"  # not ours to cut, but sent as it now is labeled


async def test_an_app_that_ends_mid_event_gets_a_truncation_error_not_half_an_event() -> None:
    record = RequestRecord(request_id="r4")
    client = Client(request())
    body = sse("ok </", done=False) + b'data: {"choices":[{"ind'
    await run(App([body]), client, _scope_with(record))
    assert client.body == (
        b'data: {"choices":[{"index":0,"delta":{"content":"ok "},"finish_reason":null}]}\n\n'
        b'data: {"error":{"message":"The upstream stream ended in the middle of an event.",'
        b'"type":"server_error","param":null,"code":"upstream_truncated"}}\n\n'
    )
    assert record.upstream_error == "truncated"


async def test_a_large_body_reaches_the_app_with_stop_cut_out_of_its_bytes() -> None:
    # Above 64 KiB the body is not re-encoded: its bytes, layout and escapes stay as sent.
    prompt = b'"' + b"\\u00e9 " * 20_000 + b'"'
    body = b'{"model": "m",  "stream": true, "stop": ["</s>"],\n "prompt": ' + prompt + b"}"
    app = App([sse("a</s>")])
    client = Client(body)
    await run(app, client)
    assert app.request_body == b'{"model": "m",  "stream": true, "prompt": ' + prompt + b"}"
    assert dict(app.scope["headers"])[b"content-length"] == str(len(app.request_body)).encode()
    assert text_of(client.body) == "a"
