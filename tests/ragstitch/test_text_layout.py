"""Text stitched on text and charged in tokens: coincidences, seams, budget exactness, document
order, provenance, and the rule that ends an endless source."""

from __future__ import annotations

import itertools
import random
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstitch import (
    Chunk,
    Stitcher,
    StitchResult,
    TextChunk,
    WordTokenizer,
    astitch,
    astitch_result,
    stitch,
    stitch_result,
    stitch_text,
)
from ragstitch._tokenizer import encode_text, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
# Jane Austen, Pride and Prejudice (public domain): real prose, with dialogue.
NOVEL = (ROOT / "benchmarks" / "_corpus.txt").read_text(encoding="utf-8")
O200K: Any = load_tokenizer("o200k_base")  # bpe-openai ships the vocabulary: offline


def count(tokenizer: Any, text: str) -> int:
    return len(encode_text(tokenizer, text))


def char_windows(text: str, size: int, shared: int) -> list[TextChunk]:
    """LangChain's CharacterTextSplitter at its simplest: windows cut anywhere, with offsets."""
    step = size - shared
    return [
        TextChunk(text[i : i + size], id=n, source="novel", start=i)
        for n, i in enumerate(range(0, len(text) - shared, step))
    ]


# -- coincidences: quotes, punctuation and short words are not merged ------------------------


def speeches() -> list[str]:
    """Whole speeches from the novel, each beginning and ending with a double quote."""
    found = []
    for paragraph in NOVEL.split("\n\n"):
        line = " ".join(paragraph.split())
        if line.startswith('"') and line.endswith('"') and line.count('"') == 2:
            found.append(line)
    return found


@pytest.mark.parametrize("tokenizer", [WordTokenizer(), O200K], ids=["word", "o200k"])
def test_forty_speeches_far_apart_do_not_merge(tokenizer: Any) -> None:
    # `...affect it."` + `"A-ah say...`: the closing and opening quotes agree, and o200k makes
    # them one token; at one character that is a coincidence, never an overlap.
    lines = speeches()[:40]
    assert len(lines) == 40
    result: StitchResult[Any] = stitch_result(lines, 100_000, tokenizer=tokenizer)
    assert result.text == "\n\n".join(lines)
    assert all(r.overlap_chars == 0 for r in result.records)
    assert len(result.segments) == 40
    assert stitch_text(lines, 100_000, tokenizer=tokenizer) == "\n\n".join(lines)


def test_min_overlap_chars_is_the_threshold() -> None:
    left, right = "He said: the end of the story", "the end of the story, and more"
    shared = len("the end of the story")
    merged = left + ", and more"
    assert stitch_text([left, right], 100, min_overlap_chars=shared) == merged
    assert stitch_text([left, right], 100, min_overlap_chars=shared + 1) == left + "\n\n" + right


# -- seams: overlaps the token ids cannot see ---------------------------------------------------


def test_window_cut_before_a_newline_is_merged() -> None:
    # o200k makes ".\n" one token: the ids of the two chunks never line up, the text does.
    text = "It was the best of times. It was the worst of times.\nIt was the age of wisdom."
    cut = text.index("\n")
    first, second = text[: cut + 0], text[cut - 40 :]
    ids = [Chunk(O200K.encode(first)), Chunk(O200K.encode(second))]
    assert stitch_result(ids, 1000, tokenizer=O200K).records[1].overlap == 0
    result: StitchResult[Any] = stitch_result([first, second], 1000, tokenizer=O200K)
    assert result.text == text
    assert result.used == count(O200K, text)
    assert result.charged == result.used


def test_char_windows_rebuild_the_novel_at_its_true_cost() -> None:
    chunks = char_windows(NOVEL[:20_000], 1000, 200)
    true = count(O200K, NOVEL[:20_000])
    for order in ("retrieval", "document"):
        result: StitchResult[Any] = stitch_result(chunks, 100_000, tokenizer=O200K, order=order)
        assert result.text == NOVEL[:20_000]
        assert result.used == true
        assert abs(result.charged - true) <= true // 100


