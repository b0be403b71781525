"""A fake OpenAI reasoning model (o3, o4-mini, the gpt-5 family) on Chat Completions: it
rejects ``stop`` as the live API does, and otherwise answers as it does.

The 400 is the live API's, word for word (as reported by smolagents, crewAI and dify users):
``{"error": {"message": "Unsupported parameter: 'stop' is not supported with this model.",
"type": "invalid_request_error", "param": "stop", "code": "unsupported_parameter"}}``. A
``stop`` of ``null`` counts as not given.

Streams are shaped as the ``openai`` SDK's ``ChatCompletionChunk`` documents them: a first
chunk with the role and ``content: ""``, then content deltas, then an empty delta with
``finish_reason: "stop"``, a usage chunk (``choices: []``, with ``reasoning_tokens``) when
``stream_options.include_usage`` is set, and ``data: [DONE]``; every chunk carries
``service_tier``, ``system_fingerprint`` and an ``obfuscation`` string (sent unless
``stream_options.include_obfuscation`` is false). No reasoning text is streamed: Chat
Completions shows none, it is only counted. A whole response is a ``chat.completion``.

The model echoes the last user message in pieces of ``PIECE`` characters; a text holding
``[forever]`` is echoed without it, then padded with `` more`` until the client leaves (a test
that a cut closes the upstream waits for ``"cancelled"``). Every request body is kept in
:attr:`FakeReasoningModel.requests`.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel

from streamstop.server import Receive, Scope, Send
from streamstop.server._asgi import call_until_disconnect, read_body, serve_lifespan

from .fake_families import FAKE_BODY_LIMIT, FOREVER, _json, _last_user_text, pieces

REJECTED_STOP = {
    "error": {
        "message": "Unsupported parameter: 'stop' is not supported with this model.",
        "type": "invalid_request_error",
        "param": "stop",
        "code": "unsupported_parameter",
    }
}
REASONING_TOKENS = 64  # counted, never shown, as on the live API


class FakeReasoningModel:
    def __init__(self, on_stream_end: Callable[[str], object] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.on_stream_end = on_stream_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive, FAKE_BODY_LIMIT)
        if body is None:
            return  # the client left before its request was whole
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _json(send, 404, _error(f"Invalid URL ({scope['method']} {scope['path']})"))
            return
        request = json.loads(body)
        self.requests.append(request)
        await call_until_disconnect(receive, lambda: self._answer(request, send))

    async def _answer(self, request: dict[str, Any], send: Send) -> None:
        if request.get("stop") is not None:
            await _json(send, 400, REJECTED_STOP)
            return
        text = _last_user_text(request.get("messages"))
        forever = FOREVER in text
        text = text.replace(FOREVER, "")
        head = {
            "id": f"chatcmpl-{secrets.token_hex(12)}",
            "created": int(time.time()),
            "model": str(request.get("model")),
            "service_tier": "default",
            "system_fingerprint": None,
        }
        usage = {
            "prompt_tokens": 12,
            "completion_tokens": len(pieces(text)) + REASONING_TOKENS,
            "total_tokens": 12 + len(pieces(text)) + REASONING_TOKENS,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": REASONING_TOKENS,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        if request.get("stream") is not True:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": [],
            }
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
            whole = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            await _json(send, 200, whole)
            return
        options = request.get("stream_options") or {}
        events = _events(
            head,
            text,
            forever,
            usage if options.get("include_usage") else None,
            options.get("include_obfuscation", True),
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
            }
        )
        outcome = "cancelled"  # the client left: call_until_disconnect cancelled this
        try:
            for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await anyio.lowlevel.checkpoint()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            outcome = "completed"
        finally:
            if self.on_stream_end is not None:
                self.on_stream_end(outcome)


def _events(
    head: dict[str, Any],
    text: str,
    forever: bool,
    usage: dict[str, Any] | None,
    obfuscation: bool,
) -> Iterator[bytes]:
    def chunk(choices: list[Any], **extra: Any) -> bytes:
        payload = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
        if obfuscation:
            payload["obfuscation"] = secrets.token_urlsafe(6)
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    def delta(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return chunk([choice])

    yield delta({"role": "assistant", "content": "", "refusal": None})
    for piece in pieces(text):
        yield delta({"content": piece})
    if forever:
        for _ in itertools.count():
            yield delta({"content": " more"})
    yield delta({}, "stop")
    if usage is not None:
        yield chunk([], usage=usage)
    yield b"data: [DONE]\n\n"


def _error(message: str) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }
