"""EchoModel: an ASGI app whose one model, ``echo``, repeats its input in every API family.

Chat completions echo the last user message, legacy completions the prompt, streamed in
token-sized pieces of 2 to 5 characters (each choice cut at a different phase, so stops fall
across pieces differently for each). The model knows nothing of stops: put it behind
:class:`~streamstop.server.StopMiddleware` and every cut you see was made there.

OpenAI endpoints: ``GET /v1/models``, ``GET /v1/models/echo``, ``POST /v1/chat/completions`` and
``POST /v1/completions`` (``n``, ``stream``, ``stream_options.include_usage``, ``max_tokens``).
Errors are OpenAI-shaped, with status 400, 404, 405 or 413. What one request may ask is bounded,
each bound a 400 naming the field and the value: ``n`` and the prompts up to 128 each, and 128
choices in all (``n`` x prompts); 2 MiB of echoed characters in all (``n`` x the prompts'
length); ``max_tokens`` up to the pieces such an echo can have.

The other families, each in its own wire format and error shape, with the same bounds, pacing
and ``on_stream_end`` (:mod:`._echo_families`, :mod:`._echo_responses_gemini`): Anthropic
``POST /v1/messages``; Ollama ``POST /api/chat`` and ``/api/generate``; llama.cpp
``POST /completion`` (and ``/completions``); TGI ``POST /generate`` and ``/generate_stream``;
OpenAI Responses ``POST /v1/responses``; Gemini ``POST /v1beta/models/echo:generateContent``
and ``:streamGenerateContent`` (``?alt=sse``: SSE; without: a JSON array).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

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
from ._echo_families import MAX_BODY as _MAX_BODY
from ._echo_families import MAX_CHOICES as _MAX_CHOICES
from ._echo_families import MAX_ECHO_CHARS as _MAX_ECHO_CHARS
from ._echo_families import MAX_N as _MAX_N
from ._echo_families import MAX_PROMPTS as _MAX_PROMPTS
from ._echo_families import MAX_TOKENS as _MAX_TOKENS
from ._echo_families import TGI, Anthropic, LlamaCpp, Ollama, Writer, parse_object
from ._echo_responses_gemini import Gemini, Responses
from ._request import InvalidRequest as _InvalidRequest
from ._request import describe as _describe
from ._request import parse_n

__all__ = ["EchoModel", "echo_pieces", "writer_for"]

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
    """An ASGI app with one model, ``echo``, that streams its input back in the OpenAI API and
    in each other family's own (see the module's docstring for the paths).

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
        writer = writer_for(path, scope.get("query_string", b""))
        if writer is not None:
            await self._serve_family(writer, method, scope, receive, send)
            return
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

    async def _serve_family(
        self, writer: Writer, method: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer a request of another API family in its wire format (and its error shape)."""
        try:
            _require(method, "POST")
            try:
                body = await read_body(receive, _MAX_BODY)
            except BodyTooLarge as error:
                raise _InvalidRequest(413, f"Request body too large: {error}.") from None
            if body is None:
                return
            job = writer.parse(parse_object(body), self.model)
        except _InvalidRequest as error:
            status, payload = writer.error(error)
            headers = [(b"allow", error.allow.encode())] if error.allow else []
            await send_json(send, status, payload, headers=headers)
            return
        if not job.stream:
            await send_json(send, 200, writer.whole(job))
            return
        frames, end = writer.frames(job), writer.end(job)
        await call_until_disconnect(
            receive, lambda: self._stream(send, writer.stream_headers, frames, end), scope
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
        frames = self._events(job)
        await call_until_disconnect(
            receive, lambda: self._stream(send, _SSE_HEADERS, frames, b"data: [DONE]\n\n"), scope
        )

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

    async def _stream(
        self,
        send: Send,
        headers: Iterable[tuple[bytes, bytes]],
        frames: Iterable[bytes],
        end: bytes,
    ) -> None:
        """Send ``frames``, pausing ``delay`` after each, then ``end``; report the outcome."""
        outcome = "cancelled"
        try:
            start = {"type": "http.response.start", "status": 200, "headers": list(headers)}
            await send(start)
            for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                await anyio.sleep(self.delay)
            outcome = "completed"
            await send({"type": "http.response.body", "body": end, "more_body": False})
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


# The other API families' paths; Gemini's name the model and the method (see writer_for).
_FAMILY_ROUTES: dict[str, Callable[[], Writer]] = {
    "/v1/messages": Anthropic,
    "/api/chat": lambda: Ollama(chat=True),
    "/api/generate": lambda: Ollama(chat=False),
    "/completion": LlamaCpp,
    "/completions": LlamaCpp,  # llama.cpp's alias of /completion (not OpenAI's /v1/completions)
    "/generate": lambda: TGI(streaming=False),
    "/generate_stream": lambda: TGI(streaming=True),
    "/v1/responses": Responses,
}
_GEMINI = "/v1beta/models/"
_GEMINI_METHODS = ("generateContent", "streamGenerateContent")


def writer_for(path: str, query: bytes = b"") -> Writer | None:
    """A new writer for a request to ``path`` of another API family (``query``: the raw query
    string, where Gemini's ``alt=sse`` is), or ``None`` when ``path`` is no such API's."""
    route = _FAMILY_ROUTES.get(path)
    if route is not None:
        return route()
    if path.startswith(_GEMINI):
        model, colon, method = path.removeprefix(_GEMINI).rpartition(":")
        if colon and method in _GEMINI_METHODS:
            sse = parse_qs(query.decode("latin-1")).get("alt") == ["sse"]
            return Gemini(model, stream=method == "streamGenerateContent", sse=sse)
    return None
