"""Reasoning models on Chat Completions (o3, o4-mini, the gpt-5 family) reject ``stop``: through
``streamstop proxy`` (the app the command builds, served by uvicorn) in front of a fake one
that answers as they do (tests/server/fake_reasoning.py), requests with any number of stops
succeed and are cut, streamed and whole, each cut saying its stop in ``stop_reason``;
``--forward-stop`` sends the stops on and gets the model's 400 back. Driven by the ``openai``
client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from streamstop._cli import build_parser
from streamstop.server._commands import build_app, settings_of

from .conftest import LiveServer, StreamEnds, client_for, user
from .fake_families import FOREVER, pieces
from .fake_reasoning import REASONING_TOKENS, REJECTED_STOP, FakeReasoningModel

# Six stops: OpenAI's own cap is 4, and these models take none.
STOPS = ["</s>", "<|im_end|>", "\n\nUser:", "###", "Observation:", "<|endoftext|>"]
TEXT = "The plan is ready.<|im_end|>\n\nUser: more ### </s>"
EXPECTED = "The plan is ready."
FIRED = "<|im_end|>"  # of the stops, the one that ends first in TEXT


def _served(argv: list[str]) -> Iterator[LiveServer]:
    args = build_parser().parse_args(argv)
    server = LiveServer(build_app(settings_of(args.parser, args, {}))).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def ends() -> StreamEnds:
    return StreamEnds()


@pytest.fixture(scope="module")
def model(ends: StreamEnds) -> FakeReasoningModel:
    return FakeReasoningModel(on_stream_end=ends)


@pytest.fixture(scope="module")
def upstream(model: FakeReasoningModel) -> Iterator[LiveServer]:
    server = LiveServer(model).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def proxy(upstream: LiveServer) -> Iterator[LiveServer]:
    """``streamstop proxy --upstream <the reasoning model>``."""
    yield from _served(["proxy", "--upstream", upstream.url])


@pytest.fixture(scope="module")
def forwarding_proxy(upstream: LiveServer) -> Iterator[LiveServer]:
    """``streamstop proxy --upstream <the reasoning model> --forward-stop``."""
    yield from _served(["proxy", "--upstream", upstream.url, "--forward-stop"])


def _is_rejected_stop(error: openai.BadRequestError) -> bool:
    # The client gives the body's "error" object as .body.
    return error.status_code == 400 and error.body == REJECTED_STOP["error"]


@pytest.mark.asyncio
async def test_the_fake_model_rejects_stop_as_the_live_api_does(upstream: LiveServer) -> None:
    async with client_for(upstream) as client:
        with pytest.raises(openai.BadRequestError) as rejected:
            await client.chat.completions.create(model="o3", messages=user("x"), stop=["."])
        whole = await client.chat.completions.create(model="o3", messages=user("a.b"))
    assert _is_rejected_stop(rejected.value)
    error = rejected.value
    assert (error.type, error.param, error.code) == (
        "invalid_request_error",
        "stop",
        "unsupported_parameter",
    )
    assert whole.choices[0].message.content == "a.b"


@pytest.mark.asyncio
async def test_a_stream_with_six_stops_is_cut_and_the_model_closed(
    proxy: LiveServer, model: FakeReasoningModel, ends: StreamEnds
) -> None:
    cancelled = ends.count("cancelled")
    async with client_for(proxy) as client:
        stream = await client.chat.completions.create(
            model="o4-mini",
            messages=user(TEXT + FOREVER),  # the model would stream until stopped
            stop=STOPS,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    texts = [chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices]
    assert "".join(texts) == EXPECTED
    *_, cut, usage = chunks
    (choice,) = cut.choices
    assert (choice.finish_reason, choice.model_extra) == ("stop", {"stop_reason": FIRED})
    assert cut.obfuscation is not None  # the model's own fields pass
    assert usage.choices == []
    assert usage.usage is not None
    # Counted as the model's pieces up to the one that completed the stop: its own usage,
    # after its end, never came.
    assert usage.usage.completion_tokens == len(pieces(TEXT[: TEXT.index(FIRED) + len(FIRED)]))
    assert "stop" not in model.requests[-1]
    await ends.wait_for("cancelled", cancelled + 1)


@pytest.mark.asyncio
async def test_a_whole_response_with_six_stops_is_cut(
    proxy: LiveServer, model: FakeReasoningModel
) -> None:
    async with client_for(proxy) as client:
        whole = await client.chat.completions.create(model="gpt-5", messages=user(TEXT), stop=STOPS)
    (choice,) = whole.choices
    assert choice.message.content == EXPECTED
    assert (choice.finish_reason, choice.model_extra) == ("stop", {"stop_reason": FIRED})
    assert whole.usage is not None
    assert whole.usage.completion_tokens_details is not None
    assert whole.usage.completion_tokens_details.reasoning_tokens == REASONING_TOKENS
    assert "stop" not in model.requests[-1]


@pytest.mark.asyncio
@pytest.mark.parametrize("stops", [STOPS, ["</s>"], "</s>"], ids=["six", "one", "a string"])
async def test_forward_stop_gets_the_models_400_back(
    forwarding_proxy: LiveServer, model: FakeReasoningModel, stops: Any
) -> None:
    async with client_for(forwarding_proxy) as client:
        with pytest.raises(openai.BadRequestError) as streamed:
            await client.chat.completions.create(
                model="o3", messages=user(TEXT), stop=stops, stream=True
            )
        assert model.requests[-1]["stop"] == stops
        with pytest.raises(openai.BadRequestError) as whole:
            await client.chat.completions.create(model="o3", messages=user(TEXT), stop=stops)
    assert _is_rejected_stop(streamed.value)
    assert _is_rejected_stop(whole.value)


@pytest.mark.asyncio
async def test_without_stops_the_response_is_the_models(proxy: LiveServer) -> None:
    async with client_for(proxy) as client:
        whole = await client.chat.completions.create(model="o3", messages=user(TEXT))
        stream = await client.chat.completions.create(model="o3", messages=user(TEXT), stream=True)
        chunks = [chunk async for chunk in stream]
    assert whole.choices[0].message.content == TEXT
    assert whole.choices[0].model_extra == {}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].model_extra == {}  # no stop_reason: no stop of ours fired
