"""Inflater: a gzip or deflate body inflated piece by piece under a bound on its total size.

A body compressed although ``accept-encoding: identity`` was asked for comes from an app or an
upstream that is faulty or hostile: deflate reaches ~1000:1, so one 64 KiB read of a gzip bomb
inflated in one call is 64 MB in memory before any bound is checked. Here no call inflates more
than :data:`INFLATE_PIECE` bytes, and the running total is checked against the limit
(``RequestLimits.max_response_bytes``) piece by piece.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["INFLATABLE", "INFLATE_PIECE", "Inflater", "ResponseTooLarge"]

INFLATABLE = frozenset({b"gzip", b"x-gzip", b"deflate"})
INFLATE_PIECE = 64 * 1024


class ResponseTooLarge(Exception):
    """A response went over ``RequestLimits.max_response_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"The response is larger than the limit max_response_bytes={limit} bytes.")
        self.limit = limit


class Inflater:
    """Inflates a gzip or zlib body incrementally, at most :data:`INFLATE_PIECE` bytes at a
    time, raising :class:`ResponseTooLarge` once the inflated total passes ``limit``; a corrupt
    body raises :class:`zlib.error`."""

    def __init__(self, limit: int) -> None:
        self._decompress = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)  # gzip or zlib
        self._limit = limit
        self._size = 0

    def pieces(self, data: bytes, *, final: bool) -> Iterator[bytes]:
        """The inflated pieces of the next ``data``; ``final``: it is the body's last."""
        decompress = self._decompress
        while data:
            piece = decompress.decompress(data, INFLATE_PIECE)
            data = decompress.unconsumed_tail
            yield self._counted(piece)
        if final:
            while not decompress.eof:
                piece = decompress.decompress(b"", INFLATE_PIECE)
                if not piece:
                    break
                yield self._counted(piece)

    def _counted(self, piece: bytes) -> bytes:
        self._size += len(piece)
        if self._size > self._limit:
            raise ResponseTooLarge(self._limit)
        return piece
