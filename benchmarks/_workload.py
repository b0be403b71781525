"""The stop-filter workload: real text cut by a real tokenizer and streamed as a server does.

Text: :func:`_corpus.build_corpus`, about a million characters of measured text (prose, code,
markdown, dialogue and some 30 other languages) and ten million of *traffic* (other documents
of the same kinds), read at run time from the Python installation and Vim's tutor.

Tokens: OpenAI's ``o200k_base`` vocabulary (200,000 entries, GPT-4o's), from the ``bpe-openai``
package (a Rust port of tiktoken whose vocabulary files ship in the wheel, so it works offline).
Each document is encoded whole and streamed as a detokenizer streams it: every token is decoded
to its bytes, and bytes that end in an unfinished UTF-8 character are held until it completes
(as vLLM's and TGI's incremental detokenizers do), so a stream never carries half a character
and some tokens carry none (they are not sent). If ``bpe-openai`` is missing, a regex word-piece
cutter stands in and :func:`tokenizer_name` says so: the results then are not the headline's.

Streams: each measured document is one completion. With ``plant``, even-numbered ones end with
a chat marker of the stop set followed by a chat tail (the model running on into the next turn);
odd-numbered ones run to their end. So the cost is measured over long runs of ordinary text.

Stop sets (:func:`stop_set`), of :data:`STOP_COUNTS` strings:

- 1: ``["</s>"]``; 4: ``["</s>", "<|im_end|>", "<|eot_id|>", "\\n\\nUser:"]``, what chat
  servers are configured with.
- 64 and up: the 16 :data:`CHAT_MARKERS` (less any that occurs in the measured text: ``###``
  does, in markdown) and generated stops that begin with the measured text's most frequent
  words, the hard case for any first-character fast path: ``"the qzv"`` (word, space, rare
  letters), ``"selfxkx"`` (word glued to rare letters), ``"Returns:"`` (a capitalized word and a
  colon, like a speaker label). Their beginnings occur all the time, so partial matches are
  frequent, but no generated stop occurs in the measured text.
"""

from __future__ import annotations

import codecs
import random
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

import _corpus

__all__ = [
    "CHAT_MARKERS",
    "ENCODING",
    "STOP_COUNTS",
    "Stream",
    "detokenize",
    "make_streams",
    "measured_tokens",
    "stop_set",
    "tokenize",
    "tokenizer_name",
    "traffic_streams",
]

ENCODING = "o200k_base"
STOP_COUNTS = (1, 4, 64, 256, 1024)

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
STOP_TAIL = "\n\nUser: Thank you, that is all."
_RARE_LETTERS = "qxzjvkw"
_FALLBACK = re.compile(r" ?[^\W\d_]{1,4}|[^\W\d_]{1,4}| ?[0-9]{1,3}| ?[^\s\w]|\s+|.", re.DOTALL)


@cache
def _encoding() -> object | None:
    with warnings.catch_warnings():
        # bpe-openai 0.1 reads its vocabulary with importlib.resources.open_binary, deprecated
        # since Python 3.11, when imported: its warning, not ours (the test suite turns warnings
        # into errors).
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import bpe_openai
        except ImportError:  # pragma: no cover - bpe-openai is in the dev extra
            return None
        encoding: object = bpe_openai.get_encoding(ENCODING)
        encoding.encode_ordinary("loads the vocabulary now")  # type: ignore[attr-defined]
        return encoding


def tokenizer_name() -> str:
    """Which tokenizer :func:`tokenize` uses."""
    if _encoding() is None:  # pragma: no cover
        return "FALLBACK regex word pieces (bpe-openai is not installed: not the headline)"
    return (
        f"OpenAI {ENCODING} (200k entries) via bpe-openai, streamed by an incremental detokenizer"
    )


def detokenize(token_bytes: Sequence[bytes]) -> list[str]:
    """The text pieces a server streams for these tokens: bytes are held until a character
    completes, and a token that completes none sends nothing."""
    decode = codecs.getincrementaldecoder("utf-8")().decode
    pieces = []
    for chunk in token_bytes:
        piece = decode(chunk)
        if piece:
            pieces.append(piece)
    tail = decode(b"", True)
    if tail:  # pragma: no cover - the text was valid UTF-8
        pieces.append(tail)
    return pieces


