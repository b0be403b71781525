"""What ``streamstop serve`` runs (the echo model behind StopMiddleware) in every API family, on
a real uvicorn server, read by the real clients: anthropic, ollama, openai (Responses) and
google-genai; llama.cpp and TGI, which have none offline, by raw httpx.

The four families the middleware filters (Anthropic, Ollama, llama.cpp, TGI) are asked with
more stops than their APIs allow, streamed and whole, and a cut must close the echo: its stream
ends ``cancelled``. Responses and Gemini are echoed without stops here.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from .conftest import LiveServer, StreamEnds, client_for

TEXT = "The answer is 42.\n\nHuman: ignore that <|im_end|> and ### then Observation: more </s>"
STOPS = ["</s>", "<|im_end|>", "\n\nHuman:", "###", "Observation:", "STOP"]  # more than 4
EXPECTED = "The answer is 42."


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# -- Anthropic -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_anthropic_stream_is_cut_and_the_echo_stopped(
    echo_server: LiveServer, echo_ends: StreamEnds
) -> None:
    cancelled = echo_ends.count("cancelled")
    client = anthropic.AsyncAnthropic(base_url=echo_server.base_url, api_key="k", max_retries=0)
    async with client:
        stream: Any = await client.messages.create(
            model="echo", max_tokens=1024, messages=user(TEXT), stop_sequences=STOPS, stream=True
        )
        events = [event async for event in stream]
        async with client.messages.stream(
            model="echo", max_tokens=1024, messages=user(TEXT), stop_sequences=STOPS
        ) as helper:
            text = "".join([piece async for piece in helper.text_stream])
            final = await helper.get_final_message()
        whole = await client.messages.create(
            model="echo", max_tokens=1024, messages=user(TEXT), stop_sequences=STOPS
        )
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]
    assert "".join(deltas) == EXPECTED
    assert [e.type for e in events][-2:] == ["message_delta", "message_stop"]
    assert events[-2].delta.stop_reason == "stop_sequence"
    assert events[-2].delta.stop_sequence == "\n\nHuman:"
    assert text == EXPECTED
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "\n\nHuman:")
    assert whole.content[0].text == EXPECTED  # type: ignore[union-attr]
    assert whole.stop_reason == "stop_sequence"
    await echo_ends.wait_for("cancelled", cancelled + 2)


@pytest.mark.asyncio
async def test_anthropic_without_stops_gets_the_whole_echo(echo_server: LiveServer) -> None:
    client = anthropic.AsyncAnthropic(base_url=echo_server.base_url, api_key="k", max_retries=0)
    async with client:
        message = await client.messages.create(model="echo", max_tokens=5, messages=user(TEXT))
        with pytest.raises(anthropic.NotFoundError, match="claude-x"):
            await client.messages.create(model="claude-x", max_tokens=5, messages=user("x"))
    assert message.stop_reason == "max_tokens"  # 5 pieces: the echo's own cap
    assert message.content[0].text == TEXT[: len(message.content[0].text)]  # type: ignore[union-attr]


# -- Ollama --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_ollama_chat_and_generate(echo_server: LiveServer, echo_ends: StreamEnds) -> None:
    cancelled = echo_ends.count("cancelled")
    async with ollama.AsyncClient(host=echo_server.base_url) as client:
        stream = await client.chat(
            model="echo", messages=user(TEXT), options={"stop": STOPS}, stream=True
        )
        parts = [part async for part in stream]
        generated = await client.generate(model="echo", prompt=TEXT, options={"stop": STOPS})
        chat = await client.chat(model="echo:latest", messages=user(TEXT), options={"stop": STOPS})
        with pytest.raises(ollama.ResponseError) as error:
            await client.chat(model="llama3.2", messages=user("x"))
    assert "".join(part.message.content or "" for part in parts) == EXPECTED
    assert (parts[-1].done, parts[-1].done_reason) == (True, "stop")
    assert generated.response == EXPECTED
    assert chat.message.content == EXPECTED
    await echo_ends.wait_for("cancelled", cancelled + 1)
    assert error.value.status_code == 404
    assert "llama3.2" in error.value.error


# -- llama.cpp and TGI (httpx) -------------------------------------------------------------------


def data_events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith(b"data:")]


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/completion", "/completions"])
async def test_llamacpp_stream_and_whole(
    echo_server: LiveServer, echo_ends: StreamEnds, path: str
) -> None:
    cancelled = echo_ends.count("cancelled")
    async with httpx.AsyncClient(base_url=echo_server.base_url) as client:
        streamed = await client.post(path, json={"prompt": TEXT, "stop": STOPS, "stream": True})
        whole = await client.post(path, json={"prompt": [TEXT, "a STOP b"], "stop": STOPS})
    events = data_events(streamed.content)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "".join(event["content"] for event in events) == EXPECTED
    assert (events[-1]["stop"], events[-1]["stop_type"]) == (True, "word")
    assert events[-1]["stopping_word"] == "\n\nHuman:"
    await echo_ends.wait_for("cancelled", cancelled + 1)
    assert [result["content"] for result in whole.json()] == [EXPECTED, "a "]
    assert [result["stopping_word"] for result in whole.json()] == ["\n\nHuman:", "STOP"]


@pytest.mark.asyncio
async def test_tgi_generate_stream_and_generate(
    echo_server: LiveServer, echo_ends: StreamEnds
) -> None:
    cancelled = echo_ends.count("cancelled")
    body = {"inputs": TEXT, "parameters": {"stop": STOPS, "details": True}}
    async with httpx.AsyncClient(base_url=echo_server.base_url) as client:
        streamed = await client.post("/generate_stream", json=body)
        whole = await client.post("/generate", json=body)
        plain = await client.post("/generate", json={"inputs": "no stops </s> here"})
    events = data_events(streamed.content)
    assert "".join(event["token"]["text"] for event in events) == EXPECTED
    assert events[-1]["generated_text"] == EXPECTED
    assert events[-1]["details"]["finish_reason"] == "stop_sequence"
    await echo_ends.wait_for("cancelled", cancelled + 1)
    assert whole.json()["generated_text"] == EXPECTED
    assert whole.json()["details"]["finish_reason"] == "stop_sequence"
    assert plain.json() == {"generated_text": "no stops </s> here"}


# -- Responses and Gemini: echoed whole (their stop filters are not in this tree yet) -----------


@pytest.mark.asyncio
async def test_responses_events_helper_and_whole(
    echo_server: LiveServer, echo_ends: StreamEnds
) -> None:
    completed = echo_ends.count("completed")
    async with client_for(echo_server) as client:
        stream = await client.responses.create(model="echo", input=TEXT, stream=True)
        events = [event async for event in stream]
        async with client.responses.stream(
            model="echo", input=[{"role": "user", "content": TEXT}], instructions="Be brief."
        ) as helper:
            final = await helper.get_final_response()
        whole = await client.responses.create(model="echo", input=TEXT)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="gpt-5", input="x")
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == TEXT
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == TEXT
    assert final.instructions == "Be brief."
    assert whole.output_text == TEXT
    assert whole.usage is not None
    assert whole.usage.output_tokens == len(deltas)
    await echo_ends.wait_for("completed", completed + 2)


@pytest.mark.asyncio
async def test_gemini_stream_and_whole(echo_server: LiveServer) -> None:
    async with httpx.AsyncClient() as http:  # (with aiohttp installed, genai would pick it)
        options = genai_types.HttpOptions(base_url=echo_server.base_url, httpx_async_client=http)
        client = genai.Client(api_key="k", http_options=options)
        config = genai_types.GenerateContentConfig(
            candidate_count=2, system_instruction="Be brief."
        )
        chunks = [
            chunk
            async for chunk in await client.aio.models.generate_content_stream(
                model="echo", contents=TEXT, config=config
            )
        ]
        whole = await client.aio.models.generate_content(model="echo", contents=TEXT)
        with pytest.raises(genai.errors.ClientError) as error:
            await client.aio.models.generate_content(model="gemini-2.5-flash", contents="x")
    texts: dict[int, str] = {0: "", 1: ""}
    for chunk in chunks:
        for candidate in chunk.candidates or []:
            assert candidate.content is not None
            assert candidate.index is not None
            texts[candidate.index] += "".join(p.text or "" for p in candidate.content.parts or [])
    assert texts == {0: TEXT, 1: TEXT}
    last = chunks[-1].candidates
    assert last is not None
    assert {c.finish_reason for c in last} == {genai_types.FinishReason.STOP}
    assert whole.text == TEXT
    assert whole.usage_metadata is not None
    assert whole.usage_metadata.candidates_token_count
    assert error.value.code == 404
