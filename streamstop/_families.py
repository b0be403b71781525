"""API families: the adapters of the streaming APIs, and the tables that route to them, sans-I/O.

Rules of this module (one filter core, one small adapter per API; no anyio, no I/O):

- A *family* says where the stop parameter of a request lives, whether a request streams, how
  many outputs (slots) a response has, where the text of an event is, which event ends a slot,
  how a cut is written, and how a whole (non-streaming) response is cut:

  ============  ======================  ====================  ============================
  family        paths                   stop parameter        text
  ============  ======================  ====================  ============================
  openai        ``/v1/chat/completions``, ``/v1/completions``: ``stop`` (``stop_regex``...),
                ``choices[].delta.content``, ``choices[].text`` (:mod:`._family_openai`)
  anthropic     ``/v1/messages``        ``stop_sequences``    ``text_delta`` of text blocks
  ollama        ``/api/chat``           ``options.stop``      ``message.content``
  ollama        ``/api/generate``       ``options.stop``      ``response``
  llama.cpp     ``/completion[s]``      ``stop``              ``content``
  tgi           ``/generate[_stream]``  ``parameters.stop``   ``token.text``
  responses     ``/v1/responses``       ``stop``              ``output_text`` of messages
  gemini        ``/v1beta/models/{model}:[stream]generateContent``: ``generationConfig.
                stopSequences``, ``candidates[].content.parts[].text`` (:mod:`._family_gemini`)
  ============  ======================  ====================  ============================

  (The Responses API's adapter lives in :mod:`._family_responses`: its cut rebuilds the
  response, so it keeps more state than these. OpenAI's chat and completions, in
  :mod:`._family_openai`, keep a core of their own, :class:`~streamstop.chat.SSEFilter`, made by
  the adapter's :meth:`~streamstop._family.Family.stream_filter`.)

- :data:`FAMILIES` holds one adapter per name, OpenAI's (``"openai"``) included;
  :data:`~streamstop._family_openai.OPENAI_PATHS` maps OpenAI's paths to it (the middleware's
  ``paths``), :data:`FAMILY_PATHS` each native path of the others to its family; a key holding
  ``{model}`` is a pattern, ``{model}`` standing for one path segment without ``:`` (Gemini
  names the model in the path). :func:`family_route` finds the key a path is (the proxy's
  routing, the middleware's, the metrics' route label: a pattern, never the model, so labels
  stay bounded).

- :class:`~streamstop._family.FamilyStream` (in :mod:`._family`) is the core they all share:
  it asks the adapter only the questions above.
- A cut writes the family's own end: Anthropic's ``content_block_stop``, ``message_delta``
  (``stop_reason: "stop_sequence"``, ``stop_sequence``) and ``message_stop``; Ollama's line
  with ``done: true, done_reason: "stop"``; llama.cpp's event with ``stop: true``,
  ``stop_type: "word"``, ``stopping_word`` (and, as last received, the fields of its own last
  event that only the server knows: ``model``, ``truncated``, ``tokens_cached``, ``timings``);
  TGI's event with ``generated_text`` and
  ``details.finish_reason: "stop_sequence"``. After it the stream is :attr:`FamilyStream.done`
  (for llama.cpp with several prompts: once every prompt is over) and the upstream may close.
- Events that are not text (Anthropic's ``tool_use``, ``thinking``, pings; TGI's special
  tokens) pass through untouched. An upstream error payload ends the stream and drops the text
  held back (it may be the start of a stop), as for OpenAI streams.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from ._automaton import StopAutomaton
from ._family import Family, cut_each, cut_text, server_error
from ._family_gemini import Gemini
from ._family_openai import OPENAI_ALIASES, OpenAI
from ._family_responses import Responses
from ._sse import encode_event

__all__ = [
    "FAMILIES",
    "FAMILY_PATHS",
    "OPENAI_ALIASES",
    "TGI",
    "Anthropic",
    "LlamaCpp",
    "OllamaChat",
    "OllamaGenerate",
    "family_for_path",
    "family_route",
]


# -- the adapters --------------------------------------------------------------------------------


class Anthropic(Family):
    """Anthropic Messages (``/v1/messages``): SSE with ``event:`` names."""

    name = "anthropic"
    stop_path = ("stop_sequences",)

    def __init__(self) -> None:
        self._deltas = 0

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        kind = payload.get("type")
        index = payload.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            return None
        if kind == "content_block_delta":
            self._deltas += 1
            delta = payload.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                return index, delta.get("text")
            return None  # tool input, thinking: not ours
        if kind == "content_block_stop":
            return index, None
        if kind == "content_block_start":
            block = payload.get("content_block")
            if isinstance(block, dict) and block.get("type") == "text":
                return index, block.get("text")
        return None

    def finishes(self, payload: dict[str, Any]) -> bool:
        return payload.get("type") == "content_block_stop"

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        if payload.get("type") == "content_block_start":
            return {**payload, "content_block": {**payload["content_block"], "text": text}}
        return {**payload, "delta": {**payload["delta"], "text": text}}

    def _delta(self, slot: int, text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": slot,
            "delta": {"type": "text_delta", "text": text},
        }

    def release(self, payload: dict[str, Any], slot: int, text: str) -> list[dict[str, Any]]:
        if payload.get("type") == "content_block_stop":
            return [self._delta(slot, text), payload] if text else [payload]
        return [self.with_text(payload, text)]

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        out = []
        if payload.get("type") == "content_block_start" or text:
            out.append(self.with_text(payload, text))
        out += [
            {"type": "content_block_stop", "index": slot},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "stop_sequence", "stop_sequence": stop},
                # The deltas received up to the cut: the upstream's own count never comes.
                "usage": {"output_tokens": self._deltas},
            },
            {"type": "message_stop"},
        ]
        return out

    def is_error(self, payload: dict[str, Any]) -> bool:
        return payload.get("type") == "error" or (
            "error" in payload and payload.get("type") is None
        )

    def encode(self, payload: dict[str, Any]) -> bytes:
        kind = payload.get("type")
        lines = [b"event: " + kind.encode()] if isinstance(kind, str) and kind.isascii() else []
        return encode_event(payload, lines)

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        return {"type": "error", **server_error(message, code)}

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        content = response.get("content") if isinstance(response, dict) else None
        if not isinstance(content, list):
            return response, []
        for position, block in enumerate(content):
            if not (isinstance(block, dict) and block.get("type") == "text"):
                continue
            found = cut_text(block.get("text"), automaton, include_stop)
            if found is None:
                continue
            text, stop = found
            blocks = [*content[:position], {**block, "text": text}]
            return {
                **response,
                "content": blocks,
                "stop_reason": "stop_sequence",
                "stop_sequence": stop,
            }, [stop]
        return response, []


class _OllamaBase(Family):
    framing = "ndjson"
    stop_path = ("options", "stop")

    def streams(self, request: dict[str, Any], path: str) -> bool:
        return request.get("stream") is not False  # Ollama streams unless told not to

    def finishes(self, payload: dict[str, Any]) -> bool:
        return payload.get("done") is True

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        return [{**self.with_text(payload, text), "done": True, "done_reason": "stop"}]

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        # Ollama's shape: its client raises ResponseError(error) for a string.
        return {"error": message}

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        if not isinstance(response, dict):
            return response, []
        found = self.text(response)
        if found is None:
            return response, []
        cut = cut_text(found[1], automaton, include_stop)
        if cut is None:
            return response, []
        return {**self.with_text(response, cut[0]), "done_reason": "stop"}, [cut[1]]


class OllamaChat(_OllamaBase):
    """Ollama ``/api/chat``: NDJSON lines with ``message.content``."""

    name = "ollama-chat"

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        message = payload.get("message")
        if not isinstance(message, dict):
            return (0, None) if payload.get("done") is True else None
        return 0, message.get("content")

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        message = payload.get("message")
        message = {**message, "content": text} if isinstance(message, dict) else {"content": text}
        return {**payload, "message": message}


class OllamaGenerate(_OllamaBase):
    """Ollama ``/api/generate``: NDJSON lines with ``response``."""

    name = "ollama-generate"

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        if "response" not in payload:
            return (0, None) if payload.get("done") is True else None
        return 0, payload.get("response")

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        return {**payload, "response": text}


def _index(payload: dict[str, Any]) -> int:
    index = payload.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


# Fields of llama.cpp's last event (tools/server/server-task.cpp, to_json_non_oaicompat) that
# the proxy cannot work out: a cut's end carries each as last received, from an event of its
# prompt (``timings`` comes with every event under ``timings_per_token``; an older server's
# last event of text had ``truncated``) or, for ``model`` (the server's, the same for all
# prompts), of any prompt (another prompt's end). What never came is left out, not made up.
_SERVER_FIELDS = ("truncated", "tokens_cached", "timings")


class LlamaCpp(Family):
    """llama.cpp's native ``/completion`` (and ``/completions``, the same handler): SSE (or one
    JSON object, or an array of them for a list of prompts) with ``content``, ``index`` and a
    last event with ``stop: true``."""

    name = "llama.cpp"

    def __init__(self) -> None:
        self._model: Any = None
        self._received: dict[int, dict[str, Any]] = {}

    def slots(self, request: dict[str, Any]) -> int:
        prompt = request.get("prompt")
        # A list of prompts (strings, or lists of tokens) has one output each; a list of ints
        # is one prompt in tokens.
        if isinstance(prompt, list) and prompt and any(isinstance(p, str | list) for p in prompt):
            return len(prompt)
        return 1

    def ends_all(self) -> bool:
        return False

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        if "content" not in payload and "stop" not in payload:
            return None
        slot = _index(payload)
        if "model" in payload:
            self._model = payload["model"]
        received = [key for key in _SERVER_FIELDS if key in payload]
        if received:
            self._received.setdefault(slot, {}).update((key, payload[key]) for key in received)
        return slot, payload.get("content")

    def finishes(self, payload: dict[str, Any]) -> bool:
        return payload.get("stop") is True

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        return {**payload, "content": text}

    def _stopped(self, payload: dict[str, Any], text: str, stop: str) -> dict[str, Any]:
        return {
            **payload,
            "content": text,
            "stop": True,
            "stop_type": "word",
            "stopping_word": stop,
        }

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        known = dict(self._received.get(slot, {}))
        if self._model is not None:
            known["model"] = self._model
        return [self._stopped({**payload, **known}, text, stop)]

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        if isinstance(response, list):
            return cut_each(response, lambda item: self.cut_whole(item, automaton, include_stop))
        if not isinstance(response, dict):
            return response, []
        cut = cut_text(response.get("content"), automaton, include_stop)
        if cut is None:
            return response, []
        return self._stopped(response, cut[0], cut[1]), [cut[1]]


class TGI(Family):
    """Hugging Face TGI's ``/generate_stream`` (SSE, ``token.text``, a last event with
    ``generated_text`` and ``details``) and ``/generate`` (one object, ``generated_text``)."""

    name = "tgi"
    stop_path = ("parameters", "stop")
    tracks_text = True

    def __init__(self) -> None:
        self._sent: list[str] = []
        self._tokens = 0

    def streams(self, request: dict[str, Any], path: str) -> bool:
        return path.endswith("_stream") or request.get("stream") is True

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        token = payload.get("token")
        if not isinstance(token, dict):
            return None
        self._tokens += 1
        if token.get("special") is True:
            return 0, None  # special tokens (</s>) are not text: generated_text skips them
        return 0, token.get("text")

    def finishes(self, payload: dict[str, Any]) -> bool:
        return payload.get("generated_text") is not None

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        return {**payload, "token": {**payload["token"], "text": text}}

    def release(self, payload: dict[str, Any], slot: int, text: str) -> list[dict[str, Any]]:
        token = payload.get("token")
        if isinstance(token, dict) and token.get("special") is True:
            # The held text goes out in an event of its own, before the special token.
            return [{**payload, "token": {**token, "text": text, "special": False},
                     "generated_text": None, "details": None}, payload]  # fmt: skip
        return [self.with_text(payload, text)]

    def on_sent(self, payload: dict[str, Any]) -> None:
        token = payload.get("token")
        if isinstance(token, dict) and token.get("special") is not True:
            text = token.get("text")
            if isinstance(text, str):
                self._sent.append(text)

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        details = payload.get("details")
        details = dict(details) if isinstance(details, dict) else {}
        details.update(
            finish_reason="stop_sequence", generated_tokens=self._tokens, seed=details.get("seed")
        )
        return [
            {
                **self.with_text(payload, text),
                "generated_text": "".join(self._sent) + text,
                "details": details,
            }
        ]

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        return {"error": message, "error_type": code}

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        if isinstance(response, list):
            return cut_each(response, lambda item: self.cut_whole(item, automaton, include_stop))
        if not isinstance(response, dict):
            return response, []
        cut = cut_text(response.get("generated_text"), automaton, include_stop)
        if cut is None:
            return response, []
        out = {**response, "generated_text": cut[0]}
        details = response.get("details")
        if isinstance(details, dict):
            out["details"] = {**details, "finish_reason": "stop_sequence"}
        return out, [cut[1]]


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        OpenAI(),
        Anthropic(),
        OllamaChat(),
        OllamaGenerate(),
        LlamaCpp(),
        TGI(),
        Responses(),
        Gemini(),
    )
}

# The native paths of each family, as an upstream serves them.
FAMILY_PATHS: dict[str, str] = {
    "/v1/messages": "anthropic",
    "/api/chat": "ollama-chat",
    "/api/generate": "ollama-generate",
    "/completion": "llama.cpp",
    # llama.cpp's alias of /completion, the same native handler (tools/server/server.cpp routes
    # both to post_completions; OpenAI's format is /v1/completions' alone).
    "/completions": "llama.cpp",
    "/generate": "tgi",
    "/generate_stream": "tgi",
    "/v1/responses": "responses",  # OpenAI's Responses API: it has no stop parameter of its own
    # Gemini's Developer API: v1beta (the SDKs' default), v1 (stable), tuned models.
    **{
        f"/{base}/{{model}}:{method}": "gemini"
        for base in ("v1beta/models", "v1/models", "v1beta/tunedModels")
        for method in ("generateContent", "streamGenerateContent")
    },
}


@functools.lru_cache(maxsize=16)
def _patterns(keys: tuple[str, ...]) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
    patterns = tuple(key for key in keys if "{model}" in key)
    if not patterns:
        return None
    alternatives = (
        "(" + re.escape(key).replace(re.escape("{model}"), "[^/:]+") + ")" for key in patterns
    )
    return re.compile("|".join(alternatives)), patterns


def family_route(path: str, paths: Mapping[str, object] = FAMILY_PATHS) -> str | None:
    """The key of ``paths`` that ``path`` is: itself, or the pattern it matches; else ``None``.

    >>> family_route("/api/chat"), family_route("/v1beta/models/gemini-2.5-flash:generateContent")
    ('/api/chat', '/v1beta/models/{model}:generateContent')
    >>> family_route("/v1beta/models/a/b:generateContent") is None
    True
    """
    if path in paths:
        return path
    if ":" not in path:
        return None  # no pattern matches: each has a ":method"
    compiled = _patterns(tuple(paths))
    if compiled is None:
        return None
    regex, patterns = compiled
    match = regex.fullmatch(path)
    return None if match is None else patterns[(match.lastindex or 1) - 1]


def family_for_path(path: str, paths: Mapping[str, str] = FAMILY_PATHS) -> str | None:
    """The name of the family serving ``path`` (per ``paths``), or ``None``.

    >>> family_for_path("/v1/models/gemini-2.5-pro:streamGenerateContent")
    'gemini'
    """
    route = family_route(path, paths)
    return None if route is None else paths[route]
