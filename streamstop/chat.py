"""Stop strings for OpenAI-compatible streams: chat and legacy completion chunks, and their SSE.

Rules of this module (everything about chunks and choices lives here):

- One :class:`~streamstop.StopBuffer` per choice ``index``, created when the index is first
  seen; choices are independent (``n > 1`` works). The text field is ``choices[i].delta.content``
  for chat chunks and ``choices[i].text`` for legacy completions; nothing else is rewritten.
- A chunk whose text comes out unchanged is returned *as it is* (the same object). A chunk that
  changes is a copy: dicts are copied where rewritten, ``openai`` client objects (pydantic
  models) through their ``model_copy``. Caller's chunks are never mutated.
- Text that could still become a stop is held and goes out with a later chunk of its choice.
  With stop ``"</s>"``, chunks ``"Hi<"`` and ``"/s>junk"`` become ``"Hi"`` and ``""`` with
  ``finish_reason: "stop"``; chunks ``"Hi<"`` and ``"3"`` become ``"Hi"`` and ``"<3"``. A
  choice whose text is all held and that carries nothing else is left out of its chunk.
- Once a choice completes a stop, that chunk carries its last text and ``finish_reason: "stop"``;
  later chunks of that choice are dropped (a chunk left with no choices and no ``usage`` is
  dropped whole). When the upstream finishes a choice itself (``"length"``, ``"stop"``), the
  held text is released into that chunk, before its ``finish_reason``.
- At the end of the upstream, held text of unfinished choices goes out in synthesized chunks
  (one per choice, built from the last chunk of that choice, ``finish_reason: null``).
- Chunks without text for a live choice (the role, tool calls) and chunks without choices
  (usage, errors) pass through unchanged and in order.
- Closing early: with ``n`` (the number of choices requested) the filter is :attr:`done` once
  all ``n`` choices have finished and at least one was cut by a stop; the upstream may then be
  closed, the model stops generating. Without ``n`` there is no telling whether another choice
  will come, so the stream runs to the upstream's end (the output is the same, only later).
  An early close loses what the upstream would have sent after: a final ``usage`` chunk.

Logprobs are passed along with the chunk they came in and are not realigned with the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from inspect import isawaitable
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio

from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer

__all__ = ["ChunkFilter", "ChunkStream", "SSEFilter", "SyncChunkStream", "truncate_response"]

ChunkT = TypeVar("ChunkT")


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _replace(obj: Any, **changes: Any) -> Any:
    """A copy of ``obj`` with fields changed: a new dict, or a pydantic ``model_copy``."""
    if isinstance(obj, Mapping):
        return {**obj, **changes}
    model_copy = getattr(obj, "model_copy", None)
    if model_copy is None:
        raise TypeError(
            f"chunks must be dicts or pydantic models (like the openai client's), "
            f"got {type(obj).__name__}: {obj!r}"
        )
    return model_copy(update=changes)


def _blank_like(obj: Any, **fields: Any) -> Any:
    """A new object of ``obj``'s kind holding only ``fields``."""
    if isinstance(obj, Mapping):
        return dict(fields)
    model_validate = getattr(type(obj), "model_validate", None)
    if model_validate is None:
        return _replace(obj, **fields)
    return model_validate(fields)


def _set_fields(obj: Any) -> set[str]:
    """The names of the fields of ``obj`` that are not ``None`` (none for ``None``)."""
    if obj is None:
        return set()
    if isinstance(obj, Mapping):
        return {key for key, value in obj.items() if value is not None}
    model_dump = getattr(obj, "model_dump", None)
    if model_dump is None:
        return {"<unknown>"}
    return set(model_dump(exclude_none=True))


def _check_n(n: int | None) -> int | None:
    if n is None:
        return None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be None or a positive int (the number of choices), got {n!r}")
    return n


