"""The proxy against hostile paths and faulty upstreams (raw TCP servers on 127.0.0.1 that break
connections, truncate events and bodies, stall, mislabel content types): what the client gets
is whole, OpenAI-shaped, and never holds the start of a stop. Expected bytes are literals."""

from __future__ import annotations

import json
import tracemalloc
import zlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from streamstop.server import Message, ProxyApp
from streamstop.server._limits import RequestLimits

from .conftest import LiveServer, RawUpstream, http_response, proxied, raw_upstream

# Integration tests, asyncio only (uvicorn and the clients): pytest-asyncio runs each
# ``async def test`` (marked one by one: the module has sync tests too).

# Every case with each upstream client (aiohttp and httpx).
pytestmark = pytest.mark.usefixtures("each_upstream_client")


class HoldingUpstream(RawUpstream):
    """Sends its answer, then keeps the connection open without a word (a stalled model)."""

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            await stream.receive()
            self.requests.append(b"")
            answer = self.answer(b"")
            assert answer is not None
            await stream.send(answer)
            await anyio.sleep_forever()


def holding_upstream(answer: bytes) -> AbstractAsyncContextManager[RawUpstream]:
    return raw_upstream(lambda _: answer, HoldingUpstream)


def event(content: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def chunked(*parts: bytes, content_type: bytes = b"text/event-stream") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
    if content_type:
        head += b"content-type: " + content_type + b"\r\n"
    return head + b"\r\n" + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)


STREAM = {"model": "m", "stream": True, "stop": "</s>"}
WHOLE = {"model": "m", "stop": "</s>"}
PARTIAL = b'data: {"choices":[{"index":0,"delta":{"content":"partial "},"finish_reason":null}]}\n\n'


# -- paths (issue 10, item 1) -------------------------------------------------------------------

BAD_PATHS: dict[str, tuple[str, bytes, bytes]] = {
    "encoded dot-dot": ("/v1/../admin", b"/v1/%2e%2e/admin", b""),
    "mixed-case encoded dot-dot": ("/v1/../admin", b"/v1/%2E%2e/admin", b""),
    "half-encoded dot-dot": ("/v1/../admin", b"/v1/.%2e/admin", b""),
    "plain dot-dot": ("/v1/../admin", b"/v1/../admin", b""),
    "dot segment": ("/v1/./models", b"/v1/./models", b""),
    "trailing dot-dot": ("/v1/models/..", b"/v1/models/..", b""),
    "encoded slash": ("/v1/models/a/b", b"/v1/models/a%2fb", b""),
    "encoded backslash": ("/v1/models\\x", b"/v1/models%5cx", b""),
    "backslash": ("/v1/models\\x", b"/v1/models\\x", b""),
    "encoded NUL": ("/v1/models\x00", b"/v1/models%00", b""),
    "encoded CR LF": ("/v1/models\r\nHost: evil", b"/v1/models%0d%0aHost:%20evil", b""),
    "raw CR LF": ("/v1/models\r\nx", b"/v1/models\r\nx", b""),
    "control in the query": ("/v1/models", b"/v1/models", b"a=\r\nb"),
    "space in the query": ("/v1/models", b"/v1/models", b"a= b"),
}


class _Client:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def receive(self) -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: Message) -> None:
        self.messages.append(message)


@pytest.mark.parametrize("case", BAD_PATHS)
@pytest.mark.asyncio
async def test_paths_that_could_leave_the_base_are_a_400(case: str) -> None:
    path, raw_path, query = BAD_PATHS[case]
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": raw_path,
        "query_string": query,
        "headers": [],
    }
    async with raw_upstream(lambda _: http_response("200 OK", "application/json", b"{}")) as up:
        proxy = ProxyApp(up.url, api_key="sk-operator")
        client = _Client()
        await proxy(scope, client.receive, client.send)
        await proxy.aclose()
    assert up.requests == []  # nothing, and no key, left the proxy
    start, body = client.messages
    assert start["status"] == 400
    error = json.loads(body["body"])["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_path"
    assert error["message"].startswith("Invalid request path ")


@pytest.mark.asyncio
async def test_an_allow_list_of_routes() -> None:
    answer = http_response("200 OK", "application/json", b'{"data":[]}')
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url, routes=["/v1/models"]) as (client, _),
    ):
        allowed = await client.get("/models")
        refused = await client.get("/files")
    assert allowed.status_code == 200
    assert allowed.content == b'{"data":[]}'
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "unknown_url"
    (request,) = upstream.requests
    assert request.startswith(b"GET /v1/models HTTP/1.1\r\n")


