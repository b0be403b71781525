"""The OpenAI Responses API (``POST /v1/responses``) as a family of the filter core, sans-I/O.

Rules of this module (an adapter of :mod:`._family`; no anyio, no I/O):

- The API has no stop parameter (the live one answers ``stop`` with ``400 Unknown parameter:
  'stop'.``): the stops come in the body's ``stop``, as for Chat Completions (a string or a
  list; the SDKs send it with ``extra_body={"stop": [...]}``), and the middleware takes them
  out before the upstream sees the request.
- They apply to the text of ``output_text`` parts of ``message`` items, each part on its own
  (a slot per ``(output_index, content_index)``, numbered in the order they appear): the
  ``delta`` of ``response.output_text.delta`` (and the ``text`` of an ``output_text`` part
  added with text, which the API never does). Reasoning items and their summaries, refusals,
  function-call arguments and every other event pass untouched.
- ``response.output_text.done`` ends its part: text held back (a proper prefix of a stop) goes
  out first, in a delta of its own. The events that carry the whole text again
  (``content_part.done``, ``output_item.done``, ``response.completed``) come after it and hold
  exactly what was sent, since no stop fired.
- A cut writes what the API would have sent had the model stopped there, in its order: the
  delta with the text up to the stop (none if that is empty), ``response.output_text.done``
  with the part's cut text, ``response.content_part.done``, ``response.output_item.done`` (the
  message with the parts before and the cut one, ``status: "completed"``), then
  ``response.completed``: the response of ``response.created`` / ``in_progress`` with
  ``status: "completed"``, the items finished before and the cut message as its ``output``
  (items after the cut never exist), ``usage`` as the upstream last gave it (the upstream's own
  count never comes) and ``stop_reason``: the stop that fired. The core numbers every event
  (``sequence_number``) consecutively, the written ones included.
- Which stop fired is stated on the *response object* only (``stop_reason``, the field vLLM's
  OpenAI server uses on chat choices): the API has no field for it; the SDKs keep it as an
  extra field (``response.stop_reason``). Not on the message item: clients such as the Agents
  SDK send output items back as the next turn's input, where the API refuses unknown fields.
- A whole response is cut the same way: the first ``output_text`` part holding a stop is cut
  (annotations and logprobs past the cut dropped), later parts and items left out, the message
  and the response ``completed``, ``stop_reason`` set, ``output_text`` (a convenience some
  servers add) recomputed if present.
- Faults: an upstream ``error`` event or ``response.failed`` passes as the stream's last event
  and drops the text held back (it may be the start of a stop); a body that ends before
  ``response.completed`` / ``incomplete`` / ``failed`` ends with an ``error`` event
  (:meth:`Responses.unfinished`). The error events this filter (and the proxy) write have the
  fields of the SDK's ``ResponseErrorEvent`` (``type: "error"``, ``code``, ``message``,
  ``param``, ``sequence_number``) and the nested ``error`` object the live API sends: the
  Python SDK raises :class:`openai.APIError` on it, stricter readers find their fields.
"""

from __future__ import annotations

import time
from typing import Any

from ._automaton import StopAutomaton
from ._family import Family, cut_text
from ._sse import encode_event

__all__ = ["Responses", "cut_part"]

_DELTA = "response.output_text.delta"
_TEXT_DONE = "response.output_text.done"
_PART_ADDED = "response.content_part.added"
_PART_DONE = "response.content_part.done"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"
_ANNOTATION = "response.output_text.annotation.added"
# The events that carry the response object before its end: the template of the cut's end.
_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})
# The events a complete stream ends with (response.failed is also an error: is_error).
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# The fields of an annotation that are positions in the text.
_POSITIONS = ("index", "start_index", "end_index")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _key(payload: dict[str, Any]) -> tuple[int, int] | None:
    output, content = payload.get("output_index"), payload.get("content_index")
    # type() rather than isinstance: a bool is no index (and this runs once per delta).
    return (output, content) if type(output) is int and type(content) is int else None


def cut_part(part: dict[str, Any], text: str) -> dict[str, Any]:
    """An ``output_text`` part holding ``text`` (a prefix of its own): the annotations that
    point past it dropped, the logprobs of the tokens past it too.

    >>> part = {"type": "output_text", "text": "see [1] STOP", "logprobs": [],
    ...         "annotations": [{"type": "file_citation", "index": 7}, {"type": "url_citation",
    ...                          "start_index": 8, "end_index": 12}]}
    >>> cut_part(part, "see [1] ")["annotations"]
    [{'type': 'file_citation', 'index': 7}]
    """
    out = {**part, "text": text}
    annotations = part.get("annotations")
    if isinstance(annotations, list):
        out["annotations"] = [a for a in annotations if _within(a, len(text))]
    logprobs = part.get("logprobs")
    if isinstance(logprobs, list):
        out["logprobs"] = _logprobs_within(logprobs, len(text))
    return out