class ChunkFilter(Generic[ChunkT]):
    """Sans-I/O stop filter for a stream of OpenAI chat or completion chunks.

    Chunks are dicts (parsed SSE JSON) or the ``openai`` client's chunk objects:

    >>> chunks = ChunkFilter(["</s>"], n=1)
    >>> chunks.feed({"choices": [{"index": 0, "delta": {"content": "Hi<"}}]})
    {'choices': [{'index': 0, 'delta': {'content': 'Hi'}}]}
    >>> chunks.feed({"choices": [{"index": 0, "delta": {"content": "/s>junk"}}]})
    {'choices': [{'index': 0, 'delta': {'content': ''}, 'finish_reason': 'stop'}]}
    >>> chunks.done, chunks.stop_strings
    (True, {0: '</s>'})

    :meth:`feed` returns the chunk to send now, or ``None`` when nothing is left of it;
    :meth:`flush` ends the input and returns chunks for the text still held.
    """

    __slots__ = (
        "_automaton",
        "_buffers",
        "_finished",
        "_flushed",
        "_include_stop",
        "_n",
        "_stop_strings",
        "_templates",
    )

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
    ) -> None:
        self._automaton = StopAutomaton.from_stops(stops)
        self._n = _check_n(n)
        self._include_stop = bool(include_stop)
        self._buffers: dict[int, StopBuffer] = {}
        # The last chunk and choice seen for each choice index: templates for flush().
        self._templates: dict[int, tuple[Any, Any]] = {}
        self._finished: set[int] = set()
        self._stop_strings: dict[int, str] = {}
        self._flushed = False

    def __repr__(self) -> str:
        return (
            f"<ChunkFilter n={self._n!r}, finished={sorted(self._finished)!r}, "
            f"stops={list(self._automaton.stops)!r}>"
        )

    @property
    def automaton(self) -> StopAutomaton:
        return self._automaton

    @property
    def n(self) -> int | None:
        """The number of choices expected, if known."""
        return self._n

    @property
    def stop_strings(self) -> dict[int, str]:
        """The stop that cut each choice, by choice index (choices not cut are absent)."""
        return dict(self._stop_strings)

    @property
    def finished(self) -> frozenset[int]:
        """Indexes of the choices that will emit nothing more (cut, or finished upstream)."""
        return frozenset(self._finished)

    @property
    def done(self) -> bool:
        """Whether the upstream may be closed: all ``n`` choices finished, at least one cut."""
        return self._n is not None and bool(self._stop_strings) and len(self._finished) >= self._n

    def held(self, index: int) -> str:
        """The text held back for choice ``index`` (``""`` if none)."""
        buffer = self._buffers.get(index)
        return buffer.held if buffer is not None else ""

    def feed(self, chunk: ChunkT) -> ChunkT | None:
        """Take the next chunk; return it, rewritten if need be, or ``None`` to drop it."""
        if self._flushed:
            raise RuntimeError(f"ChunkFilter.feed({chunk!r}) called after flush()")
        choices = _get(chunk, "choices")
        if not isinstance(choices, list) or not choices:
            return chunk
        kept: list[Any] = []
        changed = False
        for choice in choices:
            index = _get(choice, "index")
            if index is None:
                index = 0
            if not isinstance(index, int) or isinstance(index, bool):
                kept.append(choice)  # not ours to judge
                continue
            if index in self._finished:
                changed = True  # past the end of its choice: dropped
                continue
            rewritten = self._feed_choice(index, chunk, choice)
            changed = changed or rewritten is not choice
            if rewritten is not None:
                kept.append(rewritten)
        if not changed:
            return chunk
        if not kept and _get(chunk, "usage") is None:
            return None
        result: ChunkT = _replace(chunk, choices=kept)
        return result

    def _feed_choice(self, index: int, chunk: Any, choice: Any) -> Any:
        buffer = self._buffers.get(index)
        if buffer is None:
            buffer = self._buffers[index] = StopBuffer(
                self._automaton, include_stop=self._include_stop
            )
        self._templates[index] = (chunk, choice)
        delta = _get(choice, "delta")
        text = _get(delta, "content") if delta is not None else _get(choice, "text")
        piece: str | None = None
        if isinstance(text, str) and text:
            piece = buffer.feed(text)
            if buffer.stopped:
                self._finished.add(index)
                self._stop_strings[index] = buffer.stop_string or ""
                return self._rewrite(choice, delta, piece, "stop")
        finish_reason = _get(choice, "finish_reason")
        if finish_reason is not None:
            self._finished.add(index)
            tail = buffer.flush()
            if tail:
                piece = (piece or "") + tail
        if piece is None or piece == text:
            return choice
        if not piece and finish_reason is None and _set_fields(delta) <= {"content"}:
            return None  # all of its text is held, and it carries nothing else
        return self._rewrite(choice, delta, piece, finish_reason)

    @staticmethod
    def _rewrite(choice: Any, delta: Any, text: str, finish_reason: Any) -> Any:
        changes: dict[str, Any] = {} if finish_reason is None else {"finish_reason": finish_reason}
        if delta is not None:
            return _replace(choice, delta=_replace(delta, content=text), **changes)
        return _replace(choice, text=text, **changes)

    def flush(self) -> list[ChunkT]:
        """End of the upstream: chunks carrying the text still held, by choice index.

        Calling it twice is harmless (the second call returns ``[]``).
        """
        if self._flushed:
            return []
        self._flushed = True
        out: list[ChunkT] = []
        for index in sorted(self._buffers):
            if index in self._finished:
                continue
            self._finished.add(index)
            tail = self._buffers[index].flush()
            if tail:
                out.append(self._synthesize(index, tail))
        return out

    def _synthesize(self, index: int, text: str) -> Any:
        chunk, choice = self._templates[index]
        delta = _get(choice, "delta")
        if delta is not None:
            choice = _replace(
                choice,
                delta=_blank_like(delta, content=text),
                finish_reason=None,
                logprobs=None,
            )
        else:
            choice = _replace(choice, text=text, finish_reason=None, logprobs=None)
        if _get(chunk, "usage") is not None:
            return _replace(chunk, choices=[choice], usage=None)
        return _replace(chunk, choices=[choice])


