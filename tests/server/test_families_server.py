"""The server layer for every API family: the same request checks, limits, record, thread
offload and upstream-fault handling as the OpenAI routes, in-process (httpx's ASGI transport)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.lowlevel
import anyio.to_thread
import httpx
import pytest

from streamstop.server import ProxyApp, RequestLimits, StopMiddleware
from streamstop.server._observe import route_label

from .conftest import Client, Recording, http_response, http_scope, proxied, raw_upstream
from .fake_families import FakeFamilies

pytestmark = pytest.mark.anyio


def _body(
    family: str, stops: Any, text: str = "a STOP b", stream: bool = False
) -> tuple[str, dict[str, Any]]:
    """A request of ``family`` asking for ``text`` with ``stops`` where that API puts them."""
    if family == "anthropic":
        messages = [{"role": "user", "content": text}]
        return "/v1/messages", {
            "model": "c", "max_tokens": 9, "stream": stream, "messages": messages,
            "stop_sequences": stops,
        }  # fmt: skip
    if family == "ollama-chat":
        return "/api/chat", {"model": "m", "stream": stream, "options": {"stop": stops},
                             "messages": [{"role": "user", "content": text}]}  # fmt: skip
    if family == "ollama-generate":
        return "/api/generate", {
            "model": "m",
            "stream": stream,
            "prompt": text,
            "options": {"stop": stops},
        }
    if family == "llama.cpp":
        return "/completion", {"prompt": text, "stream": stream, "stop": stops}
    if family == "responses":
        return "/v1/responses", {"model": "o4-mini", "input": text, "stream": stream, "stop": stops}
    if family == "gemini":
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/gemini-2.5-flash:{method}", {
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "generationConfig": {"stopSequences": stops},
        }
    assert family == "tgi"
    return ("/generate_stream" if stream else "/generate"), {
        "inputs": text,
        "parameters": {"stop": stops},
    }


FAMILIES = [
    "anthropic",
    "ollama-chat",
    "ollama-generate",
    "llama.cpp",
    "tgi",
    "responses",
    "gemini",
]
PARAMS = {
    "responses": "stop",
    "anthropic": "stop_sequences",
    "ollama-chat": "options.stop",
    "ollama-generate": "options.stop",
    "llama.cpp": "stop",
    "tgi": "parameters.stop",
    "gemini": "generationConfig.stopSequences",
}


def _error_of(family: str, response: httpx.Response) -> tuple[str | None, str | None, str]:
    """The field at fault, this layer's code and the message of an error response, read from
    the family's error shape (OpenAI's; Google's for Gemini, as the google-genai SDK reads it)."""
    error = response.json()["error"]
    if family != "gemini":
        return error["param"], error["code"], error["message"]
    assert error["code"] == response.status_code
    assert error["status"] == ("INVALID_ARGUMENT" if response.status_code < 500 else "UNAVAILABLE")
    param = code = None
    for detail in error.get("details", []):
        if detail["@type"].endswith("BadRequest"):
            param = detail["fieldViolations"][0]["field"]
        elif detail["@type"].endswith("ErrorInfo"):
            code = detail["reason"].lower()
    return param, code, error["message"]


@asynccontextmanager
async def served(
    **options: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, Recording, FakeFamilies]]:
    fake = FakeFamilies()
    app = Recording(StopMiddleware(fake, **options))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://s"
    ) as client:
        yield client, app, fake


def _text_of(family: str, response: httpx.Response) -> str:
    body = response.json()
    if family == "anthropic":
        return "".join(block["text"] for block in body["content"] if block["type"] == "text")
    if family == "ollama-chat":
        return str(body["message"]["content"])
    if family == "ollama-generate":
        return str(body["response"])
    if family == "llama.cpp":
        return str(body["content"])
    if family == "responses":
        (message,) = [item for item in body["output"] if item["type"] == "message"]
        return "".join(part["text"] for part in message["content"])
    if family == "gemini":
        (candidate,) = body["candidates"]
        return "".join(part["text"] for part in candidate["content"]["parts"])
    return str(body["generated_text"])


