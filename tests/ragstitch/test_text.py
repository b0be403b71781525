"""Text chunks: the tokenizer protocol, the default tokenizer, and real tokenizers built offline."""

from __future__ import annotations

from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ragstitch import (
    Chunk,
    Stitcher,
    StitchResult,
    TextChunk,
    Tokenizer,
    WordTokenizer,
    stitch,
    stitch_result,
    stitch_text,
)

DOCUMENT = (
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, "
    "conceived in Liberty, and dedicated to the proposition that all men are created equal. "
    "Now we are engaged in a great civil war, testing whether that nation, or any nation so "
    "conceived and so dedicated, can long endure."
)


def word_windows(text: str, size: int, shared: int) -> list[str]:
    """A sliding window over words: chunks start and end on a word, as most chunkers cut."""
    words = text.split(" ")
    step = size - shared
    return [" ".join(words[i : i + size]) for i in range(0, len(words) - shared, step)]


# -- WordTokenizer ---------------------------------------------------------------------------

WORD_CASES: list[tuple[str, str, list[str]]] = [
    ("empty", "", []),
    ("words and spaces", "a bc", ["a", " ", "bc"]),
    ("punctuation is one character", "end...", ["end", ".", ".", "."]),
    ("whitespace runs", "a \n\n b", ["a", " \n\n ", "b"]),
    ("unicode words", "Café naïve", ["Café", " ", "naïve"]),
    ("digits and underscore are word characters", "x_1 42", ["x_1", " ", "42"]),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in WORD_CASES], ids=[c[0] for c in WORD_CASES]
)
def test_word_tokenizer_cases(text: str, expected: list[str]) -> None:
    tokenizer = WordTokenizer()
    assert tokenizer.encode(text) == expected
    assert tokenizer.decode(expected) == text


@settings(max_examples=300)
@given(st.text())
def test_word_tokens_join_back_to_the_exact_text(text: str) -> None:
    tokens = WordTokenizer().encode(text)
    assert "".join(tokens) == text
    assert all(tokens)