@pytest.mark.asyncio
async def test_an_encoded_character_in_a_name_is_forwarded_as_received() -> None:
    answer = http_response("200 OK", "application/json", b"{}")
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, _):
        response = await client.get("/models/org%40model")
    assert response.status_code == 200
    assert upstream.requests[0].startswith(b"GET /v1/models/org%40model HTTP/1.1\r\n")


# -- faults of streamed responses (issue 10, items 3 and 4) -------------------------------------

BROKEN_ERROR = (
    b'data: {"error":{"message":"The upstream stream broke off: RemoteProtocolError.",'
    b'"type":"server_error","param":null,"code":"upstream_broken"}}\n\n'
)


@pytest.mark.asyncio
async def test_a_stream_broken_mid_event_sends_neither_held_text_nor_half_an_event() -> None:
    # "partial <" holds "<" (maybe "</s>"); the next event is cut off, then the connection.
    answer = chunked(event("partial <"), b'data: {"choices":[{"ind')
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.status_code == 200
    assert response.content == PARTIAL + BROKEN_ERROR
    assert app.record.upstream_error == "broken"


@pytest.mark.asyncio
async def test_a_stream_that_ends_mid_event_ends_with_a_truncation_error() -> None:
    body = event("partial <") + b'data: {"choices":[{"ind'
    answer = http_response("200 OK", "text/event-stream", body)
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.content == PARTIAL + (
        b'data: {"error":{"message":"The upstream stream ended in the middle of an event.",'
        b'"type":"server_error","param":null,"code":"upstream_truncated"}}\n\n'
    )
    assert app.record.upstream_error == "truncated"


@pytest.mark.asyncio
async def test_a_last_event_missing_only_its_blank_line_is_whole() -> None:
    body = event("fine")[:-2]
    answer = http_response("200 OK", "text/event-stream", body)
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/chat/completions", json={**STREAM, "stop": None})
    assert response.content == event("fine")
    assert app.record.upstream_error is None


@pytest.mark.asyncio
async def test_a_stalled_stream_ends_with_a_timeout_event_and_no_held_text() -> None:
    async with (
        holding_upstream(chunked(event("partial <"))) as upstream,
        proxied(upstream.url, timeout=0.3) as (client, app),
    ):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.content == PARTIAL + (
        b'data: {"error":{"message":"The upstream stream stalled: ReadTimeout.",'
        b'"type":"server_error","param":null,"code":"upstream_timeout"}}\n\n'
    )
    assert app.record.upstream_error == "timeout"


@pytest.mark.asyncio
async def test_an_event_over_its_cap_ends_the_stream() -> None:
    answer = chunked(event("ok"), b"data: " + b"x" * 300)
    limits = RequestLimits(max_sse_line_bytes=100)
    async with (
        holding_upstream(answer) as upstream,
        proxied(upstream.url, limits=limits) as (client, app),
    ):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.content == event("ok") + (
        b'data: {"error":{"message":"The upstream sent an SSE line longer than 100 bytes '
        b'(the limit).","type":"server_error","param":null,"code":"upstream_event_too_large"}}'
        b"\n\n"
    )
    assert app.record.upstream_error == "too_large"