@pytest.mark.parametrize("family", FAMILIES)
async def test_whole_responses_are_cut_and_recorded(family: str) -> None:
    path, body = _body(family, ["STOP", "x", "y", "z", "w"])
    async with served() as (client, app, fake):
        response = await client.post(path, json=body)
    assert response.status_code == 200
    assert _text_of(family, response) == "a "
    assert int(response.headers["content-length"]) == len(response.content)
    assert app.record.stops == 5
    assert app.record.stop_fired == "STOP"
    assert app.record.choices_cut == 1
    assert PARAMS[family].split(".")[-1] not in json.dumps(fake.requests[-1][1])


@pytest.mark.parametrize("family", FAMILIES)
async def test_streams_are_cut_and_recorded(family: str) -> None:
    path, body = _body(family, ["STOP"], text="abc STOP def [forever]", stream=True)
    async with served() as (client, app, _):
        response = await client.post(path, json=body)
    assert response.status_code == 200
    assert b"def" not in response.content
    assert b" more" not in response.content
    assert app.record.stop_fired == "STOP"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    ("stops", "code"),
    [
        ([1], None),
        ("", None),
        (["a", "b", "c"], "max_stops_exceeded"),
        (["x" * 9], "max_stop_length_exceeded"),
    ],
    ids=["wrong type", "empty string is no stop", "too many", "too long"],
)
async def test_stop_parameters_are_checked_and_named(
    family: str, stops: Any, code: str | None
) -> None:
    path, body = _body(family, stops)
    limits = RequestLimits(max_stops=2, max_stop_length=8)
    async with served(limits=limits) as (client, _, _):
        response = await client.post(path, json=body)
    if stops == "":
        assert response.status_code == 200
        return
    assert response.status_code == 400
    param, error_code, message = _error_of(family, response)
    assert param == PARAMS[family]
    assert PARAMS[family] in message or code is not None
    assert error_code == code


@pytest.mark.parametrize("family", FAMILIES)
async def test_bodies_are_checked_like_openai_ones(family: str) -> None:
    path, _ = _body(family, ["STOP"])
    async with served(limits=RequestLimits(max_body_bytes=1000)) as (client, _, fake):
        malformed = await client.post(path, content=b"{nope")
        deep = await client.post(path, content=b"[" * 100 + b"]" * 100)
    assert malformed.status_code == 400
    assert deep.status_code == 400
    # Read in parts, like a server would give it: over the limit before its end.
    large = Client([b"{", b" " * 2000, b"}"])
    await StopMiddleware(fake, limits=RequestLimits(max_body_bytes=1000))(
        http_scope(path), large.receive, large.send
    )
    assert large.status == 413
    assert fake.requests == []
    if family == "gemini":  # in Google's shape, as the bad bodies above
        assert json.loads(large.body)["error"]["status"] == "INVALID_ARGUMENT"
        assert malformed.json()["error"]["code"] == 400


