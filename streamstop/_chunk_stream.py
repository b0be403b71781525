"""ChunkStream and SyncChunkStream: a ChunkFilter around an iterator of chunks (the openai
client's streams), closing the source when the filter is done, on errors and on cancellation.

The only part of the chunk filtering that does I/O; the life cycle (close once, on every exit,
shielded; iterate once) is ``_lifecycle``'s, shared with ragstitch's async assembly.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable, Mapping
from typing import Generic

from ._automaton import StopAutomaton, Stops
from ._chunks import ChunkFilter, ChunkT
from ._lifecycle import AsyncSourceStream, SyncSourceStream

__all__ = ["ChunkStream", "SyncChunkStream"]


class _ChunkFiltering(Generic[ChunkT]):
    """What both chunk streams add to their life cycle: the filter and its verdict."""

    _filter: ChunkFilter[ChunkT]

    @property
    def filter(self) -> ChunkFilter[ChunkT]:
        return self._filter

    @property
    def stop_strings(self) -> dict[int, str]:
        """The stop that cut each choice, by choice index."""
        return self._filter.stop_strings


class ChunkStream(_ChunkFiltering[ChunkT], AsyncSourceStream[ChunkT]):
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
        super().__init__(source)
        self._filter = ChunkFilter(stops, n=n, include_stop=include_stop)

    async def _iterate(self) -> AsyncGenerator[ChunkT, None]:
        chunks = self._filter
        try:
            iterator = self._open()
            if iterator is None:
                return
            async for chunk in iterator:
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


class SyncChunkStream(_ChunkFiltering[ChunkT], SyncSourceStream[ChunkT]):
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
        super().__init__(source)
        self._filter = ChunkFilter(stops, n=n, include_stop=include_stop)

    def _iterate(self) -> Generator[ChunkT, None, None]:
        chunks = self._filter
        try:
            iterator = self._open()
            if iterator is None:
                return
            for chunk in iterator:
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
