"""The stop hook in the real LiteLLM proxy, in front of a provider that refuses ``stop``.

Each route is asked with six stops, streamed and whole: the client (the ``openai`` and
``anthropic`` packages) gets the text cut at the first stop, no byte of a stop crosses the wire,
the provider never sees ``stop`` (it would answer 400) and its stream is closed at the cut. A
request without stops passes untouched.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import pytest_asyncio

from tests.server.conftest import StreamEnds

from ..server.fake_families import FOREVER
from .conftest import SKIP_REASON, Gateway

pytest.importorskip("litellm", reason=SKIP_REASON)

# Integration tests: asyncio, as the clients' transports are (see tests/conftest.py).
pytestmark = pytest.mark.asyncio

# Six stops: more than OpenAI's four. The text reaches "</s>" first; the stream goes on without
# end after it ([forever]), so only a closed upstream ends it.
STOPS = ["<|im_end|>", "\nUser:", "###", "</s>", "[END]", "Observation:"]
TEXT = "The answer is 42.</s>and what follows must not leak"
CUT = "The answer is 42."
# The first character of the stop that fires: held back, never sent.
STOP_START = "<"


@pytest_asyncio.fixture
async def client(gateway: Gateway) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=gateway.url, api_key=gateway.master_key, max_retries=0
    ) as api:
        yield api


@pytest_asyncio.fixture
async def claude(gateway: Gateway) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0
    ) as api:
        yield api


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def last_request(gateway: Gateway) -> dict[str, Any]:
    return gateway.provider.requests[-1][1]


def wire_text(wire: str) -> list[str]:
    """The pieces of text in the ``data:`` lines of an SSE body: a chat chunk's
    ``delta.content``, a completion's ``text``, an Anthropic ``text_delta``'s ``text``."""
    pieces = []
    for line in wire.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line.removeprefix("data: "))
        for choice in event.get("choices") or ():
            text = (choice.get("delta") or {}).get("content") or choice.get("text")
            if text:
                pieces.append(text)
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            pieces.append(delta["text"])
    return pieces


async def closed_at_the_cut(ends: StreamEnds, before: int) -> None:
    """The provider's stream (endless after the text) ended because its client left."""
    await ends.wait_for("cancelled", before + 1)


# -- chat completions ----------------------------------------------------------------------------


async def test_a_streamed_chat_is_cut_and_the_provider_closed(
    gateway: Gateway, client: openai.AsyncOpenAI
) -> None:
    before = gateway.provider.ends.count("cancelled")
    stream = await client.chat.completions.create(
        model="reasoner", messages=user(TEXT + FOREVER), stop=STOPS, stream=True
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == CUT
    last = next(c.choices[0] for c in reversed(chunks) if c.choices)
    assert last.finish_reason == "stop"
    assert (last.model_extra or {}).get("stop_reason") == "</s>"
    assert "stop" not in last_request(gateway)
    await closed_at_the_cut(gateway.provider.ends, before)


async def test_a_whole_chat_is_cut(gateway: Gateway, client: openai.AsyncOpenAI) -> None:
    response = await client.chat.completions.create(
        model="reasoner", messages=user(TEXT), stop=STOPS
    )
    choice = response.choices[0]
    assert choice.message.content == CUT
    assert choice.finish_reason == "stop"
    assert (choice.model_extra or {}).get("stop_reason") == "</s>"
    assert "stop" not in last_request(gateway)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_chat_without_stops_is_untouched(
    gateway: Gateway, client: openai.AsyncOpenAI, stream: bool
) -> None:
    if stream:
        chunks = [
            chunk
            async for chunk in await client.chat.completions.create(
                model="reasoner", messages=user(TEXT), stream=True
            )
        ]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        extras = [c.choices[0].model_extra or {} for c in chunks if c.choices]
    else:
        response = await client.chat.completions.create(model="reasoner", messages=user(TEXT))
        text = response.choices[0].message.content or ""
        extras = [response.choices[0].model_extra or {}]
    assert text == TEXT
    assert all("stop_reason" not in extra for extra in extras)
    assert "stop" not in last_request(gateway)


# -- legacy completions --------------------------------------------------------------------------


async def test_a_streamed_text_completion_is_cut_and_the_provider_closed(
    gateway: Gateway,
    client: openai.AsyncOpenAI,
) -> None:
    before = gateway.provider.ends.count("cancelled")
    stream = await client.completions.create(
        model="reasoner-text", prompt=TEXT + FOREVER, stop=STOPS, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text or "" for c in chunks if c.choices) == CUT
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].choices[0].model_extra or {}).get("stop_reason") == "</s>"
    await closed_at_the_cut(gateway.provider.ends, before)


