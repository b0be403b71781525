"""One life cycle for every stream wrapper: a loop over a source that must be closed.

A wrapper (``ChunkStream``, ``SyncChunkStream``, ragstitch's ``afeed``) pulls from a source that
may hold a connection (a model generating, an HTTP response). Its rules, the same sync and async:

- **iterate once**: a second ``__aiter__`` / ``__iter__`` raises :class:`RuntimeError`;
- **close once**: ``aclose()`` / ``close()`` finishes the wrapper's own generator, then closes the
  source's iterator (if one was taken) and the source; a second call does nothing;
- **close on every exit**: the wrapper's generator calls ``aclose()`` / ``close()`` in its
  ``finally``, so the end, a stop, an error in the source, a consumer that leaves its
  ``async with`` block and cancellation all close the source;
- **shielded**: the async close finishes even when the caller is being cancelled;
- **close before start**: iterating a closed wrapper pulls nothing and yields nothing.

A subclass writes only its loop, ``_iterate``, in this shape::

    async def _iterate(self):
        try:
            iterator = self._open()
            if iterator is None:
                return
            async for item in iterator:
                ...
        finally:
            await self.aclose()

The loop stays the subclass's own so that the per-item path is one generator, not two.
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Generator,
    Iterable,
    Iterator,
)
from inspect import isawaitable
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio

__all__ = [
    "AsyncSourceStream",
    "SyncSourceStream",
    "aclose_source",
    "close_source",
    "upstreams",
]

OutT = TypeVar("OutT")
AsyncS = TypeVar("AsyncS", bound="AsyncSourceStream[Any]")
SyncS = TypeVar("SyncS", bound="SyncSourceStream[Any]")


def upstreams(source: object, iterator: object | None) -> list[object]:
    """What closing a wrapper closes, in order: the source's iterator, if taken, then the source."""
    if iterator is None or iterator is source:
        return [source]
    return [iterator, source]


async def aclose_source(*objects: object) -> None:
    """``aclose()`` (or ``close()``, awaited if need be: the ``openai`` client's streams have
    both) each of ``objects`` that has one, in order, shielded from cancellation."""
    with anyio.CancelScope(shield=True):
        for obj in objects:
            close = getattr(obj, "aclose", None) or getattr(obj, "close", None)
            if close is not None:
                result = close()
                if isawaitable(result):
                    await result


def close_source(*objects: object) -> None:
    """``close()`` each of ``objects`` that has one, in order."""
    for obj in objects:
        close = getattr(obj, "close", None)
        if close is not None:
            close()


class AsyncSourceStream(Generic[OutT]):
    """An async iterator over a source, with the life cycle above; subclasses write ``_iterate``."""

    def __init__(self, source: AsyncIterable[Any]) -> None:
        self._source = source
        self._iterator: AsyncIterator[Any] | None = None
        self._generator: AsyncGenerator[OutT, None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the source has been closed."""
        return self._closed

    def __aiter__(self) -> AsyncIterator[OutT]:
        if self._generator is not None:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        # Held, so that aclose() can finish it: no async generator is left to the garbage
        # collector (trio warns about those).
        self._generator = self._iterate()
        return self._generator

    def _iterate(self) -> AsyncGenerator[OutT, None]:
        raise NotImplementedError

    def _open(self) -> AsyncIterator[Any] | None:
        """The source's iterator, taken now; ``None`` if the stream was closed before it started."""
        if self._closed:
            return None
        self._iterator = aiter(self._source)
        return self._iterator

    async def aclose(self) -> None:
        """Close the source's iterator and the source itself. Idempotent, shielded."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            generator = self._generator
            # Not when called from inside it (its ``finally``): it is finishing already.
            if generator is not None and not getattr(generator, "ag_running", False):
                await generator.aclose()
            await aclose_source(*upstreams(self._source, self._iterator))

    async def __aenter__(self: AsyncS) -> AsyncS:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class SyncSourceStream(Generic[OutT]):
    """The synchronous twin of :class:`AsyncSourceStream`."""

    def __init__(self, source: Iterable[Any]) -> None:
        self._source = source
        self._iterator: Iterator[Any] | None = None
        self._generator: Generator[OutT, None, None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the source has been closed."""
        return self._closed

    def __iter__(self) -> Iterator[OutT]:
        if self._generator is not None:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        self._generator = self._iterate()
        return self._generator

    def _iterate(self) -> Generator[OutT, None, None]:
        raise NotImplementedError

    def _open(self) -> Iterator[Any] | None:
        """The source's iterator, taken now; ``None`` if the stream was closed before it started."""
        if self._closed:
            return None
        self._iterator = iter(self._source)
        return self._iterator

    def close(self) -> None:
        """Close the source's iterator and the source itself. Idempotent."""
        if self._closed:
            return
        self._closed = True
        generator = self._generator
        if generator is not None and not getattr(generator, "gi_running", False):
            generator.close()
        close_source(*upstreams(self._source, self._iterator))

    def __enter__(self: SyncS) -> SyncS:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
