"""The filter core of every API family, sans-I/O: :class:`Family` and :class:`FamilyStream`.

Rules of this module (one filter core, one small adapter per API; no anyio, no I/O):

- A *family* (:class:`Family`, one subclass per API in :mod:`._families` and the modules it
  names) says where the stop parameter of a request lives, whether a request streams, how many
  outputs (slots) a response has, where the text of an event is, which event ends a slot, how a
  cut is written, and how a whole (non-streaming) response is cut. Nothing else differs between
  APIs: adding one is an adapter and a row of the shared table of cases
  (``tests/streamstop/test_families.py``).
- The middleware asks a family for the filter of each stream (:meth:`Family.stream_filter`,
  once per stream) and holds it as a :class:`~streamstop._stream_filter.StreamFilter`, the one
  protocol written down in :mod:`._stream_filter`. The default is :class:`FamilyStream`; OpenAI's
  chat and completions (:mod:`._family_openai`) answer with an :class:`~streamstop.chat.SSEFilter`
  instead, whose usual-event fast path needs no question to an adapter.
- An event may carry the text of several slots, or several texts (Gemini's candidates and
  parts): the adapter's :meth:`Family.split` makes it pieces of one text each, the core filters
  them one by one, and :meth:`Family.join` makes what comes out one event again. An event that
  no piece changed passes byte for byte all the same.
- :class:`FamilyStream` is the core: it frames (SSE or NDJSON), parses each JSON payload once,
  keeps one :class:`~streamstop.StopBuffer` per slot and asks the adapter only the questions
  above. An unchanged event passes byte for byte; a rewritten one is re-encoded.
- A frame whose data is not a JSON object (but for empty data and ``[DONE]``) is a broken
  stream: it ends in error (``upstream_invalid_event``), as the client could not parse it.
- After a cut the stream is :attr:`FamilyStream.done` (with several slots, once every slot is
  over) and the upstream may close. Events that are not text pass through untouched. An upstream
  error payload ends the stream and drops the text held back (it may be the start of a stop), as
  for OpenAI streams.
- Two hooks serve APIs with more bookkeeping (the Responses API) and cost the others nothing:
  a family whose events are numbered (:attr:`Family.sequence_field`) gets every event sent
  renumbered consecutively from the upstream's first number, so events the filter adds or
  rewrites never leave a gap or a repeat (an event whose number is already right passes byte
  for byte); a family whose stream must end with an event of its own says so in
  :meth:`Family.unfinished`, and a body that ends before it ends in error, held text dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from . import _json
from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer
from ._faults import Fault
from ._patterns import StopPatterns, checked_rules
from ._sse import (
    SSEDecoder,
    SSEFrameTooLarge,
    encode_event,
    event_data,
    is_whole,
    parse_field,
    snippet,
)
from ._stream_filter import StreamFilter

__all__ = [
    "Family",
    "FamilyStream",
    "LineTooLarge",
    "NDJSONDecoder",
    "cut_each",
    "cut_text",
    "server_error",
]


def cut_each(
    items: list[Any], cut: Callable[[Any], tuple[Any, list[str]]]
) -> tuple[list[Any], list[str]]:
    """A batch response (a list: one answer per prompt) cut item by item, and every stop that
    fired, in order."""
    fired: list[str] = []
    results = []
    for item in items:
        item, stops = cut(item)
        fired += stops
        results.append(item)
    return results, fired


def server_error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


class LineTooLarge(SSEFrameTooLarge):
    """A line of an NDJSON stream over its limit; ``lines`` are the whole lines before it."""

    def __init__(self, limit: int, lines: list[bytes]) -> None:
        super().__init__("line", limit)
        self.lines = lines


class NDJSONDecoder:
    """Lines of newline-delimited JSON, split anywhere across reads; bounded like SSE lines."""

    __slots__ = ("_buffer", "_max_line_bytes")

    def __init__(self, *, max_line_bytes: int | None = None) -> None:
        self._buffer = bytearray()
        self._max_line_bytes = max_line_bytes

    @property
    def pending(self) -> bytes:
        return bytes(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        self._buffer += data
        end = self._buffer.rfind(b"\n")
        if end < 0:
            self._check(len(self._buffer))
            return []
        lines = bytes(self._buffer[: end + 1]).split(b"\n")[:-1]
        del self._buffer[: end + 1]
        kept: list[bytes] = []
        for line in lines:
            self._check(len(line), kept)
            if line.strip():
                kept.append(line)
        self._check(len(self._buffer), kept)
        return kept

    def _check(self, size: int, lines: list[bytes] | None = None) -> None:
        if self._max_line_bytes is not None and size > self._max_line_bytes:
            raise LineTooLarge(self._max_line_bytes, lines or [])

    def flush(self) -> bytes | None:
        line, self._buffer = bytes(self._buffer), bytearray()
        return line if line.strip() else None


class Family:
    """What one API family looks like; subclasses override the hooks. One instance per stream
    (:meth:`fresh`): an adapter may keep counts of its own (Anthropic's output tokens...)."""

    name = "family"
    framing = "sse"  # or "ndjson"
    stop_path: tuple[str, ...] = ("stop",)
    # Whether the request's stop_regex and stop_arm_after apply (an OpenAI API's fields).
    stop_rules = False
    tracks_text = False  # call on_sent() with each event sent that may carry text
    # The field numbering every event (Responses: "sequence_number"): the core keeps it
    # consecutive over the events it sends, those it writes included.
    sequence_field: str | None = None
    # Whether a request is checked as an OpenAI completion request (its fields' types: n,
    # stream, stream_options...): another API's fields are its own (llama.cpp's prompt).
    openai_fields = False
    # The content types of a streamed response (any type but JSON also streams when the request
    # asked for a stream): OpenAI's streams are SSE only.
    stream_types: tuple[bytes, ...] = (b"text/event-stream", b"application/x-ndjson")

    def fresh(self) -> Family:
        return type(self)()

    # requests
    def streams(self, request: dict[str, Any], path: str) -> bool:
        return request.get("stream") is True

    def slots(self, request: dict[str, Any]) -> int:
        return 1

    def include_usage(self, request: dict[str, Any]) -> bool:
        """Whether a stream cut by a stop still ends with a usage event of the filter's own
        (OpenAI's ``stream_options.include_usage``): no other API asks for one."""
        return False

    def stops_value(self, request: dict[str, Any]) -> Any:
        value: Any = request
        for key in self.stop_path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    def remove_stops(self, request: dict[str, Any]) -> bool:
        """Take the stop parameter out of ``request`` (in place); whether there was one."""
        holder: Any = request
        for key in self.stop_path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and self.stop_path[-1] in holder:
            del holder[self.stop_path[-1]]
            return True
        return False

    # events
    def is_error(self, payload: dict[str, Any]) -> bool:
        return "error" in payload

    def text(self, payload: dict[str, Any]) -> tuple[int, str | None] | None:
        """The slot the event belongs to and its text (``None``: no text), or ``None``."""
        raise NotImplementedError

    def finishes(self, payload: dict[str, Any]) -> bool:
        """Whether the upstream ends the event's slot with this event."""
        raise NotImplementedError

    def with_text(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        raise NotImplementedError

    def release(self, payload: dict[str, Any], slot: int, text: str) -> list[dict[str, Any]]:
        """The finishing ``payload`` carrying ``text`` (its own, and what was held)."""
        return [self.with_text(payload, text)]

    def cut(self, payload: dict[str, Any], slot: int, text: str, stop: str) -> list[dict[str, Any]]:
        """The events ending ``slot`` after a stop: ``text`` is what is left of the event's."""
        raise NotImplementedError

    def split(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The event as pieces of one slot's text each, if it carries several (``None``: it is
        one piece, the usual case). A family that splits does not track text (``on_sent``)."""
        return None

    def join(self, payload: dict[str, Any], pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events to send for a split ``payload``, given what the core made of its pieces
        (in order; a piece dropped after its slot's cut is missing)."""
        return pieces

    def ends_all(self) -> bool:
        """Whether a cut of one slot ends the whole response (a single output)."""
        return True

    def on_sent(self, payload: dict[str, Any]) -> None:
        """Told each event sent that may carry text, if :attr:`tracks_text`."""

    def unfinished(self) -> str | None:
        """At the end of the body (no cut, no error): why the stream is not complete (its own
        last event never came), or ``None``. Most APIs have no such event: the default."""
        return None

    def encode(self, payload: dict[str, Any]) -> bytes:
        if self.framing == "ndjson":
            return _json.dumps(payload) + b"\n"
        return encode_event(payload)

    def error_payload(self, message: str, code: str) -> dict[str, Any]:
        """The last frame of a stream that failed (``code``: ``upstream_broken``...)."""
        return server_error(message, code)

    def number_after(self, sent: bytes) -> int | None:
        """For a family whose events are numbered (:attr:`sequence_field`): the number the
        event after ``sent`` (whole events, as the upstream wrote them) should have, for a
        writer that does not parse them (the proxy's fault event); ``None`` if not known."""
        if self.sequence_field is None:
            return None
        # The field at the top of an event: in a nested string its quotes would be escaped.
        pattern = rb'"' + re.escape(self.sequence_field.encode()) + rb'"\s*:\s*(\d+)'
        numbers = re.findall(pattern, sent)
        return int(numbers[-1]) + 1 if numbers else None

    def error_body(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ) -> dict[str, Any]:
        """The body of a request refused (4xx) or failed (5xx) by this layer, or of an upstream
        error wrapped: OpenAI's error shape unless the family's clients read another one
        (Gemini's)."""
        return {"error": {"message": message, "type": type, "param": param, "code": code}}

    def refusal(self, request: dict[str, Any], path: str, query: bytes) -> str | None:
        """Why a request with stops cannot be filtered (a 400 saying so), or ``None``."""
        return None

    def model(self, request: dict[str, Any], path: str) -> str | None:
        """The model the request names (for the record and the access log)."""
        model = request.get("model")
        return model if isinstance(model, str) else None

    def stream_filter(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = 1,
        include_stop: bool = False,
        include_usage: bool = False,
        max_line_bytes: int | None = None,
        max_event_bytes: int | None = None,
        regex: str | Iterable[str] | StopPatterns | None = None,
        arm_after: str | None = None,
    ) -> StreamFilter:
        """The filter of one streaming response (called once per stream, never per event): a
        :class:`FamilyStream` on this adapter unless the family has its own core (OpenAI's).
        ``include_usage`` is :meth:`include_usage`'s answer, for a filter that writes one."""
        return FamilyStream(
            self,
            stops,
            n=n,
            include_stop=include_stop,
            max_line_bytes=max_line_bytes,
            max_event_bytes=max_event_bytes,
            regex=regex,
            arm_after=arm_after,
        )

    # whole responses
    def cut_whole(
        self, response: Any, automaton: StopAutomaton, include_stop: bool
    ) -> tuple[Any, list[str]]:
        raise NotImplementedError


def cut_text(text: Any, automaton: StopAutomaton, include_stop: bool) -> tuple[str, str] | None:
    """``text`` cut at its first stop and that stop (for a regex stop, its pattern), or ``None``
    if no stop is in it. ``automaton`` may be a :class:`~streamstop.StopRules` (regex stops,
    ``arm_after``): anything whose ``find`` is :meth:`StopAutomaton.find`'s."""
    if not isinstance(text, str):
        return None
    match = automaton.find(text)
    if match is None:
        return None
    return text[: match.end if include_stop else match.start], match.pattern or match.stop


# -- the core ------------------------------------------------------------------------------------


class FamilyStream:
    """Sans-I/O stop filter for the bytes of a family's streaming response.

    :meth:`feed` takes body bytes, split anywhere, and returns the bytes to send now;
    :meth:`flush` ends the body. Same contract as :class:`~streamstop.chat.SSEFilter`:
    :attr:`done` once the response is complete (a cut, an error, a frame over its limit),
    :attr:`error` says why it ended in error, :attr:`stop_strings` which stop cut which slot.

    >>> from streamstop._families import FAMILIES
    >>> stream = FamilyStream(FAMILIES["ollama-generate"], "</s>", n=1)
    >>> stream.feed(b'{"response":"Hi</s>x","done":false}\\n')
    b'{"response":"Hi","done":true,"done_reason":"stop"}\\n'
    >>> stream.done, stream.stop_strings
    (True, {0: '</s>'})
    """

    def __init__(
        self,
        family: Family,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = 1,
        include_stop: bool = False,
        max_line_bytes: int | None = None,
        max_event_bytes: int | None = None,
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        self._family = family.fresh()
        # Whether events are split into pieces: not asked of families that never split.
        self._splits = type(family).split is not Family.split
        self._automaton = StopAutomaton.from_stops(stops)
        # Regex stops and the marker: StopBuffer's (built once here for every slot).
        self._patterns, self._arm_after = checked_rules(regex, max_match_chars, arm_after)
        self._n = n
        self._include_stop = bool(include_stop)
        self._sse = (
            SSEDecoder(max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
            if family.framing == "sse"
            else None
        )
        self._ndjson = (
            NDJSONDecoder(max_line_bytes=max_event_bytes) if family.framing == "ndjson" else None
        )
        self._buffers: dict[int, StopBuffer] = {}
        self._templates: dict[int, dict[str, Any]] = {}
        self._finished: set[int] = set()
        self._stop_strings: dict[int, str] = {}
        self._done = False
        self._error: Fault | None = None
        self._sequence = family.sequence_field
        self._next: int | None = None  # the number of the next event sent (sequence_field)

    @property
    def family(self) -> Family:
        return self._family

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> Fault | None:
        return self._error

    @property
    def stop_strings(self) -> dict[int, str]:
        return dict(self._stop_strings)

    @property
    def cut(self) -> bool:
        """Whether the stream ended on a cut (the upstream may be closed)."""
        return self._done and bool(self._stop_strings) and self._error is None

    def feed(self, data: bytes) -> bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"stream data must be bytes, got {type(data).__name__}: {data!r}")
        if self._done:
            return b""
        out: list[bytes] = []
        try:
            for raw, payload in self._frames(data):
                if self._done:
                    break
                out.append(self._payload(raw, payload))
        except SSEFrameTooLarge as error:
            out.append(self._fail(f"The upstream sent {error}.", "upstream_event_too_large"))
            self._error = Fault.TOO_LARGE
        return b"".join(out)

    def flush(self) -> bytes:
        """End of the body: the last frame, then events for the text still held. Idempotent."""
        if self._done:
            return b""
        out = b""
        if self._sse is not None:
            last = self._sse.flush()
            if last is not None:
                if not is_whole(last):
                    self._error = Fault.TRUNCATED
                    return self._fail(
                        "The upstream stream ended in the middle of an event.",
                        "upstream_truncated",
                    )
                out = self._event(last)
        elif self._ndjson is not None:
            line = self._ndjson.flush()
            if line is not None:
                payload = _parse(line)
                if not isinstance(payload, dict):
                    self._error = Fault.TRUNCATED
                    return self._fail(
                        "The upstream stream ended in the middle of a line.", "upstream_truncated"
                    )
                out = self._payload(line + b"\n", payload)
        if not self._done:
            problem = self._family.unfinished()
            if problem is not None:
                self._error = Fault.TRUNCATED
                return out + self._fail(problem, "upstream_truncated")
            self._done = True
            out += self._held()
        return out

    def fail(self, payload: dict[str, Any]) -> bytes:
        """End the stream in error: held text dropped, ``payload`` the last frame."""
        if self._done:
            return b""
        self._done = True
        self._error = self._error or Fault.UPSTREAM
        if self._sequence is not None:
            self._number(payload)
        return self._family.encode(payload)

    def _fail(self, message: str, code: str) -> bytes:
        return self.fail(self._family.error_payload(message, code))

    def _frames(self, data: bytes) -> Iterator[tuple[bytes, dict[str, Any] | _Broken | None]]:
        if self._sse is not None:
            value = self._sse.data_line(data)
            if value is not None:  # the usual read: one event, one data line
                yield data, _parse(value)
                return
            try:
                events = self._sse.feed(data)
            except SSEFrameTooLarge as error:
                for event in error.events:
                    yield event.raw, _event_payload(event.lines)
                raise
            for event in events:
                yield event.raw, _event_payload(event.lines)
        else:
            assert self._ndjson is not None
            try:
                lines = self._ndjson.feed(data)
            except LineTooLarge as error:
                for line in error.lines:
                    yield line + b"\n", _parse(line)
                raise
            for line in lines:
                yield line + b"\n", _parse(line)

    def _event(self, event: Any) -> bytes:
        return self._payload(event.raw, _event_payload(event.lines))

    def _payload(self, raw: bytes, payload: dict[str, Any] | _Broken | None) -> bytes:
        if payload is None:
            return raw
        if isinstance(payload, _Broken):
            # The client's parser would choke on it: a broken stream, ended in error.
            return self._fail(
                f"The upstream sent a frame that is not a JSON object: {snippet(payload.data)}.",
                "upstream_invalid_event",
            )
        family = self._family
        if family.is_error(payload):
            self._done = True
            self._error = Fault.UPSTREAM
            return raw if self._sequence is None else self._numbered(raw, payload)
        pieces = family.split(payload) if self._splits else None
        if pieces is None:  # the usual event: one text, or none
            out = self._piece(payload)
            if out is not None:
                return self._encode(out)
            # Sent as it came (renumbered, for a family whose events are numbered).
            return raw if self._sequence is None else self._numbered(raw, payload)
        outs: list[dict[str, Any]] = []
        changed = False
        for piece in pieces:
            out = [] if self._done else self._piece(piece)
            changed = changed or out is not None
            outs += [piece] if out is None else out
        if not changed:
            return raw if self._sequence is None else self._numbered(raw, payload)
        return self._encode(family.join(payload, outs))

    def _piece(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The events to send for one piece of text (``None``: the piece as it came)."""
        family = self._family
        found = family.text(payload)
        if found is None:
            return None
        slot, text = found
        if slot in self._finished:
            return []  # past the end of its slot (cut): dropped
        buffer = self._buffers.get(slot)
        if buffer is None:
            buffer = self._buffers[slot] = StopBuffer(
                self._automaton,
                include_stop=self._include_stop,
                regex=self._patterns,
                arm_after=self._arm_after,
            )
        piece: str | None = None
        if isinstance(text, str) and text:
            self._templates[slot] = payload
            piece = buffer.feed(text)
            if buffer.stopped:
                stop = buffer.stop_string or ""
                self._finished.add(slot)
                self._stop_strings[slot] = stop
                if family.ends_all() or (self._n is not None and len(self._finished) >= self._n):
                    self._done = True
                # The cut names the stop that fired: for a regex stop, the pattern.
                reason = buffer.stop_pattern or stop
                return family.cut(payload, slot, piece, reason)
        if family.finishes(payload):
            self._finished.add(slot)
            if self._stop_strings and self._n is not None and len(self._finished) >= self._n:
                self._done = True  # the others were cut: this was the last one
            tail = buffer.flush()
            if tail:
                return family.release(payload, slot, (piece or "") + tail)
        if piece is None or piece == text:
            if family.tracks_text:
                family.on_sent(payload)  # a text sent as it came
            return None
        return [family.with_text(payload, piece)]

    def _encode(self, payloads: list[dict[str, Any]]) -> bytes:
        family = self._family
        if family.tracks_text:
            for payload in payloads:
                family.on_sent(payload)
        if self._sequence is not None:
            for payload in payloads:
                self._number(payload)
        return b"".join(family.encode(payload) for payload in payloads)

    def _number(self, payload: dict[str, Any]) -> None:
        """Give ``payload`` (an event this filter writes: its own dict) the next number."""
        assert self._sequence is not None
        number = 0 if self._next is None else self._next
        payload[self._sequence] = number
        self._next = number + 1

    def _numbered(self, raw: bytes, payload: dict[str, Any]) -> bytes:
        """An event passed on: its own bytes if its number is the next one, else re-encoded with
        it. The upstream's first number is where the count starts."""
        assert self._sequence is not None
        number = payload.get(self._sequence)
        if self._next is None:
            if not isinstance(number, int) or isinstance(number, bool):
                return raw  # not numbered (an error in another shape): left as it is
            self._next = number
        if number == self._next and not isinstance(number, bool):
            self._next += 1
            return raw
        self._number(payload)
        return self._family.encode(payload)

    def _held(self) -> bytes:
        out: list[bytes] = []
        for slot in sorted(self._buffers):
            if slot in self._finished:
                continue
            self._finished.add(slot)
            tail = self._buffers[slot].flush()
            template = self._templates.get(slot)
            if tail and template is not None:
                payload = self._family.with_text(template, tail)
                if self._sequence is not None:
                    self._number(payload)
                out.append(self._family.encode(payload))
        return b"".join(out)


class _Broken:
    """Data that is there but is not a JSON object: the upstream broke its stream."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _parse(data: bytes) -> dict[str, Any] | _Broken | None:
    """A frame's JSON object; ``None`` for no payload (empty data, ``[DONE]``)."""
    try:
        payload = _json.loads(data)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        return payload
    if not data.strip() or data.strip() == b"[DONE]":
        return None
    return _Broken(data)


def _event_payload(lines: Sequence[bytes]) -> dict[str, Any] | _Broken | None:
    if len(lines) == 1 and lines[0].startswith(b"data:"):
        data: bytes | None = lines[0][5:]
    else:
        data = event_data(parse_field(line) for line in lines)
    return None if data is None else _parse(data)
