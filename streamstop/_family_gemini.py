"""The Gemini Developer API (``generativelanguage``): the adapter of the filter core, sans-I/O.

Rules of this module (what the API looks like; the filtering is :mod:`._family`'s):

- Paths: ``/v1beta/models/{model}:streamGenerateContent`` and ``:generateContent`` (and
  ``/v1/models/...``, the stable version, and ``/v1beta/tunedModels/...``). A stream is asked
  for by the path; its framing by the query: ``?alt=sse`` gives server-sent events of one
  ``GenerateContentResponse`` each (what every google-genai SDK asks for); without it the API
  streams one JSON array, element by element. A request with stops and no ``alt=sse`` is
  refused (400 ``INVALID_ARGUMENT``, saying to add it): cutting an array mid-stream would take a
  second incremental JSON framer facing the upstream, for a framing no SDK uses, and passing it
  through uncut would break the stops' promise. Without stops it passes untouched.
- The stops are ``generationConfig.stopSequences`` (the SDKs send camelCase; the API, as any
  proto JSON API, takes ``generation_config.stop_sequences`` too, so both are read and
  removed). The text is ``candidates[].content.parts[].text``; parts with ``thought: true``
  (the model's thoughts when ``thinkingConfig.includeThoughts``), function calls and the rest
  are not text. Candidates (``generationConfig.candidateCount``) are slots, by ``index``.
- An event may hold several candidates, or several parts: :meth:`Gemini.split` makes it pieces
  of one part of one candidate each, :meth:`Gemini.join` one event again (candidates in order,
  each with its parts), so a client reading ``chunk.text`` (the first candidate's) reads the
  same. A candidate ends with the event that gives it a ``finishReason``.
- A cut ends the candidate with ``finishReason: "STOP"`` (what the API itself writes when one of
  its own stop sequences fires) on the event carrying the text up to the stop; once every
  candidate is over the stream ends and the upstream is closed. A whole response gets the same
  in each candidate: the parts up to the stop, the rest left out.
- Errors are in Google's shape, ``{"error": {"code", "message", "status"}}`` (what the SDK's
  ``errors.APIError`` reads), with the field at fault as a ``google.rpc.BadRequest`` field
  violation and this layer's code as a ``google.rpc.ErrorInfo`` reason in ``details``.
"""

from __future__ import annotations

from typing import Any, TypeGuard
from urllib.parse import parse_qs

from ._automaton import StopAutomaton
from ._family import Family

__all__ = ["Gemini"]

# HTTP status -> the google.rpc.Code name the API writes beside it.
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",  # Google answers an oversized request as an invalid argument
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_CONFIG = ("generationConfig", "generation_config")
_STOPS = ("stopSequences", "stop_sequences")
_COUNT = ("candidateCount", "candidate_count")
_FINISH = ("finishReason", "finishMessage")


