"""`astitch`: the same result as `stitch`, early stop, closing, errors and cancellation.

Every test runs on asyncio and on trio (the `anyio_backend` fixture in tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ragstitch import Chunk, StitchResult, WordTokenizer, astitch, astitch_result, stitch_result

from .test_stitcher import CONTRACT, POLICIES

pytestmark = pytest.mark.anyio


class Source:
    """An async iterator of chunks that records what was pulled and whether it was closed."""

    def __init__(
        self, chunks: Sequence[Any], *, hang_at: int | None = None, fail_at: int | None = None
    ) -> None:
        self.chunks = list(chunks)
        self.hang_at = hang_at
        self.hanging = anyio.Event()
        self.fail_at = fail_at
        self.pulled = 0
        self.closed = 0

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise RuntimeError("pulled after close")
        if self.hang_at is not None and self.pulled == self.hang_at:
            self.hanging.set()
            await anyio.sleep_forever()
        if self.fail_at is not None and self.pulled == self.fail_at:
            raise ConnectionError("retriever went away")
        if self.pulled == len(self.chunks):
            raise StopAsyncIteration
        self.pulled += 1
        return self.chunks[self.pulled - 1]

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()  # must survive the caller's cancellation
        self.closed += 1


CASES = [(c[0], c[1], c[2]) for c in CONTRACT] + [(c[0], c[1], c[2]) for c in POLICIES]


@pytest.mark.parametrize(("chunks", "budget"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("on_overflow", ["skip", "stop"])
async def test_same_result_as_stitch(chunks: list[Any], budget: int, on_overflow: Any) -> None:
    expected: StitchResult[Any] = stitch_result(chunks, budget, on_overflow=on_overflow)
    source = Source(chunks)
    assert await astitch(source, budget, on_overflow=on_overflow) == list(expected.tokens)
    assert source.closed == 1
    result: StitchResult[Any] = await astitch_result(
        Source(chunks), budget, on_overflow=on_overflow
    )
    assert result == expected


async def test_stops_pulling_when_full_and_closes_the_source() -> None:
    source = Source([[1, 2], [2, 3], [3, 4], [9], [10]])
    assert await astitch(source, 3) == [1, 2, 3]
    assert source.pulled == 2
    assert source.closed == 1


async def test_stops_pulling_at_the_first_overflow_with_stop() -> None:
    source = Source([[1, 2], [5, 6], [3], [4]])
    result: StitchResult[int] = await astitch_result(source, 3, on_overflow="stop")
    assert result.tokens == (1, 2)
    assert result.stopped
    assert source.pulled == 2
    assert source.closed == 1


async def test_zero_budget_pulls_nothing() -> None:
    source = Source([[1]])
    assert await astitch(source, 0) == []
    assert source.pulled == 0
    assert source.closed == 1


async def test_async_generator_source_is_closed() -> None:
    finalized: list[str] = []

    async def retriever() -> AsyncIterator[Chunk[str]]:
        try:
            for i in range(100):
                yield Chunk([f"t{i}", f"t{i + 1}"], id=i)
        finally:
            finalized.append("closed")

    result: StitchResult[str] = await astitch_result(retriever(), 5)
    assert result.tokens == ("t0", "t1", "t2", "t3", "t4")
    assert [r.id for r in result.records] == [0, 1, 2, 3]
    assert finalized == ["closed"]


async def test_text_source() -> None:
    async def texts() -> AsyncIterator[str]:
        for text in ("the quick brown fox", "brown fox jumps"):
            yield text

    tokens: list[str] = await astitch(texts(), 100, tokenizer=WordTokenizer(), min_overlap_chars=5)
    assert "".join(tokens) == "the quick brown fox jumps"


async def test_source_error_propagates_and_the_source_is_closed() -> None:
    source = Source([[1], [2], [3]], fail_at=1)
    with pytest.raises(ConnectionError, match="retriever went away"):
        await astitch(source, 10)
    assert source.closed == 1


async def test_bad_chunk_is_named_and_the_source_is_closed() -> None:
    source = Source([[1], 5])
    with pytest.raises(TypeError, match=r"chunk 1 is not a sequence of tokens: 5 \(int\)"):
        await astitch(source, 10)
    assert source.closed == 1


async def test_cancellation_closes_the_source() -> None:
    source = Source([[i] for i in range(1000)], hang_at=3)
    async with anyio.create_task_group() as group:
        group.start_soon(astitch, source, 10_000)
        await source.hanging.wait()
        group.cancel_scope.cancel()
    assert source.pulled == 3
    assert source.closed == 1  # aclose ran to completion, shielded from the cancellation


async def test_bad_arguments() -> None:
    with pytest.raises(
        TypeError, match=r"source must be an async iterable of chunks, got \[\[1\]\]"
    ):
        await astitch([[1]], 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"budget must be >= 0, got -3"):
        await astitch(Source([[1]]), -3)
    with pytest.raises(TypeError, match=r"budget must be an int, got 1\.5 \(float\)"):
        await astitch(Source([[1]]), 1.5)  # type: ignore[arg-type]
