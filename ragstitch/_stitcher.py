"""The stitcher: a sans-I/O state machine that assembles chunks within a token budget.

Everything that decides what goes into the output lives in this file and, for text, in
`_text.py`. The rules:
- Chunks are taken in the order offered. A chunk's overlap `k` is the longest suffix of the
  output that equals a prefix of the chunk (`k <= min(len(output), len(chunk))`); an overlap
  shorter than `min_overlap` counts as 0. Its cost is `len(chunk) - k`, plus the separator's
  length when a separator is set, `k == 0`, the output is not empty and the chunk is not.
- If the cost fits in `budget - used`, the separator (if any) and the chunk's tokens after the
  overlap are appended: the chunk is taken. A chunk is never partially appended.
- Otherwise the chunk is not taken. With `on_overflow="skip"` the next chunk is tried; with
  `"stop"` assembly ends, and offering another chunk is an error.
- Text: when the first chunk is text (a `str`, or an object with text, see `read_text`) and
  there is a tokenizer, the stitcher works on text from then on (token chunks are decoded):
  overlaps are found on characters and charged in tokens, by `TextLayout` (see `_text.py`).
  Otherwise it works on tokens, and text chunks are encoded one by one.
- Every chunk offered gets a `ChunkRecord` (taken or not). `done` turns true when nothing more
  can be appended (assembly stopped, or no budget remains), once `max_chunks` chunks were
  offered, or after `max_idle` chunks in a row that added nothing (empty, already in the
  output, or not taken): without that rule a source of empty chunks, which cost nothing,
  would be pulled forever. `stitch` and `astitch` pull no chunk once `done` is true, so
  chunks after that point have no record. A chunk offered with no budget left can still be
  taken if it costs 0 (it appends nothing).

`add` costs O(len(chunk)): the overlap reads at most that many tokens of the output.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeGuard, TypeVar, Union, cast

from ._chunk import Chunk, HasText, HasTokens, TextInfo, read_text
from ._errors import describe
from ._overlap import overlap_native
from ._result import ChunkRecord, StitchResult
from ._text import DEFAULT_MIN_OVERLAP_CHARS, Order, TextLayout
from ._tokenizer import Tokenizer, WordTokenizer, check_tokenizer, encode_text

__all__ = [
    "DEFAULT_MAX_IDLE",
    "ChunkLike",
    "OnOverflow",
    "Order",
    "Stitcher",
    "check_int",
    "stitch",
    "stitch_result",
    "stitch_text",
]

T = TypeVar("T")

OnOverflow = Literal["skip", "stop"]

#: Chunks in a row that add nothing before `done` turns true. A retriever's top-k is far
#: shorter; an endless source of empty or repeated chunks is cut off after this many.
DEFAULT_MAX_IDLE = 1000

#: What `Stitcher.add` accepts: a sequence of tokens, an object with `tokens` (e.g. `Chunk`),
#: or, with a tokenizer, a `str` or an object with `text` (e.g. `TextChunk`).
ChunkLike = Union[Sequence[T], HasTokens[T], str, HasText]  # noqa: UP007 (needs to be subscriptable on 3.10)

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_MISSING: Any = object()
_NOT_TOKENS = (str, bytes, bytearray, memoryview)


def _is_tokens(value: object) -> TypeGuard[Sequence[Any]]:
    """Whether `value` is a sequence of tokens: a `Sequence`, but not text, bytes or a buffer."""
    return not isinstance(value, _NOT_TOKENS) and isinstance(value, Sequence)


def check_int(name: str, value: object, minimum: int) -> int:
    """Return `value` as an int, or raise `TypeError` (not an int) / `ValueError` (too small)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {describe(value)}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {describe(value)}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number!r}")
    return number


