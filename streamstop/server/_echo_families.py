"""The echo model's other APIs: one request parser and its bounds, one small writer per family.

Rules of this module (no I/O: :class:`~streamstop.server.EchoModel` reads, paces and sends):

- A *writer* knows one API's wire format, as its server writes it: where the text to echo is
  in a request, whether the request streams, how many outputs it asks for and its token cap
  (:meth:`Writer.parse`, into an :class:`EchoJob`); the whole response (:meth:`Writer.whole`);
  the frames of a stream and the bytes that end it (:meth:`Writer.frames`, :meth:`Writer.end`);
  and the API's own error shape (:meth:`Writer.error`).

  =========  ===========================================  =================  ===================
  writer     paths                                        streams            framing
  =========  ===========================================  =================  ===================
  anthropic  ``/v1/messages``                             ``stream: true``   SSE, ``event:``
  ollama     ``/api/chat``, ``/api/generate``             unless ``false``   NDJSON
  llama.cpp  ``/completion``, ``/completions``            ``stream: true``   SSE ``data:``
  tgi        ``/generate``, ``/generate_stream``          the ``_stream``    SSE ``data:``
  responses  ``/v1/responses``                            ``stream: true``   SSE, ``event:``
  gemini     ``/v1beta/models/{model}:generateContent``,  the ``stream``     SSE with
             ``...:streamGenerateContent``                method             ``?alt=sse``, else
                                                                             a JSON array
  =========  ===========================================  =================  ===================

- Every writer goes through the same bounds as the OpenAI echo (:func:`echo_job`): the body,
  the outputs of one response (prompts x copies), the characters echoed in all, the token cap.
  A bad field is a 400 naming it, a model other than the echo's a 404 (where the API names
  one: llama.cpp and TGI serve whatever they loaded), each in its API's error shape.
- The echo knows nothing of stops: a stop field is ignored, like any field the echo does not
  read. What cuts is the middleware in front.
- The Responses and Gemini writers live in :mod:`._echo_responses_gemini` (for length only);
  :func:`~streamstop.server._echo.writer_for` routes a path to its writer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .. import _json
from .._pieces import token_pieces
from .._sse import encode_event
from ._request import InvalidRequest, describe

__all__ = [
    "MAX_BODY",
    "MAX_CHOICES",
    "MAX_ECHO_CHARS",
    "MAX_N",
    "MAX_PROMPTS",
    "MAX_TOKENS",
    "TGI",
    "Anthropic",
    "EchoJob",
    "LlamaCpp",
    "Ollama",
    "Output",
    "Writer",
    "echo_job",
    "parse_object",
]

# What one request may ask of the echo model. Its work is n x the prompts' length: unbounded,
# 128 copies of 1,000 prompts of a 8 MiB body stalled the server for 45 s and took 5.6 GB.
MAX_BODY = 8 * 1024 * 1024
# OpenAI's own bound on n; the same for prompts in one legacy completion, and for choices in one
# response (n x prompts), since each choice is a stream of its own.
MAX_N = 128
MAX_PROMPTS = 128
MAX_CHOICES = 128
# Characters echoed in all choices together (n x the prompts' length): 2 MiB is 600,000 pieces,
# tens of MB and about a second of work at most; the body alone allows 8 MiB.
MAX_ECHO_CHARS = 2 * 1024 * 1024
# The most pieces an echo within MAX_ECHO_CHARS can have (2 characters each, at the least):
# a larger token cap asks for what no response here can hold.
MAX_TOKENS = MAX_ECHO_CHARS // 2

_Headers = tuple[tuple[bytes, bytes], ...]
_SSE: _Headers = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
)


# -- the request, parsed once for every family ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Output:
    """One output of a response: its ``index``, its echo in ``pieces``, and whether the token
    cap cut it (``limited``)."""

    index: int
    pieces: list[str]
    limited: bool

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True, slots=True)
class EchoJob:
    """A validated request of any family: what to echo, how many times, and how."""

    prompts: tuple[str, ...]
    copies: int
    stream: bool
    max_tokens: int | None
    model: str  # the name the response reports

    def outputs(self) -> list[Output]:
        """Every output: ``copies`` per prompt, each cut at a different phase."""
        outputs = []
        for prompt_index, prompt in enumerate(self.prompts):
            for copy in range(self.copies):
                index = prompt_index * self.copies + copy
                pieces = token_pieces(prompt, index)
                limited = self.max_tokens is not None and len(pieces) > self.max_tokens
                kept = pieces[: self.max_tokens] if limited else pieces
                outputs.append(Output(index, kept, limited))
        return outputs

    def prompt_tokens(self, index: int = 0) -> int:
        """The input's length in echo pieces (of output ``index``'s prompt)."""
        return len(token_pieces(self.prompts[index // self.copies]))


def _bad(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(400, f"Invalid '{field}': {message}", param=field)


def parse_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(400, "We could not parse the JSON body of your request.") from None
    if not isinstance(request, dict):
        raise InvalidRequest(
            400, f"The request body must be a JSON object, got {describe(request)}."
        )
    return request


def echo_job(
    prompts: tuple[str, ...],
    *,
    stream: bool,
    model: str,
    copies: int = 1,
    copies_field: str = "n",
    max_tokens: int | None = None,
) -> EchoJob:
    """The job of ``copies`` echoes of each prompt, within the echo's bounds (a 400 past one)."""
    if copies * len(prompts) > MAX_CHOICES:
        raise _bad(
            copies_field,
            f"{copies} outputs for each of {len(prompts)} prompts make "
            f"{copies * len(prompts)}, more than the {MAX_CHOICES} of one response.",
        )
    echoed = copies * sum(map(len, prompts))
    if echoed > MAX_ECHO_CHARS:
        raise _bad(
            copies_field,
            f"{copies} x {echoed // copies} characters of prompt make an echo of {echoed} "
            f"characters, more than the {MAX_ECHO_CHARS} of one response.",
        )
    return EchoJob(prompts, copies, stream, max_tokens, model)


