"""EchoModel: an OpenAI-compatible ASGI app whose one model, ``echo``, repeats its input.

Chat completions echo the last user message, legacy completions the prompt, streamed in
token-sized pieces of 2 to 5 characters (each choice cut at a different phase, so stops fall
across pieces differently for each). The model knows nothing of stops: put it behind
:class:`~streamstop.server.StopMiddleware` and every cut you see was made there.

Endpoints: ``GET /v1/models``, ``GET /v1/models/echo``, ``POST /v1/chat/completions`` and
``POST /v1/completions`` (``n``, ``stream``, ``stream_options.include_usage``, ``max_tokens``).
Errors are OpenAI-shaped, with status 400, 404, 405 or 413. What one request may ask is bounded,
each bound a 400 naming the field and the value: ``n`` and the prompts up to 128 each, and 128
choices in all (``n`` x prompts); 2 MiB of echoed characters in all (``n`` x the prompts'
length); ``max_tokens`` up to the pieces such an echo can have.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from .._pieces import token_pieces
from .._sse import encode_event as _sse
from ._asgi import (
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    call_until_disconnect,
    read_body,
    send_error,
    send_json,
    serve_lifespan,
)
from ._request import InvalidRequest as _InvalidRequest
from ._request import describe as _describe
from ._request import parse_n

__all__ = ["EchoModel", "echo_pieces"]

# What one request may ask of the echo model. Its work is n x the prompts' length: unbounded,
# 128 copies of 1,000 prompts of a 8 MiB body stalled the server for 45 s and took 5.6 GB.
_MAX_BODY = 8 * 1024 * 1024
# OpenAI's own bound on n; the same for prompts in one legacy completion, and for choices in one
# response (n x prompts), since each choice is a stream of its own.
_MAX_N = 128
_MAX_PROMPTS = 128
_MAX_CHOICES = 128
# Characters echoed in all choices together (n x the prompts' length): 2 MiB is 600,000 pieces,
# tens of MB and about a second of work at most; the body alone allows 8 MiB.
_MAX_ECHO_CHARS = 2 * 1024 * 1024
# The most pieces an echo within _MAX_ECHO_CHARS can have (2 characters each, at the least):
# a larger max_tokens asks for what no response here can hold.
_MAX_TOKENS = _MAX_ECHO_CHARS // 2
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def echo_pieces(text: str, phase: int = 0) -> list[str]:
    """Cut ``text`` into token-sized pieces of 2 to 5 characters, as a tokenizer would.

    >>> echo_pieces("Hello, world!")
    ['Hel', 'lo', ', wo', 'rld!']
    >>> "".join(echo_pieces("Hello, world!", phase=1)) == "Hello, world!"
    True
    """
    return token_pieces(text, phase)


@dataclass(frozen=True, slots=True)
class _Job:
    """A validated request: what to echo and how."""

    chat: bool
    prompts: tuple[str, ...]
    n: int
    stream: bool
    include_usage: bool
    max_tokens: int | None

    def choices(self) -> Iterator[tuple[int, str]]:
        """(choice index, text) for every choice: ``n`` per prompt."""
        for prompt_index, prompt in enumerate(self.prompts):
            for copy in range(self.n):
                yield prompt_index * self.n + copy, prompt

    def completions(self) -> list[tuple[int, list[str], str]]:
        """(choice index, pieces, finish reason) for every choice: its echo, cut at max_tokens."""
        completions = []
        for index, text in self.choices():
            pieces = echo_pieces(text, phase=index)
            if self.max_tokens is not None and len(pieces) > self.max_tokens:
                completions.append((index, pieces[: self.max_tokens], "length"))
            else:
                completions.append((index, pieces, "stop"))
        return completions

    def usage(self, completions: list[tuple[int, list[str], str]]) -> dict[str, int]:
        """The ``usage`` of a response made of ``completions``, counted in echo pieces."""
        prompt_tokens = sum(len(echo_pieces(prompt)) for prompt in self.prompts)
        completion_tokens = sum(len(pieces) for _, pieces, _ in completions)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    raise _InvalidRequest(
        400,
        f"Invalid content of a message: expected a string or a list of parts, got "
        f"{_describe(content)}.",
        param="messages",
    )


class EchoModel:
    """An OpenAI-compatible ASGI app with one model, ``echo``, that streams its input back.

    ``delay`` is the pause, in seconds, after each streamed piece (0: none, pieces still yield
    to the event loop). ``on_stream_end(outcome)`` is called at the end of each streamed
    response with ``"completed"``, or ``"cancelled"`` when the client left or the middleware
    stopped it: a hook for logs and tests.
    """

    def __init__(
        self,
        *,
        delay: float = 0.0,
        model: str = "echo",
        on_stream_end: Callable[[str], object] | None = None,
    ) -> None:
        if not delay >= 0:
            raise ValueError(f"delay must be a number of seconds >= 0, got {delay!r}")
        self.delay = delay
        self.model = model
        self.on_stream_end = on_stream_end
        self.created = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: refused by not accepting
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                _require(method, "POST")
                await self._complete(path == "/v1/chat/completions", scope, receive, send)
            elif path == "/v1/models":
                _require(method, "GET")
                await send_json(send, 200, {"object": "list", "data": [self._model_card()]})
            elif path.startswith("/v1/models/"):
                _require(method, "GET")
                if path.removeprefix("/v1/models/") != self.model:
                    raise self._no_such_model(path.removeprefix("/v1/models/"))
                await send_json(send, 200, self._model_card())
            else:
                raise _InvalidRequest(
                    404, f"Unknown request URL: {method} {path}.", code="unknown_url"
                )
        except _InvalidRequest as error:
            headers = [(b"allow", error.allow.encode())] if error.allow else []
            await send_error(
                send,
                error.status,
                error.message,
                param=error.param,
                code=error.code,
                headers=headers,
            )

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.model,
            "object": "model",
            "created": self.created,
            "owned_by": "streamstop",
        }

    def _no_such_model(self, name: object) -> _InvalidRequest:
        return _InvalidRequest(
            404,
            f"The model {_describe(name)} does not exist: this server has one model, "
            f"{self.model!r}.",
            param="model",
            code="model_not_found",
        )

    async def _complete(self, chat: bool, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, _MAX_BODY)
        except BodyTooLarge as error:
            raise _InvalidRequest(413, str(error)) from None
        if body is None:
            return
        job = self._parse(chat, body)
        if not job.stream:
            await send_json(send, 200, self._whole_response(job))
            return
        await call_until_disconnect(receive, lambda: self._stream(job, send), scope)

    def _parse(self, chat: bool, body: bytes) -> _Job:
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _InvalidRequest(
                400, "We could not parse the JSON body of your request."
            ) from None
        if not isinstance(request, dict):
            raise _InvalidRequest(
                400, f"The request body must be a JSON object, got {_describe(request)}."
            )
        model = request.get("model")
        if model is None:
            raise _InvalidRequest(400, "You must provide a model parameter.", param="model")
        if model != self.model:
            raise self._no_such_model(model)
        if chat:
            prompts: tuple[str, ...] = (self._last_user_message(request.get("messages")),)
        else:
            prompts = self._prompts(request.get("prompt"))
        n = parse_n(request, _MAX_N)
        if n * len(prompts) > _MAX_CHOICES:
            raise _InvalidRequest(
                400,
                f"Invalid 'n': {n} choices for each of {len(prompts)} prompts make "
                f"{n * len(prompts)} choices, more than the {_MAX_CHOICES} of one response.",
                param="n",
            )
        echoed = n * sum(len(prompt) for prompt in prompts)
        if echoed > _MAX_ECHO_CHARS:
            raise _InvalidRequest(
                400,
                f"Invalid 'n': {n} x {echoed // n} characters of prompt make an echo of "
                f"{echoed} characters, more than the {_MAX_ECHO_CHARS} of one response.",
                param="n",
            )
        stream = request.get("stream")
        if stream not in (None, True, False):
            raise _InvalidRequest(
                400,
                f"Invalid 'stream': expected a boolean, got {_describe(stream)}.",
                param="stream",
            )
        max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int)
            or isinstance(max_tokens, bool)
            or not 1 <= max_tokens <= _MAX_TOKENS
        ):
            raise _InvalidRequest(
                400,
                f"Invalid 'max_tokens': expected an integer from 1 to {_MAX_TOKENS}, got "
                f"{_describe(max_tokens)}.",
                param="max_tokens",
            )
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return _Job(chat, prompts, n, bool(stream), include_usage, max_tokens)

    @staticmethod
    def _last_user_message(messages: object) -> str:
        if not isinstance(messages, list) or not messages:
            raise _InvalidRequest(
                400, "Invalid 'messages': expected a non-empty array of messages.", param="messages"
            )
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _message_text(message.get("content"))
        raise _InvalidRequest(
            400, "The echo model needs a message with role 'user' to echo.", param="messages"
        )

    @staticmethod
    def _prompts(prompt: object) -> tuple[str, ...]:
        if isinstance(prompt, str):
            return (prompt,)
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            if len(prompt) > _MAX_PROMPTS:
                raise _InvalidRequest(
                    400,
                    f"Invalid 'prompt': at most {_MAX_PROMPTS} prompts in one request, got "
                    f"{len(prompt)}.",
                    param="prompt",
                )
            return tuple(prompt)
        raise _InvalidRequest(
            400,
            f"Invalid 'prompt': the echo model takes a string or an array of strings, got "
            f"{_describe(prompt)}.",
            param="prompt",
        )

    def _head(self, job: _Job, kind: str) -> dict[str, Any]:
        """The fields a response or a chunk begins with; ``kind`` is its ``object``."""
        return {
            "id": ("chatcmpl-" if job.chat else "cmpl-") + uuid.uuid4().hex,
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
        }

    def _whole_response(self, job: _Job) -> dict[str, Any]:
        completions = job.completions()
        choices = []
        for index, pieces, finish_reason in completions:
            content = "".join(pieces)
            choice: dict[str, Any] = {"index": index}
            if job.chat:
                choice["message"] = {"role": "assistant", "content": content, "refusal": None}
            else:
                choice["text"] = content
            choice["logprobs"] = None
            choice["finish_reason"] = finish_reason
            choices.append(choice)
        return {
            **self._head(job, "chat.completion" if job.chat else "text_completion"),
            "choices": choices,
            "usage": job.usage(completions),
        }

    async def _stream(self, job: _Job, send: Send) -> None:
        outcome = "cancelled"
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            for event in self._events(job):
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await anyio.sleep(self.delay)
            outcome = "completed"
            await send(
                {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False}
            )
        finally:
            if self.on_stream_end is not None:
                self.on_stream_end(outcome)

    def _events(self, job: _Job) -> Iterator[bytes]:
        """The SSE events of a streamed response, but [DONE]: choices take turns."""
        base = self._head(job, "chat.completion.chunk" if job.chat else "text_completion")
        if job.include_usage:
            base["usage"] = None

        def event(
            index: int, text: str | None, finish_reason: str | None, role: bool = False
        ) -> bytes:
            choice: dict[str, Any] = {"index": index}
            if job.chat:
                choice["delta"] = (
                    {"role": "assistant", "content": ""}
                    if role
                    else ({} if text is None else {"content": text})
                )
            else:
                choice["text"] = text or ""
            choice["logprobs"] = None
            choice["finish_reason"] = finish_reason
            return _sse({**base, "choices": [choice]})

        completions = job.completions()
        if job.chat:
            for index, _, _ in completions:
                yield event(index, None, None, role=True)
        longest = max(len(pieces) for _, pieces, _ in completions)
        for position in range(longest + 1):
            for index, pieces, finish_reason in completions:
                if position < len(pieces):
                    yield event(index, pieces[position], None)
                elif position == len(pieces):
                    yield event(index, None, finish_reason)
        if job.include_usage:
            yield _sse({**base, "choices": [], "usage": job.usage(completions)})


def _require(method: str, allowed: str) -> None:
    if method != allowed:
        raise _InvalidRequest(
            405,
            f"Method {method} not allowed here: use {allowed}.",
            code="method_not_allowed",
            allow=allowed,
        )
