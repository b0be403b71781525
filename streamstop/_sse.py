"""Server-sent events framing, sans-I/O: the one decoder and the one encoder of the package.

Rules of this module (everything about SSE bytes lives here; no anyio, no chunks):

- Lines end with ``\\n``, ``\\r\\n`` or ``\\r``; a blank line ends an event. A ``\\r`` that is the
  last byte received is not taken as a line end yet: it may be the first half of ``\\r\\n``.
- Bytes are kept as received and decoded only as whole events (by whoever parses their JSON),
  so a character split across reads comes out whole.
- Scanning is linear: each byte is searched for a line end once, however many reads a line
  takes (a 20 MB line is not rescanned on each read), and consumed events are dropped from the
  buffer once per :meth:`SSEDecoder.feed`, not once per event. The usual read, one whole
  event (or whole events, for :class:`EventSplitter`) and nothing pending, skips the scan:
  the same result, split at once.
- Every bound is explicit: a line longer than ``max_line_bytes`` or an event longer than
  ``max_event_bytes`` raises :class:`SSEFrameTooLarge` (``None``: no bound).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import NamedTuple

from . import _json

__all__ = [
    "DONE_EVENT",
    "EventSplitter",
    "RawEvent",
    "SSEDecoder",
    "SSEFrameTooLarge",
    "encode_event",
    "event_data",
    "is_whole",
    "parse_field",
    "snippet",
]

DONE_EVENT = b"data: [DONE]\n\n"

_LINE_END = re.compile(rb"\r\n|\r|\n")
# Two line ends in a row: the end of an event. "\r" not followed by "\n" is a line end of its own.
_BLANK_LINE = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")


class SSEFrameTooLarge(ValueError):
    """A line or an event of an event stream is over its limit; ``what`` is ``"line"`` or
    ``"event"``."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"an SSE {what} longer than {limit} bytes (the limit)")
        self.what = what
        self.limit = limit
        # The events completed before the limit was hit, in the same read (SSEDecoder), and
        # their bytes (EventSplitter): they are whole, and go out before the error.
        self.events: list[RawEvent] = []
        self.raw = b""


def encode_event(payload: object, other_lines: Iterable[bytes] = ()) -> bytes:
    """``payload`` as one ``data:`` event (JSON, compact), after ``other_lines`` (``id:`` ...).

    Text is sent as UTF-8; a lone surrogate (half of a pair an upstream split across two
    chunks as ``\\ud83d`` and ``\\ude00``) cannot be, so such a payload is sent escaped instead
    (:func:`streamstop._json.dumps`).
    """
    data = _json.dumps(payload)
    if not other_lines:  # the usual: no generator to run
        return b"".join((b"data: ", data, b"\n\n"))
    return b"".join(line + b"\n" for line in other_lines) + b"data: " + data + b"\n\n"


def parse_field(line: bytes) -> tuple[bytes, bytes]:
    """A line's ``(name, value)``: ``b"data: x"`` is ``(b"data", b"x")`` (one space dropped)."""
    name, colon, value = line.partition(b":")
    if colon and value.startswith(b" "):
        value = value[1:]
    return name, value


class RawEvent(NamedTuple):
    """One event as received: ``raw`` its bytes (blank line included), ``lines`` its lines.

    Immutable; a named tuple rather than a frozen dataclass: one is made per event, on the hot
    path, and a named tuple is about three times cheaper to create.
    """

    raw: bytes
    lines: tuple[bytes, ...]

    def fields(self) -> list[tuple[bytes, bytes]]:
        """``(name, value)`` of each line (``data: x`` is ``(b"data", b"x")``)."""
        return [parse_field(line) for line in self.lines]


