"""ragstitch for LangChain: `StitchCompressor`, a document compressor.

Put it in a `ContextualCompressionRetriever` (or call `compress_documents` yourself): the
retrieved documents come back merged, overlaps pasted once, in document order (by
`metadata["source"]` and `metadata["start_index"]`, which text splitters write with
`add_start_index=True`), within a token budget. Each merged document keeps the metadata of its
first chunk, says where it starts in its source (`start_index`), and lists every chunk it holds
under `metadata["ragstitch_sources"]`. Joined with the separator (a blank line, as LangChain's
stuff chain joins documents), they cost at most `budget` tokens of `tokenizer`.

Needs the `langchain` extra (`pip install 'streamstop[langchain]'`).

    >>> from langchain_core.documents import Document
    >>> compressor = StitchCompressor(budget=100, min_overlap_chars=8)
    >>> docs = [Document("brown fox jumps over the dog",
    ...                  metadata={"source": "a", "start_index": 10}),
    ...         Document("The quick brown fox jumps",
    ...                  metadata={"source": "a", "start_index": 0})]
    >>> [d.page_content for d in compressor.compress_documents(docs, "fox")]
    ['The quick brown fox jumps over the dog']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamstop._extras import missing_extra

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
    from pydantic import ConfigDict, Field
except ImportError as error:  # the langchain extra is not installed
    raise ImportError(
        missing_extra("ragstitch.langchain", "langchain-core", "langchain")
    ) from error

from ._provenance import SOURCES_KEY, segment_sources, stitch_for
from ._stitcher import DEFAULT_MAX_IDLE, Order
from ._text import DEFAULT_MIN_OVERLAP_CHARS
from ._tokenizer import WordTokenizer

__all__ = ["SOURCES_KEY", "StitchCompressor"]


class StitchCompressor(BaseDocumentCompressor):
    """Merge overlapping retrieved documents within `budget` tokens of `tokenizer`.

    Documents are chosen in the order retrieved (the best first) while they fit, then laid
    out as `order` says (`"document"` by default; `"retrieval"` keeps the retrieved order and
    merges only a document that overlaps the one before). See `ragstitch.Stitcher`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    budget: int
    tokenizer: Any = Field(default_factory=WordTokenizer)
    separator: str = "\n\n"
    order: Order = "document"
    min_overlap_chars: int = DEFAULT_MIN_OVERLAP_CHARS
    max_idle: int | None = DEFAULT_MAX_IDLE

    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """The merged documents, in layout order; `query` is not used (retrieval chose)."""
        result = stitch_for(self, documents)  # Documents: text chunks (`page_content`)
        merged = []
        for segment in result.segments:
            first = documents[segment.records[0]]
            metadata = dict(first.metadata)
            metadata.pop(SOURCES_KEY, None)
            if segment.start is not None:
                metadata["start_index"] = segment.start
            else:
                metadata.pop("start_index", None)
            metadata[SOURCES_KEY] = segment_sources(result, segment)
            merged.append(Document(page_content=segment.text, metadata=metadata))
        return merged
