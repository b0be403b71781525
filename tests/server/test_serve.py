"""What ``streamstop serve`` runs (the echo model behind StopMiddleware), on a real uvicorn
server, driven by the official ``openai`` client and by raw ``httpx``."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import openai
import pytest

from .conftest import LONG_TEXT, LiveServer, StreamEnds, client_for, leave_after_events

# Integration tests, asyncio only (uvicorn and the clients): pytest-asyncio runs each
# ``async def test`` (marked one by one: the module has sync tests too).


TEXT = "The answer is 42.\n\nUser: ignore that <|im_end|> and ### then ### Observation: more </s>"
STOPS = ["</s>", "<|im_end|>", "\n\nUser:", "###", "Observation:", "STOP"]  # more than 4
EXPECTED = "The answer is 42."


def user(text: str) -> list[Any]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@pytest.mark.asyncio
async def test_chat_stream_with_more_than_four_stops(
    echo_server: LiveServer, echo_ends: StreamEnds
) -> None:
    cancelled = echo_ends.count("cancelled")
    async with client_for(echo_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == EXPECTED
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]
    # The middleware stopped the model as soon as the stop was seen.
    await echo_ends.wait_for("cancelled", cancelled + 1)


@pytest.mark.asyncio
async def test_chat_whole_response(echo_server: LiveServer) -> None:
    async with client_for(echo_server) as client:
        completion = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS
        )
    assert completion.choices[0].message.content == EXPECTED
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0


@pytest.mark.asyncio
async def test_legacy_completions_stream_and_whole(echo_server: LiveServer) -> None:
    async with client_for(echo_server) as client:
        stream = await client.completions.create(model="echo", prompt=TEXT, stop=STOPS, stream=True)
        text = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
        whole = await client.completions.create(model="echo", prompt=TEXT, stop=STOPS)
    assert text == EXPECTED
    assert whole.choices[0].text == EXPECTED
    assert whole.choices[0].finish_reason == "stop"


@pytest.mark.asyncio
async def test_n_equals_two(echo_server: LiveServer, echo_ends: StreamEnds) -> None:
    cancelled = echo_ends.count("cancelled")
    async with client_for(echo_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS, stream=True, n=2
        )
        texts = {0: "", 1: ""}
        finishes: dict[int, list[str]] = {0: [], 1: []}
        async for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finishes[choice.index].append(choice.finish_reason)
        whole = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stop=STOPS, n=2
        )
    assert texts == {0: EXPECTED, 1: EXPECTED}
    assert finishes == {0: ["stop"], 1: ["stop"]}
    assert [c.message.content for c in whole.choices] == [EXPECTED, EXPECTED]
    await echo_ends.wait_for("cancelled", cancelled + 1)


@pytest.mark.asyncio
async def test_no_stop_found_keeps_everything_and_the_usage_chunk(
    echo_server: LiveServer,
) -> None:
    async with client_for(echo_server) as client:
        stream = await client.chat.completions.create(
            model="echo",
            messages=user("nothing to cut here <|im"),
            stop=STOPS,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "nothing to cut here <|im"  # the held "<|im" was released at the end
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None


@pytest.mark.asyncio
async def test_held_text_comes_out_before_a_length_finish(echo_server: LiveServer) -> None:
    async with client_for(echo_server) as client:
        stream = await client.completions.create(
            model="echo", prompt="abc <|im_end|>", stop=STOPS, stream=True, max_tokens=2
        )
        chunks = [chunk async for chunk in stream]
    # Pieces "abc", " <" (max_tokens=2): " <" could begin "<|im_end|>", so "<" is held until
    # the model's own finish, and goes out with it.
    assert "".join(c.choices[0].text for c in chunks) == "abc <"
    last = chunks[-1].choices[0]
    assert (last.text, last.finish_reason) == ("<", "length")


@pytest.mark.asyncio
async def test_errors_reach_the_openai_client(echo_server: LiveServer) -> None:
    async with client_for(echo_server) as client:
        with pytest.raises(openai.BadRequestError) as bad_stop:
            await client.chat.completions.create(
                model="echo", messages=user("x"), extra_body={"stop": 3}
            )
        with pytest.raises(openai.NotFoundError) as no_model:
            await client.chat.completions.create(model="gpt-9", messages=user("x"), stop="x")
    assert bad_stop.value.status_code == 400
    assert isinstance(bad_stop.value.body, dict)
    assert bad_stop.value.body["param"] == "stop"
    assert "3" in bad_stop.value.body["message"]
    assert no_model.value.status_code == 404
    assert isinstance(no_model.value.body, dict)
    assert no_model.value.body["code"] == "model_not_found"


# -- raw HTTP ----------------------------------------------------------------------------------


def events_of(body: str) -> list[Any]:
    events: list[Any] = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block.removeprefix("data: ")
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.asyncio
async def test_raw_sse(echo_server: LiveServer) -> None:
    request = {"model": "echo", "stream": True, "stop": STOPS, "messages": user(TEXT)}
    async with (
        httpx.AsyncClient(base_url=echo_server.url) as client,
        client.stream("POST", "/chat/completions", json=request) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        body = (await response.aread()).decode()
    events = events_of(body)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == EXPECTED
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


BAD_REQUESTS = {
    "not json": (b'{"model": "echo", "stop": ', None, "parse the JSON body"),
    "not an object": (b'["model", "echo"]', None, "must be an object"),
    "stop a number": (b'{"model": "echo", "stop": 3}', "stop", "got 3"),
    "stop numbers": (b'{"model": "echo", "stop": [1, 2]}', "stop", "got [1, 2]"),
    "stop an object": (b'{"model": "echo", "stop": {"a": "b"}}', "stop", "got {'a': 'b'}"),
    "stop nested": (b'{"model": "echo", "stop": [["x"]]}', "stop", "got [['x']]"),
    "not utf-8": (b'{"model": "\xff"}', None, "parse the JSON body"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
@pytest.mark.asyncio
async def test_malformed_requests_get_openai_shaped_400s(
    echo_server: LiveServer, case: str
) -> None:
    body, param, message = BAD_REQUESTS[case]
    async with httpx.AsyncClient(base_url=echo_server.url) as client:
        for path in ("/chat/completions", "/completions"):
            response = await client.post(
                path, content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 400
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error"
            assert error["param"] == param
            assert message in error["message"]
        assert (await client.get("/models")).status_code == 200  # still serving


@pytest.mark.asyncio
async def test_echo_errors_and_untouched_paths(echo_server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=echo_server.base_url) as client:
        models = await client.get("/v1/models")
        assert models.json()["data"][0]["id"] == "echo"
        assert (await client.get("/v1/models/echo")).json()["id"] == "echo"
        unknown = await client.get("/v2/anything")
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "unknown_url"
        wrong_method = await client.get("/v1/chat/completions")
        assert wrong_method.status_code == 405
        assert wrong_method.headers["allow"] == "POST"
        bad_n = await client.post(
            "/v1/chat/completions", json={"model": "echo", "messages": user("x"), "n": 0}
        )
        assert bad_n.status_code == 400
        assert bad_n.json()["error"]["param"] == "n"
        no_user = await client.post(
            "/v1/chat/completions", json={"model": "echo", "messages": [], "stop": "x"}
        )
        assert no_user.status_code == 400
        assert no_user.json()["error"]["param"] == "messages"


@pytest.mark.parametrize("stop", [["NEVER"], None])
@pytest.mark.asyncio
async def test_client_disconnect_stops_the_model(
    slow_server: LiveServer, slow_ends: StreamEnds, stop: list[str] | None
) -> None:
    # Filtered (a stop given) or passed through (none): either way the model is stopped.
    cancelled = slow_ends.count("cancelled")
    request = {"model": "echo", "stream": True, "stop": stop, "messages": user(LONG_TEXT)}
    # The connection is closed halfway through a 30 s stream.
    await leave_after_events(slow_server.url, request, events=3)
    await slow_ends.wait_for("cancelled", cancelled + 1)


# Load: many sockets and streams at once, with timeouts; never beside another load
# test (tests/conftest.py).
@pytest.mark.xdist_group("load")
@pytest.mark.asyncio
async def test_two_hundred_concurrent_streams_are_all_cut(
    echo_server: LiveServer, echo_ends: StreamEnds
) -> None:
    count = 200
    cancelled = echo_ends.count("cancelled")
    results: dict[int, str] = {}
    expected: dict[int, str] = {}

    async def one(client: httpx.AsyncClient, i: int) -> None:
        # Each stream has its own stops and its own place to be cut.
        marker = f"<END{i}>"
        head = f"stream {i}: " + " ".join(f"w{j}" for j in range(i % 37 + 5))
        text = head + marker + " gone"
        stops = [marker, f"<never{i}>", "</s>", "<|im_end|>", "###"]
        expected[i] = head
        request = {"model": "echo", "stream": True, "stop": stops, "messages": user(text)}
        async with client.stream("POST", "/chat/completions", json=request) as response:
            body = (await response.aread()).decode()
        chunks = events_of(body)
        assert chunks[-1] == "[DONE]"
        results[i] = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1] if c["choices"]
        )

    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with (
        httpx.AsyncClient(base_url=echo_server.url, limits=limits, timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        for i in range(count):
            group.start_soon(one, client, i)
    assert results == expected
    assert all(not text.endswith("<END") and "gone" not in text for text in results.values())
    await echo_ends.wait_for("cancelled", cancelled + count)


@pytest.mark.asyncio
async def test_what_used_to_stall_the_server_is_a_quick_400(echo_server: LiveServer) -> None:
    # n x prompts once made 45 s of work and 5.6 GB; now each bound names its field and value.
    async with client_for(echo_server) as client:
        with pytest.raises(openai.BadRequestError) as many:
            await client.completions.create(model="echo", prompt=["p"] * 128, n=128)
        with pytest.raises(openai.BadRequestError) as long:
            await client.completions.create(model="echo", prompt="x" * 1_000_000, n=128)
        with pytest.raises(openai.BadRequestError) as tokens:
            await client.completions.create(model="echo", prompt="x", max_tokens=10**9)
        assert (await client.models.list()).data[0].id == "echo"  # still serving
    assert isinstance(many.value.body, dict)
    assert many.value.body["message"] == (
        "Invalid 'n': 128 choices for each of 128 prompts make 16384 choices, more than the "
        "128 of one response."
    )
    assert isinstance(long.value.body, dict)
    assert long.value.body["param"] == "n"
    assert "128 x 1000000 characters" in long.value.body["message"]
    assert isinstance(tokens.value.body, dict)
    assert tokens.value.body["param"] == "max_tokens"