async def test_a_large_body_is_parsed_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(function, "__name__", "?"))
        return await real(function, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    path, body = _body("ollama-generate", ["STOP"], text="x" * 300_000 + " STOP y")
    async with served() as (client, _, _):
        response = await client.post(path, json=body)
    assert response.json()["response"] == "x" * 300_000 + " "
    assert "_prepare" in calls  # the request
    assert "_cut_json" in calls  # and the whole response


async def test_family_paths_can_be_turned_off() -> None:
    path, body = _body("ollama-generate", ["STOP"])
    async with served(family_paths={}) as (client, _, _):
        response = await client.post(path, json=body)
    assert response.json()["response"] == "a STOP b"
    with pytest.raises(ValueError, match="unknown API families"):
        StopMiddleware(FakeFamilies(), family_paths={"/x": "nope"})


def test_metrics_label_the_family_routes() -> None:
    assert route_label("/api/chat") == "/api/chat"
    assert route_label("/v1/messages") == "/v1/messages"
    # llama.cpp's paths without /v1: labelled as themselves, not "other".
    assert route_label("/chat/completions") == "/chat/completions"
    assert route_label("/completions") == "/completions"


async def test_chat_completions_without_v1_is_filtered_as_openai_chat() -> None:
    request = {"model": "m", "stop": ["STOP"], "messages": [{"role": "user", "content": "a STOP"}]}
    async with served() as (client, app, fake):
        whole = await client.post("/chat/completions", json=request)
        streamed = await client.post("/chat/completions", json={**request, "stream": True})
    assert whole.json()["choices"][0]["message"]["content"] == "a "
    chunks = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "a "
    assert [c["choices"][0].get("stop_reason") for c in chunks if c["choices"]][-1] == "STOP"
    assert streamed.text.endswith("data: [DONE]\n\n")
    assert app.record.stop_fired == "STOP"
    assert "stop" not in fake.requests[-1][1]


async def test_the_proxy_forwards_llamacpps_paths_without_v1() -> None:
    answer = http_response("200 OK", "application/json", b'{"content":"x","stop":true}')
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, _):
        for path in ("/chat/completions", "/completions"):
            response = await client.post(f"http://proxy{path}", json={"prompt": "p"})
            assert response.status_code == 200, response.text
        unknown = await client.post("http://proxy/chat/other", json={})
    heads = [request.split(b"\r\n", 1)[0] for request in upstream.requests]
    assert heads == [b"POST /chat/completions HTTP/1.1", b"POST /completions HTTP/1.1"]
    assert unknown.status_code == 404
    assert "/chat/completions, /v1/messages" in unknown.json()["error"]["message"]


# -- upstream faults through the proxy, in each family's shape ---------------------------------


def _chunked(content_type: str, body: bytes) -> bytes:
    """A response that breaks off: chunked framing, never finished."""
    return (
        (
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n"
            f"connection: close\r\n\r\n{len(body):x}\r\n"
        ).encode()
        + body
        + b"\r\n"
    )


async def test_a_broken_ndjson_stream_ends_with_an_ollama_error_line() -> None:
    lines = b'{"model":"m","response":"ab STO","done":false}\n{"model":"m","resp'
    async with (
        raw_upstream(lambda _: _chunked("application/x-ndjson", lines)) as upstream,
        proxied(upstream.url) as (client, app),
    ):
        path, body = _body("ollama-generate", ["STOP"], stream=True)
        response = await client.post(f"http://proxy{path}", json=body)
    out = [json.loads(line) for line in response.content.splitlines()]
    assert out[0]["response"] == "ab "  # "STO" held back, then dropped: it may be a stop
    assert isinstance(out[-1]["error"], str)  # Ollama's shape: its client raises on it
    assert app.record.upstream_error in ("broken", "truncated")


async def test_a_broken_anthropic_stream_ends_with_an_error_event() -> None:
    events = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hi ST"}}\n\nevent: content_bl'
    )
    async with (
        raw_upstream(lambda _: _chunked("text/event-stream", events)) as upstream,
        proxied(upstream.url) as (client, _),
    ):
        path, body = _body("anthropic", ["STOP"], stream=True)
        response = await client.post(f"http://proxy{path}", json=body)
    text = response.content.decode()
    assert '"text":"Hi "' in text
    assert text.endswith("\n\n")
    last = text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    assert json.loads(last.split("data: ", 1)[1])["type"] == "error"


async def test_the_proxy_maps_paths_under_the_root() -> None:
    answer = http_response("200 OK", "application/json", b'{"response":"x","done":true}')
    async with raw_upstream(lambda _: answer) as upstream:
        root = upstream.url.removesuffix("/v1")
        for base in (upstream.url, root, root + "/"):
            async with proxied(base) as (client, _):
                await client.post("http://proxy/api/generate", json={"prompt": "p"})
                await client.get("http://proxy/v1/models")
    heads = [request.split(b"\r\n", 1)[0] for request in upstream.requests]
    assert heads == [b"POST /api/generate HTTP/1.1", b"GET /v1/models HTTP/1.1"] * 3
    with pytest.raises(ValueError, match="http"):
        ProxyApp("localhost:11434")


