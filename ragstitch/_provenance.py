"""What the framework integrations share: the stitch they run with their fields as options, and
what they put in the metadata of a merged document or node (where each chunk it holds came
from). Kept apart so that `ragstitch.langchain` and `ragstitch.llamaindex` stitch and describe
their sources the same way, and so that it can be tested without either library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ._result import Segment, StitchResult
from ._stitcher import Order, stitch_result

__all__ = ["SOURCES_KEY", "IntegrationSettings", "segment_sources", "stitch_for"]


class IntegrationSettings(Protocol):
    """The fields both integrations have: the stitcher's options they expose."""

    budget: int
    tokenizer: Any
    separator: str
    order: Order
    min_overlap_chars: int
    max_idle: int | None


def stitch_for(settings: IntegrationSettings, chunks: Sequence[Any]) -> StitchResult[Any]:
    """The stitch an integration runs over its documents or nodes, with its fields as options."""
    return stitch_result(
        list(chunks),
        settings.budget,
        tokenizer=settings.tokenizer,
        separator=settings.separator,
        order=settings.order,
        min_overlap_chars=settings.min_overlap_chars,
        max_idle=settings.max_idle,
    )


#: The metadata key under which a merged document or node lists the chunks it holds.
SOURCES_KEY = "ragstitch_sources"


def _plain(value: object) -> object:
    """`value` if it is JSON-like, else its `str`: metadata must survive serialisation."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def segment_sources(result: StitchResult[Any], segment: Segment) -> list[dict[str, Any]]:
    """One entry per chunk of `segment`: its index among the chunks given, id, document and
    start offset there, its characters in the segment's text, and its own metadata."""
    sources = []
    for index in segment.records:
        record = result.records[index]
        chars = record.chars
        assert chars is not None
        metadata: Mapping[str, Any] = record.metadata
        sources.append(
            {
                "index": index,
                "id": _plain(record.id),
                "source": _plain(record.source),
                "start": record.start,
                "chars": [chars[0] - segment.chars[0], chars[1] - segment.chars[0]],
                "metadata": {k: v for k, v in metadata.items() if k != SOURCES_KEY},
            }
        )
    return sources