# -- the budget, with real tokenizers ---------------------------------------------------------


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(20, 400),
    shared=st.integers(0, 120),
    budget=st.integers(0, 1500),
    order=st.sampled_from(["retrieval", "document"]),
    which=st.sampled_from(["word", "o200k"]),
    separator=st.sampled_from(["\n\n", " ", "", "\n[...]\n"]),
)
def test_the_text_never_costs_more_than_the_budget(
    seed: int, size: int, shared: int, budget: int, order: Any, which: str, separator: str
) -> None:
    rng = random.Random(seed)
    tokenizer: Any = WordTokenizer() if which == "word" else O200K
    begin = rng.randrange(0, len(NOVEL) - 5000)
    chunks = char_windows(NOVEL[begin : begin + 5000], size, min(shared, size - 1))
    rng.shuffle(chunks)
    chunks = chunks[: rng.randrange(1, 40)]
    result: StitchResult[Any] = stitch_result(
        chunks, budget, tokenizer=tokenizer, order=order, separator=separator
    )
    assert result.text is not None
    used = count(tokenizer, result.text)
    assert used == result.used <= budget
    assert abs(result.charged - used) <= max(2, used // 100)
    for record in result.taken:
        chunk = chunks[record.index]
        if chunk.text:
            assert record.chars is not None
            assert result.text[record.chars[0] : record.chars[1]] == chunk.text


# -- document order -------------------------------------------------------------------------


def reference_layout(chunks: list[TextChunk], document: str, separator: str) -> str:
    """The document's covered characters, runs that touch or overlap merged, joined."""
    spans = sorted((c.start or 0, (c.start or 0) + len(c.text)) for c in chunks if c.text)
    runs: list[list[int]] = []
    for start, end in spans:
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return separator.join(document[a:b] for a, b in runs)


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    picks=st.integers(1, 30),
    size=st.integers(1, 300),
)
def test_document_order_lays_out_the_covered_text(seed: int, picks: int, size: int) -> None:
    rng = random.Random(seed)
    document = NOVEL[:3000]
    chunks = []
    for n in range(picks):
        start = rng.randrange(0, len(document))
        chunks.append(TextChunk(document[start : start + size], id=n, source="d", start=start))
    result: StitchResult[Any] = stitch_result(
        chunks, 10**6, tokenizer=WordTokenizer(), order="document", separator=" | "
    )
    assert result.text == reference_layout(chunks, document, " | ")
    for segment in result.segments:
        assert segment.source == "d"
        assert segment.start is not None
        assert document[segment.start :].startswith(segment.text)
        assert result.text[segment.chars[0] : segment.chars[1]] == segment.text


PARAGRAPHS = ["Alpha beta gamma delta. ", "Epsilon zeta eta theta. ", "Iota kappa lambda mu. "]
DOC = "".join(PARAGRAPHS) * 2


def piece(start: int, end: int, **extra: Any) -> TextChunk:
    return TextChunk(DOC[start:end], source=extra.pop("source", "doc"), start=start, **extra)


DOCUMENT_CASES: list[tuple[str, list[TextChunk], str]] = [
    ("neighbours in reverse", [piece(30, 70), piece(0, 40)], DOC[0:70]),
    ("touching chunks join without a separator", [piece(20, 40), piece(0, 20)], DOC[0:40]),
    ("a gap gets the separator", [piece(50, 60), piece(0, 10)], DOC[0:10] + "|" + DOC[50:60]),
    (
        "a chunk that bridges a gap removes the separator",
        [piece(50, 60), piece(0, 10), piece(5, 55)],
        DOC[0:60],
    ),
    ("a duplicate is dropped", [piece(0, 30), piece(0, 30)], DOC[0:30]),
    ("a contained chunk is dropped", [piece(0, 50), piece(10, 20)], DOC[0:50]),
    (
        "documents in the order of their first chunk",
        [piece(0, 10, source="b"), piece(0, 10, source="a"), piece(12, 20, source="b")],
        DOC[0:10] + "|" + DOC[12:20] + "|" + DOC[0:10],
    ),
]


