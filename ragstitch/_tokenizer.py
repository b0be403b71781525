"""Text in, tokens out. The stitcher works on tokens; text chunks are encoded one by one with a
tokenizer, and the assembled tokens are decoded back to text.

Rules of this file:
- A tokenizer is anything with `encode(str)` and `decode(tokens) -> str`. `encode` may return a
  sequence of tokens (tiktoken's `Encoding`, transformers' tokenizers, `WordTokenizer`) or an
  object with `.ids` (the `Encoding` of Hugging Face `tokenizers`); both fit as they are.
- `WordTokenizer` is the offline default: tokens are runs of word characters, runs of
  whitespace, and single other characters, so their concatenation is exactly the text, and a
  word reads the same whether or not a chunk starts or ends next to it.
- Chunks encoded one by one may not share tokens where they were cut: a BPE tokenizer encodes
  "brown" at the start of a chunk and " brown" inside one as different ids. Then no overlap is
  found there and the chunk is charged in full: text is never merged wrongly, but the saving
  can be lost. Pass token ids (`Chunk(tokens=...)`) when the chunker made them. Text chunks
  given to a stitcher as text are stitched on their text instead (see `_text.py`).
- `load_tokenizer` names a tokenizer for the command line: an OpenAI encoding by name (from
  the `bpe-openai` package, which ships its vocabularies, else from `tiktoken`), or a Hugging
  Face `tokenizer.json`. Both packages are imported only there.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

from streamstop._extras import install_hint

from ._errors import describe

__all__ = [
    "HasIds",
    "Tokenizer",
    "WordTokenizer",
    "check_tokenizer",
    "count_tokens",
    "encode_text",
    "load_tokenizer",
]

_PIECE = re.compile(r"\w+|\s+|[^\w\s]")


@runtime_checkable
class HasIds(Protocol):
    """What Hugging Face `tokenizers.Tokenizer.encode` returns: an object with `ids`."""

    @property
    def ids(self) -> list[int]: ...


Encoded = Sequence[Any] | HasIds


@runtime_checkable
class Tokenizer(Protocol):
    """`encode(text)` gives tokens (or an object with `.ids`); `decode(tokens)` gives text.

    tiktoken's `Encoding`, Hugging Face `tokenizers.Tokenizer` and transformers' tokenizers
    fit as they are, as does `WordTokenizer`.
    """

    def encode(self, text: str, /) -> Encoded: ...

    def decode(self, tokens: list[Any], /) -> str: ...


class WordTokenizer:
    """The offline default tokenizer: words, whitespace runs and single other characters.

    >>> WordTokenizer().encode("Four score, and seven")
    ['Four', ' ', 'score', ',', ' ', 'and', ' ', 'seven']

    `decode` joins the tokens, so `decode(encode(text)) == text` for every `text`. Its token
    counts are not a language model's: use the model's tokenizer when the budget is the model's.
    """

    __slots__ = ()

    def encode(self, text: str, /) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"WordTokenizer.encode expects a str, got {describe(text)}")
        return _PIECE.findall(text)

    def decode(self, tokens: Sequence[str], /) -> str:
        try:
            return "".join(tokens)
        except TypeError:
            bad = next((t for t in tokens if not isinstance(t, str)), tokens)
            raise TypeError(
                f"WordTokenizer.decode expects str tokens, got {describe(bad)}"
            ) from None

    def __repr__(self) -> str:
        return "WordTokenizer()"


def check_tokenizer(tokenizer: object) -> Tokenizer:
    """Return `tokenizer` if it has callable `encode` and `decode`, else raise `TypeError`."""
    if not (
        callable(getattr(tokenizer, "encode", None))
        and callable(getattr(tokenizer, "decode", None))
    ):
        raise TypeError(
            f"tokenizer must have encode(str) and decode(tokens) methods, got {describe(tokenizer)}"
        )
    return cast(Tokenizer, tokenizer)


def encode_text(tokenizer: Tokenizer, text: str) -> list[Any]:
    """Encode `text`, accepting a sequence of tokens or an object with `.ids` from `encode`."""
    encoded: object = tokenizer.encode(text)
    if not isinstance(encoded, Sequence):
        ids = getattr(encoded, "ids", None)
        if isinstance(ids, Sequence):
            encoded = ids
    if isinstance(encoded, (str, bytes, bytearray)) or not isinstance(encoded, Sequence):
        raise TypeError(
            f"{tokenizer!r}.encode returned {describe(encoded)}; "
            "expected a sequence of tokens or an object with .ids"
        )
    return list(encoded)


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """How many tokens `tokenizer` makes of `text` (what a context costs)."""
    return len(encode_text(tokenizer, text))


def load_tokenizer(spec: str) -> Tokenizer:
    """A tokenizer from a name: `"word"`, an OpenAI encoding such as `"o200k_base"` or
    `"cl100k_base"` (from `bpe-openai`, else `tiktoken`), or the path of a `tokenizer.json`.

    Raises `ValueError` naming `spec` when it is none of these or the package is missing.
    """
    if spec == "word":
        return WordTokenizer()
    if spec.endswith(".json") or os.sep in spec or os.path.exists(spec):
        try:
            tokenizers = importlib.import_module("tokenizers")
        except ImportError:
            raise ValueError(
                f"tokenizer {spec!r} is a tokenizer.json, which needs the 'tokenizers' package, "
                f"from the tokenizers extra: {install_hint('tokenizers')}"
            ) from None
        try:
            return cast(Tokenizer, tokenizers.Tokenizer.from_file(spec))
        except Exception as error:
            raise ValueError(f"tokenizer {spec!r}: cannot load it: {error}") from None
    failures: list[str] = []
    for package in ("bpe_openai", "tiktoken"):
        # bpe-openai 0.1.4 reads its vocabularies with a deprecated importlib.resources call:
        # its warning is no concern of the caller's.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                module = importlib.import_module(package)
            except ImportError:
                failures.append(f"{package} is not installed")
                continue
            try:
                encoding = module.get_encoding(spec)
            except Exception as error:
                failures.append(f"{package}: {error}")
                continue
        return cast(Tokenizer, _Ordinary(encoding))
    hint = ""
    if all(failure.endswith(" is not installed") for failure in failures):
        hint = f"; an encoding needs the tokenizers extra: {install_hint('tokenizers')}"
    raise ValueError(
        f"unknown tokenizer {spec!r}: not 'word', an encoding name such as 'o200k_base' or a "
        f"path to a tokenizer.json ({'; '.join(failures)}){hint}"
    )


class _Ordinary:
    """An OpenAI encoding that reads special-token text such as '<|endoftext|>' as plain text:
    retrieved documents may contain it, and must not make `encode` raise."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding

    def encode(self, text: str, /) -> list[int]:
        return cast("list[int]", self.encoding.encode_ordinary(text))

    def decode(self, tokens: list[Any], /) -> str:
        return cast(str, self.encoding.decode(tokens))

    def __repr__(self) -> str:
        return f"<encoding {self.encoding.name!r}>"