@pytest.mark.asyncio
async def test_the_whole_events_in_the_read_over_the_cap_are_sent_first() -> None:
    # One read holds two whole events and the start of one over the cap: the two go out, then
    # the error (they were dropped with the read).
    answer = chunked(event("one") + event("two") + b"data: " + b"x" * 300)
    limits = RequestLimits(max_sse_line_bytes=100)
    async with (
        holding_upstream(answer) as upstream,
        proxied(upstream.url, limits=limits) as (client, app),
    ):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.content.startswith(event("one") + event("two") + b'data: {"error":')
    assert b"upstream_event_too_large" in response.content
    assert app.record.upstream_error == "too_large"


@pytest.mark.parametrize("content_type", [b"text/plain", b""])
@pytest.mark.asyncio
async def test_a_mislabeled_stream_is_still_cut(content_type: bytes) -> None:
    answer = chunked(event("Hi </"), event("s> secret"), content_type=content_type)
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/chat/completions", json=STREAM)
    assert response.content == (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi "},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    assert app.record.stop_fired == "</s>"


# -- faults of whole responses ------------------------------------------------------------------

COMPLETION = b'{"choices":[{"index":0,"text":"a</s>b"}]}'


@pytest.mark.asyncio
async def test_a_truncated_body_is_a_502() -> None:
    answer = http_response("200 OK", "application/json", COMPLETION)[:-10]  # then it closes
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/completions", json=WHOLE)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_bad_response"
    assert app.record.upstream_error == "truncated"


@pytest.mark.asyncio
async def test_an_invalid_json_body_is_a_502() -> None:
    answer = http_response("200 OK", "application/json", COMPLETION[:-10])
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/completions", json=WHOLE)
    assert response.status_code == 502
    assert response.json() == {
        "error": {
            "message": f"The upstream {upstream.url} sent an incomplete, invalid or oversized "
            "response.",
            "type": "server_error",
            "param": None,
            "code": "upstream_bad_response",
        }
    }
    assert app.record.upstream_error == "invalid"


@pytest.mark.asyncio
async def test_a_body_that_stalls_is_a_504() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
    async with (
        holding_upstream(head) as upstream,
        proxied(upstream.url, timeout=0.3) as (client, app),
    ):
        response = await client.post("/completions", json=WHOLE)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert app.record.upstream_error == "timeout"


@pytest.mark.asyncio
async def test_a_whole_body_is_cut_and_an_error_passes_as_it_is() -> None:
    answer = http_response("200 OK", "application/json", COMPLETION)
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/completions", json=WHOLE)
    assert (
        response.content
        == b'{"choices":[{"index":0,"text":"a","finish_reason":"stop","stop_reason":"</s>"}]}'
    )
    error = b'{"error":{"message":"bad key","type":"auth","param":null,"code":401}}'
    answer = http_response("401 Unauthorized", "application/json", error)
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, app):
        response = await client.post("/completions", json=WHOLE)
    assert response.status_code == 401
    assert response.content == error
    assert app.record.upstream_error == "status"


@pytest.mark.asyncio
async def test_the_proxy_bounds_request_bodies_by_its_limits() -> None:
    answer = http_response("200 OK", "application/json", b"{}")
    limits = RequestLimits(max_body_bytes=100)
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url, limits=limits) as (client, _),
    ):
        response = await client.post("/completions", json={"model": "m", "prompt": "x" * 200})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == (
        "Request body too large: the limit is max_body_bytes=100 bytes, set by the server's "
        "--max-body-bytes or STREAMSTOP_MAX_BODY_BYTES."
    )
    assert upstream.requests == []


@pytest.mark.asyncio
async def test_a_whole_response_over_the_body_limit_is_a_502() -> None:
    completion = json.dumps({"choices": [{"index": 0, "text": "x" * 500}]}).encode()
    answer = http_response("200 OK", "application/json", completion)
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url, limits=RequestLimits(max_response_bytes=200)) as (client, app),
    ):
        response = await client.post("/completions", json={"model": "m"})
    assert response.status_code == 502
    assert app.record.upstream_error == "too_large"


LIVE_BAD_TARGETS = [
    b"/v1/%2e%2e/admin",
    b"/v1/models/%2e%2e/%2e%2e/admin",
    b"/v1/models%0d%0aX-Injected:%201",
    b"/v1/models%00",
    b"/v1/models/a%2fb",
    b"/v1/models%5c..%5cadmin",
]