def _field(container: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present (Gemini takes camelCase and snake_case alike)."""
    for name in names:
        if name in container:
            return container[name]
    return None


def _object(request: dict[str, Any], field: str) -> dict[str, Any]:
    value = request.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(field, f"expected an object, got {describe(value)}.")
    return value


def _flag(request: dict[str, Any], key: str, default: bool, field: str | None = None) -> bool:
    """The boolean ``request[key]`` (``default`` if absent); ``field`` names it in errors."""
    value = request.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(field or key, f"expected a boolean, got {describe(value)}.")
    return value


def _count(value: object, field: str, most: int, unbounded: tuple[int, ...] = ()) -> int | None:
    """An integer from 1 to ``most``; ``None`` (absent) or a value of ``unbounded`` is none."""
    if value is None or (value in unbounded and not isinstance(value, bool)):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise _bad(field, f"expected an integer from 1 to {most}, got {describe(value)}.")
    return value


def _text(content: object, field: str, kinds: tuple[str, ...] = ("text",)) -> str:
    """A message's text: a string, or its parts of a type in ``kinds`` joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in kinds
            and isinstance(part.get("text"), str)
        )
    raise _bad(field, f"expected a string or a list of parts, got {describe(content)}.")


def _last_user(messages: object, field: str, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of the last message with role ``user`` in ``messages``."""
    if not isinstance(messages, list) or not messages:
        raise _bad(field, f"expected a non-empty array of messages, got {describe(messages)}.")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text(message.get("content"), field, kinds)
    raise _bad(field, "the echo model needs a message with role 'user' to echo.")


def _model(request: dict[str, Any], model: str, *aliases: str) -> str:
    """The request's ``model``, which must be the echo's (or one of ``aliases``)."""
    name = request.get("model")
    if name is None:
        raise InvalidRequest(400, "You must provide a model parameter.", param="model")
    if name != model and name not in aliases:
        raise _no_model(name, model)
    return str(name)


def _no_model(name: object, model: str) -> InvalidRequest:
    return InvalidRequest(
        404,
        f"The model {describe(name)} does not exist: this server has one model, {model!r}.",
        param="model",
        code="model_not_found",
    )


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _interleaved(outputs: list[Output]) -> Iterator[tuple[Output, int]]:
    """``(output, position)`` for each piece of each output, outputs taking turns, and
    ``(output, len(pieces))`` as the output's end, in its turn."""
    longest = max((len(output.pieces) for output in outputs), default=0)
    for position in range(longest + 1):
        for output in outputs:
            if position <= len(output.pieces):
                yield output, position


# -- the writers ---------------------------------------------------------------------------------


class Writer:
    """One API family's wire format. A writer is made for each request (see :func:`writer_for`):
    what its path says (a model, a method, the framing) are its attributes."""

    name = ""
    stream_headers: _Headers = _SSE

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        raise NotImplementedError

    def whole(self, job: EchoJob) -> object:
        raise NotImplementedError

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        raise NotImplementedError

    def end(self, job: EchoJob) -> bytes:
        """The last bytes of a stream, after every frame (the echo paces frames, not this)."""
        return b""

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        """``(status, payload)``: the error in the family's shape."""
        raise NotImplementedError


_ANTHROPIC_ERRORS = {404: "not_found_error", 413: "request_too_large"}


class Anthropic(Writer):
    """Anthropic Messages: ``message_start``, a text block's start, deltas and stop, then
    ``message_delta`` (the stop reason, the output tokens) and ``message_stop``."""

    name = "anthropic"

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        name = _model(request, model)
        if request.get("max_tokens") is None:
            raise InvalidRequest(400, "max_tokens: Field required", param="max_tokens")
        max_tokens = _count(request["max_tokens"], "max_tokens", MAX_TOKENS)
        text = _last_user(request.get("messages"), "messages")
        return echo_job((text,), stream=_flag(request, "stream", False), model=name,
                        max_tokens=max_tokens)  # fmt: skip

    def _message(self, job: EchoJob, content: list[Any], stop: str | None, out: int) -> Any:
        return {
            "id": _id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": job.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": job.prompt_tokens(),
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": out,
                "service_tier": "standard",
            },
        }

    @staticmethod
    def _stop_reason(output: Output) -> str:
        return "max_tokens" if output.limited else "end_turn"

    def whole(self, job: EchoJob) -> object:
        (output,) = job.outputs()
        content = [{"type": "text", "text": output.text}]
        return self._message(job, content, self._stop_reason(output), len(output.pieces))

    @staticmethod
    def _event(payload: dict[str, Any]) -> bytes:
        return encode_event(payload, [b"event: " + payload["type"].encode()])

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        (output,) = job.outputs()
        event = self._event
        yield event({"type": "message_start", "message": self._message(job, [], None, 1)})
        block = {"type": "text", "text": ""}
        yield event({"type": "content_block_start", "index": 0, "content_block": block})
        yield event({"type": "ping"})
        for piece in output.pieces:
            delta = {"type": "text_delta", "text": piece}
            yield event({"type": "content_block_delta", "index": 0, "delta": delta})
        yield event({"type": "content_block_stop", "index": 0})
        yield event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(output), "stop_sequence": None},
                "usage": {"output_tokens": len(output.pieces)},
            }
        )
        yield event({"type": "message_stop"})

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        kind = _ANTHROPIC_ERRORS.get(error.status, "invalid_request_error")
        detail = {"type": kind, "message": error.message}
        return error.status, {"type": "error", "error": detail, "request_id": _id("req_")}


