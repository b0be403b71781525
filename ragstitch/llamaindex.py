"""ragstitch for LlamaIndex: `StitchPostprocessor`, a node postprocessor.

Give it to a query engine (`node_postprocessors=[...]`) or call `postprocess_nodes`: the
retrieved nodes come back merged, overlaps pasted once, in document order (by `ref_doc_id` and
`start_char_idx`, which LlamaIndex's node parsers set), within a token budget. Each merged node
keeps the metadata of its first chunk and its document (`ref_doc_id`), its place there
(`start_char_idx`, `end_char_idx`), the best score of its chunks, and lists every chunk it holds
under `metadata["ragstitch_sources"]` (kept out of what the LLM and the embedder see). The
budget counts the nodes' text joined by the separator; LlamaIndex adds the metadata it shows
the LLM on top of that.

Needs the `llamaindex` extra (`pip install 'streamstop[llamaindex]'`).
"""

from __future__ import annotations

from typing import Any

from streamstop._extras import missing_extra

try:
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as error:  # the llamaindex extra is not installed
    message = missing_extra("ragstitch.llamaindex", "llama-index-core", "llamaindex")
    raise ImportError(message) from error

from ._provenance import SOURCES_KEY, segment_sources, stitch_for
from ._stitcher import DEFAULT_MAX_IDLE, Order
from ._text import DEFAULT_MIN_OVERLAP_CHARS
from ._tokenizer import WordTokenizer

__all__ = ["SOURCES_KEY", "StitchPostprocessor"]


class StitchPostprocessor(BaseNodePostprocessor):
    """Merge overlapping retrieved nodes within `budget` tokens of `tokenizer`.

    Nodes are chosen in the order given (a retriever's, best first) while they fit, then laid
    out as `order` says (`"document"` by default). See `ragstitch.Stitcher`.
    """

    budget: int
    tokenizer: Any = Field(default_factory=WordTokenizer)
    separator: str = "\n\n"
    order: Order = "document"
    min_overlap_chars: int = DEFAULT_MIN_OVERLAP_CHARS
    max_idle: int | None = DEFAULT_MAX_IDLE

    @classmethod
    def class_name(cls) -> str:
        return "StitchPostprocessor"

    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        result = stitch_for(self, nodes)  # NodeWithScore: text chunks (read through `.node`)
        merged = []
        for segment in result.segments:
            members = [nodes[i] for i in segment.records]
            first = members[0].node
            metadata = {k: v for k, v in first.metadata.items() if k != SOURCES_KEY}
            metadata[SOURCES_KEY] = segment_sources(result, segment)
            node = TextNode(
                text=segment.text,
                metadata=metadata,
                excluded_llm_metadata_keys=[*first.excluded_llm_metadata_keys, SOURCES_KEY],
                excluded_embed_metadata_keys=[*first.excluded_embed_metadata_keys, SOURCES_KEY],
            )
            if segment.start is not None:
                node.start_char_idx = segment.start
                node.end_char_idx = segment.start + len(segment.text)
            source = first.source_node
            if source is not None:
                node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(
                    node_id=source.node_id
                )
            scores = [m.score for m in members if m.score is not None]
            merged.append(NodeWithScore(node=node, score=max(scores) if scores else None))
        return merged