@pytest.mark.parametrize("target", LIVE_BAD_TARGETS)
@pytest.mark.asyncio
async def test_hostile_targets_through_uvicorn_get_an_openai_shaped_400(
    proxy_server: LiveServer, target: bytes
) -> None:
    port = int(proxy_server.base_url.rsplit(":", 1)[1])
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        response = b""
        with anyio.fail_after(10):
            try:
                while True:
                    response += await stream.receive()
            except anyio.EndOfStream:
                pass
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["error"]["code"] == "invalid_path"


# -- compressed bodies: bounded after inflating (issue 10, "memory stays bounded") -------------

BOMB_LIMIT = 1024 * 1024
BOMB_ERROR = (
    b'"message":"The response is larger than the limit max_response_bytes=1048576 bytes.",'
    b'"type":"server_error","param":null,"code":"response_too_large"}}\n\n'
)


def gzip_bomb(head: bytes, filler: bytes, size: int) -> bytes:
    """``head`` then ``filler`` repeated to ``size`` bytes, gzipped: ~1000 times smaller."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [compressor.compress(head)]
    parts += [compressor.compress(filler) for _ in range(size // len(filler))]
    return b"".join(parts) + compressor.flush()


def gzipped_response(content_type: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\ncontent-encoding: gzip\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    ) + body


async def _peak_of(answer: bytes, request: Mapping[str, object]) -> tuple[int, httpx.Response, int]:
    """The proxy's answer to ``request`` when the upstream sends ``answer``, the peak of memory
    allocated meanwhile and the upstream error recorded.

    The same exchange runs once unmeasured first: what a process allocates only the first time
    (httpx's and httpcore's lazy imports, caches) is no memory of the response's, and counted it
    was 1 MB more when no earlier test had made such a request, 4 MB in a bare interpreter.
    The peak does include the client's two copies of what it got (httpx's ASGITransport keeps
    the parts, then joins them): up to twice the limit."""
    limits = RequestLimits(max_response_bytes=BOMB_LIMIT)
    async with raw_upstream(lambda _: answer) as upstream:
        for measured in (False, True):
            async with proxied(upstream.url, limits=limits) as (client, app):
                if measured:
                    tracemalloc.start()
                try:
                    response = await client.post("/chat/completions", json=request)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
            assert app.record.upstream_error == "too_large"
    return peak, response, len(answer)


@pytest.mark.asyncio
async def test_a_gzip_bomb_as_a_whole_body_is_a_502_and_never_materialises() -> None:
    bomb = gzip_bomb(b'{"choices":[{"index":0,"message":{"content":"', b"0" * 65536, 10 << 20)
    peak, response, size = await _peak_of(gzipped_response(b"application/json", bomb), WHOLE)
    assert size < 100_000  # 10 MB inflated
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_bad_response"
    # httpx alone would inflate the whole bomb in one read: 10 MB.
    assert peak < 4 * BOMB_LIMIT


@pytest.mark.asyncio
async def test_a_streamed_gzip_bomb_ends_with_an_error_event_and_never_materialises() -> None:
    comment = b": " + b"x" * 1021 + b"\n\n"
    bomb = gzip_bomb(event("partial <"), comment, 10 << 20)
    peak, response, size = await _peak_of(gzipped_response(b"text/event-stream", bomb), STREAM)
    assert size < 100_000
    assert response.status_code == 200
    body = response.content
    assert body.startswith(PARTIAL)
    assert body.endswith(b'data: {"error":{' + BOMB_ERROR)
    comments = body[len(PARTIAL) : -len(b'data: {"error":{' + BOMB_ERROR)]
    assert comments == comment * (len(comments) // len(comment))  # whole events only
    assert BOMB_LIMIT // 2 < len(comments) <= BOMB_LIMIT
    assert b"<" not in body  # the held "<" never got out
    assert peak < 4 * BOMB_LIMIT
