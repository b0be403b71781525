"""What the framework integrations put in the metadata of a merged document or node: where each
chunk it holds came from. Kept apart so that `ragstitch.langchain` and `ragstitch.llamaindex`
describe their sources the same way, and so that it can be tested without either library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._result import Segment, StitchResult

__all__ = ["SOURCES_KEY", "segment_sources"]

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
