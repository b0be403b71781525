"""SSEFilter: stop strings applied to the bytes of an OpenAI streaming response, sans-I/O.

Rules of this module (framing in :mod:`._sse`, chunks in :mod:`._chunks`; here what a stream of
events becomes):

- An unchanged event passes byte for byte; a rewritten one is re-encoded by the one encoder.
- The stream ends at ``data: [DONE]`` (the held text goes out first: the model finished), at an
  error event, at a frame over its limit, or when every choice is over.
- An upstream fault never lets held text out: after an error event, a chunk that is not JSON,
  or a line or event over its limit, the text held back (a possible beginning of a stop) is
  dropped, and the stream ends with the error event.
- With ``include_usage`` (the request's ``stream_options.include_usage``), a stream cut by a
  stop still ends with a usage chunk (``choices: []``), since the upstream's own will never
  come: ``completion_tokens`` is the number of (event, choice) pairs received with non-empty
  text, up to and including the one that completed the stop; ``prompt_tokens`` is the
  upstream's, if any of its chunks carried ``usage``, else ``null`` (and ``total_tokens`` too):
  numbers are never made up.
- The usual read (one whole event, one ``data:`` line, one live choice with text and no
  ``finish_reason``) takes a short path with the same result: JSON read by
  ``_json.loads_lossy`` (an event sent as it came needs no exact numbers), and read again
  exactly before anything is written from it (tests/streamstop/test_sse_usual.py pins it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from . import _json
from ._automaton import StopAutomaton, Stops
from ._chunks import NOT_USUAL, ChunkFilter
from ._faults import Fault
from ._patterns import StopPatterns
from ._sse import (
    DONE_EVENT,
    RawEvent,
    SSEDecoder,
    SSEFrameTooLarge,
    encode_event,
    event_data,
    is_whole,
    parse_field,
    snippet,
)

__all__ = ["SSEFilter"]

# The fields of a chunk copied into the usage chunk sent after a cut.
_HEAD_FIELDS = ("id", "object", "created", "model", "system_fingerprint")


def _reread(value: bytes) -> dict[str, Any] | None:
    """The chunk ``value`` read exactly, or ``None`` if ``_json.loads_lossy`` read it so."""
    return None if _json.exact(value) else _json.loads(value)


def _text_count(chunk: dict[str, Any]) -> int:
    """How many choices of ``chunk`` carry non-empty text."""
    count = 0
    for choice in chunk.get("choices") or ():
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            count += isinstance(text, str) and bool(text)
    return count


class SSEFilter:
    """Sans-I/O stop filter for the bytes of an OpenAI streaming response (server-sent events).

    :meth:`feed` takes body bytes, split anywhere, and returns the bytes to send now;
    :meth:`flush` ends the body. Events are separated by a blank line (``\\n``, ``\\r\\n`` or
    ``\\r`` line ends). ``data:`` events holding a JSON chunk go through a
    :class:`ChunkFilter`; an event that is unchanged is passed on byte for byte, a rewritten one
    is sent as a single ``data:`` line (its other fields, ``event:`` or ``id:``, kept); comments,
    named events (``event: ping``) and empty data pass through; a chunk whose data is not a
    JSON object ends the stream in error (``upstream_invalid_event``): the client would fail to
    parse it.

    ``data: [DONE]`` ends the stream, releasing the held text first. An error event
    (``data: {"error": ...}``) ends it too, dropping the held text (see the module's rules).
    Once :attr:`done`, the response is over: after all choices stopped the filter sends
    ``data: [DONE]`` itself; later bytes are dropped; the caller should end the response and
    close the upstream. A line over ``max_line_bytes`` or an event over ``max_event_bytes`` ends
    the stream with an error event (``code: "upstream_event_too_large"``); :attr:`error` says so.

    >>> sse = SSEFilter("</s>", n=1)
    >>> sse.feed(b'data: {"choices":[{"index":0,"delta":{"content":"Hi</s>"}}]}\\n\\ndata: [DO')
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop","stop_reason":"</s>"}]}\\n\\ndata: [DONE]\\n\\n'
    >>> sse.done
    True

    ``regex``, ``max_match_chars`` and ``arm_after`` are :class:`~streamstop.StopBuffer`'s;
    ``chunks.stop_patterns`` says which regex stop cut which choice.
    """  # noqa: E501

    __slots__ = (
        "_chunks",
        "_completion_tokens",
        "_decoder",
        "_done",
        "_error",
        "_head",
        "_idle",
        "_include_usage",
        "_max_usual",
        "_prompt_tokens",
    )

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
        include_usage: bool = False,
        max_line_bytes: int | None = None,
        max_event_bytes: int | None = None,
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        self._chunks: ChunkFilter[Any] = ChunkFilter(
            stops,
            n=n,
            include_stop=include_stop,
            regex=regex,
            max_match_chars=max_match_chars,
            arm_after=arm_after,
        )
        self._decoder = SSEDecoder(max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
        self._idle = True  # the decoder's idle, kept: read on every read, asked after a feed
        self._max_usual = self._decoder.usual_limit
        self._done = False
        self._error: Fault | None = None
        self._include_usage = bool(include_usage)
        self._completion_tokens = 0
        self._prompt_tokens: int | None = None
        self._head: dict[str, Any] = {}

    @property
    def chunks(self) -> ChunkFilter[Any]:
        """The chunk filter, with its per-choice state."""
        return self._chunks

    # Read after every read by the middleware: a getter in C (no Python frame).
    if TYPE_CHECKING:

        @property
        def done(self) -> bool:
            """Whether the response is complete: later input is discarded."""

    else:
        done = property(
            attrgetter("_done"), doc="Whether the response is complete: later input is discarded."
        )

    @property
    def stop_strings(self) -> dict[int, str]:
        """The stop that cut each choice, by choice index (choices not cut are absent)."""
        return self._chunks.stop_strings

    @property
    def cut(self) -> bool:
        """Whether every choice is over and one was cut: the upstream may be closed."""
        return self._chunks.done

    @property
    def error(self) -> Fault | None:
        """Why the stream ended in error, if it did: :attr:`Fault.UPSTREAM` (an error event
        came, or :meth:`fail` was called), :attr:`Fault.TOO_LARGE` (a line or event over its
        limit) or :attr:`Fault.TRUNCATED` (the body ended in the middle of an event)."""
        return self._error

    def feed(self, data: bytes) -> bytes:
        """Take the next piece of the body; return the bytes that may be sent now."""
        if type(data) is bytes:
            if self._done:
                return b""
            if (
                self._idle
                and data[:7] == b"data: {"
                and data[-2:] == b"\n\n"
                # No other line end. Int operands: with a bytes one, "in" tries it as an int
                # first and formats and clears a TypeError, and find parses its arguments
                # from a format string: each several times the search itself.
                and 10 not in (value := data[6:-2])
                and 13 not in value
                and len(data) <= self._max_usual
                and not self._include_usage  # it reads numbers: the general path
            ):
                # The usual read: one whole event of one data line, a JSON object, nothing
                # pending (what SSEDecoder.data_line takes); the usual chunk in it, read lossily
                # (see _json.loads_lossy): an event sent as it came needs no exact numbers.
                try:
                    chunk = _json.loads_lossy(value)
                except ValueError:
                    return self._not_json(data, value, ())
                chunks = self._chunks
                out = chunks.feed_usual(chunk, value, _reread)
                if out is chunk:
                    if not chunks.done:
                        return data
                elif out is NOT_USUAL:
                    exact = _reread(value)
                    return self._chunk(data, chunk if exact is None else exact, ())
                return self._sent(data, chunk, out, ())
            if self._idle and 13 not in data:
                parts = data.split(b"\n\n")
                if len(parts) > 2:
                    return self._batch(parts)
        elif not isinstance(data, bytearray | memoryview):
            raise TypeError(f"SSE data must be bytes, got {type(data).__name__}: {data!r}")
        elif self._done:
            return b""
        try:
            events = self._decoder.feed(data)
        except SSEFrameTooLarge as error:
            out = self._events(error.events)
            return out + self._too_large(error)
        self._idle = self._decoder.idle
        if len(events) == 1:  # the usual read: one event, no list to join
            return self._event(events[0])
        return self._events(events)

    def _batch(self, parts: list[bytes]) -> bytes:
        """Several events in one read (a fast upstream read as it arrives), split at their
        blank lines: each part but the last is fed as a read of its own, one whole event, so
        that the usual ones take the usual path; the last, unfinished, is fed as it is.

        The same as feeding the read whole: a part (but the last) never ends with LF (the
        leftmost split would have split one byte earlier), so it and its blank line are whole
        events ending where the decoder is idle; without CR no other line end exists."""
        feed = self.feed
        out = [feed(part + b"\n\n") for part in parts[:-1]]
        if parts[-1]:
            out.append(feed(parts[-1]))
        return b"".join(out)

    def flush(self) -> bytes:
        """End of the body: the last event, then chunks for the text still held.

        An event missing its final blank line is taken as complete if its data is JSON (or
        ``[DONE]``); one cut off ends the stream in error (``upstream_truncated``), dropping the
        held text. Idempotent.
        """
        if self._done:
            return b""
        last = self._decoder.flush()
        if last is not None and not is_whole(last):
            self._error = Fault.TRUNCATED
            return self.fail(
                {
                    "error": {
                        "message": "The upstream stream ended in the middle of an event.",
                        "type": "server_error",
                        "param": None,
                        "code": "upstream_truncated",
                    }
                }
            )
        out = self._events([last]) if last is not None else b""
        if not self._done:
            self._done = True
            out += self._held_events()
        return out

    def fail(self, payload: dict[str, Any]) -> bytes:
        """End the stream in error (the upstream broke): the held text is dropped, ``payload``
        goes out as the last event. Returns ``b""`` if the stream was over already."""
        if self._done:
            return b""
        self._done = True
        self._error = self._error or Fault.UPSTREAM
        self._chunks.flush()
        return encode_event(payload)

    def _too_large(self, error: SSEFrameTooLarge) -> bytes:
        if self._done:
            return b""
        payload = {
            "error": {
                "message": f"The upstream sent {error}.",
                "type": "server_error",
                "param": None,
                "code": "upstream_event_too_large",
            }
        }
        out = self.fail(payload)
        self._error = Fault.TOO_LARGE
        return out

    def _held_events(self) -> bytes:
        """End the chunk filter: events carrying the text it still holds."""
        return b"".join(encode_event(chunk) for chunk in self._chunks.flush())

    def _events(self, events: list[RawEvent]) -> bytes:
        out: list[bytes] = []
        for event in events:
            if self._done:
                break
            out.append(self._event(event))
        return b"".join(out)

    def _event(self, event: RawEvent) -> bytes:
        raw, lines = event
        if len(lines) == 1 and lines[0].startswith(b"data: "):
            # One data line: no field list to build.
            return self._data(raw, lines[0][6:], ())
        fields = [parse_field(line) for line in lines]
        data = event_data(fields)
        if data is None:
            return raw
        others = [line for line, (name, _) in zip(lines, fields, strict=True) if name != b"data"]
        return self._data(raw, data, others)

    def _data(self, raw: bytes, data: bytes, others: Sequence[bytes]) -> bytes:
        """What is sent for the event ``raw`` of data ``data`` and other fields ``others``."""
        if data[:1] != b"{" and data.strip() == b"[DONE]":  # a chunk starts with "{"
            self._done = True
            return self._held_events() + raw
        try:
            chunk = _json.loads(data)
        except ValueError:
            return self._not_json(raw, data, others)
        if type(chunk) is not dict:  # JSON objects are read as plain dicts
            return self._not_json(raw, data, others)
        return self._chunk(raw, chunk, others)

    def _not_json(self, raw: bytes, data: bytes, others: Sequence[bytes]) -> bytes:
        """An event whose data is not a JSON object: a named event of the upstream's own
        (``event: ping``) or empty data passes; a chunk that is not one is a broken stream,
        which the client's parser would choke on: it ends in error, the held text dropped."""
        if not data.strip() or any(
            name == b"event" and value.strip() != b"message"
            for name, value in map(parse_field, others)
        ):
            return raw
        return self.fail(
            {
                "error": {
                    "message": f"The upstream sent an event that is not a JSON object: "
                    f"{snippet(data)}.",
                    "type": "server_error",
                    "param": None,
                    "code": "upstream_invalid_event",
                }
            }
        )

    def _chunk(self, raw: bytes, chunk: dict[str, Any], others: Sequence[bytes]) -> bytes:
        """What is sent for the event ``raw`` holding ``chunk`` (read exactly)."""
        if "error" in chunk and "choices" not in chunk:
            # The upstream failed: what is held may be the start of a stop, so it is dropped.
            self.fail(chunk)
            return raw
        if self._include_usage:
            self._count(chunk)
        chunks = self._chunks
        out = chunks.feed(chunk)
        if out is chunk and not chunks.done:
            return raw  # the usual event
        return self._sent(raw, chunk, out, others)

    def _sent(self, raw: bytes, chunk: dict[str, Any], out: Any, others: Sequence[bytes]) -> bytes:
        """What is sent for the event ``raw``, once its ``chunk`` went through the chunk filter
        and came out as ``out``."""
        chunks = self._chunks
        if out is chunk:
            result = raw
        elif out is None:
            result = b""
        else:
            result = encode_event(out, others)
        if chunks.done:
            self._done = True
            if self._include_usage:
                result += encode_event(self._usage_chunk())
            result += DONE_EVENT
        return result

    def _count(self, chunk: dict[str, Any]) -> None:
        self._completion_tokens += _text_count(chunk)
        for name in _HEAD_FIELDS:
            if name in chunk:
                self._head[name] = chunk[name]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int) and not isinstance(prompt, bool):
                self._prompt_tokens = prompt

    def _usage_chunk(self) -> dict[str, Any]:
        prompt = self._prompt_tokens
        completion = self._completion_tokens
        return {
            **self._head,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": None if prompt is None else prompt + completion,
            },
        }