async def test_a_whole_text_completion_is_cut(gateway: Gateway, client: openai.AsyncOpenAI) -> None:
    response = await client.completions.create(model="reasoner-text", prompt=TEXT, stop=STOPS)
    assert response.choices[0].text == CUT
    assert response.choices[0].finish_reason == "stop"
    assert "stop" not in last_request(gateway)


# -- the wire ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "reasoner", "messages": user(TEXT + FOREVER)}),
        ("/v1/completions", {"model": "reasoner-text", "prompt": TEXT + FOREVER}),
        (
            "/v1/messages",
            {"model": "reasoner-chat", "max_tokens": 100, "messages": user(TEXT + FOREVER)},
        ),
    ],
    ids=["chat", "completions", "messages"],
)
async def test_no_part_of_a_stop_crosses_the_wire(
    gateway: Gateway, path: str, body: dict[str, Any]
) -> None:
    field = "stop_sequences" if path == "/v1/messages" else "stop"
    before = gateway.provider.ends.count("cancelled")
    async with (
        httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as http,
        http.stream(
            "POST",
            path,
            json={**body, field: STOPS, "stream": True},
            headers={"authorization": f"Bearer {gateway.master_key}"},
        ) as response,
    ):
        assert response.status_code == 200
        wire = (await response.aread()).decode()
    pieces = wire_text(wire)
    assert "".join(pieces) == CUT
    assert not [piece for piece in pieces if STOP_START in piece]  # held, never sent
    assert "leak" not in wire
    await closed_at_the_cut(gateway.provider.ends, before)


# -- Anthropic messages --------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["reasoner-chat", "claude"], ids=["translated", "anthropic"])
async def test_a_streamed_message_is_cut_and_the_provider_closed(
    gateway: Gateway, claude: anthropic.AsyncAnthropic, model: str
) -> None:
    ends = gateway.provider.ends if model == "reasoner-chat" else gateway.anthropic_ends
    before = ends.count("cancelled")
    async with claude.messages.stream(
        model=model, max_tokens=100, messages=user(TEXT + FOREVER), stop_sequences=STOPS
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        message = await stream.get_final_message()
    assert text == CUT
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "</s>"
    await closed_at_the_cut(ends, before)


@pytest.mark.parametrize("model", ["reasoner-chat", "claude"], ids=["translated", "anthropic"])
async def test_a_whole_message_is_cut(
    gateway: Gateway, claude: anthropic.AsyncAnthropic, model: str
) -> None:
    message = await claude.messages.create(
        model=model, max_tokens=100, messages=user(TEXT), stop_sequences=STOPS
    )
    assert [block.text for block in message.content if block.type == "text"] == [CUT]
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "</s>"
    if model == "claude":
        assert "stop_sequences" not in gateway.anthropic.requests[-1][1]


# -- refusals ------------------------------------------------------------------------------------


async def test_too_many_stops_is_a_400_naming_the_limit(
    gateway: Gateway, client: openai.AsyncOpenAI
) -> None:
    stops = [f"<stop{i}>" for i in range(1025)]
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="reasoner", messages=user(TEXT), stop=stops)
    assert raised.value.status_code == 400
    assert "max_stops=1024" in raised.value.message
    assert "1025 stop strings" in raised.value.message
    assert raised.value.param == "stop"


async def test_a_stop_of_the_wrong_type_is_a_400(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as http:
        response = await http.post(
            "/v1/chat/completions",
            json={"model": "reasoner", "messages": user(TEXT), "stop": 7},
            headers={"authorization": f"Bearer {gateway.master_key}"},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == (
        "Invalid type for 'stop': expected a string or an array of strings, got 7."
    )
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "stop"
