"""A fake upstream speaking each native API the proxy filters, as the real servers write them.

Shapes follow the APIs' documentation: Anthropic Messages (``/v1/messages``: SSE with
``event:`` names, a thinking block first when ``thinking`` is asked, a tool_use block after the
text when ``tools`` are given), Ollama (``/api/chat``, ``/api/generate``: NDJSON, streaming
unless ``stream: false``), llama.cpp (``/completion`` and its alias ``/completions``:
``data:`` events with ``content`` and ``index``, a last one with ``stop: true`` and the fields
only it has, as tools/server/server-task.cpp writes them; one output per prompt of a list; and
``/chat/completions``, OpenAI's chat format without the ``/v1``, as llama.cpp serves it), TGI
(``/generate_stream``: ``data:`` events with ``token``, a last one with ``generated_text`` and
``details``; ``/generate``: one object), OpenAI's Responses API (``/v1/responses``: SSE with
``event:`` names and numbered events, a reasoning item with its summary before the message,
deltas with an ``obfuscation`` field, a function call after the message when ``tools`` are given;
a request with ``stop`` refused with the live API's 400; the fields as in the openai SDK's
``types/responses``), and Gemini (``/v1beta/models/{model}:generateContent``
and ``:streamGenerateContent``: with ``?alt=sse`` events of one ``GenerateContentResponse``
each, lines ended by CRLF, without it one JSON array streamed; candidates with
``content.role: "model"`` and ``parts``, ``finishReason`` on the last chunk, ``usageMetadata``,
``modelVersion`` and ``responseId`` on each; thought parts first when
``thinkingConfig.includeThoughts``; ``candidateCount`` candidates; and, as the real API does,
more than 5 ``stopSequences`` refused with a 400 ``INVALID_ARGUMENT``, up to 5 applied).

The model echoes the request's text (the last user message, ``prompt`` or ``inputs``) in pieces
of ``PIECE`` characters and ignores stops, like a backend without them. A text containing
``[forever]`` is echoed without the marker, then padded with `` more`` until the client leaves:
a test that a cut closes the upstream waits for ``"cancelled"`` in :attr:`FakeFamilies.ends`.
Every request body is kept in :attr:`FakeFamilies.requests`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from contextlib import aclosing
from typing import Any

import anyio
import anyio.lowlevel

from streamstop.server import Receive, Scope, Send
from streamstop.server._asgi import call_until_disconnect, read_body, serve_lifespan

PIECE = 3
FOREVER = "[forever]"


def pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)]


def _last_user_text(messages: Any, part: str = "text") -> str:
    """The last user message's text: its content a string, or its parts of type ``part``."""
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    item.get("text", "")
                    for item in content
                    if isinstance(item, dict) and item.get("type") == part
                )
    return ""


# The fakes read any body a test sends them (16 MiB, well past any limit under test).
FAKE_BODY_LIMIT = 16 * 1024 * 1024


class FakeFamilies:
    def __init__(self, on_stream_end: Callable[[str], object] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
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
        path = scope["path"]
        request = json.loads(body) if body else {}
        self.requests.append((path, request))
        handler: Callable[[str, dict[str, Any], Send], Coroutine[Any, Any, None]] | None = {
            "/v1/messages": self._anthropic,
            "/api/chat": self._ollama,
            "/api/generate": self._ollama,
            "/completion": self._llamacpp,
            "/completions": self._llamacpp,  # llama.cpp's alias: the same native handler
            "/chat/completions": self._llamacpp_chat,
            "/generate": self._tgi,
            "/generate_stream": self._tgi,
            "/v1/responses": self._responses,
        }.get(path)
        if handler is None and _GEMINI_PATH.fullmatch(path):
            handler = self._gemini_handler(scope.get("query_string", b""))
        if handler is None:
            await _json(send, 404, {"error": f"no route {path}", "path": path})
            return
        await call_until_disconnect(receive, lambda: handler(path, request, send))

    async def _stream(
        self, send: Send, content_type: bytes, frames: AsyncGenerator[bytes, None]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type)],
            }
        )
        outcome = "cancelled"  # the client left: call_until_disconnect cancelled this
        try:
            async with aclosing(frames):
                async for frame in frames:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    await anyio.lowlevel.checkpoint()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            outcome = "completed"
        finally:
            if self.on_stream_end is not None:
                self.on_stream_end(outcome)

    # -- Anthropic -----------------------------------------------------------------------------

    async def _anthropic(self, path: str, request: dict[str, Any], send: Send) -> None:
        text = _last_user_text(request.get("messages"))
        model = request.get("model", "claude-fake")
        blocks: list[dict[str, Any]] = []
        if request.get("thinking"):
            blocks.append({"type": "thinking", "thinking": "Let me think.", "signature": "sig"})
        blocks.append({"type": "text", "text": text.replace(FOREVER, "")})
        if request.get("tools"):
            blocks.append({"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "x"}})
        if not request.get("stream"):
            message = _message(model, blocks, "end_turn", len(pieces(text)))
            await _json(send, 200, message)
            return
        await self._stream(send, b"text/event-stream", self._anthropic_events(model, blocks, text))

    async def _anthropic_events(
        self, model: str, blocks: list[dict[str, Any]], text: str
    ) -> AsyncGenerator[bytes, None]:
        start = _message(model, [], None, 1)
        yield _event("message_start", {"type": "message_start", "message": start})
        yield _event("ping", {"type": "ping"})
        for index, block in enumerate(blocks):
            kind = block["type"]
            empty = {**block, "text": ""} if kind == "text" else block
            if kind == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
            elif kind == "tool_use":
                empty = {**block, "input": {}}
            yield _event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
            if kind == "text":
                for piece in _text_pieces(text):
                    yield _delta(index, {"type": "text_delta", "text": piece})
            elif kind == "thinking":
                yield _delta(index, {"type": "thinking_delta", "thinking": block["thinking"]})
                yield _delta(index, {"type": "signature_delta", "signature": block["signature"]})
            else:
                partial = json.dumps(block["input"])
                yield _delta(index, {"type": "input_json_delta", "partial_json": partial})
            yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        yield _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(pieces(text))},
            },
        )
        yield _event("message_stop", {"type": "message_stop"})

    # -- Ollama --------------------------------------------------------------------------------

    async def _ollama(self, path: str, request: dict[str, Any], send: Send) -> None:
        chat = path == "/api/chat"
        text = _last_user_text(request.get("messages")) if chat else str(request.get("prompt"))
        model = request.get("model", "llama3.2")
        head = {"model": model, "created_at": "2024-07-22T20:33:28.123648Z"}

        def line(content: str, done: bool) -> dict[str, Any]:
            out: dict[str, Any] = dict(head)
            if chat:
                out["message"] = {"role": "assistant", "content": content}
            else:
                out["response"] = content
            out["done"] = done
            if done:
                out.update(
                    done_reason="stop",
                    total_duration=1000,
                    load_duration=10,
                    prompt_eval_count=5,
                    prompt_eval_duration=100,
                    eval_count=len(pieces(text)),
                    eval_duration=800,
                )
                if not chat:
                    out["context"] = [1, 2, 3]
            return out

        if request.get("stream") is False:
            await _json(send, 200, line(text.replace(FOREVER, ""), True))
            return

        async def lines() -> AsyncGenerator[bytes, None]:
            for piece in _text_pieces(text):
                yield json.dumps(line(piece, False)).encode() + b"\n"
            yield json.dumps(line("", True)).encode() + b"\n"

        await self._stream(send, b"application/x-ndjson", lines())

    # -- llama.cpp -----------------------------------------------------------------------------

    async def _llamacpp(self, path: str, request: dict[str, Any], send: Send) -> None:
        prompt = request.get("prompt", "")
        prompts = prompt if isinstance(prompt, list) else [prompt]

        timings_per_token = request.get("timings_per_token") is True

        def result(index: int, content: str, stop: bool, text: str, n: int) -> dict[str, Any]:
            # server_task_result_cmpl_partial / _final::to_json_non_oaicompat: a partial has no
            # model, truncated or tokens_cached; timings only under timings_per_token.
            timings = {"cache_n": 0, "prompt_n": 4, "prompt_ms": 2.5, "predicted_n": n,
                       "predicted_ms": 1.5 * n, "predicted_per_second": 666.7}  # fmt: skip
            if not stop:
                out: dict[str, Any] = {
                    "index": index,
                    "content": content,
                    "tokens": [1000 + n],
                    "stop": False,
                    "id_slot": index,
                    "tokens_predicted": n,
                    "tokens_evaluated": 4,
                }
                if timings_per_token:
                    out["timings"] = timings
                return out
            return {
                "index": index,
                "content": content,
                "tokens": [],
                "id_slot": index,
                "stop": True,
                "model": "fake.gguf",
                "tokens_predicted": n,
                "tokens_evaluated": 4,
                "generation_settings": {"n_predict": -1},
                "prompt": text,
                "has_new_line": False,
                "truncated": False,
                "stop_type": "eos",
                "stopping_word": "",
                "tokens_cached": 4 + n,
                "timings": timings,
            }

        if not request.get("stream"):
            results = []
            for i, p in enumerate(prompts):
                text = str(p).replace(FOREVER, "")
                results.append(result(i, text, True, str(p), len(pieces(text))))
            await _json(send, 200, results if isinstance(prompt, list) else results[0])
            return

        async def events() -> AsyncGenerator[bytes, None]:
            # The outputs of a list of prompts interleave, piece by piece.
            split = [pieces(str(p).replace(FOREVER, "")) for p in prompts]
            for step in range(max(map(len, split), default=0)):
                for index, parts in enumerate(split):
                    if step < len(parts):
                        text = str(prompts[index])
                        yield _data(result(index, parts[step], False, text, step + 1))
            if any(FOREVER in str(p) for p in prompts):
                for n, piece in enumerate(itertools.repeat(" more"), len(split[0]) + 1):
                    yield _data(result(0, piece, False, "", n))
            for index, p in enumerate(prompts):
                # In a stream the last event's content is empty: the text came before it.
                yield _data(result(index, "", True, str(p), len(split[index])))

        await self._stream(send, b"text/event-stream", events())

    async def _llamacpp_chat(self, path: str, request: dict[str, Any], send: Send) -> None:
        """llama.cpp's /chat/completions: OpenAI's chat completion (chunks), as it writes them
        (server_task_result_cmpl_partial / _final::to_json_oaicompat_chat*)."""
        text = _last_user_text(request.get("messages")).replace(FOREVER, "")
        head = {"created": 1700000000, "id": "chatcmpl-fake", "model": "fake.gguf",
                "system_fingerprint": "b1-fake"}  # fmt: skip
        if not request.get("stream"):
            message = {"role": "assistant", "content": text}
            choice = {"finish_reason": "stop", "index": 0, "message": message}
            usage = {"completion_tokens": len(pieces(text)), "prompt_tokens": 4,
                     "total_tokens": 4 + len(pieces(text))}  # fmt: skip
            answer = {"choices": [choice], **head, "object": "chat.completion", "usage": usage}
            await _json(send, 200, answer)
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"finish_reason": finish_reason, "index": 0, "delta": delta}
            return _data({"choices": [choice], **head, "object": "chat.completion.chunk"})

        forever = FOREVER in _last_user_text(request.get("messages"))

        async def events() -> AsyncGenerator[bytes, None]:
            yield chunk({"role": "assistant", "content": None})
            for piece in pieces(text):
                yield chunk({"content": piece})
            if forever:
                for piece in itertools.repeat(" more"):
                    yield chunk({"content": piece})
            yield chunk({}, "stop")
            yield b"data: [DONE]\n\n"

        await self._stream(send, b"text/event-stream", events())

    # -- TGI -----------------------------------------------------------------------------------

    async def _tgi(self, path: str, request: dict[str, Any], send: Send) -> None:
        text = str(request.get("inputs", ""))
        clean = text.replace(FOREVER, "")
        details = {
            "finish_reason": "eos_token",
            "generated_tokens": len(pieces(text)),
            "seed": None,
        }
        if path == "/generate":
            await _json(send, 200, {"generated_text": clean, "details": details})
            return

        async def events() -> AsyncGenerator[bytes, None]:
            count = 0
            for piece in _text_pieces(text):
                count += 1
                token = {"id": count, "text": piece, "logprob": -0.5, "special": False}
                yield (
                    b"data:"
                    + json.dumps(
                        {"index": count, "token": token, "generated_text": None, "details": None}
                    ).encode()
                    + b"\n\n"
                )
            token = {"id": 2, "text": "</s>", "logprob": -0.1, "special": True}
            yield (
                b"data:"
                + json.dumps(
                    {
                        "index": count + 1,
                        "token": token,
                        "generated_text": clean,
                        "details": details,
                    }
                ).encode()
                + b"\n\n"
            )

        await self._stream(send, b"text/event-stream", events())

    # -- OpenAI Responses ----------------------------------------------------------------------

    async def _responses(self, path: str, request: dict[str, Any], send: Send) -> None:
        if "stop" in request:
            # What the live API answers: it has no stop parameter.
            error = {
                "message": "Unknown parameter: 'stop'.",
                "type": "invalid_request_error",
                "param": "stop",
                "code": "unknown_parameter",
            }
            await _json(send, 400, {"error": error})
            return
        text = _input_text(request.get("input"))
        response = _response_object(request)
        reasoning = {"id": "rs_fake", "type": "reasoning", "summary": [SUMMARY_PART]}
        message_id = "msg_fake"
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        message = {
            "id": message_id,
            "type": "message",
            "status": "completed",
            "content": [{**part, "text": text.replace(FOREVER, "")}],
            "role": "assistant",
        }
        items: list[dict[str, Any]] = [reasoning, message]
        if request.get("tools"):
            items.append(FUNCTION_CALL)
        usage = _usage(len(pieces(text)))
        if request.get("stream") is not True:
            done = {
                **response,
                "status": "completed",
                "completed_at": 1741476543,
                "output": items,
                "usage": usage,
            }
            await _json(send, 200, done)
            return
        await self._stream(
            send, b"text/event-stream", self._responses_events(response, items, text, usage)
        )

    async def _responses_events(
        self, response: dict[str, Any], items: list[dict[str, Any]], text: str, usage: Any
    ) -> AsyncGenerator[bytes, None]:
        number = itertools.count()

        def event(kind: str, **fields: Any) -> bytes:
            return _event(kind, {"type": kind, "sequence_number": next(number), **fields})

        yield event("response.created", response=response)
        yield event("response.in_progress", response=response)
        for index, item in enumerate(items):
            kind = item["type"]
            if kind == "reasoning":
                yield event(
                    "response.output_item.added", output_index=index, item={**item, "summary": []}
                )
                where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
                summary = SUMMARY_PART["text"]
                yield event(
                    "response.reasoning_summary_part.added",
                    **where,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in pieces(summary):
                    yield event(
                        "response.reasoning_summary_text.delta",
                        **where,
                        delta=piece,
                        obfuscation=OBFUSCATION,
                    )
                yield event("response.reasoning_summary_text.done", **where, text=summary)
                yield event("response.reasoning_summary_part.done", **where, part=SUMMARY_PART)
            elif kind == "message":
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                yield event("response.content_part.added", **where, part=part)
                for piece in _text_pieces(text):
                    yield event(
                        "response.output_text.delta",
                        **where,
                        delta=piece,
                        logprobs=[],
                        obfuscation=OBFUSCATION,
                    )
                done = item["content"][0]
                yield event("response.output_text.done", **where, text=done["text"], logprobs=[])
                yield event("response.content_part.done", **where, part=done)
            else:  # a function call
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                where = {"item_id": item["id"], "output_index": index}
                for piece in pieces(item["arguments"]):
                    yield event(
                        "response.function_call_arguments.delta",
                        **where,
                        delta=piece,
                        obfuscation=OBFUSCATION,
                    )
                yield event(
                    "response.function_call_arguments.done", **where, arguments=item["arguments"]
                )
            yield event("response.output_item.done", output_index=index, item=item)
        yield event(
            "response.completed",
            response={
                **response,
                "status": "completed",
                "completed_at": 1741476543,
                "output": items,
                "usage": usage,
            },
        )

    # -- Gemini --------------------------------------------------------------------------------

    def _gemini_handler(
        self, query: bytes
    ) -> Callable[[str, dict[str, Any], Send], Coroutine[Any, Any, None]]:
        async def handle(path: str, request: dict[str, Any], send: Send) -> None:
            await self._gemini(path, query, request, send)

        return handle

    async def _gemini(self, path: str, query: bytes, request: dict[str, Any], send: Send) -> None:
        config = request.get("generationConfig") or {}
        stops = config.get("stopSequences") or []
        if len(stops) > 5:
            message = (
                "* GenerateContentRequest.generation_config.stop_sequences: the number of "
                "stop_sequences must not exceed 5.\n"
            )
            await _google_error(send, 400, message, "INVALID_ARGUMENT")
            return
        text = ""
        for content in reversed(request.get("contents") or []):
            if content.get("role", "user") == "user":
                text = "".join(part.get("text", "") for part in content.get("parts", []))
                break
        # The real API applies its own (up to 5) stops: the text ends before the first.
        found = [text.find(stop) for stop in stops if stop in text]
        if found:
            text = text[: min(found)]
        count = int(config.get("candidateCount") or 1)
        # The SDK sends thinkingConfig's own fields in snake case (it passes that object as it
        # is); the API, like any proto JSON API, takes both spellings.
        thinking_config = config.get("thinkingConfig") or {}
        thinking = True in (
            thinking_config.get("includeThoughts"),
            thinking_config.get("include_thoughts"),
        )
        model = path.rsplit("/", 1)[1].split(":")[0]
        usage = {"promptTokenCount": 8, "totalTokenCount": 8}
        done = {
            "promptTokenCount": 8,
            "candidatesTokenCount": len(pieces(text)),
            "totalTokenCount": 8 + len(pieces(text)),
        }
        if thinking:
            done = {**done, "thoughtsTokenCount": 4}

        def response(parts: list[dict[str, Any]], finish: bool) -> dict[str, Any]:
            candidates = []
            for index in range(count):
                candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
                if finish:
                    candidate["finishReason"] = "STOP"
                candidate["index"] = index
                candidates.append(candidate)
            return {
                "candidates": candidates,
                "usageMetadata": done if finish else usage,
                "modelVersion": model,
                "responseId": "fakeResponseId0",
            }

        thought = {"text": "**Reading the prompt**\nThe user wants an echo.", "thought": True}
        if path.endswith(":generateContent"):
            parts = [thought] if thinking else []
            await _json(send, 200, response([*parts, {"text": text.replace(FOREVER, "")}], True))
            return

        def chunks() -> Iterator[dict[str, Any]]:
            if thinking:
                yield response([thought], False)
            for piece in _text_pieces(text):
                yield response([{"text": piece}], False)
            yield response([{"text": ""}], True)

        if b"alt=sse" in query:

            async def events() -> AsyncGenerator[bytes, None]:
                for item in chunks():
                    yield b"data: " + _google_json(item) + b"\r\n\r\n"

            await self._stream(send, b"text/event-stream", events())
            return

        async def array() -> AsyncGenerator[bytes, None]:
            first = True
            for item in chunks():
                yield (b"[" if first else b",\r\n") + json.dumps(item, indent=2).encode()
                first = False
            yield b"]"

        await self._stream(send, b"application/json; charset=UTF-8", array())


OBFUSCATION = "q8XyTz"
SUMMARY_PART = {
    "type": "summary_text",
    "text": "**Echoing** STOP, </s> and END are not stops here.",
}
FUNCTION_CALL = {
    "id": "fc_fake",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"q": "STOP </s>"}',
    "call_id": "call_fake",
    "name": "get",
}


def _input_text(value: Any) -> str:
    """The text of the Responses request's ``input``: a string, or the last user message (its
    content a string or ``input_text`` parts)."""
    return value if isinstance(value, str) else _last_user_text(value, "input_text")


def _response_object(request: dict[str, Any]) -> dict[str, Any]:
    """The response object of ``response.created``, as the API writes it."""
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 1741476542,
        "status": "in_progress",
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": request.get("model", "o4-mini-2025-04-16"),
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": "detailed"},
        "service_tier": "auto",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }


def _usage(output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens + 20,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": output_tokens + 32,
    }


_GEMINI_PATH = re.compile(r"/v1(?:beta)?/(?:models|tunedModels)/[^/:]+:(?:streamG|g)enerateContent")


def _google_json(payload: Any) -> bytes:
    """JSON as Google's servers write a chunk: a space after each colon, none after commas."""
    return json.dumps(payload, separators=(",", ": ")).encode()


async def _google_error(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps(
        {"error": {"code": status, "message": message, "status": code}}, indent=2
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json; charset=UTF-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _text_pieces(text: str) -> Iterator[str]:
    """The pieces of ``text``; with ``[forever]``, then `` more`` without end."""
    yield from pieces(text.replace(FOREVER, ""))
    if FOREVER in text:
        yield from itertools.repeat(" more")


def _message(
    model: str, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int
) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": output_tokens},
    }


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


async def _json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
