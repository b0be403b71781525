"""StopMiddleware's memory stays bounded on what the app sends (issue 10): a JSON body it holds
and the inflated size of a body the app compressed are capped by
``RequestLimits.max_response_bytes``. The app here is a hostile one: a gzip bomb (10 MB of
filler compressed to a few KB), streamed and whole, and an oversized plain JSON body. Expected
outputs are literal bytes; the memory bound is tracemalloc's peak, a few times the 1 MiB limit
(the bombs alone would be 10 MB)."""

from __future__ import annotations

import functools
import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import anyio
import pytest

from streamstop.server import Receive, Scope, Send, StopMiddleware
from streamstop.server._limits import RequestLimits
from streamstop.server._record import RECORD_KEY, RequestRecord

from .conftest import Client, http_scope
from .test_middleware import request, sse

pytestmark = pytest.mark.anyio

LIMIT = 1024 * 1024
LIMITS = RequestLimits(max_response_bytes=LIMIT)
BOMB_BYTES = 10 * 1024 * 1024
# Peak memory allowed while the middleware handles a response over LIMIT: the held part (at
# most LIMIT), its join, one inflated piece and the test's own bookkeeping.
PEAK_BOUND = 4 * LIMIT

TOO_LARGE_MESSAGE = f"The response is larger than the limit max_response_bytes={LIMIT} bytes."
TOO_LARGE_JSON = (
    b'{"error":{"message":"' + TOO_LARGE_MESSAGE.encode() + b'",'
    b'"type":"server_error","param":null,"code":"response_too_large"}}'
)
TOO_LARGE_EVENT = b"data: " + TOO_LARGE_JSON + b"\n\n"

# An SSE comment line: passed through by the filter, and it compresses ~1000:1.
COMMENT = b": " + b"x" * 1021 + b"\n\n"
FIRST_EVENT = sse("ok </", done=False)  # "</" may start the stop: held back


