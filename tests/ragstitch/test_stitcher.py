"""The stitcher: the contract's cases, the policies, provenance, bad input, and the reference."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstitch import Chunk, ChunkRecord, Stitcher, StitchResult, stitch, stitch_result

from .reference import ref_stitch

a, b, c = "a1", "b1", "c1"

# The contract, verbatim from the issue: (name, chunks, budget, expected)
CONTRACT: list[tuple[str, list[list[str]], int, list[str]]] = [
    ("overlap is merged and not charged", [[a, b, c], [b, c, "d"]], 4, [a, b, c, "d"]),
    ("a chunk is never partially appended", [[a, b], [b, c]], 2, [a, b]),
    ("no chunks", [], 1, []),
    ("zero budget", [[a]], 0, []),
    ("no overlap", [[a], [b]], 2, [a, b]),
    ("duplicate chunk costs nothing", [[a, b], [a, b]], 2, [a, b]),
]


def _ids(cases: Sequence[tuple[Any, ...]]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize(
    ("chunks", "budget", "expected"), [c[1:] for c in CONTRACT], ids=_ids(CONTRACT)
)
@pytest.mark.parametrize("on_overflow", ["skip", "stop"])
def test_contract(
    chunks: list[list[str]], budget: int, expected: list[str], on_overflow: Any
) -> None:
    assert stitch(chunks, budget, on_overflow=on_overflow) == expected
    assert ref_stitch(chunks, budget, on_overflow)[0] == expected


# (name, chunks, budget, skip result, stop result)
POLICIES: list[tuple[str, list[list[int]], int, list[int], list[int]]] = [
    ("all fit", [[1, 2], [2, 3]], 3, [1, 2, 3], [1, 2, 3]),
    ("skip tries the next chunk", [[1, 2], [5, 6, 7], [2, 3]], 3, [1, 2, 3], [1, 2]),
    ("first chunk too big", [[1, 2, 3, 4], [5]], 3, [5], []),
    ("overlap makes it fit", [[1, 2, 3], [2, 3, 4]], 4, [1, 2, 3, 4], [1, 2, 3, 4]),
    ("exact fit", [[1], [2], [3]], 3, [1, 2, 3], [1, 2, 3]),
    ("later small chunk fits", [[1, 2], [3, 4, 5], [6]], 3, [1, 2, 6], [1, 2]),
    ("empty chunk is free", [[], [1], []], 1, [1], [1]),
    ("contained but not a suffix is not merged", [[1, 2, 3], [1, 2]], 4, [1, 2, 3], [1, 2, 3]),
    (
        "overlap spans two chunks",
        [[1, 2], [3, 4], [2, 3, 4, 5]],
        5,
        [1, 2, 3, 4, 5],
        [1, 2, 3, 4, 5],
    ),
]


@pytest.mark.parametrize(
    ("chunks", "budget", "skip", "stop"), [c[1:] for c in POLICIES], ids=_ids(POLICIES)
)
def test_policies(chunks: list[list[int]], budget: int, skip: list[int], stop: list[int]) -> None:
    assert stitch(chunks, budget) == skip
    assert stitch(chunks, budget, on_overflow="skip") == skip
    assert stitch(chunks, budget, on_overflow="stop") == stop
    assert ref_stitch(chunks, budget, "skip")[0] == skip
    assert ref_stitch(chunks, budget, "stop")[0] == stop


# (name, chunks, min_overlap, expected) with an ample budget
MIN_OVERLAP: list[tuple[str, list[list[str]], int, list[str]]] = [
    ("default merges one token", [["x", "the"], ["the", "y"]], 1, ["x", "the", "y"]),
    ("coincidental 'the' kept", [["x", "the"], ["the", "y"]], 2, ["x", "the", "the", "y"]),
    (
        "long enough overlap merged",
        [["x", "the", "cat"], ["the", "cat", "y"]],
        2,
        ["x", "the", "cat", "y"],
    ),
    (
        "longest overlap is what counts",
        [["p", ".", "p", "."], ["p", ".", "p", ".", "z"]],
        3,
        ["p", ".", "p", ".", "z"],
    ),
    ("short duplicate is appended again", [["a", "b"], ["a", "b"]], 3, ["a", "b", "a", "b"]),
]


@pytest.mark.parametrize(
    ("chunks", "min_overlap", "expected"), [c[1:] for c in MIN_OVERLAP], ids=_ids(MIN_OVERLAP)
)
def test_min_overlap(chunks: list[list[str]], min_overlap: int, expected: list[str]) -> None:
    assert stitch(chunks, 100, min_overlap=min_overlap) == expected
    assert ref_stitch(chunks, 100, min_overlap=min_overlap)[0] == expected


# (name, chunks, budget, expected) with separator ["|"]
SEPARATOR: list[tuple[str, list[list[str]], int, list[str]]] = [
    ("between non-overlapping chunks", [["a"], ["b"]], 3, ["a", "|", "b"]),
    ("not before the first chunk", [["a"]], 1, ["a"]),
    ("not where chunks overlap", [["a", "b"], ["b", "c"]], 3, ["a", "b", "c"]),
    ("charged to the chunk after it", [["a"], ["b"]], 2, ["a"]),
    ("not for an empty chunk", [["a"], [], ["b"]], 3, ["a", "|", "b"]),
]


@pytest.mark.parametrize(
    ("chunks", "budget", "expected"), [c[1:] for c in SEPARATOR], ids=_ids(SEPARATOR)
)
def test_separator(chunks: list[list[str]], budget: int, expected: list[str]) -> None:
    assert stitch(chunks, budget, separator=["|"]) == expected
    assert ref_stitch(chunks, budget, separator=["|"])[0] == expected


def test_records_say_what_happened() -> None:
    chunks: list[Any] = [
        Chunk(["a", "b", "c"], id="doc#0", metadata={"page": 1}),
        Chunk(["b", "c", "d"], id="doc#1"),
        Chunk(["x", "y", "z"], id="other#4"),
        ["d", "e"],
    ]
    result = stitch_result(chunks, 5)
    assert result.tokens == ("a", "b", "c", "d", "e")
    assert result.records == (
        ChunkRecord(0, "doc#0", True, 3, 0, 0, 3, (0, 3), {"page": 1}),
        ChunkRecord(1, "doc#1", True, 3, 2, 0, 1, (3, 4), {}),
        ChunkRecord(2, "other#4", False, 3, 0, 0, 3, None, {}),
        ChunkRecord(3, None, True, 2, 1, 0, 1, (4, 5), {}),
    )
    assert [r.covers for r in result.records] == [(0, 3), (1, 4), None, (3, 5)]
    assert result.used == 5
    assert result.remaining == 0
    assert result.saved == 3
    assert [r.id for r in result.taken] == ["doc#0", "doc#1", None]
    assert [r.id for r in result.skipped] == ["other#4"]
    assert [r.id for r in result.cite(1, 3)] == ["doc#0", "doc#1"]
    assert [r.id for r in result.cite(4)] == [None]
    assert result.cite(2, 2) == ()
    assert not result.stopped
    assert result.text is None


def test_cite_checks_its_range() -> None:
    result = stitch_result([[1, 2]], 5)
    with pytest.raises(ValueError, match=r"0 <= start <= end <= 2, got start=1, end=3"):
        result.cite(1, 3)
    with pytest.raises(TypeError, match=r"start must be an int, got 1.0 \(float\)"):
        result.cite(1.0, 2)  # type: ignore[arg-type]


@dataclass
class Passage:
    """Any object with `tokens` is a chunk; `id` and `metadata` are picked up when present."""

    tokens: list[int]
    id: str = "p"
    metadata: dict[str, Any] = field(default_factory=dict)


def test_chunk_kinds() -> None:
    chunks: list[Any] = [(1, 2), Passage([2, 3], "p1", {"url": "u"}), range(3, 5), Chunk((4, 5, 6))]
    result = stitch_result(chunks, 10)
    assert result.tokens == (1, 2, 3, 4, 5, 6)
    assert [(r.id, dict(r.metadata), r.overlap) for r in result.records] == [
        (None, {}, 0),
        ("p1", {"url": "u"}, 1),
        (None, {}, 1),
        (None, {}, 1),
    ]


def test_chunk_is_a_frozen_value() -> None:
    chunk = Chunk([1, 2], id="x", metadata={"k": "v"})
    assert chunk.tokens == (1, 2)
    assert chunk == Chunk((1, 2), id="x", metadata={"k": "v"})
    assert hash(chunk) == hash(Chunk((1, 2), id="x", metadata={"k": "w"}))
    with pytest.raises(AttributeError):
        chunk.id = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        chunk.metadata["k"] = "w"  # type: ignore[index]


def test_stop_ends_assembly_and_more_input_is_an_error() -> None:
    stitcher: Stitcher[int] = Stitcher(3, on_overflow="stop")
    assert stitcher.add([1, 2])
    assert not stitcher.add([7, 8])
    assert stitcher.stopped
    assert stitcher.done
    assert stitcher.tokens == [1, 2]
    assert stitcher.remaining == 1
    with pytest.raises(RuntimeError, match=r"stopped at chunk 1 \(on_overflow='stop'\)"):
        stitcher.add([3])
    assert len(stitcher.records) == 2
    assert stitcher.result().stopped


def test_full_stitcher_still_records_free_chunks() -> None:
    stitcher: Stitcher[int] = Stitcher(2)
    assert stitcher.add([1, 2])
    assert stitcher.done
    assert not stitcher.stopped
    assert stitcher.add([1, 2])  # fully overlapped: costs 0
    assert stitcher.add([])
    assert not stitcher.add([2, 3])
    assert [(r.taken, r.cost, r.span) for r in stitcher.records] == [
        (True, 2, (0, 2)),
        (True, 0, (2, 2)),
        (True, 0, (2, 2)),
        (False, 1, None),
    ]


def test_stitch_pulls_nothing_once_done() -> None:
    pulled: list[int] = []

    def chunks() -> Iterator[list[int]]:
        for i in range(10):
            pulled.append(i)
            yield [i]

    assert stitch(chunks(), 3) == [0, 1, 2]
    assert pulled == [0, 1, 2]
    pulled.clear()
    assert stitch(chunks(), 0) == []
    assert pulled == []
    pulled.clear()
    result = stitch_result(chunks(), 5, on_overflow="stop", separator=[-1, -1])
    assert result.tokens == (0, -1, -1, 1)
    assert pulled == [0, 1, 2]
    assert len(result.records) == 3
    assert result.stopped


def test_tokens_property_is_a_copy() -> None:
    stitcher: Stitcher[int] = Stitcher(5)
    stitcher.add([1, 2])
    stitcher.tokens.append(99)
    assert stitcher.tokens == [1, 2]
    assert stitcher.used == 2
    assert "used=2" in repr(stitcher)


BAD_CONFIG: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("negative budget", {"budget": -1}, ValueError, r"budget must be >= 0, got -1"),
    ("float budget", {"budget": 2.0}, TypeError, r"budget must be an int, got 2\.0 \(float\)"),
    ("bool budget", {"budget": True}, TypeError, r"budget must be an int, got True \(bool\)"),
    ("str budget", {"budget": "5"}, TypeError, r"budget must be an int, got '5' \(str\)"),
    ("None budget", {"budget": None}, TypeError, r"budget must be an int, got None"),
    (
        "unknown policy",
        {"on_overflow": "truncate"},
        ValueError,
        r"'skip' or 'stop', got 'truncate'",
    ),
    ("zero min_overlap", {"min_overlap": 0}, ValueError, r"min_overlap must be >= 1, got 0"),
    ("float min_overlap", {"min_overlap": 1.5}, TypeError, r"min_overlap must be an int, got 1\.5"),
    ("str separator, no tokenizer", {"separator": "\n"}, TypeError, r"separator '\\n' is a str"),
    (
        "int separator",
        {"separator": 0},
        TypeError,
        r"separator must be a sequence of tokens, got 0",
    ),
    ("bad tokenizer", {"tokenizer": "gpt2"}, TypeError, r"tokenizer must have encode.*'gpt2'"),
]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"), [c[1:] for c in BAD_CONFIG], ids=_ids(BAD_CONFIG)
)
def test_bad_configuration(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    kwargs = {"budget": 5, **kwargs}
    with pytest.raises(error, match=message):
        Stitcher(**kwargs)
    with pytest.raises(error, match=message):
        stitch([[1]], **kwargs)


BAD_CHUNKS: list[tuple[str, object, str]] = [
    ("int", 5, r"chunk 1 is not a sequence of tokens: 5 \(int\)"),
    ("None", None, r"chunk 1 is not a sequence of tokens: None"),
    ("dict", {"tokens": [1]}, r"chunk 1 is not a sequence of tokens: \{'tokens': \[1\]\} \(dict\)"),
    ("generator", (t for t in [1]), r"chunk 1 is not a sequence of tokens: <generator"),
    ("bytes", b"ab", r"chunk 1 is not a sequence of tokens: b'ab' \(bytes\)"),
    (
        "str without tokenizer",
        "some text",
        r"chunk 1 is text \('some text' \(str\)\) but the stitcher has no tokenizer",
    ),
    (
        "tokens not a sequence",
        Passage(cast(Any, 5)),
        r"chunk 1: \.tokens must be a sequence of tokens, got 5 \(int\)",
    ),
    (
        "tokens a str",
        Passage(cast(Any, "abc")),
        r"chunk 1: \.tokens must be a sequence of tokens, got 'abc'",
    ),
    (
        "metadata not a mapping",
        Passage([1], metadata=cast(Any, [1])),
        r"chunk 1: \.metadata must be a mapping, got \[1\]",
    ),
]


@pytest.mark.parametrize(("chunk", "message"), [c[1:] for c in BAD_CHUNKS], ids=_ids(BAD_CHUNKS))
def test_bad_chunk_is_a_type_error_naming_it(chunk: object, message: str) -> None:
    stitcher: Stitcher[int] = Stitcher(5)
    stitcher.add([1])
    with pytest.raises(TypeError, match=message):
        stitcher.add(chunk)  # type: ignore[arg-type]
    assert stitcher.tokens == [1]
    assert len(stitcher.records) == 1
    with pytest.raises(TypeError, match=message):
        stitch(cast(Any, [[1], chunk]), 5)


def test_chunk_constructors_check_their_fields() -> None:
    with pytest.raises(
        TypeError,
        match=r"Chunk\.tokens must be a sequence of tokens.*'abc' \(str\); for text use TextChunk",
    ):
        Chunk("abc")
    with pytest.raises(TypeError, match=r"Chunk\.metadata must be a mapping, got 3 \(int\)"):
        Chunk([1], metadata=3)  # type: ignore[arg-type]


# -- against the reference -------------------------------------------------------------------


@st.composite
def chunkings(draw: st.DrawFn) -> tuple[list[int], list[list[int]]]:
    """A random token stream (small alphabet: many coincidental overlaps) and chunks of it:
    sliding windows in order, with a few chunks dropped, moved or drawn at random."""
    stream = draw(st.lists(st.integers(0, 2), max_size=40))
    size = draw(st.integers(1, 8))
    step = draw(st.integers(1, size))
    chunks = [stream[i : i + size] for i in range(0, max(len(stream), 1), step)]
    edits = draw(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 50)), max_size=4)
    )
    for kind, i, j in edits:
        if kind == 0 and chunks:
            del chunks[i % len(chunks)]
        elif kind == 1 and chunks:
            chunks.insert(j % (len(chunks) + 1), chunks.pop(i % len(chunks)))
        else:
            chunks.insert(j % (len(chunks) + 1), stream[min(i, j) % 41 : max(i, j) % 41])
    return stream, chunks


@settings(max_examples=400)
@given(
    chunkings(),
    st.integers(0, 45),
    st.sampled_from(["skip", "stop"]),
    st.integers(1, 3),
    st.sampled_from([(), (9,), (9, 9)]),
)
def test_matches_reference(
    drawn: tuple[list[int], list[list[int]]],
    budget: int,
    on_overflow: Any,
    min_overlap: int,
    separator: tuple[int, ...],
) -> None:
    _, chunks = drawn
    expected, expected_records = ref_stitch(chunks, budget, on_overflow, min_overlap, separator)
    every_chunk, _ = ref_stitch(
        chunks, budget, on_overflow, min_overlap, separator, stop_when_full=False
    )
    assert every_chunk == expected  # stopping once full never changes the output
    options: dict[str, Any] = {
        "on_overflow": on_overflow,
        "min_overlap": min_overlap,
        "separator": separator,
    }
    assert stitch(chunks, budget, **options) == expected
    result: StitchResult[int] = stitch_result(iter(chunks), budget, **options)
    assert list(result.tokens) == expected
    assert [(r.taken, r.overlap, r.separator, r.cost, r.span) for r in result.records] == [
        (r.taken, r.overlap, r.separator, r.cost, r.span) for r in expected_records
    ]
    _check_invariants(result, chunks)

    # Fed one chunk at a time (tuples this time), the machine agrees, and says when it is done.
    stitcher: Stitcher[int] = Stitcher(budget, **options)
    for chunk in chunks:
        if stitcher.done:
            break
        stitcher.add(tuple(chunk))
    assert stitcher.result() == result


def _check_invariants(result: StitchResult[int], chunks: list[list[int]]) -> None:
    assert result.used <= result.budget
    assert sum(r.cost for r in result.taken) == result.used
    position = 0
    for record in result.records:
        chunk = chunks[record.index]
        assert record.length == len(chunk)
        assert record.cost == record.length - record.overlap + record.separator
        if record.taken:
            assert record.span is not None
            assert record.covers is not None
            start, end = record.covers
            assert list(result.tokens[start:end]) == chunk  # provenance: where it sits
            assert record.span[0] == position + record.separator
            position = record.span[1]
    assert position == result.used


@settings(max_examples=200)
@given(st.lists(st.integers(), unique=True, max_size=60), st.integers(1, 10), st.integers(0, 9))
def test_sliding_window_reassembles_the_stream(stream: list[int], size: int, shared: int) -> None:
    # Windows of `size` sharing `shared` tokens of a stream without repeats: with the stream's
    # length as budget, stitching gives the stream back, and saves what the windows repeat.
    shared = min(shared, size - 1)
    step = size - shared
    windows = [stream[i : i + size] for i in range(0, max(len(stream) - shared, 1), step)]
    result = stitch_result(windows, len(stream))
    assert list(result.tokens) == stream
    assert result.used + result.saved == sum(map(len, windows))