def _proxy_of(app: Any) -> ProxyApp:
    """The ProxyApp at the bottom of the layers build_app stacks."""
    while not isinstance(app, ProxyApp):
        app = app.app
    return app


@pytest.mark.parametrize(
    ("flags", "environ", "forward"),
    [
        ([], {}, False),
        (["--forward-other-paths"], {}, True),
        ([], {"STREAMSTOP_FORWARD_OTHER_PATHS": "1"}, True),
    ],
    ids=["default", "flag", "environment"],
)
def test_the_cli_forwards_other_paths_when_asked(
    flags: list[str], environ: dict[str, str], forward: bool
) -> None:
    from streamstop._cli import build_parser
    from streamstop.server._commands import build_app, settings_of

    args = build_parser().parse_args(["proxy", "--upstream", "http://127.0.0.1:9/v1", *flags])
    proxy = _proxy_of(build_app(settings_of(args.parser, args, environ)))
    assert proxy.forward_other is forward
    assert proxy.root == "http://127.0.0.1:9"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("how", ["send fails", "disconnect"])
async def test_a_client_that_leaves_stops_the_upstream(family: str, how: str) -> None:
    outcomes: list[str] = []
    fake = FakeFamilies(on_stream_end=outcomes.append)
    target, body = _body(family, ["NEVER"], text="going on [forever]", stream=True)
    path, _, query = target.partition("?")
    client = Client(json.dumps(body).encode(), fail_send_after=3 if how == "send fails" else None)
    middleware = StopMiddleware(fake)

    async def leave() -> None:
        # The client reads a few frames of the endless stream, then hangs up.
        while len(client.messages) < 3:
            await anyio.lowlevel.checkpoint()
        client.gone.set()

    # An upstream left running would stream forever: fail rather than hang.
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            if how == "disconnect":
                group.start_soon(leave)
            scope = http_scope(path, query_string=query.encode())
            await middleware(scope, client.receive, client.send)
    assert outcomes == ["cancelled"]
    assert client.status == 200


async def test_native_fields_are_not_judged_by_openai_rules() -> None:
    # llama.cpp takes a prompt mixing tokens and strings; OpenAI's "prompt" check would refuse it.
    body = {"prompt": [12, "a STOP b", 34], "stop": ["STOP"], "n": "not OpenAI's"}
    async with served() as (client, _, fake):
        response = await client.post("/completion", json=body)
    assert response.status_code == 200
    assert fake.requests[-1][1]["prompt"] == [12, "a STOP b", 34]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_anthropic_sdk_raises_on_a_broken_upstream(anyio_backend: str) -> None:
    """The fault frames are in each API's shape: its own client raises its own error. asyncio
    only: the SDK raises from inside its own event iterators and leaves them to the garbage
    collector, which trio reports as an error (a fault of that client, not ours)."""
    import anthropic
    import httpx2

    anthropic_events = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":'
        b'"message","role":"assistant","model":"c","content":[],"stop_reason":null,'
        b'"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\nevent: content_bl'
    )
    ollama_lines = b'{"model":"m","created_at":"t","response":"ab","done":false}\n{"mo'
    answers = {
        b"/v1/messages": _chunked("text/event-stream", anthropic_events),
        b"/api/generate": _chunked("application/x-ndjson", ollama_lines),
    }
    async with raw_upstream(lambda _: None) as upstream:
        upstream.answer = lambda body: answers[
            b"/v1/messages" if b"max_tokens" in body else b"/api/generate"
        ]
        proxy = ProxyApp(upstream.url)
        app = StopMiddleware(proxy)
        try:
            # This anthropic SDK speaks through httpx2, the ollama client through httpx.
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http:
                claude = anthropic.AsyncAnthropic(
                    base_url="http://proxy", api_key="k", max_retries=0, http_client=http
                )
                stream = await claude.messages.create(
                    model="c",
                    max_tokens=5,
                    messages=[{"role": "user", "content": "x"}],
                    stop_sequences=["STOP"],
                    stream=True,
                )
                with pytest.raises(anthropic.APIError, match=r"broke off|middle"):
                    await _drain(stream)
        finally:
            await proxy.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_ollama_client_raises_on_a_broken_upstream(anyio_backend: str) -> None:
    """asyncio only, as above: the ollama client leaves httpx's line iterator to the GC."""
    import ollama

    lines = b'{"model":"m","created_at":"t","response":"ab","done":false}\n{"mo'
    async with raw_upstream(lambda _: _chunked("application/x-ndjson", lines)) as upstream:
        proxy = ProxyApp(upstream.url)
        try:
            transport = httpx.ASGITransport(app=StopMiddleware(proxy))
            llama = ollama.AsyncClient(host="http://proxy", transport=transport)
            parts = await llama.generate(
                model="m", prompt="x", options={"stop": ["STOP"]}, stream=True
            )
            with pytest.raises(ollama.ResponseError, match=r"broke off|middle"):
                await _drain(parts)
        finally:
            await proxy.aclose()


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