def test_word_tokenizer_errors_name_the_value() -> None:
    with pytest.raises(TypeError, match=r"expects a str, got b'x' \(bytes\)"):
        WordTokenizer().encode(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expects str tokens, got 3 \(int\)"):
        WordTokenizer().decode(["a", 3])  # type: ignore[list-item]


# -- text through the stitcher ---------------------------------------------------------------


def test_stitch_text_merges_word_windows_back_into_the_document() -> None:
    chunks = word_windows(DOCUMENT, 14, 8)  # 8 words shared: at least 35 characters
    assert len(chunks) > 3
    assert stitch_text(chunks, 10_000) == DOCUMENT
    tokens = WordTokenizer().encode(DOCUMENT)
    assert stitch_text(chunks, len(tokens)) == DOCUMENT  # the overlap costs nothing
    # Overlaps shorter than min_overlap_chars are not merged.
    short = word_windows(DOCUMENT, 12, 4)
    assert stitch_text(short, 10_000, min_overlap_chars=8) == DOCUMENT
    assert stitch_text(short, 10_000, min_overlap_chars=1000) == "\n\n".join(short)


def test_stitch_text_separates_chunks_that_do_not_overlap() -> None:
    chunks = word_windows(DOCUMENT, 12, 4)
    text = stitch_text([chunks[0], chunks[3]], 100)
    assert text == chunks[0] + "\n\n" + chunks[3]
    assert stitch_text([chunks[0], chunks[3]], 100, separator=" [...] ") == (
        chunks[0] + " [...] " + chunks[3]
    )


def test_text_chunk_records_and_text() -> None:
    chunks: list[Any] = [
        TextChunk("the quick brown fox", id="a", metadata={"source": "fable"}),
        TextChunk("brown fox jumps", id="b"),
        "over the lazy dog",
    ]
    result: StitchResult[Any] = stitch_result(
        chunks, 100, tokenizer=WordTokenizer(), separator="\n", min_overlap_chars=5
    )
    assert result.mode == "text"
    assert result.text == "the quick brown fox jumps\nover the lazy dog"
    assert [(r.id, r.overlap, r.separator, r.cost, r.overlap_chars) for r in result.records] == [
        ("a", 0, 0, 7, 0),
        ("b", 3, 0, 2, len("brown fox")),
        (None, 0, 1, 8, 0),
    ]
    assert result.records[0].metadata == {"source": "fable"}
    assert [r.chars for r in result.records] == [(0, 19), (10, 25), (26, 43)]
    assert result.records[1].span is None
    assert result.records[1].covers is None
    assert [r.id for r in result.cite(12, 14)] == ["a", "b"]  # characters: "ro" of "brown"
    assert [(s.text, s.chars, s.records) for s in result.segments] == [
        ("the quick brown fox jumps", (0, 25), (0, 1)),
        ("over the lazy dog", (26, 43), (2,)),
    ]
    assert result.tokens == tuple(WordTokenizer().encode(result.text))
    assert result.used == result.charged == 17


def test_tokens_win_over_text_and_min_overlap_guards_coincidences() -> None:
    class Both:
        tokens = ("x", " ", "the")
        text = "ignored"

    assert stitch_text([Both(), "the end"], 100) == "x the end"
    assert stitch_text([Both(), "the end"], 100, min_overlap=2) == "x the\n\nthe end"


def test_stitcher_text_property() -> None:
    stitcher: Stitcher[Any] = Stitcher(100, tokenizer=WordTokenizer())
    stitcher.add("one two")
    assert stitcher.text == "one two"
    assert Stitcher(5).text is None


def test_tokenizer_returning_garbage_is_named() -> None:
    class Broken:
        def encode(self, text: str) -> int:
            return 3

        def decode(self, tokens: list[Any]) -> str:
            return ""

        def __repr__(self) -> str:
            return "Broken()"

    with pytest.raises(TypeError, match=r"Broken\(\)\.encode returned 3 \(int\)"):
        stitch(["abc"], 5, tokenizer=Broken())  # type: ignore[arg-type]


# -- real tokenizers, built offline ----------------------------------------------------------


@pytest.fixture(scope="module")
def hf_bpe() -> HFTokenizer:
    """A byte-level BPE trained here, on the document: no download."""
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([DOCUMENT] * 3, trainer=trainer)
    return tokenizer


@pytest.fixture(scope="module")
def tiktoken_bytes() -> tiktoken.Encoding:
    """tiktoken with its own byte-level ranks and a few merges: no download."""
    ranks = {bytes([i]): i for i in range(256)}
    for merge in (b"th", b"the", b" t", b" the", b"on", b"ion", b" n", b" na"):
        ranks[merge] = len(ranks)
    return tiktoken.Encoding(
        "bytes-with-merges",
        pat_str=r""" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks,
        special_tokens={},
    )


def test_real_tokenizers_fit_the_protocol_as_they_are(
    hf_bpe: HFTokenizer, tiktoken_bytes: tiktoken.Encoding
) -> None:
    # Static check: these assignments are what mypy verifies.
    protocols: list[Tokenizer] = [hf_bpe, tiktoken_bytes, WordTokenizer()]
    for tokenizer in protocols:
        assert isinstance(tokenizer, Tokenizer)
        result: StitchResult[Any] = stitch_result([DOCUMENT], 10_000, tokenizer=tokenizer)
        assert result.text == DOCUMENT


@pytest.mark.parametrize("which", ["hf_bpe", "tiktoken_bytes"])
def test_token_ids_from_one_encoding_stitch_back_exactly(
    which: str, request: pytest.FixtureRequest
) -> None:
    # The chunker had the ids (it cut the document's encoding): the overlap is found on them.
    tokenizer: Any = request.getfixturevalue(which)
    encoded = tokenizer.encode(DOCUMENT)
    ids: list[int] = list(getattr(encoded, "ids", encoded))
    windows = [Chunk(ids[i : i + 16], id=i) for i in range(0, len(ids) - 4, 12)]
    result: StitchResult[Any] = stitch_result(windows, len(ids), tokenizer=tokenizer)
    assert list(result.tokens) == ids
    assert result.text == DOCUMENT
    assert result.saved == 4 * (len(windows) - 1)


@pytest.mark.parametrize("which", ["hf_bpe", "tiktoken_bytes"])
def test_text_overlaps_are_found_on_the_text_whatever_the_ids(
    which: str, request: pytest.FixtureRequest
) -> None:
    # Encoded one by one, chunks may disagree at the cut (" the" inside, "the" at the start), so
    # an overlap can be missed; what is merged is always a true overlap of the token sequences.
    tokenizer: Any = request.getfixturevalue(which)
    chunks = word_windows(DOCUMENT, 9, 3)
    result: StitchResult[Any] = stitch_result(
        chunks, 10_000, tokenizer=tokenizer, separator=" | ", min_overlap_chars=4
    )
    assert result.text == DOCUMENT  # every overlap found on the text, whatever the ids
    for record, chunk in zip(result.records, chunks, strict=True):
        assert record.chars is not None
        assert result.text[record.chars[0] : record.chars[1]] == chunk
    encoded = tokenizer.encode(DOCUMENT)
    assert result.used == len(getattr(encoded, "ids", encoded))


def test_the_overlap_a_bpe_splits_differently_is_found_on_the_text(
    hf_bpe: HFTokenizer, tiktoken_bytes: tiktoken.Encoding
) -> None:
    # "the" starts the second chunk; inside the first it is " the": different BPE ids. As
    # token chunks the ids miss it; as text it is found.
    first, second = "of the people, by the people", "the people, for the people"
    whole = "of the people, by the people, for the people"
    assert stitch_text([first, second], 100, min_overlap_chars=8) == whole
    tokenizers: list[Any] = [hf_bpe, tiktoken_bytes]
    for tokenizer in tokenizers:
        result: StitchResult[Any] = stitch_result(
            [first, second], 100, tokenizer=tokenizer, separator=" | ", min_overlap_chars=8
        )
        assert result.text == whole
        assert result.records[1].overlap_chars == len("the people")
        ids = [
            Chunk(list(getattr(tokenizer.encode(t), "ids", tokenizer.encode(t))))
            for t in (first, second)
        ]
        as_ids: StitchResult[Any] = stitch_result(ids, 100, tokenizer=tokenizer, separator=" | ")
        assert as_ids.records[1].overlap == 0
        assert as_ids.text == first + " | " + second
