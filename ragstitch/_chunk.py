# What a chunk is. The stitcher accepts, in this order of precedence:
# - any object with a `tokens` attribute (a sequence of tokens), such as `Chunk`;
# - any object with a `text` attribute (a str), such as `TextChunk`, when a tokenizer is given;
# - a bare sequence of tokens (list, tuple, ...);
# - a bare `str`, when a tokenizer is given.
# An object may also carry `id` and `metadata` attributes; they are copied into the chunk's record
# so that an answer can cite its sources. `Chunk` and `TextChunk` are the small frozen types that
# carry all three.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ._errors import describe

__all__ = ["Chunk", "HasText", "HasTokens", "TextChunk"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class HasTokens(Protocol[T_co]):
    """Any object with a `tokens` sequence (and optionally `id` and `metadata`) is a chunk."""

    @property
    def tokens(self) -> Sequence[T_co]: ...


@runtime_checkable
class HasText(Protocol):
    """Any object with a `text` string is a text chunk (it needs a tokenizer)."""

    @property
    def text(self) -> str: ...


def _freeze_metadata(owner: object, metadata: object) -> None:
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"{type(owner).__name__}.metadata must be a mapping, got {describe(metadata)}"
        )
    object.__setattr__(owner, "metadata", MappingProxyType(dict(metadata)))


@dataclass(frozen=True)
class Chunk(Generic[T]):
    """A chunk of tokens with an optional `id` and `metadata` (e.g. source, page, url).

    `tokens` is stored as a tuple and `metadata` as a read-only mapping, so a `Chunk` is a value:
    two chunks with equal fields are equal (the metadata takes no part in the hash).
    """

    tokens: Sequence[T]
    id: object = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        tokens: object = self.tokens
        if isinstance(tokens, (str, bytes, bytearray)) or not isinstance(tokens, Sequence):
            raise TypeError(
                f"Chunk.tokens must be a sequence of tokens (list or tuple), "
                f"got {describe(tokens)}; for text use TextChunk"
            )
        object.__setattr__(self, "tokens", tuple(tokens))
        _freeze_metadata(self, self.metadata)


@dataclass(frozen=True)
class TextChunk:
    """A chunk of text with an optional `id` and `metadata`; the stitcher's tokenizer encodes it."""

    text: str
    id: object = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"TextChunk.text must be a str, got {describe(self.text)}")
        _freeze_metadata(self, self.metadata)
