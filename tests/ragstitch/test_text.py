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
    chunks = word_windows(DOCUMENT, 12, 4)
    assert len(chunks) > 3
    assert stitch_text(chunks, 10_000) == DOCUMENT
    tokens = WordTokenizer().encode(DOCUMENT)
    assert stitch_text(chunks, len(tokens)) == DOCUMENT  # the overlap costs nothing


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
        chunks, 100, tokenizer=WordTokenizer(), separator="\n"
    )
    assert result.text == "the quick brown fox jumps\nover the lazy dog"
    assert [(r.id, r.overlap, r.separator, r.cost) for r in result.records] == [
        ("a", 0, 0, 7),
        ("b", 3, 0, 2),
        (None, 0, 1, 8),
    ]
    assert result.records[0].metadata == {"source": "fable"}
    covers = result.records[1].covers
    assert covers is not None
    assert "".join(result.tokens[covers[0] : covers[1]]) == "brown fox jumps"


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
def test_text_chunks_are_never_merged_wrongly(which: str, request: pytest.FixtureRequest) -> None:
    # Encoded one by one, chunks may disagree at the cut (" the" inside, "the" at the start), so
    # an overlap can be missed; what is merged is always a true overlap of the token sequences.
    tokenizer: Any = request.getfixturevalue(which)
    chunks = word_windows(DOCUMENT, 9, 3)
    result: StitchResult[Any] = stitch_result(chunks, 10_000, tokenizer=tokenizer, separator=" | ")
    assert result.text is not None
    for piece in result.text.split(" | "):
        assert piece in DOCUMENT
    for record, chunk in zip(result.records, chunks, strict=True):
        covers = record.covers
        assert covers is not None
        assert tokenizer.decode(list(result.tokens[covers[0] : covers[1]])) == chunk


def test_word_tokenizer_finds_the_overlap_a_bpe_misses(
    hf_bpe: HFTokenizer, tiktoken_bytes: tiktoken.Encoding
) -> None:
    # "the" starts the second chunk; inside the first it is " the": different BPE ids.
    first, second = "of the people, by the people", "the people, for the people"
    assert stitch_text([first, second], 100) == "of the people, by the people, for the people"
    for tokenizer in (hf_bpe, tiktoken_bytes):
        result: StitchResult[Any] = stitch_result(
            [first, second], 100, tokenizer=tokenizer, separator=" | "
        )
        assert result.records[1].overlap == 0
        assert result.text == first + " | " + second