class Stitcher(Generic[T]):
    """Assemble chunks, one `add` at a time, within `budget` tokens. No I/O.

    >>> s = Stitcher(4)
    >>> s.add(["a1", "b1", "c1"]), s.add(["b1", "c1", "d"]), s.tokens
    (True, True, ['a1', 'b1', 'c1', 'd'])
    >>> s.records[1].overlap, s.records[1].cost, s.records[1].span
    (2, 1, (3, 4))

    Options:

    - `on_overflow`: `"skip"` passes over a chunk that does not fit and tries the next;
      `"stop"` ends assembly at the first chunk that does not fit.
    - `min_overlap`: overlaps shorter than this many tokens are not merged (a coincidental
      repeat of "the" or "." is not swallowed). Default 1.
    - `separator`: put between two taken chunks that do not overlap, charged to the chunk after
      them: tokens, or a `str` (encoded with the tokenizer when working on tokens). Default
      none for tokens, a blank line for text.
    - `tokenizer`: encodes text chunks and decodes `text`; with one, text chunks are stitched
      on their text and charged in its tokens.
    - `min_overlap_chars`: for text, overlaps shorter than this many characters are not merged
      in retrieval order. Default `DEFAULT_MIN_OVERLAP_CHARS` (32).
    - `order`: `"retrieval"` (default) appends chunks in the order offered; `"document"` (text
      only) lays each chunk out at its place in its document (see `read_text`).
    - `max_idle`: `done` turns true after this many chunks in a row that added nothing.
      Default `DEFAULT_MAX_IDLE` (1000); `None` for no limit.
    - `max_chunks`: `done` turns true once this many chunks were offered. Default no limit.

    Raises `TypeError` or `ValueError` naming the offending value for a budget that is not an
    int >= 0, an unknown `on_overflow` or `order`, a `min_overlap` that is not an int >= 1, a
    bad separator or tokenizer, or `order="document"` without a tokenizer.
    """

    def __init__(
        self,
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
    ) -> None:
        self._budget = check_int("budget", budget, 0)
        if on_overflow not in ("skip", "stop"):
            raise ValueError(f"on_overflow must be 'skip' or 'stop', got {on_overflow!r}")
        self._on_overflow: OnOverflow = on_overflow
        self._min_overlap = check_int("min_overlap", min_overlap, 1)
        self._min_overlap_chars = check_int("min_overlap_chars", min_overlap_chars, 1)
        if order not in ("retrieval", "document"):
            raise ValueError(f"order must be 'retrieval' or 'document', got {order!r}")
        self._order: Order = order
        self._max_idle = None if max_idle is None else check_int("max_idle", max_idle, 1)
        self._max_chunks = None if max_chunks is None else check_int("max_chunks", max_chunks, 0)
        self._tokenizer = None if tokenizer is None else check_tokenizer(tokenizer)
        if order == "document" and self._tokenizer is None:
            raise ValueError(
                "order='document' lays out text and needs a tokenizer to charge it: pass "
                "tokenizer=WordTokenizer() (or your model's)"
            )
        self._separator_arg: object = separator
        self._separator: list[Any] = self._check_separator(separator)
        self._out: list[T] = []
        self._records: list[ChunkRecord] = []
        self._stopped = False
        self._idle = 0
        # Set by the first chunk: None until then, a TextLayout once working on text.
        self._mode: Literal["tokens", "text"] | None = "text" if order == "document" else None
        self._layout: TextLayout | None = None

    def _check_separator(self, separator: object) -> list[Any]:
        if separator is None:
            return []
        if isinstance(separator, str):
            if self._tokenizer is None:
                raise TypeError(
                    f"separator {separator!r} is a str but there is no tokenizer to encode it; "
                    "pass a tokenizer, or a sequence of tokens such as ('\\n\\n',)"
                )
            return encode_text(self._tokenizer, separator)
        if not _is_tokens(separator):
            raise TypeError(f"separator must be a sequence of tokens, got {describe(separator)}")
        return list(separator)

    def _text_layout(self) -> TextLayout:
        if self._layout is None:
            tokenizer = self._tokenizer
            assert tokenizer is not None
            separator = self._separator_arg
            if separator is None:
                text_separator = "\n\n"
            elif isinstance(separator, str):
                text_separator = separator
            else:
                text_separator = tokenizer.decode(list(self._separator))

            def count(text: str) -> int:
                return len(encode_text(tokenizer, text))

            self._layout = TextLayout(count, text_separator, self._min_overlap_chars, self._order)
        return self._layout

    # -- state ---------------------------------------------------------------------------------

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def on_overflow(self) -> OnOverflow:
        return self._on_overflow

    @property
    def min_overlap(self) -> int:
        return self._min_overlap

    @property
    def min_overlap_chars(self) -> int:
        return self._min_overlap_chars

    @property
    def order(self) -> Order:
        return self._order

    @property
    def separator(self) -> tuple[Any, ...]:
        return tuple(self._separator)

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._tokenizer

    @property
    def mode(self) -> Literal["tokens", "text"] | None:
        """`"text"` or `"tokens"`, as set by the first chunk; `None` before it."""
        return self._mode

    @property
    def tokens(self) -> list[T]:
        """The output so far (a copy); for text, its encoding."""
        if self._layout is not None:
            assert self._tokenizer is not None
            return encode_text(self._tokenizer, self._layout.text)
        return list(self._out)

    @property
    def used(self) -> int:
        """Tokens in the output, separators included; for text, the tokens charged so far."""
        if self._layout is not None:
            return self._layout.charged
        return len(self._out)

    @property
    def remaining(self) -> int:
        return self._budget - self.used

    @property
    def records(self) -> tuple[ChunkRecord, ...]:
        """One record per chunk offered so far, in order."""
        if self._layout is not None:
            return self._located()[0]
        return tuple(self._records)

    @property
    def stopped(self) -> bool:
        """True once a chunk did not fit under `on_overflow="stop"`."""
        return self._stopped

    @property
    def done(self) -> bool:
        """True when no more chunks should be pulled: see the rules at the top of this module.

        Assembly stopped, no budget remains, `max_chunks` chunks were offered, or the last
        `max_idle` chunks added nothing.
        """
        return (
            self._stopped
            or self.used >= self._budget
            or (self._max_idle is not None and self._idle >= self._max_idle)
            or (self._max_chunks is not None and len(self._records) >= self._max_chunks)
        )

    @property
    def text(self) -> str | None:
        """The output as text (decoded with the tokenizer), or `None` without a tokenizer."""
        if self._layout is not None:
            return self._layout.text
        if self._tokenizer is None:
            return None
        return self._tokenizer.decode(list(self._out))

    def _located(self) -> tuple[tuple[ChunkRecord, ...], Any]:
        assert self._layout is not None
        spans, segments = self._layout.locate()
        records = tuple(
            replace(r, chars=spans.get(r.index)) if r.taken else r for r in self._records
        )
        return records, segments

    def result(self) -> StitchResult[T]:
        """A frozen snapshot: tokens, records, budget, whether it stopped, and `text`."""
        if self._layout is not None:
            records, segments = self._located()
            return StitchResult(
                tokens=tuple(self.tokens),
                records=records,
                budget=self._budget,
                stopped=self._stopped,
                text=self._layout.text,
                mode="text",
                segments=segments,
            )
        return StitchResult(
            tokens=tuple(self._out),
            records=tuple(self._records),
            budget=self._budget,
            stopped=self._stopped,
            text=self.text,
        )

    def __repr__(self) -> str:
        return (
            f"Stitcher(budget={self._budget}, on_overflow={self._on_overflow!r}, "
            f"min_overlap={self._min_overlap}, used={self.used}, "
            f"chunks={len(self._records)}, stopped={self._stopped})"
        )

    # -- events --------------------------------------------------------------------------------

    def add(self, chunk: ChunkLike[T]) -> bool:
        """Offer the next chunk; return whether it was taken (its tokens appended).

        Raises `TypeError` naming the chunk if it is not a chunk (see `ChunkLike`), and
        `RuntimeError` if assembly already stopped (`on_overflow="stop"`).
        """
        if self._stopped:
            raise RuntimeError(
                f"Stitcher stopped at chunk {len(self._records) - 1} (on_overflow='stop'); "
                "check .done before offering more chunks"
            )
        index = len(self._records)
        if self._mode is None:
            text_first = (
                self._tokenizer is not None
                and getattr(chunk, "tokens", _MISSING) is _MISSING
                and read_text(chunk, index) is not None
            )
            self._mode = "text" if text_first else "tokens"
        if self._mode == "text":
            return self._add_text(chunk, index)
        tokens, chunk_id, metadata = self._coerce(chunk, index)
        out = self._out
        n = len(out)
        length = len(tokens)
        k = overlap_native(out, tokens) if n and length else 0
        if k < self._min_overlap:
            k = 0
        sep = len(self._separator) if (k == 0 and n and length) else 0
        cost = length - k + sep
        taken = cost <= self._budget - n
        span: tuple[int, int] | None = None
        if taken:
            if sep:
                out += self._separator
            start = len(out)
            out += tokens[k:] if k else tokens
            span = (start, len(out))
        elif self._on_overflow == "stop":
            self._stopped = True
        self._idle = 0 if len(out) > n else self._idle + 1
        self._records.append(
            ChunkRecord(
                index=index,
                id=chunk_id,
                taken=taken,
                length=length,
                overlap=k,
                separator=sep,
                cost=cost,
                span=span,
                metadata=metadata,
            )
        )
        return taken

    def _add_text(self, chunk: object, index: int) -> bool:
        layout = self._text_layout()
        tokenizer = self._tokenizer
        assert tokenizer is not None
        info = self._read(chunk, index, tokenizer)
        placement = layout.plan(info)
        budget = self._budget
        cost = layout.estimate(placement)
        exact = bool(placement.edits) and layout.needs_exact(cost, budget)
        if exact:
            cost = layout.exact(placement) - layout.charged
        taken = layout.charged + cost <= budget
        separator = max(placement.separators, 0) * layout.separator_tokens
        # The chunk's own tokens: those it is charged for, plus those of the text it shares
        # (encoding only that part: the rest was just counted).
        spared = sum(len(encode_text(tokenizer, piece)) for piece in placement.shared)
        length = max(cost - separator, 0) + spared
        covered = layout.covered
        if taken:
            layout.apply(placement, index, cost, exact)
        elif self._on_overflow == "stop":
            self._stopped = True
        self._idle = 0 if layout.covered > covered else self._idle + 1
        self._records.append(
            ChunkRecord(
                index=index,
                id=info.id,
                taken=taken,
                length=length,
                overlap=max(length + separator - cost, 0),
                separator=separator,
                cost=cost,
                span=None,
                metadata=info.metadata,
                overlap_chars=len(info.text) - placement.added_chars,
                source=info.source,
                start=info.start,
            )
        )
        return taken

    def _read(self, chunk: object, index: int, tokenizer: Tokenizer) -> TextInfo:
        """A chunk as text: text chunks as they are, token chunks decoded."""
        if getattr(chunk, "tokens", _MISSING) is _MISSING:
            info = read_text(chunk, index)
            if info is not None:
                return info
        tokens, chunk_id, metadata = self._coerce(chunk, index)
        text = tokenizer.decode(tokens)
        return TextInfo(text, chunk_id, metadata, None, None)

    def extend(self, chunks: Iterable[ChunkLike[T]]) -> None:
        """`add` each chunk in turn until `done`; no chunk is pulled once `done` is true."""
        if self.done:
            return
        for chunk in chunks:
            self.add(chunk)
            if self.done:
                return

    # -- input checking ------------------------------------------------------------------------

    def _coerce(self, chunk: object, index: int) -> tuple[list[Any], object, Mapping[str, Any]]:
        """Return the chunk's tokens (as a list), id and metadata, or raise `TypeError`."""
        kind = type(chunk)
        if kind is list:
            return cast("list[Any]", chunk), None, _EMPTY
        if kind is tuple:
            return list(cast("tuple[Any, ...]", chunk)), None, _EMPTY
        if kind is Chunk:
            known = cast("Chunk[Any]", chunk)
            return list(known.tokens), known.id, known.metadata
        tokens = getattr(chunk, "tokens", _MISSING)
        if tokens is not _MISSING:
            if not _is_tokens(tokens):
                raise TypeError(
                    f"chunk {index}: .tokens must be a sequence of tokens, got {describe(tokens)}"
                )
            return list(tokens), getattr(chunk, "id", None), self._metadata(chunk, index)
        info = read_text(chunk, index)
        if info is not None:
            return self._encode(info.text, index), info.id, info.metadata
        if not _is_tokens(chunk):
            raise TypeError(
                f"chunk {index} is not a sequence of tokens: {describe(chunk)}; a chunk is a "
                "sequence of tokens, an object with .tokens (Chunk), or, with a tokenizer, a str "
                "or an object with .text (TextChunk)"
            )
        return list(chunk), None, _EMPTY

    def _encode(self, text: str, index: int) -> list[Any]:
        if self._tokenizer is None:
            raise TypeError(
                f"chunk {index} is text ({describe(text)}) but the stitcher has no tokenizer: "
                "pass tokenizer=WordTokenizer() (or your model's), use stitch_text(), or give "
                "token sequences"
            )
        return encode_text(self._tokenizer, text)

    @staticmethod
    def _metadata(chunk: object, index: int) -> Mapping[str, Any]:
        metadata = getattr(chunk, "metadata", None)
        if metadata is None:
            return _EMPTY
        if isinstance(metadata, MappingProxyType):
            return metadata
        if not isinstance(metadata, Mapping):
            raise TypeError(f"chunk {index}: .metadata must be a mapping, got {describe(metadata)}")
        return MappingProxyType(dict(metadata))


