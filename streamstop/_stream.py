"""StopStream and SyncStopStream: loops that pull chunks through a :class:`StopBuffer`.

All matching lives in the buffer. What lives here is the life cycle of the source: once a stop
completes, the consumer stops early, the consumer is cancelled or the source fails, the source
is closed (awaiting ``aclose()``), so that the model stops generating. Closing is idempotent.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Iterator
from types import TracebackType
from typing import Any

import anyio

from ._automaton import PASS_THROUGH, StopAutomaton, Stops
from ._buffer import StopBuffer

__all__ = ["StopStream", "SyncStopStream"]


def _unfinished(source: object) -> bool:
    """Whether closing ``source`` could do anything: not for an async generator that has run to
    its end (the common case, at the end of a stream), which saves a cancel scope a stream."""
    return not (inspect.isasyncgen(source) and source.ag_frame is None)


class _FilteredStream:
    """What both streams expose: the buffer's verdict and whether the source is closed."""

    def __init__(self, stops: Stops | StopAutomaton, *, include_stop: bool, errors: str) -> None:
        self._buffer = StopBuffer(stops, include_stop=include_stop, errors=errors)
        # Exhausted: nothing more will be pulled (a stop, the end, an error or a close).
        self._exhausted = False
        self._closed = False

    @property
    def buffer(self) -> StopBuffer:
        return self._buffer

    @property
    def stopped(self) -> bool:
        """Whether a stop completed."""
        return self._buffer.stopped

    @property
    def stop_string(self) -> str | None:
        """The stop that ended the stream, or ``None``."""
        return self._buffer.stop_string

    @property
    def held(self) -> str:
        """Text pulled from the source but not yielded (it might still become a stop)."""
        return self._buffer.held

    @property
    def closed(self) -> bool:
        """Whether the source has been closed."""
        return self._closed


