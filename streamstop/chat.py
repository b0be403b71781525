"""Stop strings for OpenAI-compatible streams: chat and legacy completion chunks, and their SSE.

The public import path of the chunk layer, whose parts live in one module per concept:

- :class:`ChunkFilter` and :func:`truncate_response` (``_chunks``): the rules for chunks and
  choices, sans-I/O;
- :class:`SSEFilter` (``_sse_filter``): those rules applied to the bytes of a streamed response,
  over the SSE framing of ``_sse``, sans-I/O;
- :class:`ChunkStream` and :class:`SyncChunkStream` (``_chunk_stream``): a filter around the
  ``openai`` client's streams, closing them when done (the only part that imports anyio).
"""

from ._chunk_stream import ChunkStream, SyncChunkStream
from ._chunks import ChunkFilter, truncate_response
from ._sse_filter import SSEFilter

__all__ = ["ChunkFilter", "ChunkStream", "SSEFilter", "SyncChunkStream", "truncate_response"]