# -- the Responses API's faults through the proxy ----------------------------------------------


def _responses_head() -> bytes:
    from ..streamstop.test_families import responses_bytes

    # The events up to the message's first delta, "Hi ST": "ST" may be the start of STOP.
    return responses_bytes(["Hi ST"], end=False)


def _numbered_events(content: bytes) -> list[dict[str, Any]]:
    from ..streamstop.test_families import _sse_events

    payloads = [payload for _, payload in _sse_events(content)]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    return payloads


@pytest.mark.parametrize(
    ("tail", "code", "kind"),
    [
        (b"event: response.output_te", "upstream_broken", "broken"),
        (b"", "upstream_truncated", "truncated"),
        (
            b"event: response.output_text.delta\ndata: " + b"x" * 600 + b"\n\n",
            "upstream_event_too_large",
            "too_large",
        ),
    ],
    ids=["broken mid-event", "ended before response.completed", "event over its limit"],
)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_failing_responses_stream_ends_with_an_error_event(
    tail: bytes, code: str, kind: str, anyio_backend: str
) -> None:
    """asyncio only, as the proxy's other fault tests: on trio, httpx leaves the iterators of
    an upstream response the middleware stops mid-read to the garbage collector."""
    body = _responses_head() + tail
    if code == "upstream_truncated":  # a whole HTTP response: the stream itself is short
        answer = http_response("200 OK", "text/event-stream", body)
    else:
        answer = _chunked("text/event-stream", body)
    # The middleware's limits (the proxy's own are the defaults): the filter finds the event
    # over its limit, as it would behind any app.
    limits = RequestLimits(max_sse_event_bytes=500, max_sse_line_bytes=500)
    async with raw_upstream(lambda _: answer) as upstream:
        proxy = ProxyApp(upstream.url)
        app = Recording(StopMiddleware(proxy, limits=limits))
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://proxy"
            ) as client:
                path, request = _body("responses", ["STOP"], stream=True)
                response = await client.post(path, json=request)
        finally:
            await proxy.aclose()
    payloads = _numbered_events(response.content)
    assert payloads[-2]["delta"] == "Hi "  # "ST" never sent: it may be a stop's start
    error = payloads[-1]
    assert (error["type"], error["code"]) == ("error", code)
    assert error["error"]["code"] == code
    assert app.record.upstream_error == kind


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_openai_sdk_raises_on_a_broken_responses_stream(anyio_backend: str) -> None:
    """asyncio only, as for the anthropic SDK above."""
    import httpx2
    import openai

    answer = _chunked("text/event-stream", _responses_head() + b"event: resp")
    async with raw_upstream(lambda _: answer) as upstream:
        proxy = ProxyApp(upstream.url)
        try:
            async with httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=StopMiddleware(proxy))
            ) as http:
                client = openai.AsyncOpenAI(
                    base_url="http://proxy/v1", api_key="k", max_retries=0, http_client=http
                )
                stream = await client.responses.create(
                    model="o4-mini", input="x", stream=True, extra_body={"stop": ["STOP"]}
                )
                texts: list[str] = []

                async def read() -> None:
                    async for event in stream:
                        if event.type == "response.output_text.delta":
                            texts.append(event.delta)

                with pytest.raises(openai.APIError, match="broke off"):
                    await read()
                assert "".join(texts) == "Hi "
        finally:
            await proxy.aclose()


async def test_without_stops_the_proxys_fault_event_is_numbered_after_the_last_one() -> None:
    # No stop: the middleware leaves the stream to the proxy, which does not parse events.
    answer = _chunked("text/event-stream", _responses_head() + b"event: resp")
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url) as (client, app),
    ):
        path, request = _body("responses", None, stream=True)
        response = await client.post(f"http://proxy{path}", json=request)
    payloads = _numbered_events(response.content)
    assert payloads[-2]["delta"] == "Hi ST"  # no stop asked for: nothing held
    assert (payloads[-1]["type"], payloads[-1]["code"]) == ("error", "upstream_broken")
    assert app.record.upstream_error == "broken"


def test_number_after_reads_the_last_events_number() -> None:
    from streamstop._families import FAMILIES as ADAPTERS

    family = ADAPTERS["responses"]
    events = (
        b'event: a\ndata: {"type":"a","sequence_number":7,"x":"\\"sequence_number\\": 99"}\n\n'
        b'event: b\ndata: {"type": "b", "sequence_number" : 8}\n\n'
    )
    assert family.number_after(events) == 9
    assert family.number_after(events[:-40]) == 8  # an escaped one in a string is not it
    assert family.number_after(b"") is None
    assert ADAPTERS["anthropic"].number_after(events) is None


# -- Gemini: patterns for paths, Google's error shape --------------------------------------------

GEMINI_STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def test_metrics_label_gemini_routes_by_pattern_not_model() -> None:
    for model in ("gemini-2.5-flash", "gemini-2.5-pro", "x" * 200):
        assert route_label(f"/v1beta/models/{model}:streamGenerateContent") == (
            "/v1beta/models/{model}:streamGenerateContent"
        )
    assert route_label("/v1/models/m:generateContent") == "/v1/models/{model}:generateContent"
    assert route_label("/v1/models/m") == "/v1/models/{model}"  # OpenAI's, as before
    assert route_label("/v1beta/models/m:countTokens") == "other"


async def test_family_paths_take_patterns() -> None:
    only_whole = {"/v1beta/models/{model}:generateContent": "gemini"}
    path, body = _body("gemini", ["STOP"])
    async with served(family_paths=only_whole) as (client, app, fake):
        whole = await client.post(path, json=body)
        stream_path, stream_body = _body("gemini", ["STOP"], stream=True)
        streamed = await client.post(stream_path, json=stream_body)
    assert _text_of("gemini", whole) == "a "
    assert app.record.model == "gemini-2.5-flash"
    # Not a filtered path here: the upstream got the stops and cut with them itself.
    assert fake.requests[-1][1]["generationConfig"] == {"stopSequences": ["STOP"]}
    assert b'"text": "a "' in streamed.content


def _gemini_event(text: str) -> bytes:
    chunk = {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}]}
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def _last_error(body: bytes) -> dict[str, Any]:
    last = body.decode().strip().split("\r\n\r\n")[-1].split("\n\n")[-1]
    assert last.startswith("data: ")
    error: dict[str, Any] = json.loads(last[len("data: ") :])["error"]
    return error


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b'data: {"candid', "UPSTREAM_TRUNCATED"),  # the body ends mid-event
        (b"data: " + b"x" * 3000, "UPSTREAM_EVENT_TOO_LARGE"),
    ],
    ids=["truncated", "too large"],
)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_broken_gemini_stream_ends_with_an_error_in_googles_shape(
    tail: bytes, reason: str, anyio_backend: str
) -> None:
    """asyncio only, as test_proxy_faults' oversized event: under trio httpx's own stream
    iterators, left when the proxy stops reading, are reported by the garbage collector."""
    events = _gemini_event("Hi ST") + tail
    answer = _chunked("text/event-stream", events)
    limits = RequestLimits(max_sse_line_bytes=1000, max_sse_event_bytes=1000)
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url, limits=limits) as (client, app),
    ):
        _, body = _body("gemini", ["STOP"], stream=True)
        response = await client.post(f"http://proxy{GEMINI_STREAM}?alt=sse", json=body)
    if reason == "UPSTREAM_TRUNCATED":  # "ST" held, then dropped: it may start a stop
        assert b'"text":"Hi "' in response.content.replace(b": ", b":")
    error = _last_error(response.content)
    assert (error["code"], error["status"]) == (502, "UNAVAILABLE")
    assert error["details"][-1]["reason"] in (reason, "UPSTREAM_BROKEN")
    assert app.record.upstream_error in ("truncated", "too_large", "broken")


