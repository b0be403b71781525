"""ragstitch: overlap-aware assembly of retrieved RAG chunks within a token budget.

Chunks cut by a sliding window share tokens with their neighbours. `stitch` finds the real
overlap between the end of what is assembled and the start of each chunk, pastes the shared
tokens once and charges them once (text chunks are stitched on their characters and charged in
the tokenizer's tokens, optionally laid out in document order)::

    >>> from ragstitch import stitch
    >>> stitch([["a1", "b1", "c1"], ["b1", "c1", "d"]], 4)
    ['a1', 'b1', 'c1', 'd']

`Stitcher` is the sans-I/O machine behind it, `astitch` its async adapter, and the records of a
`StitchResult` say, for each chunk, whether it was taken, its overlap, its cost and the span of
output tokens it contributed.
"""

# One version for the distribution that ships both packages (streamstop/_version.py).
from streamstop._version import __version__ as __version__

from ._astitch import astitch, astitch_result
from ._chunk import Chunk, HasText, HasTokens, TextChunk
from ._overlap import overlap
from ._result import ChunkRecord, Segment, StitchResult
from ._stitcher import (
    ChunkLike,
    OnOverflow,
    Order,
    Stitcher,
    stitch,
    stitch_result,
    stitch_text,
)
from ._tokenizer import HasIds, Tokenizer, WordTokenizer, count_tokens, load_tokenizer

__all__ = [
    "Chunk",
    "ChunkLike",
    "ChunkRecord",
    "HasIds",
    "HasText",
    "HasTokens",
    "OnOverflow",
    "Order",
    "Segment",
    "StitchResult",
    "Stitcher",
    "TextChunk",
    "Tokenizer",
    "WordTokenizer",
    "astitch",
    "astitch_result",
    "count_tokens",
    "load_tokenizer",
    "overlap",
    "stitch",
    "stitch_result",
    "stitch_text",
]
