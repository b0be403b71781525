"""The async adapter: a short loop that pulls chunks from an async source into a `Stitcher`.

All assembly logic lives in the sans-I/O `Stitcher`. The loop pulls no chunk once
`Stitcher.done` is true (assembly stopped, or no budget remains), and it closes the source's
iterator and the source in `finally`, shielded from cancellation, whether the loop ended by
exhaustion, by `done`, by an error or by cancellation: the life cycle of every stream wrapper
(`streamstop._lifecycle`). Works under asyncio and trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import TypeVar

from streamstop._lifecycle import aclose_source, upstreams

from ._errors import describe
from ._result import StitchResult
from ._stitcher import DEFAULT_MAX_IDLE, ChunkLike, OnOverflow, Order, Stitcher
from ._text import DEFAULT_MIN_OVERLAP_CHARS
from ._tokenizer import Tokenizer

__all__ = ["afeed", "astitch", "astitch_result"]

T = TypeVar("T")


async def afeed(stitcher: Stitcher[T], source: AsyncIterable[ChunkLike[T]]) -> None:
    """Offer chunks from `source` to `stitcher` until the source ends or the stitcher is done.

    The source's iterator and the source are closed (`aclose()`, or `close()`, awaited if need
    be) before returning or raising, shielded from cancellation.
    """
    if not hasattr(source, "__aiter__"):
        raise TypeError(
            f"source must be an async iterable of chunks, got {describe(source)}; "
            "for a sync iterable use stitch()"
        )
    iterator: AsyncIterator[ChunkLike[T]] = source.__aiter__()
    try:
        if stitcher.done:
            return
        async for chunk in iterator:
            stitcher.add(chunk)
            if stitcher.done:
                return
    finally:
        await aclose_source(*upstreams(source, iterator))


async def astitch(
    source: AsyncIterable[ChunkLike[T]],
    budget: int,
    *,
    on_overflow: OnOverflow = "skip",
    min_overlap: int = 1,
    separator: Sequence[T] | str | None = None,
    tokenizer: Tokenizer | None = None,
    min_overlap_chars: int = DEFAULT_MIN_OVERLAP_CHARS,
    order: Order = "retrieval",
    max_idle: int | None = DEFAULT_MAX_IDLE,
    max_chunks: int | None = None,
) -> list[T]:
    """`stitch` for an async source (e.g. a streaming retriever); returns the output tokens.

    Stops pulling once `done` (nothing more can be appended, `max_chunks` pulled, or
    `max_idle` chunks in a row added nothing), and closes the source.
    """
    stitcher: Stitcher[T] = Stitcher(
        budget,
        on_overflow=on_overflow,
        min_overlap=min_overlap,
        separator=separator,
        tokenizer=tokenizer,
        min_overlap_chars=min_overlap_chars,
        order=order,
        max_idle=max_idle,
        max_chunks=max_chunks,
    )
    await afeed(stitcher, source)
    return stitcher.tokens


async def astitch_result(
    source: AsyncIterable[ChunkLike[T]],
    budget: int,
    *,
    on_overflow: OnOverflow = "skip",
    min_overlap: int = 1,
    separator: Sequence[T] | str | None = None,
    tokenizer: Tokenizer | None = None,
    min_overlap_chars: int = DEFAULT_MIN_OVERLAP_CHARS,
    order: Order = "retrieval",
    max_idle: int | None = DEFAULT_MAX_IDLE,
    max_chunks: int | None = None,
) -> StitchResult[T]:
    """Like `astitch`, but return a `StitchResult` with one record per chunk pulled."""
    stitcher: Stitcher[T] = Stitcher(
        budget,
        on_overflow=on_overflow,
        min_overlap=min_overlap,
        separator=separator,
        tokenizer=tokenizer,
        min_overlap_chars=min_overlap_chars,
        order=order,
        max_idle=max_idle,
        max_chunks=max_chunks,
    )
    await afeed(stitcher, source)
    return stitcher.result()
