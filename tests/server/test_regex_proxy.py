"""stop_regex and stop_arm_after through ``streamstop proxy`` (StopMiddleware in front of
ProxyApp, in front of the bare echo model, which knows neither field), driven by the ``openai``
client on Chat Completions, Completions and Responses: the fields go in ``extra_body``, as for
SGLang; ``stop_reason`` names the pattern that fired."""

from __future__ import annotations

import openai
import pytest

from .conftest import LiveServer, client_for, user

TEXT = "<think>\nQuestion 1: is it 6*7?</think>Answer: 42.\nQuestion 2: next"
RULES = {"stop_regex": [r"\nQuestion \d{1,3}:"], "stop_arm_after": "</think>"}
EXPECTED = "<think>\nQuestion 1: is it 6*7?</think>Answer: 42."


@pytest.mark.asyncio
async def test_a_stream_and_a_whole_response_through_the_proxy(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT), stream=True, extra_body=RULES
        )
        chunks = [chunk async for chunk in stream]
        whole = await client.completions.create(model="echo", prompt=TEXT, extra_body=RULES)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == EXPECTED
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (whole.choices[0].text, whole.choices[0].finish_reason) == (EXPECTED, "stop")


@pytest.mark.asyncio
async def test_an_unbounded_pattern_is_a_400_naming_the_field(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        with pytest.raises(openai.BadRequestError) as error:
            await client.chat.completions.create(
                model="echo", messages=user("hi"), extra_body={"stop_regex": "a.*b"}
            )
    assert error.value.param == "stop_regex"
    assert error.value.code == "invalid_stop_regex"


@pytest.mark.asyncio
async def test_the_responses_api_through_the_proxy(proxy_server: LiveServer) -> None:
    async with client_for(proxy_server) as client:
        stream = await client.responses.create(
            model="echo", input=TEXT, stream=True, extra_body=RULES
        )
        deltas = [
            event.delta async for event in stream if event.type == "response.output_text.delta"
        ]
        whole = await client.responses.create(model="echo", input=TEXT, extra_body=RULES)
    assert "".join(deltas) == EXPECTED
    assert whole.output_text == EXPECTED
    assert getattr(whole, "stop_reason", None) == RULES["stop_regex"][0]