@pytest.mark.parametrize(
    ("chunks", "expected"), [c[1:] for c in DOCUMENT_CASES], ids=[c[0] for c in DOCUMENT_CASES]
)
def test_document_order_cases(chunks: list[TextChunk], expected: str) -> None:
    result: StitchResult[Any] = stitch_result(
        chunks, 1000, tokenizer=WordTokenizer(), order="document", separator="|"
    )
    assert result.text == expected
    assert result.used == count(WordTokenizer(), expected)
    for record, chunk in zip(result.records, chunks, strict=True):
        assert record.chars is not None
        assert result.text[record.chars[0] : record.chars[1]] == chunk.text


def test_duplicates_and_contained_chunks_cost_nothing() -> None:
    chunks = [piece(0, 50), piece(0, 50), piece(10, 20)]
    result: StitchResult[Any] = stitch_result(
        chunks, 1000, tokenizer=WordTokenizer(), order="document"
    )
    assert [r.cost for r in result.records][1:] == [0, 0]
    assert [r.overlap_chars for r in result.records] == [0, 50, 10]


def test_offsets_that_disagree_with_the_text_are_not_trusted() -> None:
    liar = TextChunk("Something else entirely, placed wrongly", source="doc", start=5)
    result: StitchResult[Any] = stitch_result(
        [piece(0, 30), liar], 1000, tokenizer=WordTokenizer(), order="document", separator="|"
    )
    assert result.text == DOC[0:30] + "|" + liar.text
    assert [s.start for s in result.segments] == [0, None]


def test_chosen_by_rank_within_the_budget_then_laid_out() -> None:
    # The best chunk comes last in the document; the budget holds two of the three.
    chunks = [piece(96, 120, id="best"), piece(30, 90, id="long"), piece(0, 24, id="third")]
    tokenizer = WordTokenizer()
    budget = count(tokenizer, DOC[96:120]) + count(tokenizer, "|" + DOC[0:24])
    result: StitchResult[Any] = stitch_result(
        chunks, budget, tokenizer=tokenizer, order="document", separator="|"
    )
    assert [r.id for r in result.taken] == ["best", "third"]
    assert result.text == DOC[0:24] + "|" + DOC[96:120]
    assert [r.id for r in result.cite(0, 3)] == ["third"]


def test_framework_metadata_places_chunks() -> None:
    class LangChainDocument:  # the attribute names LangChain's Document has
        def __init__(self, text: str, start: int) -> None:
            self.page_content = text
            self.metadata = {"source": "doc.txt", "start_index": start}
            self.id = None

    class HaystackDocument:
        def __init__(self, text: str, start: int) -> None:
            self.content = text
            self.meta = {"source_id": "h", "split_idx_start": start}
            self.id = f"h{start}"

    chunks: list[Any] = [
        LangChainDocument(DOC[30:70], 30),
        LangChainDocument(DOC[0:40], 0),
        HaystackDocument(DOC[10:20], 10),
        HaystackDocument(DOC[0:15], 0),
    ]
    result: StitchResult[Any] = stitch_result(
        chunks, 1000, tokenizer=WordTokenizer(), order="document", separator="|"
    )
    assert result.text == DOC[0:70] + "|" + DOC[0:20]
    assert [(r.source, r.start) for r in result.records] == [
        ("doc.txt", 30),
        ("doc.txt", 0),
        ("h", 10),
        ("h", 0),
    ]
    assert [r.id for r in result.records][2:] == ["h10", "h0"]


def test_document_order_needs_a_tokenizer() -> None:
    with pytest.raises(ValueError, match="order='document' lays out text and needs a tokenizer"):
        Stitcher(10, order="document")
    with pytest.raises(ValueError, match="order must be 'retrieval' or 'document', got 'rank'"):
        Stitcher(10, order="rank")  # type: ignore[arg-type]


# -- no endless work ------------------------------------------------------------------------


def test_an_endless_source_of_empty_chunks_ends() -> None:
    assert stitch(itertools.repeat([]), 10) == []
    result: StitchResult[Any] = stitch_result(itertools.repeat([]), 10, max_idle=5)
    assert len(result.records) == 5


