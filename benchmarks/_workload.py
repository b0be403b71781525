"""The streamstop benchmark workload: real English cut into BPE tokens, and stop sets.

Text: ``_corpus.txt`` beside this file holds the first five chapters of Jane Austen's *Pride and
Prejudice* (1813, public domain; about 5,300 words of narration and dialogue). Its hard line
wraps are undone, so paragraphs are separated by ``"\\n\\n"`` as in a model's output.

Tokens: a byte-level BPE (Hugging Face ``tokenizers``, GPT-2 pre-tokenization, so pieces carry
their leading space: ``" truth"``) is trained offline on the corpus, with a vocabulary of
:data:`VOCAB_SIZE` that gives token pieces of 3-5 characters on average. The text is cut at
each token's start offset, so the pieces concatenate exactly back to the text. If ``tokenizers``
is unavailable, a regex cutter (words with their leading space, split into pieces of at most
four letters, punctuation and whitespace runs on their own) stands in; :func:`tokenizer_name`
says which one ran.

Streams: each is a completion of ordinary text, a window of the first half of the tokenized
corpus (the second half is text "seen before", to warm up shared automata). Even-numbered
streams end with a stop followed by a short chat tail, odd-numbered ones without any stop, so
the per-token cost is measured over a long run of ordinary text, as in a real completion.

Stop sets (:func:`stop_set`), of 1, 4, 16, 64, 256 and 1024 strings:

- 1: ``["</s>"]``; 4: ``["</s>", "<|im_end|>", "<|eot_id|>", "\\n\\nUser:"]``, what chat
  servers see.
- 16 and up: chat markers (8 at 16, all 16 :data:`CHAT_MARKERS` from 64 up), then generated
  stops that begin with the corpus's most frequent words, the hard case for a first-character
  fast path: ``"the qzv"`` (word, space, rare letters), ``"ofxkx"`` (word glued to rare
  letters) and ``"Bingley:"`` (a capitalized word as a speaker label). Their starts (``"the "``,
  ``"of"``) occur all the time, so partial matches are frequent, but no generated stop occurs in
  the text: any that would is skipped.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = [
    "CHAT_MARKERS",
    "STOP_COUNTS",
    "VOCAB_SIZE",
    "Stream",
    "corpus_text",
    "corpus_tokens",
    "long_stream",
    "make_streams",
    "stop_set",
    "tokenize",
    "tokenizer_name",
    "warmup_streams",
]

CORPUS_PATH = Path(__file__).with_name("_corpus.txt")
VOCAB_SIZE = 1500
STOP_COUNTS = (1, 4, 16, 64, 256, 1024)

# Stop strings that chat servers are configured with, most common first.
CHAT_MARKERS = (
    "</s>",
    "<|im_end|>",
    "<|eot_id|>",
    "\n\nUser:",
    "\n\nHuman:",
    "###",
    "<|endoftext|>",
    "Observation:",
    "<|end|>",
    "<end_of_turn>",
    "[/INST]",
    "<|eom_id|>",
    "\n\nAssistant:",
    "<|user|>",
    "\nQuestion:",
    "<|im_start|>",
)

# What follows a stop in a completion that has one: the model running on into the next turn.
_STOP_TAIL = "\n\nUser: Thank you, that is all."
_RARE_LETTERS = "qxzjvkw"


@cache
def corpus_text() -> str:
    """The corpus with paragraphs unwrapped: one line each, separated by a blank line."""
    raw = CORPUS_PATH.read_text(encoding="utf-8")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw) if p.strip()]
    return "\n\n".join(paragraphs) + "\n"


@cache
def _bpe() -> object | None:
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:  # pragma: no cover - tokenizers is in the bench extra
        return None
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = corpus_text()
    tokenizer.train_from_iterator([text[i : i + 2000] for i in range(0, len(text), 2000)], trainer)
    return tokenizer


def tokenizer_name() -> str:
    """Which cutter :func:`tokenize` uses."""
    if _bpe() is None:  # pragma: no cover
        return "regex word pieces (tokenizers unavailable)"
    return f"byte-level BPE trained on the corpus, vocabulary {VOCAB_SIZE}"


_FALLBACK = re.compile(r" ?[A-Za-z]{1,4}|[A-Za-z]{1,4}| ?[0-9]+| ?[^\sA-Za-z0-9]|\s+")


def tokenize(text: str) -> list[str]:
    """Cut ``text`` into token pieces; ``"".join(tokenize(text)) == text``."""
    if not text:
        return []
    tokenizer = _bpe()
    if tokenizer is None:  # pragma: no cover
        pieces = _FALLBACK.findall(text)
    else:
        encoding = tokenizer.encode(text)  # type: ignore[attr-defined]
        starts = sorted({start for start, _ in encoding.offsets} | {0})
        pieces = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    if "".join(pieces) != text:  # pragma: no cover - a tokenizer bug, not a benchmark result
        raise RuntimeError("token pieces do not concatenate back to the text")
    return pieces


@cache
def corpus_tokens() -> tuple[str, ...]:
    return tuple(tokenize(corpus_text()))


@dataclass(frozen=True)
class Stream:
    """One completion: its token pieces, and the stop planted near its end (or ``None``)."""

    tokens: tuple[str, ...]
    planted: str | None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def _halves() -> tuple[tuple[str, ...], tuple[str, ...]]:
    tokens = corpus_tokens()
    # Cut at a paragraph break, near the middle.
    middle = len(tokens) // 2
    while not tokens[middle].endswith("\n") and middle < len(tokens) - 1:
        middle += 1
    return tokens[: middle + 1], tokens[middle + 1 :]


def make_streams(
    stops: Sequence[str], count: int, length: int, *, plant: bool = True
) -> list[Stream]:
    """``count`` completions of ``length`` tokens of ordinary text each, from the first half of
    the corpus (the second half is for :func:`warmup_streams`).

    With ``plant``, even-numbered streams then end with one of ``stops`` (the chat markers in
    turn) and a chat tail; the others end there. The streams are cut from the half one after the
    other, so they do not overlap unless ``count * length`` exceeds it.
    """
    tokens = _halves()[0]
    markers = [s for s in stops if s in CHAT_MARKERS] or list(stops[:1])
    streams = []
    for index in range(count):
        start = (index * length) % len(tokens)
        body = [tokens[(start + i) % len(tokens)] for i in range(length)]
        planted: str | None = None
        if plant and index % 2 == 0 and markers:
            planted = markers[(index // 2) % len(markers)]
            body += tokenize(planted) + tokenize(_STOP_TAIL)
        streams.append(Stream(tuple(body), planted))
    return streams


def warmup_streams(count: int, length: int) -> list[tuple[str, ...]]:
    """Streams of ordinary text from the second half of the corpus: text that a server saw
    before the streams of :func:`make_streams`, for warming up a shared automaton."""
    tokens = _halves()[1]
    return [
        tuple(tokens[(index * length + i) % len(tokens)] for i in range(length))
        for index in range(count)
    ]


def long_stream(length: int) -> list[str]:
    """``length`` tokens of ordinary text, the corpus read round and round, with no stop."""
    tokens = corpus_tokens()
    whole, part = divmod(length, len(tokens))
    return list(tokens) * whole + list(tokens[:part])


def _frequent_words() -> list[str]:
    words = re.findall(r"[A-Za-z]+", corpus_text())
    return [word for word, _ in Counter(words).most_common()]


@cache
def stop_set(count: int) -> tuple[str, ...]:
    """The benchmark's stop set of ``count`` strings (see the module docstring)."""
    if count == 1:
        return ("</s>",)
    if count <= 4:
        return CHAT_MARKERS[:count]
    chosen = list(CHAT_MARKERS[: min(count // 2, len(CHAT_MARKERS))])
    seen = set(chosen)
    # The text the streams are cut from, wrapped once, so that no generated stop occurs in it.
    text = corpus_text() + corpus_text() + _STOP_TAIL
    words = _frequent_words()
    capitalized = [w for w in words if w[0].isupper() and len(w) > 2]
    rng = random.Random(count)
    index = 0
    while len(chosen) < count:
        word = words[index % 200]
        kind = index % 5
        rare = "".join(rng.choice(_RARE_LETTERS) for _ in range(rng.randint(2, 4)))
        if kind in (0, 1, 2):
            candidate = f"{word} {rare}"
        elif kind == 3:
            candidate = f"{word}{rare}"
        else:
            candidate = f"{capitalized[(index // 5) % len(capitalized)]}:"
            if candidate in seen:
                candidate = f"{capitalized[(index // 5) % len(capitalized)]} {rare}:"
        index += 1
        if candidate in seen or candidate in text:
            continue
        seen.add(candidate)
        chosen.append(candidate)
    return tuple(chosen)
