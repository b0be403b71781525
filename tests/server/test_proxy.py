"""What ``streamstop proxy`` runs: StopMiddleware in front of ProxyApp, in front of a backend.

Live: a real uvicorn proxy in front of the bare echo model (which ignores stops), driven by the
``openai`` client and httpx. In-process (``httpx.ASGITransport``): the proxy in front of raw TCP
upstreams that misbehave on purpose (HTML errors, a stream that breaks, silence).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import openai
import pytest

from streamstop.server import ProxyApp, StopMiddleware
from streamstop.server._proxy import upstream_error_payload

from .conftest import (
    LONG_TEXT,
    LiveServer,
    StreamEnds,
    client_for,
    http_response,
    leave_after_events,
    raw_upstream,
    user,
)

# Integration tests, asyncio only (uvicorn and the clients): pytest-asyncio runs each
# ``async def test`` (marked one by one: the module has sync tests too).

# Every case with each upstream client (aiohttp and httpx).
pytestmark = pytest.mark.usefixtures("each_upstream_client")


TEXT = "Sure: 1, 2, 3.\n\nUser: and now? <|im_end|> ### Observation: x </s>"
STOPS = ["</s>", "<|im_end|>", "\n\nUser:", "###", "Observation:"]
EXPECTED = "Sure: 1, 2, 3."


@pytest.mark.asyncio
async def test_streams_through_the_proxy_are_cut_and_the_backend_stopped(
    slow_proxy_server: LiveServer, slow_upstream_ends: StreamEnds
) -> None:
    cancelled = slow_upstream_ends.count("cancelled")
    async with client_for(slow_proxy_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT + LONG_TEXT), stop=STOPS, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == EXPECTED
    assert chunks[-1].choices[0].finish_reason == "stop"
    # The upstream would stream for a minute: the proxy closed it after the stop.
    await slow_upstream_ends.wait_for("cancelled", cancelled + 1)


@pytest.mark.asyncio
async def test_whole_responses_and_legacy_n2_through_the_proxy(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        whole = await client.chat.completions.create(model="echo", messages=user(TEXT), stop=STOPS)
        stream = await client.completions.create(
            model="echo", prompt=TEXT, stop=STOPS, stream=True, n=2
        )
        texts = {0: "", 1: ""}
        async for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] += choice.text
        models = await client.models.list()
    assert whole.choices[0].message.content == EXPECTED
    assert whole.choices[0].finish_reason == "stop"
    assert texts == {0: EXPECTED, 1: EXPECTED}
    assert [model.id for model in models.data] == ["echo"]


@pytest.mark.asyncio
async def test_upstream_errors_keep_their_status_and_shape(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        with pytest.raises(openai.NotFoundError) as no_model:
            await client.chat.completions.create(model="nope", messages=user("x"), stop=STOPS)
        with pytest.raises(openai.BadRequestError) as bad_n:
            await client.chat.completions.create(
                model="echo", messages=user("x"), stop=STOPS, stream=True, n=0
            )
    assert no_model.value.status_code == 404
    assert isinstance(no_model.value.body, dict)
    assert no_model.value.body["code"] == "model_not_found"
    assert bad_n.value.status_code == 400
    assert isinstance(bad_n.value.body, dict)
    assert bad_n.value.body["param"] == "n"
    async with httpx.AsyncClient(base_url=proxy_server.base_url) as raw:
        outside = await raw.get("/other")
    assert outside.status_code == 404
    assert outside.json()["error"]["code"] == "unknown_url"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "stops",
    [
        pytest.param({"stop": ["NEVER"]}, id="filtered: the middleware watches"),
        pytest.param({}, id="no stop: the proxy watches"),
    ],
)
async def test_client_disconnect_through_the_proxy_stops_the_backend(
    slow_proxy_server: LiveServer, slow_upstream_ends: StreamEnds, stops: dict[str, Any]
) -> None:
    cancelled = slow_upstream_ends.count("cancelled")
    request = {"model": "echo", "stream": True, **stops, "messages": user(LONG_TEXT)}
    await leave_after_events(slow_proxy_server.url, request, events=3)
    await slow_upstream_ends.wait_for("cancelled", cancelled + 1)


# Load: many sockets and streams at once, with timeouts; never beside another load
# test (tests/conftest.py).
@pytest.mark.xdist_group("load")
@pytest.mark.asyncio
async def test_one_hundred_concurrent_streams_through_the_proxy(proxy_server: LiveServer) -> None:
    results: dict[int, str] = {}

    async def one(client: openai.AsyncOpenAI, i: int) -> None:
        stream = await client.chat.completions.create(
            model="echo", messages=user(f"{i}: {TEXT}"), stop=STOPS, stream=True
        )
        results[i] = "".join([c.choices[0].delta.content or "" async for c in stream])

    async with client_for(proxy_server) as client, anyio.create_task_group() as group:
        for i in range(100):
            group.start_soon(one, client, i)
    assert results == {i: f"{i}: {EXPECTED}" for i in range(100)}


# -- misbehaving upstreams, in-process ---------------------------------------------------------


@asynccontextmanager
async def proxy_client(
    upstream_url: str, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ProxyApp]]:
    proxy = ProxyApp(upstream_url, **options)
    transport = httpx.ASGITransport(app=StopMiddleware(proxy))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy/v1") as client:
            yield client, proxy
    finally:
        await proxy.aclose()


@pytest.mark.asyncio
async def test_requests_are_forwarded_without_the_stops() -> None:
    completion = {"choices": [{"index": 0, "text": "a</s>b", "finish_reason": "length"}]}
    answer = http_response("200 OK", "application/json", json.dumps(completion).encode())
    async with (
        raw_upstream(lambda body: answer) as upstream,
        proxy_client(upstream.url, api_key="sk-upstream") as (client, _),
    ):
        response = await client.post(
            "/completions?x=1",
            json={"model": "m", "prompt": "p", "stop": ["</s>", "a", "b", "c", "d"]},
            headers={"authorization": "Bearer sk-client"},
        )
    assert response.status_code == 200
    assert response.json()["choices"][0] == {
        "index": 0,
        "text": "",
        "finish_reason": "stop",
        "stop_reason": "a",  # of the stops, the first to end in "a</s>b"
    }
    (request,) = upstream.requests
    head, _, body = request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions?x=1 HTTP/1.1")
    assert b"authorization: Bearer sk-upstream" in head.lower().replace(b"bearer", b"Bearer")
    assert b"sk-client" not in head
    assert json.loads(body) == {"model": "m", "prompt": "p"}  # stops stay in the proxy


UPSTREAM_ERRORS = {
    "html": ("503 Service Unavailable", "text/html", b"<h1>down for maintenance</h1>", "maint"),
    "vllm": ("400 Bad Request", "application/json", b'{"object": "error", "message": "no"}', "no"),
    "fastapi": ("422 Unprocessable Entity", "application/json", b'{"detail": "field"}', "field"),
    "empty": ("500 Internal Server Error", "text/plain", b"", "HTTP 500"),
}


@pytest.mark.parametrize("case", UPSTREAM_ERRORS)
@pytest.mark.asyncio
async def test_upstream_errors_become_openai_shaped(case: str) -> None:
    status, content_type, body, message = UPSTREAM_ERRORS[case]
    answer = http_response(status, content_type, body)
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxy_client(upstream.url) as (client, _),
    ):
        response = await client.post("/chat/completions", json={"model": "m", "stream": True})
    assert response.status_code == int(status.split()[0])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]
    assert error["code"] == response.status_code


@pytest.mark.asyncio
async def test_unreachable_upstream_is_a_502() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nothing listens there any more
    async with proxy_client(f"http://127.0.0.1:{port}/v1") as (client, _):
        response = await client.post("/chat/completions", json={"model": "m", "stop": "x"})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"


@pytest.mark.asyncio
async def test_silent_upstream_is_a_504() -> None:
    async with (
        raw_upstream(lambda _: None) as upstream,
        proxy_client(upstream.url, timeout=0.2) as (client, _),
    ):
        response = await client.post("/chat/completions", json={"model": "m", "stop": "x"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.asyncio
async def test_a_stream_that_breaks_ends_with_an_error_event() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "partial <"}, "finish_reason": None}]}
    event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + f"{len(event):x}\r\n".encode()
        + event
        + b"\r\n"
    )  # and then the connection closes, mid-body
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxy_client(upstream.url) as (client, _),
    ):
        response = await client.post(
            "/chat/completions", json={"model": "m", "stream": True, "stop": "</s>"}
        )
    assert response.status_code == 200
    events = [block for block in response.text.split("\n\n") if block.strip()]
    assert json.loads(events[0].removeprefix("data: "))["choices"][0]["delta"]["content"] == (
        "partial "
    )
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "upstream_broken"


def test_upstream_error_payload_passes_openai_errors_through() -> None:
    openai_error = {"error": {"message": "m", "type": "t", "param": None, "code": "c"}}
    assert upstream_error_payload(401, json.dumps(openai_error).encode()) == openai_error
    wrapped = upstream_error_payload(502, b"\xff bad gateway")
    assert wrapped["error"]["type"] == "server_error"
    assert "bad gateway" in wrapped["error"]["message"]


def test_bad_upstream_url() -> None:
    with pytest.raises(ValueError, match="'localhost:8000'"):
        ProxyApp("localhost:8000")
