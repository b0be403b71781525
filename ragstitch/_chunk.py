"""What a chunk is. The stitcher accepts, in this order of precedence:
- any object with a `tokens` attribute (a sequence of tokens), such as `Chunk`;
- any object with text, when a tokenizer is given: a `text` attribute (`TextChunk`, LlamaIndex
  nodes), `page_content` (LangChain) or `content` (Haystack), all read by `read_text`;
- a bare sequence of tokens (list, tuple, ...);
- a bare `str`, when a tokenizer is given.
An object may also carry `id` and `metadata` attributes; they are copied into the chunk's record
so that an answer can cite its sources. `Chunk` and `TextChunk` are the small frozen types that
carry all three.

The frameworks' chunk types are text chunks as they are (`read_text` knows their names):
LangChain's `Document` (`page_content`, `id`, `metadata["source"]`, `metadata["start_index"]`
with `add_start_index=True`), LlamaIndex's `TextNode` and `NodeWithScore` (`text`, `node_id`,
`ref_doc_id`, `start_char_idx`) and Haystack's `Document` (`content`, `id`, `meta["source_id"]`,
`meta["split_idx_start"]`). Their document id and start offset place a chunk in its document
for `order="document"`; a `TextChunk` gives them as `source` and `start`. A chunk ends at
`start + len(text)` (LlamaIndex's `end_char_idx` is not read: the text is what is laid out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ._errors import describe

__all__ = ["Chunk", "HasText", "HasTokens", "TextChunk", "TextInfo", "read_text"]

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
    """A chunk of text with an optional `id` and `metadata`; the stitcher's tokenizer encodes it.

    `source` (any hashable document id) and `start` (the character offset of the chunk in that
    document) place it for `order="document"`; without them it is placed by its metadata, if it
    names them as a framework does (see `read_text`), or not at all.
    """

    text: str
    id: object = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    source: object = None
    start: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"TextChunk.text must be a str, got {describe(self.text)}")
        if self.start is not None and (type(self.start) is not int or self.start < 0):
            raise TypeError(
                f"TextChunk.start must be an int >= 0 or None, got {describe(self.start)}"
            )
        _freeze_metadata(self, self.metadata)


@dataclass(frozen=True)
class TextInfo:
    """What `read_text` found in a text chunk: its text, id, metadata and place, if any."""

    text: str
    id: object
    metadata: Mapping[str, Any]
    source: object
    start: int | None


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_MISSING: Any = object()
# Where the frameworks keep a chunk's document id and start offset in its metadata.
_PLACES = (("source", "start_index"), ("source_id", "split_idx_start"))


def _mapping(owner: object, name: str, index: int) -> Mapping[str, Any]:
    metadata = getattr(owner, name, None)
    if metadata is None:
        return _EMPTY
    if isinstance(metadata, MappingProxyType):
        return metadata
    if not isinstance(metadata, Mapping):
        raise TypeError(f"chunk {index}: .{name} must be a mapping, got {describe(metadata)}")
    return MappingProxyType(dict(metadata))


def _offset(value: object) -> int | None:
    # LangChain writes -1 when it could not find the chunk in its document.
    if type(value) is int and value >= 0:
        return value
    return None


def _hashable(value: object) -> object:
    try:
        hash(value)
    except TypeError:
        return None
    return value


def read_text(chunk: object, index: int) -> TextInfo | None:
    """The text, id, metadata, document id and start offset of a text chunk; `None` if not text.

    A text chunk is a `str`, or an object with a `str` in `text`, `page_content` (LangChain) or
    `content` (Haystack); a LlamaIndex `NodeWithScore` is read through its `node`. Raises
    `TypeError` naming the chunk if that attribute is not a `str`.
    """
    if isinstance(chunk, str):
        return TextInfo(chunk, None, _EMPTY, None, None)
    node = getattr(chunk, "node", None)
    if node is not None and hasattr(chunk, "score"):
        chunk = node
    for name in ("text", "page_content", "content"):
        text = getattr(chunk, name, _MISSING)
        if text is not _MISSING:
            break
    else:
        return None
    if not isinstance(text, str):
        raise TypeError(f"chunk {index}: .{name} must be a str, got {describe(text)}")
    metadata = _mapping(chunk, "meta" if name == "content" else "metadata", index)
    chunk_id = getattr(chunk, "id", None)
    if chunk_id is None:
        chunk_id = getattr(chunk, "node_id", None)
    source = _hashable(getattr(chunk, "source", None))
    start = _offset(getattr(chunk, "start", None))
    if source is None:
        source = _hashable(getattr(chunk, "ref_doc_id", None))
        start = _offset(getattr(chunk, "start_char_idx", None))
    for source_key, start_key in _PLACES:
        if source is not None:
            break
        source = _hashable(metadata.get(source_key))
        start = _offset(metadata.get(start_key))
    if source is None:
        start = None
    return TextInfo(text, chunk_id, metadata, source, start)