def _within(annotation: Any, size: int) -> bool:
    if not isinstance(annotation, dict):
        return True
    return all(
        not isinstance(annotation.get(name), int) or annotation[name] <= size for name in _POSITIONS
    )


def _logprobs_within(logprobs: list[Any], size: int) -> list[Any]:
    """The leading logprobs whose tokens fit in ``size`` characters."""
    kept, used = [], 0
    for entry in logprobs:
        token = entry.get("token") if isinstance(entry, dict) else None
        if not isinstance(token, str) or used + len(token) > size:
            break
        used += len(token)
        kept.append(entry)
    return kept


def _part_logprobs(logprobs: list[Any]) -> list[Any]:
    """The logprobs of deltas (``token``, ``logprob``, ``top_logprobs``) as a part holds them:
    each token with its ``bytes`` (UTF-8), top ones included."""

    def with_bytes(entry: Any) -> Any:
        token = entry.get("token") if isinstance(entry, dict) else None
        if not isinstance(token, str):
            return entry
        out = {"token": token, "bytes": list(token.encode("utf-8", "surrogatepass"))}
        out.update((key, value) for key, value in entry.items() if key != "token")
        return out

    return [
        {**with_bytes(entry), "top_logprobs": [with_bytes(top) for top in entry["top_logprobs"]]}
        if isinstance(entry, dict) and isinstance(entry.get("top_logprobs"), list)
        else with_bytes(entry)
        for entry in logprobs
    ]


