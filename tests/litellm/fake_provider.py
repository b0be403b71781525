"""A fake OpenAI-compatible provider for LiteLLM to route to, as the real API answers.

Shapes follow the ``openai`` package's types (``ChatCompletion``, ``ChatCompletionChunk``,
``Completion``) and OpenAI's API reference:

- ``POST /v1/chat/completions`` and ``POST /v1/completions``, whole or streamed (SSE ``data:``
  lines, a first chat chunk with ``role``, one chunk per piece of text, a last one with
  ``finish_reason: "stop"``, a ``usage`` chunk with no choices when
  ``stream_options.include_usage`` is set, then ``data: [DONE]``);
- a request with ``stop`` is refused as OpenAI refuses it for reasoning models: 400,
  ``Unsupported parameter: 'stop' is not supported with this model.``, type
  ``invalid_request_error``, param ``stop``, code ``unsupported_parameter``.

The model echoes the request's text (the last user message, or ``prompt``) in pieces of
``PIECE`` characters. A text containing ``[forever]`` is echoed without the marker, then padded
with `` more`` until the client leaves: a test that a cut closes the provider's stream waits for
``"cancelled"`` in :attr:`FakeProvider.ends` (a stream read to its end records ``"completed"``).
Every request body is kept in :attr:`FakeProvider.requests`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator
from typing import Any

import anyio.lowlevel

from streamstop.server import Receive, Scope, Send
from streamstop.server._asgi import call_until_disconnect, read_body, serve_lifespan
from tests.server.conftest import StreamEnds
from tests.server.fake_families import (
    FAKE_BODY_LIMIT,
    FOREVER,
    _json,
    _last_user_text,
    _text_pieces,
)

STOP_REFUSED = {
    "error": {
        "message": "Unsupported parameter: 'stop' is not supported with this model.",
        "type": "invalid_request_error",
        "param": "stop",
        "code": "unsupported_parameter",
    }
}


class FakeProvider:
    """The ASGI app of the fake provider (see the module's docstring)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.ends = StreamEnds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive, FAKE_BODY_LIMIT)
        if body is None:
            return  # the client left before its request was whole
        path = scope["path"]
        request = json.loads(body) if body else {}
        self.requests.append((path, request))
        if path not in ("/v1/chat/completions", "/v1/completions"):
            await _json(
                send,
                404,
                {
                    "error": {
                        "message": f"no route {path}",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if "stop" in request:
            await _json(send, 400, STOP_REFUSED)
            return
        chat = path == "/v1/chat/completions"
        await call_until_disconnect(receive, lambda: self._answer(chat, request, send))

    async def _answer(self, chat: bool, request: dict[str, Any], send: Send) -> None:
        text = _last_user_text(request.get("messages")) if chat else str(request.get("prompt"))
        head = {
            "id": "chatcmpl-fake" if chat else "cmpl-fake",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": str(request.get("model")),
            "system_fingerprint": "fp_fake",
        }
        if not request.get("stream"):
            clean = text.replace(FOREVER, "")
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": clean, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            else:
                choice = {"index": 0, "text": clean, "logprobs": None, "finish_reason": "stop"}
            whole = {
                **head,
                "object": "chat.completion" if chat else "text_completion",
                "choices": [choice],
                "usage": _usage(clean),
            }
            await _json(send, 200, whole)
            return
        await self._stream(send, self._events(chat, head, text, request))

    async def _events(
        self, chat: bool, head: dict[str, Any], text: str, request: dict[str, Any]
    ) -> AsyncGenerator[bytes, None]:
        def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
            if chat:
                choice = {"index": 0, "delta": delta, "logprobs": None}
            else:
                choice = {"index": 0, "text": delta.get("content", ""), "logprobs": None}
            payload = {**head, "choices": [{**choice, "finish_reason": finish_reason}]}
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        if chat:
            yield chunk({"role": "assistant", "content": "", "refusal": None}, None)
        for piece in _text_pieces(text):
            yield chunk({"content": piece}, None)
        yield chunk({}, "stop")
        options = request.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            payload = {**head, "choices": [], "usage": _usage(text)}
            yield b"data: " + json.dumps(payload).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def _stream(self, send: Send, events: AsyncGenerator[bytes, None]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        outcome = "cancelled"  # the client left: call_until_disconnect cancelled this
        try:
            async for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await anyio.lowlevel.checkpoint()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            outcome = "completed"
        finally:
            await events.aclose()
            self.ends(outcome)


def _usage(text: str) -> dict[str, int]:
    tokens = len(list(_text_pieces(text.replace(FOREVER, ""))))
    return {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}
