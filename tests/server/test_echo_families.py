"""The echo model in every API family, driven in process (no middleware, no server): each family's
wire format checked with its SDK's types, whole and streamed, and the shared bounds and errors.

Runs on asyncio and trio (``pytest.mark.anyio``); the live servers and real clients are in
tests/server/test_serve_families.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop.server import EchoModel
from streamstop.server._echo import writer_for
from streamstop.server._echo_families import MAX_BODY, MAX_CHOICES, MAX_ECHO_CHARS, MAX_TOKENS

from .conftest import Client, http_scope
from .echo_wire import FAMILIES, Family

pytestmark = pytest.mark.anyio

TEXTS = {
    "plain": "The answer is 42.",
    "empty": "",
    "one character": "x",
    "lines": "first line\n\nHuman: second\r\nthird",
    "unicode": "naïve café 🦜 — 日本語のテキスト",
    "json-looking": '{"data": "[DONE]"}\n\ndata: x',
    "long": " ".join(f"word{i}" for i in range(500)),
}


async def call(
    app: EchoModel, path: str, body: dict[str, Any] | bytes, method: str = "POST"
) -> Client:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    client = Client(raw)
    route, _, query = path.partition("?")
    scope = http_scope(route, method, query_string=query.encode())
    await app(scope, client.receive, client.send)
    return client


def ids(family: Family) -> str:
    return family.name


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
@pytest.mark.parametrize("name", TEXTS)
async def test_whole_and_streamed_echo_the_text(family: Family, name: str) -> None:
    text = TEXTS[name]
    ends: list[str] = []
    app = EchoModel(on_stream_end=ends.append)
    whole = await call(app, family.path, family.request(text, False))
    streamed = await call(app, family.stream_path, family.request(text, True))
    assert whole.status == 200, whole.body
    assert whole.headers[b"content-type"].startswith(b"application/json")
    assert family.whole_text(json.loads(whole.body)) == text
    assert streamed.status == 200, streamed.body
    assert streamed.headers[b"content-type"].decode() == family.media_type
    assert streamed.complete
    assert family.stream_text(streamed.body) == text
    assert ends == ["completed"]


@given(text=st.text(max_size=60))
def test_any_text_streams_back_whole_in_every_family(text: str) -> None:
    # The reference is the text itself: every family's stream and whole response carry it.
    async def check() -> None:
        app = EchoModel()
        for family in FAMILIES:
            streamed = await call(app, family.stream_path, family.request(text, True))
            whole = await call(app, family.path, family.request(text, False))
            assert family.stream_text(streamed.body) == text, family.name
            assert family.whole_text(json.loads(whole.body)) == text, family.name

    anyio.run(check)


# -- the token cap: each family's own reason ----------------------------------------------------

TEXT = "one two three four five"  # pieces: 'one', ' t', 'wo t', 'hree ', 'fou', ...
CAPPED = "one two t"  # three pieces

CAPS: dict[str, tuple[str, dict[str, Any], Callable[[Any], tuple[str, str]], str]] = {
    "anthropic": (
        "/v1/messages",
        {"model": "echo", "max_tokens": 3, "messages": [{"role": "user", "content": TEXT}]},
        lambda r: (r["content"][0]["text"], r["stop_reason"]),
        "max_tokens",
    ),
    "ollama": (
        "/api/chat",
        {
            "model": "echo",
            "stream": False,
            "options": {"num_predict": 3},
            "messages": [{"role": "user", "content": TEXT}],
        },
        lambda r: (r["message"]["content"], r["done_reason"]),
        "length",
    ),
    "llama.cpp": (
        "/completion",
        {"prompt": TEXT, "n_predict": 3},
        lambda r: (r["content"], r["stop_type"]),
        "limit",
    ),
    "tgi": (
        "/generate",
        {"inputs": TEXT, "parameters": {"max_new_tokens": 3, "details": True}},
        lambda r: (r["generated_text"], r["details"]["finish_reason"]),
        "length",
    ),
    "responses": (
        "/v1/responses",
        {"model": "echo", "input": TEXT, "max_output_tokens": 3},
        lambda r: (r["output"][0]["content"][0]["text"], r["incomplete_details"]["reason"]),
        "max_output_tokens",
    ),
    "gemini": (
        "/v1beta/models/echo:generateContent",
        {"contents": [{"parts": [{"text": TEXT}]}], "generationConfig": {"maxOutputTokens": 3}},
        lambda r: (
            r["candidates"][0]["content"]["parts"][0]["text"],
            r["candidates"][0]["finishReason"],
        ),
        "MAX_TOKENS",
    ),
}


@pytest.mark.parametrize("name", CAPS)
async def test_the_token_cap_cuts_with_the_familys_reason(name: str) -> None:
    path, body, read, reason = CAPS[name]
    reply = await call(EchoModel(), path, body)
    assert reply.status == 200, reply.body
    assert read(json.loads(reply.body)) == (CAPPED, reason)


async def test_capped_streams_end_as_their_api_says() -> None:
    app = EchoModel()
    body = {"model": "echo", "input": TEXT, "max_output_tokens": 3, "stream": True}
    responses = await call(app, "/v1/responses", body)
    last = json.loads(responses.body.decode().rsplit("data: ", 1)[1])
    assert last["type"] == "response.incomplete"
    assert last["response"]["output"][0]["status"] == "incomplete"
    tgi = await call(app, "/generate_stream", {"inputs": TEXT, "parameters": {"max_new_tokens": 3}})
    final = json.loads(tgi.body.decode().strip().rsplit("data:", 1)[1])
    assert final["token"]["special"] is False  # no end of sequence: the cap came first
    assert final["generated_text"] == CAPPED


# -- several outputs ------------------------------------------------------------------------------


async def test_llamacpp_prompts_and_gemini_candidates_take_turns() -> None:
    app = EchoModel()
    many = await call(app, "/completion", {"prompt": ["first prompt", "second"], "stream": True})
    texts: dict[int, str] = {}
    finals = []
    for line in many.body.split(b"\n\n"):
        if line:
            event = json.loads(line.removeprefix(b"data: "))
            texts[event["index"]] = texts.get(event["index"], "") + event["content"]
            finals += [event["index"]] if event["stop"] else []
    assert texts == {0: "first prompt", 1: "second"}
    assert sorted(finals) == [0, 1]
    whole = json.loads((await call(app, "/completion", {"prompt": ["a", "b"]})).body)
    assert [result["content"] for result in whole] == ["a", "b"]
    body = {"contents": [{"parts": [{"text": TEXT}]}], "generationConfig": {"candidateCount": 3}}
    gemini = json.loads((await call(app, "/v1beta/models/echo:generateContent", body)).body)
    assert [c["index"] for c in gemini["candidates"]] == [0, 1, 2]
    assert {c["content"]["parts"][0]["text"] for c in gemini["candidates"]} == {TEXT}
    streamed = await call(app, "/v1beta/models/echo:streamGenerateContent?alt=sse", body)
    chunks = [json.loads(line[6:]) for line in streamed.body.split(b"\r\n\r\n") if line]
    by_index: dict[int, str] = {}
    for chunk in chunks:
        for candidate in chunk["candidates"]:
            by_index[candidate["index"]] = (
                by_index.get(candidate["index"], "") + candidate["content"]["parts"][0]["text"]
            )
    assert by_index == {0: TEXT, 1: TEXT, 2: TEXT}


# -- errors: each family's shape, the field named --------------------------------------------------


def anthropic_error(body: Any) -> str:
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    return str(body["error"]["message"])


def ollama_error(body: Any) -> str:
    assert set(body) == {"error"}
    return str(body["error"])


def llamacpp_error(body: Any) -> str:
    assert set(body["error"]) == {"code", "message", "type"}
    return str(body["error"]["message"])


def tgi_error(body: Any) -> str:
    assert body["error_type"] == "validation"
    return str(body["error"])


def openai_error(body: Any) -> str:
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return str(body["error"]["message"])


def gemini_error(body: Any) -> str:
    assert set(body["error"]) == {"code", "message", "status"}
    assert body["error"]["status"] in ("INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED")
    return str(body["error"]["message"])


GEMINI = "/v1beta/models/echo:generateContent"
MESSAGES = [{"role": "user", "content": "hi"}]

ERRORS: dict[str, tuple[str, Any, int, str, Any]] = {
    # name: (path, body, status, a word the message has, the error reader)
    "anthropic without max_tokens": (
        "/v1/messages", {"model": "echo", "messages": MESSAGES}, 400, "max_tokens",
        anthropic_error),
    "anthropic unknown model": (
        "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": MESSAGES}, 404,
        "'claude'", anthropic_error),
    "anthropic no user message": (
        "/v1/messages", {"model": "echo", "max_tokens": 5, "messages": [{"role": "assistant",
        "content": "x"}]}, 400, "'messages'", anthropic_error),
    "anthropic stream not a boolean": (
        "/v1/messages", {"model": "echo", "max_tokens": 5, "messages": MESSAGES, "stream": "yes"},
        400, "'stream'", anthropic_error),
    "ollama without a model": ("/api/chat", {"messages": MESSAGES}, 400, "model", ollama_error),
    "ollama unknown model": (
        "/api/chat", {"model": "llama3", "messages": MESSAGES}, 404, "'llama3'", ollama_error),
    "ollama bad num_predict": (
        "/api/generate", {"model": "echo", "prompt": "x", "options": {"num_predict": 0}}, 400,
        "'options.num_predict'", ollama_error),
    "ollama options not an object": (
        "/api/generate", {"model": "echo", "prompt": "x", "options": [1]}, 400, "'options'",
        ollama_error),
    "llama.cpp without a prompt": ("/completion", {"n_predict": 3}, 400, "prompt",
                                   llamacpp_error),
    "llama.cpp prompt of numbers": ("/completions", {"prompt": [1, 2]}, 400, "'prompt'",
                                    llamacpp_error),
    "llama.cpp too many prompts": (
        "/completion", {"prompt": ["x"] * (MAX_CHOICES + 1)}, 400, "'prompt'", llamacpp_error),
    "tgi without inputs": ("/generate", {"parameters": {}}, 400, "'inputs'", tgi_error),
    "tgi bad max_new_tokens": (
        "/generate_stream", {"inputs": "x", "parameters": {"max_new_tokens": MAX_TOKENS + 1}},
        400, "'parameters.max_new_tokens'", tgi_error),
    "tgi details not a boolean": (
        "/generate", {"inputs": "x", "parameters": {"details": "yes"}}, 400,
        "'parameters.details'", tgi_error),
    "responses unknown model": (
        "/v1/responses", {"model": "gpt-5", "input": "x"}, 404, "'gpt-5'", openai_error),
    "responses without input": ("/v1/responses", {"model": "echo"}, 400, "'input'",
                                openai_error),
    "responses bad max_output_tokens": (
        "/v1/responses", {"model": "echo", "input": "x", "max_output_tokens": True}, 400,
        "'max_output_tokens'", openai_error),
    "gemini unknown model": (
        "/v1beta/models/gemini-2.5-flash:generateContent", {"contents": [{"parts": []}]}, 404,
        "models/gemini-2.5-flash", gemini_error),
    "gemini without contents": (GEMINI, {}, 400, "'contents'", gemini_error),
    "gemini too many candidates": (
        GEMINI, {"contents": [{"parts": [{"text": "x"}]}],
                 "generationConfig": {"candidateCount": MAX_CHOICES + 1}},
        400, "'generationConfig.candidateCount'", gemini_error),
    "gemini echo too long": (
        GEMINI, {"contents": [{"parts": [{"text": "x" * (MAX_ECHO_CHARS // 2 + 1)}]}],
                 "generationConfig": {"candidateCount": 2}},
        400, "'generationConfig.candidateCount'", gemini_error),
    "gemini config not an object": (
        GEMINI, {"contents": [{"parts": [{"text": "x"}]}], "generationConfig": "hot"}, 400,
        "'generationConfig'", gemini_error),
}  # fmt: skip


@pytest.mark.parametrize("name", ERRORS)
async def test_errors_in_the_familys_shape_name_the_field(name: str) -> None:
    path, body, status, word, read = ERRORS[name]
    reply = await call(EchoModel(), path, body)
    assert reply.status == status
    assert word in read(json.loads(reply.body))


@pytest.mark.parametrize(
    ("path", "read"),
    [
        ("/v1/messages", anthropic_error),
        ("/api/chat", ollama_error),
        ("/completion", llamacpp_error),
        ("/generate_stream", tgi_error),
        ("/v1/responses", openai_error),
        ("/v1beta/models/echo:streamGenerateContent", gemini_error),
    ],
)
async def test_bodies_methods_and_sizes_refused_in_the_familys_shape(path: str, read: Any) -> None:
    app = EchoModel()
    for body, status in [(b"{not json", 400), (b"[1, 2]", 400), (b"x" * (MAX_BODY + 1), 413)]:
        reply = await call(app, path, body)
        assert reply.status == status
        assert read(json.loads(reply.body))
    get = await call(app, path, b"", method="GET")
    assert get.status == 405
    assert get.headers[b"allow"] == b"POST"
    assert read(json.loads(get.body))


async def test_other_gemini_methods_and_paths_are_not_routed() -> None:
    assert writer_for("/v1beta/models/echo:countTokens") is None
    assert writer_for("/v1beta/models/echo") is None
    assert writer_for("/api/tags") is None
    reply = await call(EchoModel(), "/v1beta/models/echo:embedContent", {})
    assert reply.status == 404
    assert json.loads(reply.body)["error"]["code"] == "unknown_url"


# -- streams: the end hook, a client that leaves ------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=ids)
async def test_a_client_that_leaves_cancels_the_stream(family: Family) -> None:
    ends: list[str] = []
    app = EchoModel(on_stream_end=ends.append)
    client = Client(json.dumps(family.request(TEXTS["long"], True)).encode(), fail_send_after=3)
    route, _, query = family.stream_path.partition("?")
    with pytest.raises(OSError, match="connection reset"):
        await app(http_scope(route, query_string=query.encode()), client.receive, client.send)
    assert ends == ["cancelled"]


async def test_a_paced_stream_sleeps_after_each_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr("streamstop.server._echo.anyio.sleep", sleep)
    body = {"inputs": "Hello, world!"}  # 4 pieces and the end of sequence: 5 events
    reply = await call(EchoModel(delay=0.25), "/generate_stream", body)
    assert reply.body.count(b"data:") == 5
    assert pauses == [0.25] * 5
