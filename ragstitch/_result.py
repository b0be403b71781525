"""Provenance: what the stitcher emits besides tokens. Every chunk offered to a `Stitcher` gets one
`ChunkRecord`, taken or not; `StitchResult` holds the output and all records. Both are frozen.

Spans are half-open token offsets into the output, `(start, end)` meaning
`tokens[start:end]`. A taken chunk *contributed* `span` (the tokens appended for it) and
*covers* `covers` (its overlap with what came before plus `span`): `tokens[covers[0]:covers[1]]`
equals the chunk's tokens.

Text is stitched on characters, so text chunks are located by characters: `chars` is the
half-open span of `text` that equals the chunk's text, and `span` is `None`. The result's
`segments` are the pieces of `text` between separators, each with the chunks it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ._errors import describe

__all__ = ["ChunkRecord", "Segment", "StitchResult"]

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
    - `span`: `(start, end)` of the output tokens it contributed, `None` if not taken (and for
      text chunks, which are located by `chars`).

    For a text chunk (stitched on text), `length`, `separator` and `cost` are in the tokenizer's
    tokens, `overlap` is the tokens it was spared (`length + separator - cost`, at least 0), and:

    - `chars`: `(start, end)` of the characters of the result's `text` that equal its text;
      `None` if not taken.
    - `overlap_chars`: its characters that were already in the context (merged, not repeated).
    - `source`, `start`: its document id and character offset there, `None` when unknown.
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
    chars: tuple[int, int] | None = None
    overlap_chars: int = 0
    source: object = None
    start: int | None = None

    @property
    def covers(self) -> tuple[int, int] | None:
        """`(start, end)` of the output tokens equal to this chunk's tokens; `None` if not taken."""
        if self.span is None:
            return None
        return (self.span[0] - self.overlap, self.span[1])


@dataclass(frozen=True)
class Segment:
    """A piece of the assembled text between separators: `text[chars[0]:chars[1]]`.

    `records` are the indices of the taken chunks it holds, in order of position; `source` and
    `start` say where it sits in its document when its chunks were placed (`order="document"`).
    """

    text: str
    chars: tuple[int, int]
    records: tuple[int, ...]
    source: object = None
    start: int | None = None


@dataclass(frozen=True)
class StitchResult(Generic[T]):
    """The assembled tokens, the budget, and one `ChunkRecord` per chunk offered.

    `text` is the decoded output when the stitcher had a tokenizer, else `None`. `stopped` is
    true when `on_overflow="stop"` ended assembly. Chunks never pulled (after assembly ended)
    have no record.

    `mode` is `"text"` when text chunks were stitched on their text: then `tokens` is the
    tokenizer's encoding of `text` (so `used` is its exact cost), records locate chunks by
    `chars`, `cite` takes character offsets, and `segments` lists the pieces between separators.
    """

    tokens: tuple[T, ...]
    records: tuple[ChunkRecord, ...]
    budget: int
    stopped: bool = False
    text: str | None = None
    mode: Literal["tokens", "text"] = "tokens"
    segments: tuple[Segment, ...] = ()

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
    def charged(self) -> int:
        """The sum of the taken chunks' costs: `used` for tokens; for text, within 1% of it."""
        return sum(r.cost for r in self.records if r.taken)

    @property
    def saved(self) -> int:
        """Tokens not pasted twice thanks to overlap: the sum of the taken chunks' overlaps."""
        return sum(r.overlap for r in self.records if r.taken)

    def cite(self, start: int, end: int | None = None) -> tuple[ChunkRecord, ...]:
        """The taken chunks whose tokens cover any output token in `[start, end)`.

        `end` defaults to `start + 1` (one token). Use it to cite the sources of a passage of
        the context. For a text result (`mode == "text"`) the offsets are characters of `text`.
        Raises `ValueError` unless `0 <= start <= end <= used` (`len(text)` for text).
        """
        if end is None:
            end = start + 1
        for name, value in (("start", start), ("end", end)):
            if type(value) is not int:
                raise TypeError(f"cite: {name} must be an int, got {describe(value)}")
        text_mode = self.mode == "text"
        size = len(self.text or "") if text_mode else len(self.tokens)
        if not 0 <= start <= end <= size:
            raise ValueError(
                f"cite: need 0 <= start <= end <= {size}, got start={start}, end={end}"
            )
        if start == end:
            return ()
        found: list[ChunkRecord] = []
        for record in self.records:
            covers = record.chars if text_mode else record.covers
            if covers is not None and covers[0] < end and start < covers[1]:
                found.append(record)
        return tuple(found)