def stitch(
    chunks: Iterable[ChunkLike[T]],
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
    """Assemble `chunks` within `budget` tokens and return the output tokens.

    With `a, b, c = "a1", "b1", "c1"`::

        stitch([[a, b, c], [b, c, "d"]], 4) == [a, b, c, "d"]  # overlap b, c is not repaid
        stitch([[a, b], [b, c]], 2) == [a, b]                  # [b, c] costs 1: no room
        stitch([[a, b], [a, b]], 2) == [a, b]                  # fully overlapped: costs 0

    See `Stitcher` for the options. `stitch_result` returns the provenance too.
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
    stitcher.extend(chunks)
    return stitcher.tokens if stitcher.mode == "text" else stitcher._out


def stitch_result(
    chunks: Iterable[ChunkLike[T]],
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
    """Like `stitch`, but return a `StitchResult`: tokens, one record per chunk, and `text`."""
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
    stitcher.extend(chunks)
    return stitcher.result()


def stitch_text(
    chunks: Iterable[ChunkLike[Any]],
    budget: int,
    *,
    tokenizer: Tokenizer | None = None,
    separator: str = "\n\n",
    on_overflow: OnOverflow = "skip",
    min_overlap: int = 1,
    min_overlap_chars: int = DEFAULT_MIN_OVERLAP_CHARS,
    order: Order = "retrieval",
    max_idle: int | None = DEFAULT_MAX_IDLE,
    max_chunks: int | None = None,
) -> str:
    """Assemble text chunks within `budget` tokens of `tokenizer` and return the text.

    The tokenizer defaults to `WordTokenizer()`. Text chunks are stitched on their text:
    overlaps of at least `min_overlap_chars` characters are merged, and chunks that do not
    overlap are joined by `separator` (default a blank line). The text costs at most `budget`
    tokens of `tokenizer`. See `Stitcher` for the other options.
    """
    if tokenizer is None:
        tokenizer = WordTokenizer()
    stitcher: Stitcher[Any] = Stitcher(
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
    stitcher.extend(chunks)
    text = stitcher.text
    assert text is not None
    return text