class Ollama(Writer):
    """Ollama's ``/api/chat`` (``message.content``) and ``/api/generate`` (``response``):
    NDJSON lines, the last with ``done: true``, ``done_reason`` and the counts."""

    stream_headers: _Headers = ((b"content-type", b"application/x-ndjson"),)

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.name = "ollama-chat" if chat else "ollama-generate"
        self.started = time.monotonic_ns()

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        if request.get("model") is None:
            raise InvalidRequest(400, "model is required", param="model")
        name = _model(request, model, model + ":latest")
        if self.chat:
            text = _last_user(request.get("messages"), "messages")
        else:
            text = request.get("prompt", "")
            if not isinstance(text, str):
                raise _bad("prompt", f"expected a string, got {describe(text)}.")
        options = _object(request, "options")
        # -1 (the default) generates until the end, -2 until the context is full: no cap.
        cap = _count(options.get("num_predict"), "options.num_predict", MAX_TOKENS, (-1, -2))
        return echo_job((text,), stream=_flag(request, "stream", True), model=name,
                        max_tokens=cap)  # fmt: skip

    def _line(self, job: EchoJob, text: str) -> dict[str, Any]:
        line: dict[str, Any] = {
            "model": job.model,
            # RFC 3339, as Ollama writes it (Go's time.Time).
            "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        if self.chat:
            line["message"] = {"role": "assistant", "content": text}
        else:
            line["response"] = text
        line["done"] = False
        return line

    def _last(self, job: EchoJob, output: Output, text: str) -> dict[str, Any]:
        line = self._line(job, text)
        elapsed = time.monotonic_ns() - self.started
        line.update(done=True, done_reason="length" if output.limited else "stop")
        if not self.chat:
            # The conversation so far, in tokens: here one number per piece of both sides.
            line["context"] = list(range(job.prompt_tokens() + len(output.pieces)))
        line.update(
            total_duration=elapsed,
            load_duration=0,
            prompt_eval_count=job.prompt_tokens(),
            prompt_eval_duration=0,
            eval_count=len(output.pieces),
            eval_duration=elapsed,
        )
        return line

    def whole(self, job: EchoJob) -> object:
        (output,) = job.outputs()
        return self._last(job, output, output.text)

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        (output,) = job.outputs()
        for piece in output.pieces:
            yield _json.dumps(self._line(job, piece)) + b"\n"
        yield _json.dumps(self._last(job, output, "")) + b"\n"

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        return error.status, {"error": error.message}  # the client raises ResponseError(error)


class LlamaCpp(Writer):
    """llama.cpp's native ``/completion``: ``data:`` events with ``content`` and ``index``,
    each prompt of a list ending with an event of ``stop: true``; no ``[DONE]``."""

    name = "llama.cpp"

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        prompt = request.get("prompt")
        if prompt is None:
            raise InvalidRequest(400, '"prompt" must be provided', param="prompt")
        if isinstance(prompt, str):
            prompts: tuple[str, ...] = (prompt,)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            if len(prompt) > MAX_PROMPTS:
                raise _bad("prompt", f"at most {MAX_PROMPTS} prompts, got {len(prompt)}.")
            prompts = tuple(prompt)
        else:
            raise _bad("prompt", f"expected a string or strings, got {describe(prompt)}.")
        # n_predict beats max_tokens, as in llama.cpp; -1 (its default) is no cap.
        cap = request.get("n_predict", request.get("max_tokens"))
        field = "n_predict" if "n_predict" in request else "max_tokens"
        return echo_job(prompts, stream=_flag(request, "stream", False), model=model,
                        max_tokens=_count(cap, field, MAX_TOKENS, (-1,)))  # fmt: skip

    def _result(self, job: EchoJob, output: Output, content: str, decoded: int) -> dict[str, Any]:
        return {
            "index": output.index,
            "content": content,
            "tokens": [],
            "stop": False,
            "id_slot": output.index,
            "tokens_predicted": decoded,
            "tokens_evaluated": job.prompt_tokens(output.index),
        }

    def _final(self, job: EchoJob, output: Output, content: str) -> dict[str, Any]:
        decoded = len(output.pieces)
        prompt = job.prompts[output.index // job.copies]
        result = self._result(job, output, content, decoded)
        result.update(
            stop=True,
            model=job.model,
            generation_settings={"n_predict": job.max_tokens or -1, "stream": job.stream},
            prompt=prompt,
            has_new_line="\n" in output.text,
            truncated=False,
            stop_type="limit" if output.limited else "eos",
            stopping_word="",
            tokens_cached=job.prompt_tokens(output.index) + decoded,
            timings={"prompt_n": job.prompt_tokens(output.index), "predicted_n": decoded},
        )
        return result

    def whole(self, job: EchoJob) -> object:
        results = [self._final(job, output, output.text) for output in job.outputs()]
        return results if len(results) > 1 else results[0]  # one prompt: one object

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        for output, position in _interleaved(job.outputs()):
            if position < len(output.pieces):
                piece = output.pieces[position]
                yield encode_event(self._result(job, output, piece, position + 1))
            else:
                yield encode_event(self._final(job, output, ""))  # streamed: content was sent

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        kind = "not_found_error" if error.status == 404 else "invalid_request_error"
        detail = {"code": error.status, "message": error.message, "type": kind}
        return error.status, {"error": detail}


class TGI(Writer):
    """Hugging Face TGI: ``/generate`` answers ``generated_text`` (and ``details`` if asked);
    ``/generate_stream`` sends ``data:`` events of one ``token`` each, the last with
    ``generated_text`` (and ``details``). The end of sequence is a special token."""

    name = "tgi"
    stream_headers: _Headers = (
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
    )

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.details = False

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        inputs = request.get("inputs")
        if not isinstance(inputs, str):
            raise _bad("inputs", f"expected a string, got {describe(inputs)}.")
        parameters = _object(request, "parameters")
        # TGI answers details only when asked (the field defaults to false in its router).
        self.details = _flag(parameters, "details", False, "parameters.details")
        cap = _count(parameters.get("max_new_tokens"), "parameters.max_new_tokens", MAX_TOKENS)
        return echo_job((inputs,), stream=self.streaming, model=model, max_tokens=cap)

    @staticmethod
    def _token(position: int, text: str, special: bool = False) -> dict[str, Any]:
        return {"id": position + 3, "text": text, "logprob": 0.0, "special": special}

    def whole(self, job: EchoJob) -> object:
        (output,) = job.outputs()
        response: dict[str, Any] = {"generated_text": output.text}
        if self.details:
            response["details"] = {
                "finish_reason": "length" if output.limited else "eos_token",
                "generated_tokens": len(output.pieces) + (not output.limited),
                "seed": None,
                "prefill": [],
                "tokens": [self._token(i, piece) for i, piece in enumerate(output.pieces)]
                + ([] if output.limited else [self._token(len(output.pieces), "</s>", True)]),
            }
        return response

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        (output,) = job.outputs()
        tokens = [self._token(i, piece) for i, piece in enumerate(output.pieces)]
        if not output.limited:
            tokens.append(self._token(len(tokens), "</s>", special=True))
        for position, token in enumerate(tokens):
            event: dict[str, Any] = {"index": position + 1, "token": token}
            last = position == len(tokens) - 1
            event["generated_text"] = output.text if last else None
            event["details"] = None
            if last and self.details:
                event["details"] = {
                    "finish_reason": "length" if output.limited else "eos_token",
                    "generated_tokens": len(tokens),
                    "input_length": job.prompt_tokens(),
                    "seed": None,
                }
            yield (
                b"data:" + _json.dumps(event) + b"\n\n"
            )  # TGI (axum) writes no space after the colon

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        return error.status, {"error": error.message, "error_type": "validation"}
