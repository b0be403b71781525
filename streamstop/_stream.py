"""StopStream and SyncStopStream: loops that pull chunks through a :class:`StopBuffer`.

All matching lives in the buffer; the life cycle of the source (closed once a stop completes,
at the end, when the consumer stops early or is cancelled, when the source fails; close once;
iterate once) is ``_lifecycle``'s, shared with every stream wrapper. What lives here is the
per-token loop.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable
from typing import TYPE_CHECKING

from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer
from ._lifecycle import AsyncSourceStream, SyncSourceStream
from ._memo import _PASS_THROUGH

if TYPE_CHECKING:
    from ._patterns import StopPatterns

__all__ = ["StopStream", "SyncStopStream"]


class _Filtered:
    """What both streams add to their life cycle: the buffer and its verdict."""

    _buffer: StopBuffer

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
    def stop_pattern(self) -> str | None:
        """The regex stop whose match ended the stream (:attr:`stop_string` is the match), or
        ``None``."""
        return self._buffer.stop_pattern

    @property
    def held(self) -> str:
        """Text pulled from the source but not yielded (it might still become a stop)."""
        return self._buffer.held


class StopStream(_Filtered, AsyncSourceStream[str]):
    """Async iterator of the filtered text of ``source`` (an async iterable of str or bytes).

    Never yields ``""``. After the stream ends, :attr:`stopped` and :attr:`stop_string` say
    whether and where it was cut::

        async with StopStream(model.stream(prompt), ["</s>", "\\n\\nUser:"]) as stream:
            async for text in stream:
                await send(text)

    On a stop the final piece is yielded and the source is closed at once, before anything
    else is pulled. ``async with`` (or :meth:`aclose`) closes the source deterministically when
    the consumer leaves early; a bare ``async for`` that breaks closes it when the event loop
    finalizes the iterator, as with any async generator. Closing (the source's iterator, then
    the source: ``aclose()``, or ``close()``, awaited if need be) is shielded and idempotent.

    If the source raises, the error propagates and the text held at that moment is not emitted
    (it might have been the start of a stop); it stays readable as :attr:`held`.

    ``regex``, ``max_match_chars`` and ``arm_after`` are :class:`StopBuffer`'s: regex stops, and
    stops armed only once a marker has appeared.
    """

    def __init__(
        self,
        source: AsyncIterable[str | bytes],
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        if not hasattr(source, "__aiter__"):
            raise TypeError(
                f"source must be an async iterable of str or bytes, got "
                f"{type(source).__name__}: {source!r}"
            )
        super().__init__(source)
        self._buffer = StopBuffer(
            stops,
            include_stop=include_stop,
            errors=errors,
            regex=regex,
            max_match_chars=max_match_chars,
            arm_after=arm_after,
        )

    async def _iterate(self) -> AsyncGenerator[str, None]:
        # The per-token path of every stream. Most tokens arrive with nothing held and are known
        # to pass whole (see StopBuffer._at_root): one dict lookup instead of feed's frame. That
        # lookup (hashing a new str, probing the memo) is most of what this loop adds to a bare
        # pass-through; a local copy of _at_root saved only 2-3% and would miss a buffer fed or
        # flushed from outside the loop, so it is read from the buffer each time.
        buffer = self._buffer
        try:
            iterator = self._open()
            if iterator is None:
                return
            feed = buffer.feed
            # Keyed by str, called with any chunk: one of another type misses (feed then decides).
            root_step = buffer.automaton._root_step
            pass_through = _PASS_THROUGH
            async for chunk in iterator:
                if buffer._at_root:
                    try:
                        step = root_step(chunk)
                    except TypeError:  # unhashable: feed() reports it
                        step = None
                    if step is pass_through and chunk.__class__ is str:
                        # A str subclass equal to a known token goes through feed(), which
                        # gives plain text. (No typing.cast: a call on every token.)
                        yield chunk
                        continue
                piece = feed(chunk)
                if buffer.stopped:
                    await self.aclose()
                    if piece:
                        yield piece
                    return
                if piece:
                    yield piece
            piece = buffer.flush()
            if piece:
                yield piece
        finally:
            await self.aclose()


class SyncStopStream(_Filtered, SyncSourceStream[str]):
    """The synchronous twin of :class:`StopStream`, for plain iterables of str or bytes.

    >>> pieces = SyncStopStream(["Hel", "lo</", "s>junk"], "</s>")
    >>> list(pieces), pieces.stop_string
    (['Hel', 'lo'], '</s>')
    >>> pieces = SyncStopStream(["<think>Q: 1?</think>", "A.", " Q: 2"], "Q:", arm_after="</think>")
    >>> list(pieces), pieces.stop_string
    (['<think>Q: 1?</think>', 'A.', ' '], 'Q:')

    The source's iterator and the source are closed (``close()``, if they have one: generators
    do) on a stop, at the end, on an error, when the consumer leaves a ``with`` block, and from
    :meth:`close`.
    """

    def __init__(
        self,
        source: Iterable[str | bytes],
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        if not hasattr(source, "__iter__") or isinstance(source, (str, bytes)):
            raise TypeError(
                f"source must be an iterable of str or bytes chunks, got "
                f"{type(source).__name__}: {source!r}"
            )
        super().__init__(source)
        self._buffer = StopBuffer(
            stops,
            include_stop=include_stop,
            errors=errors,
            regex=regex,
            max_match_chars=max_match_chars,
            arm_after=arm_after,
        )

    def _iterate(self) -> Generator[str, None, None]:
        # The same loop as StopStream's.
        buffer = self._buffer
        try:
            iterator = self._open()
            if iterator is None:
                return
            feed = buffer.feed
            root_step = buffer.automaton._root_step
            pass_through = _PASS_THROUGH
            for chunk in iterator:
                if buffer._at_root:
                    try:
                        step = root_step(chunk)
                    except TypeError:
                        step = None
                    if step is pass_through and chunk.__class__ is str:
                        yield chunk
                        continue
                piece = feed(chunk)
                if buffer.stopped:
                    self.close()
                    if piece:
                        yield piece
                    return
                if piece:
                    yield piece
            piece = buffer.flush()
            if piece:
                yield piece
        finally:
            self.close()