class Responses(Family):
    """The Responses API: SSE with ``event:`` names and numbered events."""

    name = "responses"
    stop_rules = True  # stop_regex and stop_arm_after, as on Chat Completions
    tracks_text = True
    sequence_field = "sequence_number"

    def __init__(self) -> None:
        self._response: dict[str, Any] | None = None  # the last lifecycle response object
        self._items: dict[int, dict[str, Any]] = {}  # output_index -> item as added
        self._done_items: dict[int, dict[str, Any]] = {}  # output_index -> item as done
        self._parts: dict[tuple[int, int], dict[str, Any]] = {}  # part as added
        self._done_parts: dict[tuple[int, int], dict[str, Any]] = {}  # part as done
        self._annotations: dict[tuple[int, int], list[Any]] = {}  # added by events
        self._slots: dict[tuple[int, int], int] = {}
        self._keys: list[tuple[int, int]] = []  # slot -> key
        self._sent: list[list[str]] = []  # slot -> the text sent
        self._logprobs: list[list[Any]] = []  # slot -> the logprobs sent
        # The slot of the event last given to text(): on_sent() is told of that event (or of
        # those written in its place) before text() sees another.
        self._current = 0
        self._ended = False  # a terminal event was seen

    def _slot(self, key: tuple[int, int]) -> int | None:
        """The slot of a part of a message (``None``: the part of an item that is not one)."""
        slot = self._slots.get(key)
        if slot is None:
            item = self._items.get(key[0])
            if item is not None and item.get("type") != "message":
                return None
            slot = self._slots[key] = len(self._keys)
            self._keys.append(key)
            self._sent.append([])
            self._logprobs.append([])
        return slot

    # events

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        kind = payload.get("type")
        if kind in (_DELTA, _TEXT_DONE):
            key = _key(payload)
            slot = None if key is None else self._slot(key)
            if slot is None:
                return None
            self._current = slot
            return slot, (payload.get("delta") if kind == _DELTA else None)
        if kind == _PART_ADDED:
            key, part = _key(payload), payload.get("part")
            if key is None or not isinstance(part, dict):
                return None
            self._parts[key] = part
            slot = self._slot(key) if part.get("type") == "output_text" else None
            if slot is not None:
                self._current = slot
                return slot, part.get("text")
        elif kind in _LIFECYCLE:
            response = payload.get("response")
            if isinstance(response, dict):
                self._response = response
        elif kind in (_ITEM_ADDED, _ITEM_DONE):
            index, item = _int(payload.get("output_index")), payload.get("item")
            if index is not None and isinstance(item, dict):
                (self._items if kind == _ITEM_ADDED else self._done_items)[index] = item
        elif kind == _PART_DONE:
            key, part = _key(payload), payload.get("part")
            if key is not None and isinstance(part, dict):
                self._done_parts[key] = part
        elif kind == _ANNOTATION:
            key = _key(payload)
            if key is not None:
                self._annotations.setdefault(key, []).append(payload.get("annotation"))
        elif kind in _TERMINAL:
            self._ended = True
        return None

    def finishes(self, payload: dict[str, Any]) -> bool:
        return payload.get("type") == _TEXT_DONE

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        if payload.get("type") == _PART_ADDED:
            return {**payload, "part": {**payload["part"], "text": text}}
        return {**payload, "delta": text}

    def on_sent(self, payload: dict[str, Any]) -> None:
        if payload.get("type") != _DELTA:
            return
        delta = payload.get("delta")
        if isinstance(delta, str):
            self._sent[self._current].append(delta)
        logprobs = payload.get("logprobs")
        if logprobs and isinstance(logprobs, list):
            self._logprobs[self._current].extend(logprobs)

    def release(self, payload: dict[str, Any], slot: int, text: str) -> list[dict[str, Any]]:
        # The held text in a delta of its own, just before the part's done event.
        return [self._delta(payload, text, []), payload]

    def _delta(self, like: dict[str, Any], text: str, logprobs: list[Any]) -> dict[str, Any]:
        return {
            "type": _DELTA,
            "sequence_number": 0,  # numbered by the core
            "item_id": like.get("item_id"),
            "output_index": like.get("output_index"),
            "content_index": like.get("content_index"),
            "delta": text,
            "logprobs": logprobs,
        }

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        output_index, content_index = key = self._keys[slot]
        item_id = payload.get("item_id")
        out: list[dict[str, Any]] = []
        if payload.get("type") == _DELTA:
            sent = "".join(self._sent[slot])
            logprobs = payload.get("logprobs")
            logprobs = _logprobs_within(logprobs, len(text)) if isinstance(logprobs, list) else []
            if text:
                out.append({**payload, "delta": text, "logprobs": logprobs})
        else:  # a part added with text of its own
            sent, logprobs = "", []
            out.append(self.with_text(payload, text))
        full = sent + text
        logprobs = self._logprobs[slot] + logprobs
        added = self._parts.get(key, {"type": "output_text", "annotations": []})
        annotations = [*(added.get("annotations") or []), *self._annotations.get(key, [])]
        part = cut_part({**added, "text": full, "annotations": annotations}, full)
        part["logprobs"] = _part_logprobs(logprobs)
        where = {"item_id": item_id, "output_index": output_index, "content_index": content_index}
        out.append(
            {"type": _TEXT_DONE, "sequence_number": 0, **where, "text": full, "logprobs": logprobs}
        )
        out.append({"type": _PART_DONE, "sequence_number": 0, **where, "part": part})
        earlier = [
            self._done_parts[(output_index, index)]
            for index in range(content_index)
            if (output_index, index) in self._done_parts
        ]
        added_item = self._items.get(output_index)
        if added_item is None:
            added_item = {"id": item_id, "type": "message", "role": "assistant"}
        item = {**added_item, "status": "completed", "content": [*earlier, part]}
        out.append(
            {
                "type": _ITEM_DONE,
                "sequence_number": 0,
                "output_index": output_index,
                "item": item,
            }
        )
        # The items before the message, as finished (or as added, if one never was).
        before = [
            self._done_items[index] if index in self._done_items else self._items[index]
            for index in sorted(self._items.keys() | self._done_items.keys())
            if index < output_index
        ]
        response: dict[str, Any] = {"object": "response"}
        if self._response is not None:
            response = dict(self._response)
        response.update(status="completed", output=[*before, item])
        if "completed_at" in response:
            response["completed_at"] = int(time.time())
        response["stop_reason"] = stop
        out.append({"type": "response.completed", "sequence_number": 0, "response": response})
        self._ended = True
        return out

    def is_error(self, payload: dict[str, Any]) -> bool:
        kind = payload.get("type")
        return kind == "error" or kind == "response.failed" or ("error" in payload and kind is None)

    def unfinished(self) -> str | None:
        if self._ended:
            return None
        return (
            "The upstream stream ended before its response.completed event (or "
            "response.incomplete, response.failed): the response is not complete."
        )

    def encode(self, payload: dict[str, Any]) -> bytes:
        kind = payload.get("type")
        lines = [b"event: " + kind.encode()] if isinstance(kind, str) and kind.isascii() else []
        return encode_event(payload, lines)

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        return {
            "type": "error",
            "sequence_number": 0,  # numbered by the core (the proxy alone cannot know it)
            "code": code,
            "message": message,
            "param": None,
            "error": {"type": "server_error", "code": code, "message": message, "param": None},
        }

    # whole responses

    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        output = response.get("output") if isinstance(response, dict) else None
        if not isinstance(output, list):
            return response, []
        for position, item in enumerate(output):
            content = item.get("content") if isinstance(item, dict) else None
            if not isinstance(content, list) or item.get("type") != "message":
                continue
            for index, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type") == "output_text"):
                    continue
                found = cut_text(part.get("text"), automaton, include_stop)
                if found is None:
                    continue
                text, stop = found
                cut_item = {
                    **item,
                    "status": "completed",
                    "content": [*content[:index], cut_part(part, text)],
                }
                out = {
                    **response,
                    "status": "completed",
                    "output": [*output[:position], cut_item],
                    "stop_reason": stop,
                }
                if "incomplete_details" in response:
                    out["incomplete_details"] = None  # it ended on the stop, not a limit
                if "output_text" in response:
                    out["output_text"] = _output_text(out["output"])
                return out, [stop]
        return response, []


def _output_text(output: list[Any]) -> str:
    """The SDK's ``output_text``: the text of every ``output_text`` part of the messages."""
    return "".join(
        part.get("text", "")
        for item in output
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    )