async def _close_async(obj: object) -> None:
    close = getattr(obj, "aclose", None) or getattr(obj, "close", None)
    if close is not None:
        result = close()
        if isawaitable(result):
            await result


class _ChunkStreamBase(Generic[ChunkT]):
    """What both chunk streams share: the filter, its verdict and whether the source is closed."""

    def __init__(self, stops: Stops | StopAutomaton, *, n: int | None, include_stop: bool) -> None:
        self._filter: ChunkFilter[ChunkT] = ChunkFilter(stops, n=n, include_stop=include_stop)
        self._closed = False

    @property
    def filter(self) -> ChunkFilter[ChunkT]:
        return self._filter

    @property
    def stop_strings(self) -> dict[int, str]:
        """The stop that cut each choice, by choice index."""
        return self._filter.stop_strings

    @property
    def closed(self) -> bool:
        """Whether the source has been closed."""
        return self._closed


def _upstreams(source: object, iterator: object | None) -> list[object]:
    """What closing a stream closes, in order: the source's iterator, if taken, then the source."""
    if iterator is None or iterator is source:
        return [source]
    return [iterator, source]


class ChunkStream(_ChunkStreamBase[ChunkT]):
    """Async iterator of the filtered chunks of ``source``, e.g. an ``openai`` ``AsyncStream``::

        stream = await client.chat.completions.create(..., stream=True)
        async with ChunkStream(stream, ["</s>", "\\n\\nUser:"], n=1) as chunks:
            async for chunk in chunks:
                print(chunk.choices[0].delta.content or "", end="")

    Pass ``n`` (the request's number of choices) to close the source as soon as every choice
    is over (see :class:`ChunkFilter`); without it the source is read to its end.

    The source is closed (``aclose()``, or ``close()``, awaited if need be: the ``openai``
    client's streams have both) when the filter is done, at the end, when the consumer leaves
    the ``async with`` block or is cancelled, and when the source fails. Closing is shielded and
    idempotent.
    """

    def __init__(
        self,
        source: AsyncIterable[ChunkT],
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
    ) -> None:
        if not hasattr(source, "__aiter__"):
            raise TypeError(
                f"source must be an async iterable of chunks, got {type(source).__name__}: "
                f"{source!r}"
            )
        super().__init__(stops, n=n, include_stop=include_stop)
        self._source = source
        self._iterator: AsyncIterator[ChunkT] | None = None
        self._generator: AsyncGenerator[ChunkT, None] | None = None

    def __aiter__(self) -> AsyncIterator[ChunkT]:
        if self._generator is not None:
            raise RuntimeError("a ChunkStream can be iterated only once")
        # Held, so that aclose() can finish it: no async generator is left to the garbage
        # collector (trio warns about those).
        self._generator = self._iterate()
        return self._generator

    async def _iterate(self) -> AsyncGenerator[ChunkT, None]:
        chunks = self._filter
        try:
            if self._closed:
                return
            self._iterator = aiter(self._source)
            async for chunk in self._iterator:
                out = chunks.feed(chunk)
                if chunks.done:
                    await self.aclose()
                    if out is not None:
                        yield out
                    return
                if out is not None:
                    yield out
            for out in chunks.flush():
                yield out
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the source's iterator and the source itself. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # Shielded: closing must finish even when we got here by being cancelled.
        with anyio.CancelScope(shield=True):
            generator = self._generator
            # Not when called from inside it (its ``finally``): it is finishing already.
            if generator is not None and not getattr(generator, "ag_running", False):
                await generator.aclose()
            for upstream in _upstreams(self._source, self._iterator):
                await _close_async(upstream)

    async def __aenter__(self) -> ChunkStream[ChunkT]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class SyncChunkStream(_ChunkStreamBase[ChunkT]):
    """The synchronous twin of :class:`ChunkStream`, e.g. for the ``openai`` client's ``Stream``.

    The source's (and its iterator's) ``close()`` is called when the filter is done, at the
    end, on an error, when leaving a ``with`` block and from :meth:`close`.
    """

    def __init__(
        self,
        source: Iterable[ChunkT],
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
    ) -> None:
        if not hasattr(source, "__iter__") or isinstance(source, (str, bytes, Mapping)):
            raise TypeError(
                f"source must be an iterable of chunks, got {type(source).__name__}: {source!r}"
            )
        super().__init__(stops, n=n, include_stop=include_stop)
        self._source = source
        self._iterator: Iterator[ChunkT] | None = None
        self._generator: Generator[ChunkT, None, None] | None = None

    def __iter__(self) -> Iterator[ChunkT]:
        if self._generator is not None:
            raise RuntimeError("a SyncChunkStream can be iterated only once")
        self._generator = self._iterate()
        return self._generator

    def _iterate(self) -> Generator[ChunkT, None, None]:
        chunks = self._filter
        try:
            if self._closed:
                return
            self._iterator = iter(self._source)
            for chunk in self._iterator:
                out = chunks.feed(chunk)
                if chunks.done:
                    self.close()
                    if out is not None:
                        yield out
                    return
                if out is not None:
                    yield out
            yield from chunks.flush()
        finally:
            self.close()

    def close(self) -> None:
        """Close the source's iterator and the source itself. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._generator is not None and not getattr(self._generator, "gi_running", False):
            self._generator.close()
        for upstream in _upstreams(self._source, self._iterator):
            close = getattr(upstream, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> SyncChunkStream[ChunkT]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# -- server-sent events ------------------------------------------------------------------------

_LINE_END = re.compile(rb"\r\n|\r|\n")
_DONE_EVENT = b"data: [DONE]\n\n"


def _event_bytes(chunk: object, other_lines: Iterable[bytes] = ()) -> bytes:
    data = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
    return b"".join(line + b"\n" for line in other_lines) + b"data: " + data.encode() + b"\n\n"


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, colon, value = line.partition(b":")
    if colon and value.startswith(b" "):
        value = value[1:]
    return name, value


class SSEFilter:
    """Sans-I/O stop filter for the bytes of an OpenAI streaming response (server-sent events).

    :meth:`feed` takes body bytes, split anywhere, and returns the bytes to send now;
    :meth:`flush` ends the body. Events are separated by a blank line (``\\n``, ``\\r\\n`` or
    ``\\r`` line ends). ``data:`` events holding a JSON chunk go through a
    :class:`ChunkFilter`; an event that is unchanged is passed on byte for byte, a rewritten one
    is sent as a single ``data:`` line (its other fields, ``event:`` or ``id:``, kept); comments,
    other events and data that is not JSON pass through.

    ``data: [DONE]`` and an error event (``data: {"error": ...}``) end the stream, releasing
    the held text first. Once :attr:`done`, the response is over: after all choices stopped
    the filter sends ``data: [DONE]`` itself; later bytes are dropped; the caller should end
    the response and close the upstream.

    >>> sse = SSEFilter("</s>", n=1)
    >>> sse.feed(b'data: {"choices":[{"index":0,"delta":{"content":"Hi</s>"}}]}\\n\\ndata: [DO')
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\\n\\ndata: [DONE]\\n\\n'
    >>> sse.done
    True
    """  # noqa: E501

    __slots__ = ("_chunks", "_done", "_lines", "_pending", "_scan")

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
    ) -> None:
        self._chunks: ChunkFilter[Any] = ChunkFilter(stops, n=n, include_stop=include_stop)
        self._pending = bytearray()  # the bytes of the event being received
        self._scan = 0  # where the first line not yet examined starts, in _pending
        self._lines: list[bytes] = []  # the complete lines of that event
        self._done = False

    @property
    def chunks(self) -> ChunkFilter[Any]:
        """The chunk filter, with its per-choice state."""
        return self._chunks

    @property
    def done(self) -> bool:
        """Whether the response is complete: later input is discarded."""
        return self._done

    def feed(self, data: bytes) -> bytes:
        """Take the next piece of the body; return the bytes that may be sent now."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"SSE data must be bytes, got {type(data).__name__}: {data!r}")
        if self._done:
            return b""
        self._pending += data
        return self._drain()

    def flush(self) -> bytes:
        """End of the body: the last event, then chunks for the text still held.

        An event missing its final blank line is taken as complete. Idempotent.
        """
        if self._done:
            return b""
        out = b""
        if self._pending:
            # The body ended: a last "\r" ends its line, and the event needs its blank line.
            if self._pending.endswith(b"\r"):
                self._pending += b"\n"
            self._pending += b"\n" if self._pending.endswith(b"\n") else b"\n\n"
            out = self._drain()
        if not self._done:
            self._done = True
            out += self._held_events()
        return out

    def _held_events(self) -> bytes:
        """End the chunk filter: events carrying the text it still holds."""
        return b"".join(_event_bytes(chunk) for chunk in self._chunks.flush())

    def _drain(self) -> bytes:
        out: list[bytes] = []
        pending = self._pending
        start = self._scan
        while not self._done:
            match = _LINE_END.search(pending, start)
            if match is None:
                break
            if match.end() == len(pending) and match.group() == b"\r":
                break  # perhaps the first half of "\r\n"
            line = bytes(pending[start : match.start()])
            start = match.end()
            if line:
                self._lines.append(line)
                continue
            raw = bytes(pending[:start])
            del pending[:start]
            start = 0
            lines, self._lines = self._lines, []
            out.append(self._event(raw, lines))
        self._scan = start
        if self._done:
            pending.clear()
            self._scan = 0
            self._lines = []
        return b"".join(out)

    def _event(self, raw: bytes, lines: list[bytes]) -> bytes:
        fields = [_field(line) for line in lines]
        data_lines = [value for name, value in fields if name == b"data"]
        if not data_lines:
            return raw
        data = b"\n".join(data_lines)
        if data.strip() == b"[DONE]":
            self._done = True
            return self._held_events() + raw
        try:
            chunk = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(chunk, dict):
            return raw
        if "error" in chunk and "choices" not in chunk:
            # An error ends the stream (the openai client raises on it): the held text first.
            self._done = True
            return self._held_events() + raw
        out = self._chunks.feed(chunk)
        if out is chunk:
            result = raw
        elif out is None:
            result = b""
        else:
            others = [
                line for line, (name, _) in zip(lines, fields, strict=True) if name != b"data"
            ]
            result = _event_bytes(out, others)
        if self._chunks.done:
            self._done = True
            result += _DONE_EVENT
        return result