def tokenize(text: str) -> list[str]:
    """Cut ``text`` as a server streams it; ``"".join(tokenize(text)) == text``."""
    if not text:
        return []
    encoding = _encoding()
    if encoding is None:  # pragma: no cover
        pieces = _FALLBACK.findall(text)
    else:
        ids = encoding.encode_ordinary(text)  # type: ignore[attr-defined]
        table = _token_bytes()
        pieces = detokenize([table[i] for i in ids])
    if "".join(pieces) != text:  # pragma: no cover - a tokenizer bug, not a benchmark result
        raise RuntimeError("token pieces do not concatenate back to the text")
    return pieces


@cache
def _token_bytes() -> list[bytes]:
    return list(_encoding().token_byte_values())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Stream:
    """One completion: its token pieces, its kind of text, and the stop planted near its end
    (or ``None``)."""

    tokens: tuple[str, ...]
    kind: str
    planted: str | None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


@cache
def measured_tokens() -> tuple[tuple[str, ...], ...]:
    """The measured documents, tokenized (one tuple of pieces per document)."""
    return tuple(tuple(tokenize(doc.text)) for doc in _corpus.build_corpus().measured)


@cache
def _tail_tokens() -> tuple[str, ...]:
    return tuple(tokenize(STOP_TAIL))


def make_streams(
    stops: Sequence[str], count: int | None = None, length: int | None = None, *, plant: bool = True
) -> list[Stream]:
    """The first ``count`` measured documents (all by default) as completions, each cut to
    ``length`` tokens if given; with ``plant``, even-numbered ones then end with one of the stop
    set's chat markers (in turn) and a chat tail."""
    docs = _corpus.build_corpus().measured
    tokenized = measured_tokens()
    markers = [s for s in stops if s in CHAT_MARKERS] or list(stops[:1])
    streams = []
    for index, (doc, tokens) in enumerate(zip(docs, tokenized, strict=True)):
        if count is not None and index >= count:
            break
        body = list(tokens if length is None else tokens[:length])
        planted: str | None = None
        if plant and index % 2 == 0 and markers:
            planted = markers[(index // 2) % len(markers)]
            # The planted stop begins a new piece: a model emits it as tokens of its own.
            body += tokenize(planted) + list(_tail_tokens())
        streams.append(Stream(tuple(body), doc.kind, planted))
    return streams


def traffic_streams(tokens: int) -> Iterator[tuple[str, ...]]:
    """Other documents, tokenized, until about ``tokens`` tokens: what a long-running server
    streamed before the measured text. Read round and round if asked for more than there is."""
    docs = _corpus.build_corpus().traffic
    if not docs or tokens <= 0:
        return
    sent = 0
    index = 0
    while sent < tokens:
        pieces = _traffic_doc(index % len(docs))
        yield pieces
        sent += len(pieces)
        index += 1


@cache
def _traffic_doc(index: int) -> tuple[str, ...]:
    return tuple(tokenize(_corpus.build_corpus().traffic[index].text))


def _frequent_words(text: str) -> list[str]:
    words = re.findall(r"[^\W\d_]{2,}", text)
    return [word for word, _ in Counter(words).most_common(400)]


@cache
def _measured_text() -> str:
    return "".join(doc.text for doc in _corpus.build_corpus().measured) + STOP_TAIL


@cache
def stop_set(count: int) -> tuple[str, ...]:
    """The benchmark's stop set of ``count`` strings (see the module docstring)."""
    if count == 1:
        return ("</s>",)
    if count <= 4:
        return CHAT_MARKERS[:count]
    text = _measured_text()
    chosen = [m for m in CHAT_MARKERS[: min(count // 2, len(CHAT_MARKERS))] if m not in text]
    seen = set(chosen)
    words = _frequent_words(text)
    capitalized = [w for w in words if w[0].isupper() and len(w) > 2]
    rng = random.Random(count)
    index = 0
    while len(chosen) < count:
        word = words[index % len(words)]
        kind = index % 5
        rare = "".join(rng.choice(_RARE_LETTERS) for _ in range(rng.randint(2, 4)))
        if kind in (0, 1, 2):
            candidate = f"{word} {rare}"
        elif kind == 3:
            candidate = f"{word}{rare}"
        else:
            label = capitalized[(index // 5) % len(capitalized)]
            candidate = f"{label}:" if f"{label}:" not in seen else f"{label} {rare}:"
        index += 1
        if candidate in seen or candidate in text:
            continue
        seen.add(candidate)
        chosen.append(candidate)
    return tuple(chosen)
