# Provenance: what the stitcher emits besides tokens. Every chunk offered to a `Stitcher` gets one
# `ChunkRecord`, taken or not; `StitchResult` holds the output and all records. Both are frozen.
#
# Spans are half-open token offsets into the output, `(start, end)` meaning
# `tokens[start:end]`. A taken chunk *contributed* `span` (the tokens appended for it) and
# *covers* `covers` (its overlap with what came before plus `span`): `tokens[covers[0]:covers[1]]`
# equals the chunk's tokens.

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._errors import describe

__all__ = ["ChunkRecord", "StitchResult"]

T = TypeVar("T")


@dataclass(frozen=True)
class ChunkRecord:
    """What happened to one chunk.

    - `index`: its position among the chunks offered, from 0.
    - `id`, `metadata`: copied from the chunk (`None` and empty when it has none).
    - `taken`: whether its tokens were appended.
    - `length`: its number of tokens.
    - `overlap`: tokens shared with the end of the output when it was offered; they are merged,
      not repeated and not charged. 0 when the longest overlap was shorter than `min_overlap`.
    - `separator`: separator tokens put (or that would have been put) before it; only when
      `overlap == 0`, the output is not empty and the chunk is not.
    - `cost`: `length - overlap + separator`, what it was (or would have been) charged.
    - `span`: `(start, end)` of the output tokens it contributed, `None` if not taken.
    """

    index: int
    id: object
    taken: bool
    length: int
    overlap: int
    separator: int
    cost: int
    span: tuple[int, int] | None
    metadata: Mapping[str, Any]

    @property
    def covers(self) -> tuple[int, int] | None:
        """`(start, end)` of the output tokens equal to this chunk's tokens; `None` if not taken."""
        if self.span is None:
            return None
        return (self.span[0] - self.overlap, self.span[1])


@dataclass(frozen=True)
class StitchResult(Generic[T]):
    """The assembled tokens, the budget, and one `ChunkRecord` per chunk offered.

    `text` is the decoded output when the stitcher had a tokenizer, else `None`. `stopped` is
    true when `on_overflow="stop"` ended assembly. Chunks never pulled (after assembly ended)
    have no record.
    """

    tokens: tuple[T, ...]
    records: tuple[ChunkRecord, ...]
    budget: int
    stopped: bool = False
    text: str | None = None

    @property
    def used(self) -> int:
        """Tokens in the output, separators included."""
        return len(self.tokens)

    @property
    def remaining(self) -> int:
        return self.budget - len(self.tokens)

    @property
    def taken(self) -> tuple[ChunkRecord, ...]:
        return tuple(r for r in self.records if r.taken)

    @property
    def skipped(self) -> tuple[ChunkRecord, ...]:
        return tuple(r for r in self.records if not r.taken)

    @property
    def saved(self) -> int:
        """Tokens not pasted twice thanks to overlap: the sum of the taken chunks' overlaps."""
        return sum(r.overlap for r in self.records if r.taken)

    def cite(self, start: int, end: int | None = None) -> tuple[ChunkRecord, ...]:
        """The taken chunks whose tokens cover any output token in `[start, end)`.

        `end` defaults to `start + 1` (one token). Use it to cite the sources of a passage of
        the context. Raises `ValueError` unless `0 <= start <= end <= used`.
        """
        if end is None:
            end = start + 1
        for name, value in (("start", start), ("end", end)):
            if type(value) is not int:
                raise TypeError(f"cite: {name} must be an int, got {describe(value)}")
        if not 0 <= start <= end <= len(self.tokens):
            raise ValueError(
                f"cite: need 0 <= start <= end <= {len(self.tokens)}, got start={start}, end={end}"
            )
        if start == end:
            return ()
        found: list[ChunkRecord] = []
        for record in self.records:
            covers = record.covers
            if covers is not None and covers[0] < end and start < covers[1]:
                found.append(record)
        return tuple(found)