def _compressed(pieces: Callable[[], Iterator[bytes]], wbits: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(compressor.compress(piece) for piece in pieces()) + compressor.flush()


def _sse_bomb_pieces() -> Iterator[bytes]:
    yield FIRST_EVENT
    for _ in range(BOMB_BYTES // len(COMMENT)):
        yield COMMENT


def _json_bomb_pieces() -> Iterator[bytes]:
    yield b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
    for _ in range(BOMB_BYTES // 65536):
        yield b"0" * 65536
    yield b'</s>"},"finish_reason":"stop"}]}'


@functools.cache
def sse_bomb(wbits: int) -> bytes:
    return _compressed(_sse_bomb_pieces, wbits)


@functools.cache
def json_bomb(wbits: int) -> bytes:
    return _compressed(_json_bomb_pieces, wbits)


GZIP, DEFLATE = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS
ENCODINGS = {"gzip": (b"gzip", GZIP), "deflate": (b"deflate", DEFLATE)}


class LazyApp:
    """Sends the body ``pieces()`` makes, one message per piece, never holding it whole."""

    def __init__(
        self,
        pieces: Callable[[], Iterator[bytes]],
        *,
        content_type: bytes,
        encoding: bytes | None = None,
    ) -> None:
        self.pieces = pieces
        self.headers = [(b"content-type", content_type)]
        if encoding is not None:
            self.headers.append((b"content-encoding", encoding))
        self.sent = 0
        self.cancelled = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            for piece in self.pieces():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += len(piece)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


def _split(data: bytes, size: int = 4096) -> Callable[[], Iterator[bytes]]:
    return lambda: (data[i : i + size] for i in range(0, len(data), size))


async def _run_measured(app: LazyApp, client: Client, record: RequestRecord) -> int:
    """Run the middleware over ``app``; the peak of memory allocated meanwhile, in bytes."""
    scope = http_scope()
    scope[RECORD_KEY] = record
    middleware = StopMiddleware(app, limits=LIMITS)
    tracemalloc.start()
    try:
        await middleware(scope, client.receive, client.send)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_streamed_gzip_bomb_ends_in_an_error_event_with_memory_bounded(
    encoding: str,
) -> None:
    name, wbits = ENCODINGS[encoding]
    bomb = sse_bomb(wbits)
    assert len(bomb) < BOMB_BYTES // 100  # a bomb indeed
    app = LazyApp(_split(bomb), content_type=b"text/event-stream", encoding=name)
    client = Client(request())
    record = RequestRecord(request_id="bomb")
    peak = await _run_measured(app, client, record)
    assert peak < PEAK_BOUND
    assert client.status == 200
    assert b"content-encoding" not in client.headers
    assert client.complete
    body = client.body
    first = b'data: {"choices":[{"index":0,"delta":{"content":"ok "},"finish_reason":null}]}\n\n'
    assert body.startswith(first)
    assert body.endswith(TOO_LARGE_EVENT)
    comments = body[len(first) : -len(TOO_LARGE_EVENT)]
    count = len(comments) // len(COMMENT)
    # Whole comments only, as many as fit under the limit (give or take the last read's).
    assert comments == COMMENT * count
    assert LIMIT // 2 < len(FIRST_EVENT) + count * len(COMMENT) <= LIMIT
    assert b"</" not in body  # the held text of a possible stop never got out
    assert app.cancelled
    assert record.upstream_error == "too_large"


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_whole_json_gzip_bomb_is_a_502_with_memory_bounded(encoding: str) -> None:
    name, wbits = ENCODINGS[encoding]
    bomb = json_bomb(wbits)
    assert len(bomb) < BOMB_BYTES // 100
    app = LazyApp(_split(bomb), content_type=b"application/json", encoding=name)
    client = Client(request(stream=False))
    record = RequestRecord(request_id="bomb")
    peak = await _run_measured(app, client, record)
    assert peak < PEAK_BOUND
    assert client.status == 502
    assert client.headers[b"content-type"] == b"application/json"
    assert client.body == TOO_LARGE_JSON
    assert client.complete
    assert app.cancelled
    assert record.upstream_error == "too_large"


async def test_an_oversized_plain_json_body_is_a_502_with_memory_bounded() -> None:
    app = LazyApp(_json_bomb_pieces, content_type=b"application/json")
    client = Client(request(stream=False))
    record = RequestRecord(request_id="big")
    peak = await _run_measured(app, client, record)
    assert peak < PEAK_BOUND
    assert client.status == 502
    assert client.body == TOO_LARGE_JSON
    assert app.cancelled
    assert app.sent <= LIMIT + 65536  # stopped at the limit, not at the end of its 10 MB
    assert record.upstream_error == "too_large"


async def test_a_plain_json_body_at_the_limit_is_held_and_cut() -> None:
    head = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
    tail = b'</s>"},"finish_reason":"stop"}]}'
    filler = b"0" * (LIMIT - len(head) - len(tail))
    app = LazyApp(lambda: iter([head, filler, tail]), content_type=b"application/json")
    client = Client(request(stream=False))
    await StopMiddleware(app, limits=LIMITS)(http_scope(), client.receive, client.send)
    assert client.status == 200
    response = json.loads(client.body)
    assert response["choices"][0]["message"]["content"] == filler.decode()


async def test_a_compressed_page_passed_through_is_cut_off_at_the_limit() -> None:
    # Not filtered (text/html), but inflated: its head is out, so the limit can only end it.
    page = gzip.compress(b"<p>" + b"a" * (2 * LIMIT) + b"</p>")
    app = LazyApp(_split(page), content_type=b"text/html", encoding=b"gzip")
    client = Client(request(stream=False))
    record = RequestRecord(request_id="page")
    peak = await _run_measured(app, client, record)
    assert peak < PEAK_BOUND
    assert client.status == 200
    assert client.complete
    assert client.body == (b"<p>" + b"a" * (2 * LIMIT))[: len(client.body)]
    assert LIMIT // 2 < len(client.body) <= LIMIT
    assert record.upstream_error == "too_large"


async def test_a_compressed_stream_under_the_limit_is_inflated_whole() -> None:
    body = sse("a", "b</s>c")
    app = LazyApp(
        _split(gzip.compress(body), 7), content_type=b"text/event-stream", encoding=b"gzip"
    )
    client = Client(request())
    await StopMiddleware(app, limits=LIMITS)(http_scope(), client.receive, client.send)
    assert client.body == (
        b'data: {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n"
    )
