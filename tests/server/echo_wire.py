"""Reading what the echo model writes in each API family, checked against the SDKs' own types.

Each :class:`Family` says how to ask the echo for a text (streamed or whole) and how to read the
text back; :func:`events` splits a stream into ``(event name, payload)``. The readers validate
every payload with the family's SDK type where one is installed (anthropic, ollama, openai,
google-genai): a field the SDK needs and the echo lacks fails here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic.types
import ollama
import openai.types.responses
import pydantic
from google.genai import types as genai

_ANTHROPIC_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
    anthropic.types.RawMessageStreamEvent
)
_RESPONSES_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
    openai.types.responses.ResponseStreamEvent
)


def events(body: bytes) -> list[tuple[str | None, Any]]:
    """The ``(event name, JSON payload)`` of each SSE event of ``body`` (any line ends)."""
    out: list[tuple[str | None, Any]] = []
    text = body.decode().replace("\r\n", "\n")
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@dataclass(frozen=True)
class Family:
    """How to ask one API family's echo for ``text`` and read the text back."""

    name: str
    path: str  # of a whole response
    stream_path: str
    request: Callable[[str, bool], dict[str, Any]]
    whole_text: Callable[[Any], str]
    stream_text: Callable[[bytes], str]
    media_type: str  # of a stream


# -- readers, one per family ---------------------------------------------------------------------


def _anthropic_whole(payload: Any) -> str:
    message = anthropic.types.Message.model_validate(payload)
    assert message.stop_reason == "end_turn"
    return "".join(block.text for block in message.content if block.type == "text")


def _anthropic_stream(body: bytes) -> str:
    parsed = events(body)
    for name, payload in parsed:
        assert name == payload["type"]  # the event: line names the payload
        if name != "ping":  # the SDK reads pings apart from the stream's events
            _ANTHROPIC_EVENT.validate_python(payload)
    kinds = [payload["type"] for _, payload in parsed]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    return "".join(p["delta"]["text"] for _, p in parsed if p["type"] == "content_block_delta")


def _ollama_whole(chat: bool) -> Callable[[Any], str]:
    def read(payload: Any) -> str:
        if chat:
            reply = ollama.ChatResponse.model_validate(payload)
            text = reply.message.content or ""
        else:
            generated = ollama.GenerateResponse.model_validate(payload)
            assert generated.context is not None  # the tokens so far, as Ollama sends
            text = generated.response or ""
        assert payload["done"] is True
        assert payload["done_reason"] == "stop"
        return text

    return read


def _ollama_stream(chat: bool) -> Callable[[bytes], str]:
    def read(body: bytes) -> str:
        lines = [json.loads(line) for line in body.splitlines()]
        assert body.endswith(b"\n")
        assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
        kind: Any = ollama.ChatResponse if chat else ollama.GenerateResponse
        parts = [kind.model_validate(line) for line in lines]
        assert parts[-1].done_reason == "stop"
        assert parts[-1].eval_count == len(lines) - 1
        if chat:
            return "".join(part.message.content or "" for part in parts)
        return "".join(part.response or "" for part in parts)

    return read


def _llamacpp_whole(payload: Any) -> str:
    assert payload["stop"] is True
    assert payload["stop_type"] == "eos"
    return str(payload["content"])


def _llamacpp_stream(body: bytes) -> str:
    parsed = [payload for _, payload in events(body)]
    assert not body.endswith(b"data: [DONE]\n\n")  # native: no OpenAI end marker
    assert [p["stop"] for p in parsed] == [False] * (len(parsed) - 1) + [True]
    assert parsed[-1]["content"] == ""
    assert parsed[-1]["stop_type"] == "eos"
    return "".join(p["content"] for p in parsed)


def _tgi_whole(payload: Any) -> str:
    assert set(payload) == {"generated_text"}  # details only when asked
    return str(payload["generated_text"])