def event_data(fields: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The joined ``data:`` values of an event's fields, or ``None`` if it has none."""
    data = [value for name, value in fields if name == b"data"]
    return b"\n".join(data) if data else None


def snippet(data: bytes, limit: int = 80) -> str:
    """``data`` shown in an error message: its start, as a Python bytes literal.

    >>> snippet(b"{not json")
    "b'{not json'"
    >>> snippet(b"x" * 100, limit=4)
    "b'xxxx'... (100 bytes)"
    """
    if len(data) <= limit:
        return repr(data)
    return f"{data[:limit]!r}... ({len(data)} bytes)"


def is_whole(event: RawEvent) -> bool:
    """Whether an event that came without its blank line (the body ended) is whole: no data,
    ``[DONE]`` or a JSON value; else it was cut off, and passing it on would hand the client
    invalid JSON."""
    data = event_data(event.fields())
    if data is None or data.strip() == b"[DONE]":
        return True
    try:
        _json.loads(data)
    except ValueError:
        return False
    return True


def _check(what: str, size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise SSEFrameTooLarge(what, limit)


class SSEDecoder:
    """Bytes in, whole events out: ``feed(data)`` returns the events completed by ``data``.

    >>> decoder = SSEDecoder()
    >>> decoder.feed(b"data: a\\n\\nda")
    [RawEvent(raw=b'data: a\\n\\n', lines=(b'data: a',))]
    >>> decoder.feed(b"ta: b\\r\\n\\r\\n")[0].lines
    (b'data: b',)
    """

    __slots__ = (
        "_buffer",
        "_line_start",
        "_lines",
        "_max_event",
        "_max_line",
        "_search",
        "usual_limit",
    )

    def __init__(
        self, *, max_line_bytes: int | None = None, max_event_bytes: int | None = None
    ) -> None:
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        # The most bytes a read may have to be the usual one (data_line): within both limits,
        # one test, not two. Read-only for everyone else (SSEFilter makes the same test).
        self.usual_limit = min(
            sys.maxsize if max_line_bytes is None else max_line_bytes,
            sys.maxsize if max_event_bytes is None else max_event_bytes,
        )
        self._buffer = bytearray()  # from the start of the event being received
        self._lines: list[bytes] = []  # its complete lines
        self._line_start = 0  # where its unfinished line starts, in _buffer
        self._search = 0  # where the search for the next line end resumes, in _buffer

    @property
    def pending(self) -> bytes:
        """The bytes of the event not yet complete."""
        return bytes(self._buffer)

    @property
    def idle(self) -> bool:
        """Whether nothing is pending: the next read starts an event (no copy made)."""
        return not self._buffer

    def feed(self, data: bytes | bytearray | memoryview) -> list[RawEvent]:
        buffer = self._buffer
        if not buffer and data[-2:] == b"\n\n":
            # The usual read, nothing pending: one whole event of "\n" line ends within the
            # limits is split at once, without the scan's per-line work (the same result).
            data = bytes(data)
            size = len(data)
            if (
                data[0] != 10  # not a blank line first: that is an event of its own
                and data.find(b"\n\n") == size - 2
                and 13 not in data  # an int operand: see data_line
                and size <= self.usual_limit
            ):
                return [RawEvent(data, tuple(data[:-2].split(b"\n")))]
        buffer += data
        events: list[RawEvent] = []
        start = self._line_start
        search = self._search
        try:
            self._scan(buffer, events, start, search)
        except SSEFrameTooLarge as error:
            error.events = events
            raise
        return events

    def data_line(self, data: bytes) -> bytes | None:
        """The value of ``data`` if it is the usual read: one whole event of one ``data:`` line
        and nothing pending (a stream of chunks, one per read); ``None`` for anything else, to
        :meth:`feed`. Taking it is feeding it: the decoder is then as after ``feed(data)``.

        >>> SSEDecoder().data_line(b'data: {"a":1}\\n\\n')
        b'{"a":1}'
        >>> SSEDecoder().data_line(b'data: {"a":1}\\r\\n\\r\\n')  # Gemini ends lines with CRLF
        b'{"a":1}'
        """
        size = len(data)
        if (
            type(data) is bytes
            and not self._buffer
            and data.startswith(b"data: ")
            and data.find(b"\n") == size - 2
            and data[-1] == 10
            # An int operand: a bytes one ("\r") would have "in" try it as an int first, and
            # format and clear a TypeError (~2k instructions, more than the whole search).
            and 13 not in data
            and size <= self.usual_limit
        ):
            return data[6:-2]
        if (
            # The same read with CRLF line ends (Gemini's): its only CR and LF are the last four.
            type(data) is bytes
            and not self._buffer
            and data.endswith(b"\r\n\r\n")
            and data.startswith(b"data: ")
            and data.find(b"\r") == size - 4
            and data.find(b"\n") == size - 3
            and size <= self.usual_limit
        ):
            return data[6:-4]
        return None

    def _scan(self, buffer: bytearray, events: list[RawEvent], start: int, search: int) -> None:
        max_line, max_event = self._max_line, self._max_event
        event_start = 0
        while True:
            match = _LINE_END.search(buffer, search)
            if match is None:
                search = len(buffer)
                break
            if match.end() == len(buffer) and match.group() == b"\r":
                search = match.start()  # perhaps the first half of "\r\n": look again later
                break
            if max_line is not None and match.start() - start > max_line:
                raise SSEFrameTooLarge("line", max_line)
            line = bytes(buffer[start : match.start()])
            start = search = match.end()
            if max_event is not None and start - event_start > max_event:
                raise SSEFrameTooLarge("event", max_event)
            if line:
                self._lines.append(line)
                continue
            events.append(RawEvent(bytes(buffer[event_start:start]), tuple(self._lines)))
            self._lines = []
            event_start = start
        # The unfinished line ends where the search stopped: a last "\r" (perhaps half of a
        # "\r\n") is its line end, not one of its bytes, whatever the reads.
        _check("line", search - start, self._max_line)
        _check("event", len(buffer) - event_start, self._max_event)
        if event_start:
            del buffer[:event_start]
        self._line_start = start - event_start
        self._search = search - event_start

    def flush(self) -> RawEvent | None:
        """End of the input: the event left without its blank line, completed, if any."""
        if not self._buffer:
            return None
        tail = bytes(self._buffer)
        ending = b"\n" if tail.endswith(b"\r") else b""  # a last "\r" ends its line
        tail += ending
        tail += b"\n" if tail.endswith(b"\n") else b"\n\n"
        self._buffer.clear()
        self._lines, self._line_start, self._search = [], 0, 0
        events = SSEDecoder().feed(tail)
        return events[0] if events else None


class EventSplitter:
    """Bytes in, the bytes of whole events out: what a proxy may forward without ever sending
    half an event. Cheaper than :class:`SSEDecoder` (one search per event, no lines made).

    The event being received is bounded by ``max_event_bytes``, and its unfinished line by
    ``max_line_bytes`` (a line that arrives whole is bounded by the event's limit).

    >>> splitter = EventSplitter()
    >>> splitter.feed(b"data: a\\n\\ndata: b"), splitter.pending
    (b'data: a\\n\\n', b'data: b')
    """

    __slots__ = ("_buffer", "_max_event", "_max_line")

    def __init__(
        self, *, max_line_bytes: int | None = None, max_event_bytes: int | None = None
    ) -> None:
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._buffer = bytearray()

    @property
    def pending(self) -> bytes:
        """The bytes after the last complete event."""
        return bytes(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> bytes:
        buffer = self._buffer
        if not buffer and data[-2:] == b"\n\n":
            return bytes(data)  # the usual read: whole events, nothing kept (a "\n\n" ends one)
        # A blank line may straddle the reads: look again at the last bytes kept.
        resume = max(0, len(buffer) - 3)
        buffer += data
        end = 0
        for match in _BLANK_LINE.finditer(buffer, resume):
            end = match.end()
        if end:
            out = bytes(buffer[:end])
            del buffer[:end]
        else:
            out = b""
        try:
            if self._max_line is not None and len(buffer) > self._max_line:
                last = max(buffer.rfind(b"\n"), buffer.rfind(b"\r"))
                _check("line", len(buffer) - last - 1, self._max_line)
            _check("event", len(buffer), self._max_event)
        except SSEFrameTooLarge as error:
            error.raw = out
            raise
        return out