async def test_the_proxys_own_errors_on_gemini_paths_are_in_googles_shape() -> None:
    html = http_response("503 Service Unavailable", "text/html", b"<h1>down</h1>")
    async with raw_upstream(lambda _: html) as upstream, proxied(upstream.url) as (client, _):
        _, body = _body("gemini", ["STOP"])
        wrapped = await client.post("http://proxy/v1beta/models/m:generateContent", json=body)
        openai = await client.post("http://proxy/v1/chat/completions", json={"messages": []})
    assert wrapped.status_code == 503
    assert wrapped.json() == {
        "error": {
            "code": 503,
            "message": "The upstream server returned HTTP 503: <h1>down</h1>",
            "status": "UNAVAILABLE",
        }
    }
    assert openai.json()["error"]["code"] == 503  # OpenAI's shape, as before
    async with proxied("http://127.0.0.1:1/v1") as (client, _):
        unreachable = await client.post("http://proxy/v1/models/m:generateContent", json=body)
    assert unreachable.status_code == 502
    error = unreachable.json()["error"]
    assert (error["code"], error["status"]) == (502, "UNAVAILABLE")
    assert error["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "UPSTREAM_UNREACHABLE",
            "domain": "streamstop",
        }
    ]


async def test_the_proxy_routes_gemini_paths_and_their_allow_list_patterns() -> None:
    answer = http_response("200 OK", "application/json", b'{"candidates":[]}')
    async with raw_upstream(lambda _: answer) as upstream:
        async with proxied(upstream.url) as (client, _):
            known = await client.post(f"http://proxy{GEMINI_STREAM}", json={})
            other = await client.post("http://proxy/v1beta/models/m:countTokens", json={})
        routes = ["/v1beta/models/{model}:generateContent"]
        async with proxied(upstream.url, routes=routes) as (client, _):
            allowed = await client.post("http://proxy/v1beta/models/m:generateContent", json={})
            refused = await client.post(f"http://proxy{GEMINI_STREAM}", json={})
    assert (known.status_code, other.status_code) == (200, 404)
    assert (allowed.status_code, refused.status_code) == (200, 404)
    heads = [request.split(b"\r\n", 1)[0] for request in upstream.requests]
    assert heads == [
        f"POST {GEMINI_STREAM} HTTP/1.1".encode(),
        b"POST /v1beta/models/m:generateContent HTTP/1.1",
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_google_genai_sdk_raises_on_a_broken_upstream(anyio_backend: str) -> None:
    """asyncio only, as above: the SDK leaves httpx's line iterator to the GC."""
    from google import genai
    from google.genai import errors, types

    answer = _chunked("text/event-stream", _gemini_event("ab") + b'data: {"cand')
    async with raw_upstream(lambda _: answer) as upstream:
        proxy = ProxyApp(upstream.url)
        try:
            transport = httpx.ASGITransport(app=StopMiddleware(proxy))
            async with httpx.AsyncClient(transport=transport) as http:
                options = types.HttpOptions(base_url="http://proxy", httpx_async_client=http)
                client = genai.Client(api_key="k", http_options=options)
                config = types.GenerateContentConfig(stop_sequences=["STOP"])
                stream = await client.aio.models.generate_content_stream(
                    model="m", contents="x", config=config
                )
                with pytest.raises(errors.ServerError, match=r"broke off|middle") as error:
                    await _drain(stream)
            assert (error.value.code, error.value.status) == (502, "UNAVAILABLE")
        finally:
            await proxy.aclose()