def test_an_endless_source_of_chunks_that_add_nothing_ends() -> None:
    assert stitch(itertools.repeat([1] * 20), 10) == []  # never fits
    assert stitch(itertools.chain([[1, 2]], itertools.repeat([1, 2])), 10) == [1, 2]
    tokenizer = WordTokenizer()
    text = itertools.repeat("the same chunk of text, again and again")
    assert stitch_text(text, 1000, tokenizer=tokenizer) == "the same chunk of text, again and again"
    placed = itertools.repeat(piece(0, 30))
    result: StitchResult[Any] = stitch_result(placed, 1000, tokenizer=tokenizer, order="document")
    assert result.text == DOC[0:30]


def test_the_idle_run_restarts_when_a_chunk_adds_something() -> None:
    def source() -> Iterator[list[int]]:
        for n in range(10):
            yield from [[]] * 3
            yield [n]

    assert stitch(source(), 100, max_idle=4) == list(range(10))
    assert stitch(source(), 100, max_idle=3) == []


def test_max_chunks() -> None:
    assert stitch(([n] for n in itertools.count()), 100, max_chunks=3) == [0, 1, 2]
    # Not chunks at all, but none is pulled:
    assert stitch(itertools.count(), 100, max_chunks=0) == []  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_idle must be >= 1, got 0"):
        stitch([], 1, max_idle=0)


@pytest.mark.anyio
async def test_an_endless_async_source_ends() -> None:
    closed: list[bool] = []

    async def empty_forever() -> AsyncIterator[Any]:
        try:
            while True:
                await anyio.lowlevel.checkpoint()
                yield []
        finally:
            closed.append(True)

    assert await astitch(empty_forever(), 10) == []
    assert closed == [True]
    result: StitchResult[Any] = await astitch_result(empty_forever(), 10, max_chunks=7)
    assert len(result.records) == 7

    async def same_text_forever() -> AsyncIterator[str]:
        while True:
            yield "a chunk that is already in the context"

    text_result: StitchResult[Any] = await astitch_result(
        same_text_forever(), 100, tokenizer=WordTokenizer(), max_idle=50
    )
    assert text_result.text == "a chunk that is already in the context"
    assert len(text_result.records) == 51


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    alphabet=st.sampled_from(["ab", "aaab", "0123456789", "x\n", "a "]),
    budget=st.integers(0, 2000),
    order=st.sampled_from(["retrieval", "document"]),
)
def test_words_longer_than_the_window_still_keep_the_budget(
    seed: int, alphabet: str, budget: int, order: Any
) -> None:
    # One "word" of thousands of characters: o200k's merges reach past the 64-character window,
    # so the windowed charge can be off; the exact count near the budget still holds it.
    rng = random.Random(seed)
    document = "".join(rng.choice(alphabet) for _ in range(4000))
    size = rng.randrange(20, 600)
    chunks = [
        TextChunk(document[i : i + size], source="d", start=i)
        for i in range(0, len(document), max(size // 2, 1))
    ]
    rng.shuffle(chunks)
    result: StitchResult[Any] = stitch_result(
        chunks[:30], budget, tokenizer=O200K, order=order, min_overlap_chars=1
    )
    assert result.text is not None
    assert count(O200K, result.text) == result.used <= budget


def test_a_bpe_openai_encoding_fits_as_it_is() -> None:
    with warnings.catch_warnings():  # bpe-openai 0.1.4 uses a deprecated importlib call
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        encoding = bpe_openai.get_encoding("cl100k_base")
    chunks = [NOVEL[:300], NOVEL[200:500]]
    result: StitchResult[Any] = stitch_result(chunks, 1000, tokenizer=encoding)
    assert result.text == NOVEL[:500]
    assert result.used == len(encoding.encode(NOVEL[:500]))


@pytest.mark.anyio
async def test_astitch_in_document_order() -> None:
    chunks = char_windows(NOVEL[:3000], 500, 100)
    shuffled = chunks[::-1]

    async def retrieve() -> AsyncIterator[TextChunk]:
        for chunk in shuffled:
            await anyio.lowlevel.checkpoint()
            yield chunk

    result: StitchResult[Any] = await astitch_result(
        retrieve(), 10_000, tokenizer=O200K, order="document"
    )
    assert result.text == NOVEL[:3000]
    assert result.used == count(O200K, NOVEL[:3000])
