"""One contract for the life cycle of every stream wrapper, sync and async, on asyncio and trio.

The wrappers: ``StopStream`` and ``SyncStopStream`` (streamstop), ``ChunkStream`` and
``SyncChunkStream`` (streamstop.chat), and ragstitch's ``astitch``. The
contract (``streamstop._lifecycle``): the source is closed exactly once, whether the stream ends,
the source raises, the consumer stops early or is cancelled (the close is shielded: the sources
here await inside ``aclose``, which a cancelled, unshielded close would not finish); closing
twice is harmless; a stream is iterated once (``__anext__`` / ``next`` take from that same one
iteration); a stream closed before it starts pulls nothing; a source whose iterator is another
object is closed after its iterator; a source with only ``close()`` is closed with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from ragstitch import astitch
from streamstop import StopStream, SyncStopStream
from streamstop.chat import ChunkStream, SyncChunkStream

pytestmark = pytest.mark.anyio

STOPS = ["</s>"]


class Boom(Exception):
    pass


def chat(content: str) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": {"content": content}}]}


class Source:
    """An async source that counts what is pulled and closed; it may fail or hang after
    ``after`` items. Its ``aclose`` awaits, as a real one does (a network close)."""

    def __init__(self, items: list[Any], *, fail: bool = False, hang: bool = False) -> None:
        self.items = list(items)
        self.fail = fail
        self.hang = hang
        self.pulled = 0
        self.closes = 0
        self.hanging = anyio.Event()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self.pulled == len(self.items):
            if self.fail:
                raise Boom("the source failed")
            if self.hang:
                self.hanging.set()
                await anyio.sleep_forever()
            raise StopAsyncIteration
        self.pulled += 1
        return self.items[self.pulled - 1]

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closes += 1


class Split:
    """An async iterable whose iterator is another object; both record their closes in ``log``."""

    def __init__(self, items: list[Any]) -> None:
        self.log: list[str] = []
        self.iterator = Source(items)
        self.iterator.aclose = self._close_iterator  # type: ignore[method-assign]

    def __aiter__(self) -> AsyncIterator[Any]:
        return self.iterator

    async def _close_iterator(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.log.append("iterator")

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.log.append("source")


class CloseOnly:
    """An async source with a synchronous ``close()`` and no ``aclose()``."""

    def __init__(self, items: list[Any]) -> None:
        self.items = iter(items)
        self.closes = 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self.items)
        except StopIteration:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self.closes += 1


class SyncSource:
    """The synchronous twin of :class:`Source`; ``fail`` may be any exception type."""

    def __init__(self, items: list[Any], *, fail: type[BaseException] | None = None) -> None:
        self.items = list(items)
        self.fail = fail
        self.pulled = 0
        self.closes = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.pulled == len(self.items):
            if self.fail is not None:
                raise self.fail("the source failed")
            raise StopIteration
        self.pulled += 1
        return self.items[self.pulled - 1]

    def close(self) -> None:
        self.closes += 1


@dataclass(frozen=True)
class Wrapper:
    name: str
    make: Callable[[Any], Any]
    items: list[Any]


ASYNC_WRAPPERS = [
    Wrapper("StopStream", lambda source: StopStream(source, STOPS), ["a", "b", "c"]),
    Wrapper("ChunkStream", lambda source: ChunkStream(source, STOPS), [chat("a"), chat("b")]),
]
SYNC_WRAPPERS = [
    Wrapper("SyncStopStream", lambda source: SyncStopStream(source, STOPS), ["a", "b", "c"]),
    Wrapper(
        "SyncChunkStream", lambda source: SyncChunkStream(source, STOPS), [chat("a"), chat("b")]
    ),
]


def wrappers(table: list[Wrapper], xfail: dict[str, str] | None = None) -> list[Any]:
    xfail = xfail or {}
    return [
        pytest.param(
            wrapper,
            id=wrapper.name,
            marks=[pytest.mark.xfail(strict=True, reason=xfail[wrapper.name])]
            if wrapper.name in xfail
            else [],
        )
        for wrapper in table
    ]


# Async wrappers.


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_reading_to_the_end_closes_the_source_once(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    out = [item async for item in stream]
    assert len(out) == len(wrapper.items)
    assert (source.pulled, source.closes, stream.closed) == (len(wrapper.items), 1, True)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_a_source_that_raises_is_closed_and_the_error_propagates(wrapper: Wrapper) -> None:
    source = Source(wrapper.items, fail=True)
    stream = wrapper.make(source)
    with pytest.raises(Boom, match="the source failed"):
        async for _ in stream:
            pass
    assert (source.closes, stream.closed) == (1, True)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_a_consumer_that_stops_early_closes_the_source(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    async with wrapper.make(source) as stream:
        async for _ in stream:
            break
    assert (source.pulled, source.closes, stream.closed) == (1, 1, True)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_cancellation_closes_the_source_under_a_shield(wrapper: Wrapper) -> None:
    source = Source(wrapper.items, hang=True)
    stream = wrapper.make(source)
    got: list[Any] = []

    async def consume() -> None:
        async for item in stream:
            got.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await source.hanging.wait()
        tg.cancel_scope.cancel()
    assert (source.closes, stream.closed) == (1, True)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_closing_twice_closes_once(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    async for _ in stream:
        pass
    await stream.aclose()
    await stream.aclose()
    assert source.closes == 1


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_a_second_iteration_raises(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    async for _ in stream:
        pass
    with pytest.raises(RuntimeError, match=f"a {wrapper.name} can be iterated only once"):
        aiter(stream)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_closed_before_start_pulls_nothing(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    await stream.aclose()
    await stream.aclose()
    assert [item async for item in stream] == []
    assert (source.pulled, source.closes, stream.closed) == (0, 1, True)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_anext_takes_from_the_one_iteration(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    first = await stream.__anext__()
    rest = [item async for item in stream]
    assert [first, *rest] == [item async for item in wrapper.make(Source(wrapper.items))]
    assert (source.pulled, source.closes, stream.closed) == (len(wrapper.items), 1, True)
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    with pytest.raises(RuntimeError, match=f"a {wrapper.name} can be iterated only once"):
        aiter(stream)


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_anext_after_close_pulls_nothing(wrapper: Wrapper) -> None:
    source = Source(wrapper.items)
    stream = wrapper.make(source)
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert (source.pulled, source.closes) == (0, 1)


@pytest.mark.parametrize("early", [False, True], ids=["to the end", "early"])
@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_the_iterator_is_closed_then_the_source(wrapper: Wrapper, early: bool) -> None:
    source = Split(wrapper.items)
    async with wrapper.make(source) as stream:
        async for _ in stream:
            if early:
                break
    assert source.log == ["iterator", "source"]


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_a_source_with_only_a_sync_close_is_closed_once(wrapper: Wrapper) -> None:
    source = CloseOnly(wrapper.items)
    stream = wrapper.make(source)
    assert len([item async for item in stream]) == len(wrapper.items)
    await stream.aclose()
    assert source.closes == 1


@pytest.mark.parametrize("wrapper", wrappers(ASYNC_WRAPPERS))
async def test_an_async_generator_source_is_finished_on_every_exit(wrapper: Wrapper) -> None:
    # A finished generator is not closed again (nothing would happen); one that was left
    # suspended is: its ``finally`` runs.
    finished: list[bool] = []

    async def generate() -> AsyncIterator[Any]:
        try:
            for item in wrapper.items:
                yield item
        finally:
            finished.append(True)

    stream = wrapper.make(generate())
    assert len([item async for item in stream]) == len(wrapper.items)
    async with wrapper.make(generate()) as early:
        async for _ in early:
            break
    assert (finished, stream.closed, early.closed) == ([True, True], True, True)


# Sync wrappers: no cancellation, but an interrupt (a BaseException) closes the source too.


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_reading_to_the_end_closes_the_source_once(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    stream = wrapper.make(source)
    assert len(list(stream)) == len(wrapper.items)
    assert (source.pulled, source.closes, stream.closed) == (len(wrapper.items), 1, True)


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_a_source_that_raises_is_closed_and_the_error_propagates(
    wrapper: Wrapper, error: type[BaseException]
) -> None:
    source = SyncSource(wrapper.items, fail=error)
    stream = wrapper.make(source)
    with pytest.raises(error, match="the source failed"):
        for _ in stream:
            pass
    assert (source.closes, stream.closed) == (1, True)


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_a_consumer_that_stops_early_closes_the_source(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    with wrapper.make(source) as stream:
        for _ in stream:
            break
    assert (source.pulled, source.closes, stream.closed) == (1, 1, True)


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_closing_twice_closes_once(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    stream = wrapper.make(source)
    list(stream)
    stream.close()
    stream.close()
    assert source.closes == 1


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_a_second_iteration_raises(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    stream = wrapper.make(source)
    list(stream)
    with pytest.raises(RuntimeError, match=f"a {wrapper.name} can be iterated only once"):
        iter(stream)


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_closed_before_start_pulls_nothing(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    stream = wrapper.make(source)
    stream.close()
    stream.close()
    assert list(stream) == []
    assert (source.pulled, source.closes, stream.closed) == (0, 1, True)


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_next_takes_from_the_one_iteration(wrapper: Wrapper) -> None:
    source = SyncSource(wrapper.items)
    stream = wrapper.make(source)
    first = next(stream)
    assert [first, *stream] == list(wrapper.make(SyncSource(wrapper.items)))
    assert (source.pulled, source.closes, stream.closed) == (len(wrapper.items), 1, True)
    with pytest.raises(StopIteration):
        next(stream)
    with pytest.raises(RuntimeError, match=f"a {wrapper.name} can be iterated only once"):
        iter(stream)


@pytest.mark.parametrize("early", [False, True], ids=["to the end", "early"])
@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_the_iterator_is_closed_then_the_source(wrapper: Wrapper, early: bool) -> None:
    log: list[str] = []

    class Iterator_(SyncSource):
        def close(self) -> None:
            log.append("iterator")

    class Iterable_:
        def __iter__(self) -> Iterator[Any]:
            return Iterator_(wrapper.items)

        def close(self) -> None:
            log.append("source")

    with wrapper.make(Iterable_()) as stream:
        for _ in stream:
            if early:
                break
    assert log == ["iterator", "source"]


@pytest.mark.parametrize("wrapper", wrappers(SYNC_WRAPPERS))
def test_sync_a_generator_source_is_finished_on_every_exit(wrapper: Wrapper) -> None:
    finished: list[bool] = []

    def generate() -> Iterator[Any]:
        try:
            yield from wrapper.items
        finally:
            finished.append(True)

    stream = wrapper.make(generate())
    assert len(list(stream)) == len(wrapper.items)
    with wrapper.make(generate()) as early:
        for _ in early:
            break
    assert (finished, stream.closed, early.closed) == ([True, True], True, True)


# ragstitch's astitch is a loop, not an iterator: the cases that apply to a loop.

TOKENS = [["a", "b"], ["c", "d"], ["e", "f"]]


async def test_astitch_reading_to_the_end_closes_the_source_once() -> None:
    source = Source(TOKENS)
    assert await astitch(source, 100) == ["a", "b", "c", "d", "e", "f"]
    assert (source.pulled, source.closes) == (3, 1)


async def test_astitch_a_source_that_raises_is_closed_and_the_error_propagates() -> None:
    source = Source(TOKENS, fail=True)
    with pytest.raises(Boom, match="the source failed"):
        await astitch(source, 100)
    assert source.closes == 1


async def test_astitch_stops_early_when_done_and_closes_the_source() -> None:
    source = Source(TOKENS)
    assert await astitch(source, 2, on_overflow="stop") == ["a", "b"]
    assert (source.pulled, source.closes) == (1, 1)


async def test_astitch_closed_before_start_when_already_done() -> None:
    source = Source(TOKENS)
    assert await astitch(source, 0) == []
    assert (source.pulled, source.closes) == (0, 1)


async def test_astitch_cancellation_closes_the_source_under_a_shield() -> None:
    source = Source(TOKENS, hang=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(astitch, source, 100)
        await source.hanging.wait()
        tg.cancel_scope.cancel()
    assert source.closes == 1