def _is_text(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")


def _parts(candidate: dict[str, Any]) -> list[Any]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _status(status: int) -> str:
    return _STATUS.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")


class Gemini(Family):
    """Gemini's ``generateContent`` and ``streamGenerateContent?alt=sse``."""

    name = "gemini"
    stop_path = ("generationConfig", "stopSequences")

    # -- requests ---------------------------------------------------------------------------

    def streams(self, request: dict[str, Any], path: str) -> bool:
        return path.endswith(":streamGenerateContent")

    def _configs(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        return [c for key in _CONFIG if isinstance(c := request.get(key), dict)]

    def slots(self, request: dict[str, Any]) -> int:
        for config in self._configs(request):
            for key in _COUNT:
                count = config.get(key)
                if _is_index(count) and count >= 1:
                    return int(count)
        return 1

    def stops_value(self, request: dict[str, Any]) -> Any:
        values = [
            config[key] for config in self._configs(request) for key in _STOPS if key in config
        ]
        if len(values) <= 1:
            return values[0] if values else None
        # Both spellings at once: every stop of either, checked as one list.
        if all(isinstance(value, list) for value in values):
            return [stop for value in values for stop in value]
        return next(value for value in values if not isinstance(value, list))

    def remove_stops(self, request: dict[str, Any]) -> bool:
        removed = False
        for config in self._configs(request):
            for key in _STOPS:
                if key in config:
                    del config[key]
                    removed = True
        return removed

    def refusal(self, request: dict[str, Any], path: str, query: bytes) -> str | None:
        if not self.streams(request, path):
            return None
        alt = parse_qs(query.decode("latin-1")).get("alt", [])
        if alt and alt[-1] == "sse":
            return None
        return (
            "streamGenerateContent with stopSequences needs server-sent events: add ?alt=sse "
            "to the URL (the google-genai SDKs always do). Without it the API streams one JSON "
            "array, which this proxy does not cut."
        )

    def model(self, request: dict[str, Any], path: str) -> str | None:
        name = path.rpartition(":")[0]
        for prefix in ("/models/", "/tunedModels/"):
            if prefix in name:
                return name.split(prefix, 1)[1] or None
        return None

    # -- events -----------------------------------------------------------------------------

    def ends_all(self) -> bool:
        return False  # with candidateCount, the others go on: over once each one is

    def split(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        candidates = payload.get("candidates")
        if type(candidates) is not list or len(candidates) <= 1:
            # The usual event (one candidate, one part) is tested first, type by type: this
            # runs on every event (isinstance and helper calls cost a third of the filter).
            if not candidates or type(candidates) is not list:
                return None
            candidate = candidates[0]
            content = candidate.get("content") if type(candidate) is dict else None
            parts = content.get("parts") if type(content) is dict else None
            if type(parts) is not list or len(parts) <= 1:
                return None
        if not all(isinstance(c, dict) for c in candidates):
            return None
        pieces = []
        for position, candidate in enumerate(candidates):
            index = candidate.get("index")
            candidate = {**candidate, "index": index if _is_index(index) else position}
            parts = _parts(candidate)
            if not parts:
                pieces.append({**payload, "candidates": [candidate]})
                continue
            # Only the last piece of a candidate carries its end.
            head = {k: v for k, v in candidate.items() if k not in _FINISH}
            for number, part in enumerate(parts):
                whole = candidate if number == len(parts) - 1 else head
                content = {**candidate["content"], "parts": [part]}
                pieces.append({**payload, "candidates": [{**whole, "content": content}]})
        return pieces

    def join(self, payload: dict[str, Any], pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        unindexed = {
            position
            for position, candidate in enumerate(payload["candidates"])
            if not _is_index(candidate.get("index"))
        }
        merged: dict[Any, dict[str, Any]] = {}
        for piece in pieces:
            for candidate in piece["candidates"]:
                index = candidate.get("index")
                into = merged.get(index)
                if into is None:
                    merged[index] = dict(candidate)
                    continue
                parts = _parts(into) + _parts(candidate)
                content = {**(into.get("content") or {}), **(candidate.get("content") or {})}
                into.update(candidate)
                into["content"] = {**content, "parts": parts}
        if not merged:
            return []
        candidates = []
        for index, candidate in merged.items():
            if index in unindexed:
                del candidate["index"]  # as the upstream wrote it: without one
            candidates.append(candidate)
        return [{**payload, "candidates": candidates}]

    def _candidate(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        candidates = payload.get("candidates")
        if isinstance(candidates, list) and len(candidates) == 1:
            candidate = candidates[0]
            return candidate if isinstance(candidate, dict) else None
        return None

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        candidates = payload.get("candidates")
        if type(candidates) is not list or len(candidates) != 1:
            return None
        candidate = candidates[0]
        if type(candidate) is not dict:
            return None
        index = candidate.get("index", 0)
        slot = index if type(index) is int else 0
        content = candidate.get("content")
        parts = content.get("parts") if type(content) is dict else None
        if type(parts) is list and parts:
            part = parts[0]
            if len(parts) == 1 and type(part) is dict and not part.get("thought"):
                text = part.get("text")  # the usual event: one text part
                return slot, text if type(text) is str else None
            texts = [part["text"] for part in parts if _is_text(part)]
            if texts:
                return slot, "".join(texts)
        # Not text (thoughts, function calls): still the candidate's, dropped after its cut.
        return slot, None

    def finishes(self, payload: dict[str, Any]) -> bool:
        candidates = payload.get("candidates")  # tested inline: asked of every event
        if type(candidates) is not list or len(candidates) != 1:
            return False
        candidate = candidates[0]
        return type(candidate) is dict and bool(candidate.get("finishReason"))

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        candidate = self._candidate(payload)
        assert candidate is not None
        content = candidate.get("content")
        content = dict(content) if isinstance(content, dict) else {"role": "model"}
        parts = list(_parts(candidate))
        for position, part in enumerate(parts):
            if _is_text(part):
                parts[position] = {**part, "text": text}
                break
        else:
            parts.append({"text": text})
        content["parts"] = parts
        return {**payload, "candidates": [{**candidate, "content": content}]}

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        out = self.with_text(payload, text)
        (candidate,) = out["candidates"]
        ended = {k: v for k, v in candidate.items() if k != "finishMessage"}
        ended["finishReason"] = "STOP"
        return [{**out, "candidates": [ended]}]

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        status = 504 if code == "upstream_timeout" else 502
        return self.error_body(status, message, type="server_error", code=code)

    def error_body(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ) -> dict[str, Any]:
        error: dict[str, Any] = {"code": status, "message": message, "status": _status(status)}
        details: list[dict[str, Any]] = []
        if param is not None:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": param, "description": message}],
                }
            )
        if isinstance(code, str):  # this layer's own (an int is the upstream's status)
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": code.upper(),
                    "domain": "streamstop",
                }
            )
        if details:
            error["details"] = details
        return {"error": error}

    # -- whole responses --------------------------------------------------------------------

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        candidates = response.get("candidates") if isinstance(response, dict) else None
        if not isinstance(candidates, list):
            return response, []
        fired: list[str] = []
        out = []
        for candidate in candidates:
            cut = _cut_candidate(candidate, automaton, include_stop)
            if cut is None:
                out.append(candidate)
            else:
                out.append(cut[0])
                fired.append(cut[1])
        if not fired:
            return response, []
        return {**response, "candidates": out}, fired


def _cut_candidate(
    candidate: Any, automaton: StopAutomaton, include_stop: bool
) -> tuple[dict[str, Any], str] | None:
    """A candidate of a whole response cut at its first stop, and that stop; ``None`` if none.

    Its text parts are one text, as they are when streamed: a stop may span two of them. The
    parts before the one in which the stop ends are kept (their text up to the cut), that one
    is cut, the rest left out."""
    if not isinstance(candidate, dict):
        return None
    parts = _parts(candidate)
    spans = []  # (position in parts, start in the whole text)
    total = 0
    for position, part in enumerate(parts):
        if _is_text(part):
            spans.append((position, total))
            total += len(part["text"])
    if not spans:
        return None
    match = automaton.find("".join(parts[position]["text"] for position, _ in spans))
    if match is None:
        return None
    at = match.end if include_stop else match.start
    last = next(position for position, start in reversed(spans) if start < match.end)
    starts = dict(spans)
    kept = []
    for position, part in enumerate(parts[: last + 1]):
        if position not in starts:
            kept.append(part)
            continue
        text = part["text"][: max(0, at - starts[position])]
        if text or position == last:
            kept.append({**part, "text": text})
    content = {**candidate["content"], "parts": kept}
    ended = {k: v for k, v in candidate.items() if k != "finishMessage"}
    return {**ended, "content": content, "finishReason": "STOP"}, match.stop
