"""GuardedHttpToolsProtocol: uvicorn's httptools protocol with the rules of
:mod:`streamstop.server._protocol` (the head timeout, the OpenAI-shaped 503 at the connection
limit), and the bound on a request head's size that uvicorn applies with h11 only.

A separate module: importing it needs httptools (the ``fast`` extra), and
:func:`~streamstop.server._protocol.protocol` names it only where that is installed.

The head's size. uvicorn's httptools protocol buffers a head (its URL, its headers, and inside
httptools a header not yet complete) for as long as the client sends one. Here, as h11 does with
``h11_max_incomplete_event_size`` (16 KiB by default), a head still incomplete after a read, of
more bytes than that, gets a ``400`` and the connection closed. A head is counted from the
connection's start, and from the end of each request message, read by read; a head that ends
within a read is not refused whatever its size (h11's rule too), and what follows a request's
end in the same read (a pipelined head) is counted from the next read on: either way one read
at most, so what is buffered stays bounded. (Such a pipelined head, if it then stalls, gets the
close without the ``408``.)
"""

from __future__ import annotations

from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._protocol import HeadGuard

__all__ = ["GuardedHttpToolsProtocol"]

# h11's default for h11_max_incomplete_event_size, which uvicorn leaves to h11.
_DEFAULT_HEAD_BYTES = 16 * 1024


class GuardedHttpToolsProtocol(HeadGuard, HttpToolsProtocol):
    """See the module's rules. Configured through
    :class:`~streamstop.server._protocol.ServerConfig`."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._guard(config)
        limit = getattr(config, "h11_max_incomplete_event_size", None)
        self._head_limit: int = _DEFAULT_HEAD_BYTES if limit is None else limit
        self._in_head = True  # the next bytes belong to a request head
        self._head_bytes = 0  # of the head being read

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Still in a head (on_headers_complete resets the count), and over its bound: refused.
        if (
            self._in_head
            and self._head_bytes > self._head_limit
            and not self.transport.is_closing()
        ):
            self.send_400_response(
                f"The request head is larger than {self._head_limit} bytes (max_head_bytes)."
            )

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        over = self._choose_app()
        super().on_headers_complete()
        self._head_arrived(over)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True

    def on_response_complete(self) -> None:
        # A pipelined request's head is complete already: it starts below, with no timer.
        if not self.transport.is_closing() and not self.pipeline:
            self._arm()
        super().on_response_complete()

    def _partial_head(self) -> bool:
        return self._head_bytes > 0
