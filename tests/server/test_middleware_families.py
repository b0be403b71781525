"""StopMiddleware holds a family for every filtered path, OpenAI's included: the filter of a
stream is the family's (made once per stream), the path tables decide which family it is, and
the error shapes are the family's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamstop._families import FAMILIES
from streamstop._family import Family, FamilyStream
from streamstop._family_openai import OpenAI
from streamstop._stream_filter import StreamFilter
from streamstop.chat import SSEFilter

from .conftest import Client, http_scope
from .test_middleware import App, request, run, sse, text_of

pytestmark = pytest.mark.anyio


def _anthropic_events(*texts: str) -> bytes:
    events = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
            for t in texts
        ),
    ]
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
    )


# path, request body, what the app streams, the filter's class
STREAMS = {
    "openai": ("/v1/chat/completions", request(), sse(*["tok "] * 50), SSEFilter),
    "anthropic": (
        "/v1/messages",
        json.dumps({"model": "c", "stream": True, "stop_sequences": ["</s>"]}).encode(),
        _anthropic_events(*["tok "] * 50),
        FamilyStream,
    ),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
async def test_the_filter_is_the_familys_made_once_per_stream(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, body, events, core = STREAMS[name]
    family = type(FAMILIES[name])
    made: list[StreamFilter] = []
    original = family.stream_filter

    def counted(self: Family, *args: Any, **options: Any) -> StreamFilter:
        made.append(original(self, *args, **options))
        return made[-1]

    monkeypatch.setattr(family, "stream_filter", counted)
    pieces = [events[i : i + 40] for i in range(0, len(events), 40)]  # many bodies
    client = Client(body)
    await run(App(pieces), client, scope=http_scope(path))
    assert len(pieces) > 50
    assert [type(stream) for stream in made] == [core]  # one filter, not one per body
    assert client.body.count(b"tok ") == 50


async def test_a_path_mapped_to_the_openai_family_is_filtered_as_openai() -> None:
    app = App([sse("Hi</s>junk")])
    client = Client(request(stop_arm_after=None, n=1))
    await run(app, client, scope=http_scope("/my/chat"), family_paths={"/my/chat": "openai"})
    assert text_of(client.body) == "Hi"
    assert client.body.endswith(b"data: [DONE]\n\n")
    assert b'"stop_reason":"</s>"' in client.body
    forwarded = json.loads(app.request_body)
    assert "stop" not in forwarded
    assert "stop_arm_after" not in forwarded


async def test_paths_are_openais_even_where_family_paths_names_another() -> None:
    app = App([sse("a</s>b")])
    client = Client(request())
    scope = http_scope("/x")
    await run(app, client, scope=scope, paths=["/x"], family_paths={"/x": "anthropic"})
    assert text_of(client.body) == "a"


async def test_a_path_of_no_family_passes_untouched() -> None:
    body = sse("a</s>b")
    app = App([body])
    client = Client(request())
    await run(app, client, scope=http_scope("/v1/embeddings"))
    assert client.body == body
    assert app.request_body == request()


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "openai"),
        ("/api/chat", "openai"),
        ("/v1beta/models/g:generateContent", "google"),
    ],
)
async def test_a_body_over_the_limit_is_a_413_naming_its_setting_in_the_familys_shape(
    path: str, shape: str
) -> None:
    app = App([])
    client = Client([b"x" * 600, b"x" * 600])
    await run(app, client, scope=http_scope(path), max_body_size=1000)
    assert client.status == 413
    error = json.loads(client.body)["error"]
    assert "max_body_bytes=1000" in error["message"]
    if shape == "openai":
        assert (error["type"], error["code"]) == (
            "invalid_request_error",
            "max_body_bytes_exceeded",
        )
    else:
        assert (error["code"], error["status"]) == (413, "INVALID_ARGUMENT")
        reasons = [detail.get("reason") for detail in error["details"]]
        assert "MAX_BODY_BYTES_EXCEEDED" in reasons
    assert app.receive is None


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/embeddings"])
async def test_the_proxy_answers_a_path_of_no_family_in_openais_error_shape(path: str) -> None:
    from streamstop.server import ProxyApp

    # Port 1: refused at once, so the proxy writes its own 502.
    proxy = ProxyApp("http://127.0.0.1:1", forward_other=True, timeout=5.0)
    client = Client(b"{}")
    try:
        await proxy(http_scope(path, method="GET"), client.receive, client.send)
    finally:
        await proxy.aclose()
    assert client.status == 502
    error = json.loads(client.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "upstream_unreachable")


def test_the_openai_family_is_the_one_for_openais_paths() -> None:
    from streamstop.server._middleware import DEFAULT_PATHS

    assert DEFAULT_PATHS == ("/v1/chat/completions", "/v1/completions", "/chat/completions")
    assert isinstance(FAMILIES["openai"], OpenAI)
