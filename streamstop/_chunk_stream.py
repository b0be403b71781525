"""ChunkStream and SyncChunkStream: a ChunkFilter around an iterator of chunks (the openai
client's streams), closing the source when the filter is done, on errors and on cancellation.

The only part of the chunk filtering that does I/O (and imports anyio).
"""

from __future__ import annotations

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
from typing import Generic

import anyio

from ._automaton import StopAutomaton, Stops
from ._chunks import ChunkFilter, ChunkT

__all__ = ["ChunkStream", "SyncChunkStream"]


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