class StopStream(_FilteredStream):
    """Async iterator of the filtered text of ``source`` (an async iterable of str or bytes).

    Never yields ``""``. After the stream ends, :attr:`stopped` and :attr:`stop_string` say
    whether and where it was cut::

        async with StopStream(model.stream(prompt), ["</s>", "\\n\\nUser:"]) as stream:
            async for text in stream:
                await send(text)

    On a stop the final piece is yielded and the source is closed at once, before anything
    else is pulled. ``async with`` (or :meth:`aclose`) closes the source deterministically when
    the consumer leaves early; a bare ``async for`` that breaks closes it when the event loop
    finalizes the iterator, as with any async generator.

    If the source raises, the error propagates and the text held at that moment is not emitted
    (it might have been the start of a stop); it stays readable as :attr:`held`.
    """

    def __init__(
        self,
        source: AsyncIterable[str | bytes],
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
    ) -> None:
        if not hasattr(source, "__aiter__"):
            raise TypeError(
                f"source must be an async iterable of str or bytes, got "
                f"{type(source).__name__}: {source!r}"
            )
        super().__init__(stops, include_stop=include_stop, errors=errors)
        self._source = source
        self._iterator: AsyncIterator[str | bytes] | None = None
        self._generator: AsyncGenerator[str, None] | None = None
        self._looped = False

    def __aiter__(self) -> AsyncIterator[str]:
        # An async generator rather than ``self``: resuming a generator costs less than a new
        # ``__anext__`` coroutine per token, and an abandoned one is finalized by the event loop
        # (which then closes the source). Held here, so that ``aclose()`` can finish it. Once,
        # as every stream wrapper (streamstop._lifecycle): a second loop would silently resume
        # or find nothing.
        # (Pieces taken with __anext__ first are part of the same one iteration.)
        if self._looped:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        self._looped = True
        if self._generator is None:
            self._generator = self._iterate()
        return self._generator

    async def _iterate(self) -> AsyncGenerator[str, None]:
        # The per-token path of every stream. Most tokens arrive with nothing held and are known
        # to pass whole (see StopBuffer.at_root): two C-level calls instead of feed's frame.
        if self._exhausted:
            return
        buffer = self._buffer
        feed = buffer.feed
        # Keyed by str, called with any chunk: one of another type misses (feed then decides).
        root_step = buffer.automaton.root_step
        pass_through = PASS_THROUGH
        try:
            if self._iterator is None:
                self._iterator = aiter(self._source)
            async for chunk in self._iterator:
                if buffer.at_root:
                    try:
                        step = root_step(chunk)  # type: ignore[arg-type]
                    except TypeError:  # unhashable: feed() reports it
                        step = None
                    if step is pass_through and type(chunk) is str:
                        # A str subclass equal to a known token goes through feed(), which
                        # gives plain text. (No typing.cast: a call on every token.)
                        yield chunk
                        continue
                piece = feed(chunk)
                if buffer.stopped:
                    self._exhausted = True
                    await self.aclose()
                    if piece:
                        yield piece
                    return
                if piece:
                    yield piece
            self._exhausted = True
            piece = buffer.flush()
            if piece:
                yield piece
        finally:
            self._exhausted = True
            await self.aclose()

    async def __anext__(self) -> str:
        """The next piece, from the same iterator that ``async for`` uses."""
        if self._generator is None:
            self._generator = self._iterate()
        return await self._generator.__anext__()

    async def aclose(self) -> None:
        """Close the source (its iterator's ``aclose()``, if it has one). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._exhausted = True
        closers = []
        # Our own iterator too (its ``finally`` finds us closed), so that no async generator is
        # left to the garbage collector (trio warns about those); but not from inside it.
        generator = self._generator
        running = getattr(generator, "ag_running", False)
        if generator is not None and not running and _unfinished(generator):
            closers.append(generator.aclose)
        source: object = self._iterator if self._iterator is not None else self._source
        aclose = getattr(source, "aclose", None)
        if aclose is not None and _unfinished(source):
            closers.append(aclose)
        if closers:
            # Shielded: closing must finish even when we got here by being cancelled.
            with anyio.CancelScope(shield=True):
                for close in closers:
                    await close()

    async def __aenter__(self) -> StopStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class SyncStopStream(_FilteredStream):
    """The synchronous twin of :class:`StopStream`, for plain iterables of str or bytes.

    >>> pieces = SyncStopStream(["Hel", "lo</", "s>junk"], "</s>")
    >>> list(pieces), pieces.stop_string
    (['Hel', 'lo'], '</s>')

    The source's ``close()`` (generators have one) is called on a stop, on an error, when the
    consumer leaves a ``with`` block, and from :meth:`close`.
    """

    def __init__(
        self,
        source: Iterable[str | bytes],
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
    ) -> None:
        if not hasattr(source, "__iter__") or isinstance(source, (str, bytes)):
            raise TypeError(
                f"source must be an iterable of str or bytes chunks, got "
                f"{type(source).__name__}: {source!r}"
            )
        super().__init__(stops, include_stop=include_stop, errors=errors)
        self._source = source
        self._iterator: Iterator[str | bytes] | None = None
        self._iterated = False

    def __iter__(self) -> SyncStopStream:
        if self._iterated:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        self._iterated = True
        return self

    def __next__(self) -> str:
        if self._exhausted:
            raise StopIteration
        buffer = self._buffer
        try:
            if self._iterator is None:
                self._iterator = iter(self._source)
            for chunk in self._iterator:
                piece = buffer.feed(chunk)
                if buffer._stop_string is not None:
                    break
                if piece:
                    return piece
            else:
                piece = buffer.flush()
        except BaseException:
            self._exhausted = True
            self.close()
            raise
        self._exhausted = True
        self.close()
        if piece:
            return piece
        raise StopIteration

    def close(self) -> None:
        """Close the source (its iterator's ``close()``, if it has one). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._exhausted = True
        closable: Any = self._iterator if self._iterator is not None else self._source
        close = getattr(closable, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> SyncStopStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
