"""The echo model's writers of the OpenAI Responses API and of Gemini's ``generateContent``.

The same rules as :mod:`._echo_families` (its request bounds, one writer per family); kept apart
only for length. Formats, as the SDKs' types read them:

- Responses (``openai.types.responses``): ``response.created``, ``response.in_progress``, the
  message item's ``output_item.added`` and ``content_part.added``, ``output_text.delta``
  events (with ``obfuscation`` unless ``stream_options.include_obfuscation`` is false), the
  ``.done`` events in reverse, then ``response.completed`` (``response.incomplete`` when
  ``max_output_tokens`` cut it); each event has the next ``sequence_number``; no ``[DONE]``.
- Gemini (``google.genai.types.GenerateContentResponse``): chunks of ``candidates`` (each
  ``content.parts[].text``, ``role: "model"``, ``index``; the last of a candidate with its
  ``finishReason``) and ``usageMetadata``; ``?alt=sse`` streams them as ``data:`` events, as
  the SDK asks, and without it the stream is one JSON array written chunk by chunk.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from .. import _json
from .._sse import encode_event
from ._echo_families import (
    MAX_N,
    MAX_TOKENS,
    EchoJob,
    Output,
    Writer,
    _bad,
    _count,
    _field,
    _flag,
    _id,
    _model,
    _object,
    _text,
    echo_job,
)
from ._request import InvalidRequest, describe

__all__ = ["Gemini", "Responses"]


class Responses(Writer):
    """The OpenAI Responses API (``/v1/responses``): one ``message`` item of one
    ``output_text`` part."""

    name = "responses"

    def __init__(self) -> None:
        self.id = _id("resp_")
        self.message_id = _id("msg_")
        self.created = int(time.time())
        self.obfuscation = True
        self.instructions: str | None = None

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        name = _model(request, model)
        text = self._input(request.get("input"))
        cap = _count(request.get("max_output_tokens"), "max_output_tokens", MAX_TOKENS)
        options = _object(request, "stream_options")
        self.obfuscation = options.get("include_obfuscation") is not False
        instructions = request.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None
        return echo_job((text,), stream=_flag(request, "stream", False), model=name,
                        max_tokens=cap)  # fmt: skip

    @staticmethod
    def _input(items: object) -> str:
        """The text of ``input``: a string, or its last item with role ``user``."""
        if isinstance(items, str):
            return items
        if isinstance(items, list) and items:
            for item in reversed(items):
                if isinstance(item, dict) and item.get("role") == "user":
                    return _text(item.get("content"), "input", ("input_text", "text"))
            raise _bad("input", "the echo model needs an input item with role 'user' to echo.")
        raise _bad("input", f"expected a string or a non-empty array, got {describe(items)}.")

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _item(self, status: str, parts: list[Any]) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "content": parts,
            "role": "assistant",
        }

    def _response(self, job: EchoJob, output: Output | None) -> dict[str, Any]:
        """The response object: in progress (``output`` ``None``), or done with ``output``."""
        status = "in_progress" if output is None else self._status(output)
        usage = None
        if output is not None:
            prompt, completion = job.prompt_tokens(), len(output.pieces)
            usage = {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "instructions": self.instructions,
            "max_output_tokens": job.max_tokens,
            "max_tool_calls": None,
            "model": job.model,
            "output": [] if output is None else [self._done_item(output)],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": False,  # the echo keeps nothing to retrieve
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    @staticmethod
    def _status(output: Output) -> str:
        return "incomplete" if output.limited else "completed"

    def _done_item(self, output: Output) -> dict[str, Any]:
        return self._item(self._status(output), [self._part(output.text)])

    def whole(self, job: EchoJob) -> object:
        (output,) = job.outputs()
        return self._response(job, output)

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        (output,) = job.outputs()
        sequence = 0

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **fields}
            sequence += 1
            return encode_event(payload, [b"event: " + kind.encode()])

        where = {"item_id": self.message_id, "output_index": 0, "content_index": 0}
        yield event("response.created", response=self._response(job, None))
        yield event("response.in_progress", response=self._response(job, None))
        item = self._item("in_progress", [])
        yield event("response.output_item.added", output_index=0, item=item)
        yield event("response.content_part.added", **where, part=self._part(""))
        for piece in output.pieces:
            delta: dict[str, Any] = {"delta": piece, "logprobs": []}
            if self.obfuscation:
                # Random padding, so the events' sizes do not tell the deltas' lengths.
                delta["obfuscation"] = uuid.uuid4().hex[: 4 + (-len(piece)) % 12]
            yield event("response.output_text.delta", **where, **delta)
        yield event("response.output_text.done", **where, text=output.text, logprobs=[])
        yield event("response.content_part.done", **where, part=self._part(output.text))
        yield event("response.output_item.done", output_index=0, item=self._done_item(output))
        done = self._response(job, output)
        yield event(f"response.{done['status']}", response=done)

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        detail = {
            "message": error.message,
            "type": "invalid_request_error",
            "param": error.param,
            "code": error.code,
        }
        return error.status, {"error": detail}


# Google's error statuses (google.rpc.Code) by HTTP status.
_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED"}


class Gemini(Writer):
    """Gemini's ``models/{model}:generateContent`` and ``:streamGenerateContent`` (the
    Developer API's ``/v1beta`` paths): ``candidateCount`` candidates, ``maxOutputTokens``."""

    name = "gemini"

    def __init__(self, model: str, *, stream: bool, sse: bool) -> None:
        self.path_model = model
        self.streaming = stream
        self.sse = sse
        self.id = uuid.uuid4().hex[:22]
        if not sse:
            self.stream_headers = ((b"content-type", b"application/json; charset=UTF-8"),)

    def parse(self, request: dict[str, Any], model: str) -> EchoJob:
        if self.path_model != model:
            raise InvalidRequest(
                404,
                f"models/{self.path_model} is not found for API version v1beta, or is not "
                f"supported for generateContent: this server has one model, {model!r}.",
                param="model",
            )
        text = self._contents(request.get("contents"))
        config = _field(request, "generationConfig", "generation_config")
        if config is not None and not isinstance(config, dict):
            raise _bad("generationConfig", f"expected an object, got {describe(config)}.")
        config = config or {}
        copies_field = "generationConfig.candidateCount"
        copies = _count(_field(config, "candidateCount", "candidate_count"), copies_field, MAX_N)
        cap = _count(
            _field(config, "maxOutputTokens", "max_output_tokens"),
            "generationConfig.maxOutputTokens",
            MAX_TOKENS,
        )
        return echo_job((text,), stream=self.streaming, model=model, copies=copies or 1,
                        copies_field=copies_field, max_tokens=cap)  # fmt: skip

    @staticmethod
    def _contents(contents: object) -> str:
        """The text of the last content from the user (``role`` ``user``, or none given)."""
        if not isinstance(contents, list) or not contents:
            raise _bad("contents", f"expected a non-empty array, got {describe(contents)}.")
        for content in reversed(contents):
            if isinstance(content, dict) and content.get("role", "user") == "user":
                parts = content.get("parts")
                if not isinstance(parts, list):
                    raise _bad("contents", f"expected parts as an array, got {describe(parts)}.")
                return "".join(
                    part["text"]
                    for part in parts
                    if isinstance(part, dict)
                    and isinstance(part.get("text"), str)
                    and part.get("thought") is not True
                )
        raise _bad("contents", "the echo model needs a content with role 'user' to echo.")

    @staticmethod
    def _candidate(output: Output, text: str, last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
        if last:
            candidate["finishReason"] = "MAX_TOKENS" if output.limited else "STOP"
        candidate["index"] = output.index
        return candidate

    def _chunk(self, job: EchoJob, candidates: list[Any], generated: int) -> dict[str, Any]:
        prompt = job.prompt_tokens()
        return {
            "candidates": candidates,
            "usageMetadata": {
                "promptTokenCount": prompt,
                "candidatesTokenCount": generated,
                "totalTokenCount": prompt + generated,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
            },
            "modelVersion": job.model,
            "responseId": self.id,
        }

    def whole(self, job: EchoJob) -> object:
        outputs = job.outputs()
        candidates = [self._candidate(output, output.text, True) for output in outputs]
        return self._chunk(job, candidates, sum(len(output.pieces) for output in outputs))

    def frames(self, job: EchoJob) -> Iterator[bytes]:
        outputs = job.outputs()
        generated = 0
        # A chunk for each position: the candidates' pieces there; an empty echo is one "".
        for position in range(max(1, *(len(output.pieces) for output in outputs))):
            candidates = []
            for output in outputs:
                if position < len(output.pieces):
                    last = position == len(output.pieces) - 1
                    candidates.append(self._candidate(output, output.pieces[position], last))
                    generated += 1
                elif position == 0:
                    candidates.append(self._candidate(output, "", True))
            chunk = _json.dumps(self._chunk(job, candidates, generated))
            if self.sse:
                yield b"data: " + chunk + b"\r\n\r\n"  # Google's servers end lines with CRLF
            else:
                yield (b"[" if position == 0 else b",\r\n") + chunk

    def end(self, job: EchoJob) -> bytes:
        return b"" if self.sse else b"]"

    def error(self, error: InvalidRequest) -> tuple[int, object]:
        status = _GEMINI_STATUS.get(error.status, "INVALID_ARGUMENT")
        return error.status, {
            "error": {"code": error.status, "message": error.message, "status": status}
        }