# -- whole responses ---------------------------------------------------------------------------


def truncate_response(
    response: Mapping[str, Any], stops: Stops | StopAutomaton, *, include_stop: bool = False
) -> dict[str, Any]:
    """Cut each choice of a non-streaming chat or completion response at its first stop.

    Returns a new dict (the argument is not modified); a choice that was cut gets
    ``finish_reason: "stop"``. ``message.content`` (chat) or ``text`` (completions) is cut.

    >>> truncate_response({"choices": [{"index": 0, "text": "Hi</s>junk"}]}, "</s>")
    {'choices': [{'index': 0, 'text': 'Hi', 'finish_reason': 'stop'}]}
    """
    automaton = StopAutomaton.from_stops(stops)
    choices = response.get("choices")
    if not isinstance(choices, list):
        return dict(response)
    new_choices: list[Any] = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            new_choices.append(choice)
            continue
        message = choice.get("message")
        text = message.get("content") if isinstance(message, Mapping) else choice.get("text")
        match = automaton.find(text) if isinstance(text, str) else None
        if match is not None:
            cut = str(text)[: match.end if include_stop else match.start]
            if isinstance(message, Mapping):
                choice = {**choice, "message": {**message, "content": cut}, "finish_reason": "stop"}
            else:
                choice = {**choice, "text": cut, "finish_reason": "stop"}
        new_choices.append(choice)
    return {**response, "choices": new_choices}