def _tgi_stream(body: bytes) -> str:
    assert body.startswith(b"data:{")  # TGI writes no space after the colon
    parsed = [payload for _, payload in events(body)]
    assert [p["index"] for p in parsed] == list(range(1, len(parsed) + 1))
    assert parsed[-1]["token"]["special"] is True  # the end of sequence
    text = "".join(p["token"]["text"] for p in parsed if not p["token"]["special"])
    assert [p["generated_text"] for p in parsed] == [None] * (len(parsed) - 1) + [text]
    return text


def _responses_whole(payload: Any) -> str:
    response = openai.types.responses.Response.model_validate(payload)
    assert response.status == "completed"
    return response.output_text


def _responses_stream(body: bytes) -> str:
    parsed = events(body)
    checked = [_RESPONSES_EVENT.validate_python(payload) for _, payload in parsed]
    assert [name for name, _ in parsed] == [event.type for event in checked]
    assert [event.sequence_number for event in checked] == list(range(len(checked)))
    assert checked[-1].type == "response.completed"
    text = "".join(e.delta for e in checked if e.type == "response.output_text.delta")
    assert checked[-1].response.output_text == text
    return text


def _gemini_whole(payload: Any) -> str:
    response = genai.GenerateContentResponse.model_validate(payload)
    assert response.candidates
    assert response.candidates[0].finish_reason == genai.FinishReason.STOP
    return response.text or ""


def _gemini_chunks_text(chunks: list[Any]) -> str:
    responses = [genai.GenerateContentResponse.model_validate(chunk) for chunk in chunks]
    last = responses[-1].candidates
    assert last
    assert last[0].finish_reason == genai.FinishReason.STOP
    return "".join(response.text or "" for response in responses)


def _gemini_stream(body: bytes) -> str:
    assert body.endswith(b"\r\n\r\n")
    return _gemini_chunks_text([payload for _, payload in events(body)])


def _gemini_array(body: bytes) -> str:
    chunks = json.loads(body)
    assert isinstance(chunks, list)
    return _gemini_chunks_text(chunks)


def _gemini_request(text: str, stream: bool) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


FAMILIES = [
    Family(
        "anthropic",
        "/v1/messages",
        "/v1/messages",
        lambda text, stream: {
            "model": "echo",
            "max_tokens": 4096,
            "messages": _user(text),
            "stream": stream,
        },
        _anthropic_whole,
        _anthropic_stream,
        "text/event-stream; charset=utf-8",
    ),
    *(
        Family(
            f"ollama-{kind}",
            f"/api/{kind}",
            f"/api/{kind}",
            (lambda text, stream: {"model": "echo", "messages": _user(text), "stream": stream})
            if kind == "chat"
            else (lambda text, stream: {"model": "echo:latest", "prompt": text, "stream": stream}),
            _ollama_whole(kind == "chat"),
            _ollama_stream(kind == "chat"),
            "application/x-ndjson",
        )
        for kind in ("chat", "generate")
    ),
    *(
        Family(
            f"llama.cpp {path}",
            path,
            path,
            lambda text, stream: {"prompt": text, "stream": stream},
            _llamacpp_whole,
            _llamacpp_stream,
            "text/event-stream; charset=utf-8",
        )
        for path in ("/completion", "/completions")
    ),
    Family(
        "tgi",
        "/generate",
        "/generate_stream",
        lambda text, stream: {"inputs": text, "parameters": {"temperature": 0.5}},
        _tgi_whole,
        _tgi_stream,
        "text/event-stream",
    ),
    Family(
        "responses",
        "/v1/responses",
        "/v1/responses",
        lambda text, stream: {
            "model": "echo",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
            "stream": stream,
        },
        _responses_whole,
        _responses_stream,
        "text/event-stream; charset=utf-8",
    ),
    Family(
        "gemini sse",
        "/v1beta/models/echo:generateContent",
        "/v1beta/models/echo:streamGenerateContent?alt=sse",
        _gemini_request,
        _gemini_whole,
        _gemini_stream,
        "text/event-stream; charset=utf-8",
    ),
    Family(
        "gemini array",
        "/v1beta/models/echo:generateContent",
        "/v1beta/models/echo:streamGenerateContent",
        _gemini_request,
        _gemini_whole,
        _gemini_array,
        "application/json; charset=UTF-8",
    ),
]
