"""StreamFilter: the one protocol of a stream's stop filter, whatever the API (sans-I/O).

Rules of this module (a contract only: no code runs here):

- Every API family makes the filter of its streaming responses with
  :meth:`Family.stream_filter <streamstop._family.Family.stream_filter>`, once per stream: the
  default builds a :class:`~streamstop._family.FamilyStream` (the core shared by the native
  APIs), the OpenAI adapter (:mod:`._family_openai`) an :class:`~streamstop.chat.SSEFilter`
  (its usual-event fast path kept). The middleware holds a :class:`StreamFilter` and nothing
  more specific: adding an API never touches it.
- :meth:`~StreamFilter.feed` takes body bytes, split anywhere, and returns the bytes that may
  be sent now: an unchanged frame byte for byte, a rewritten one re-encoded, text that could
  still become a stop held back. Once :attr:`~StreamFilter.done`, it returns ``b""``.
- :meth:`~StreamFilter.flush` ends the body: the last frame (one cut off ends the stream in
  error, ``upstream_truncated``), then the text still held. Idempotent.
- :meth:`~StreamFilter.fail` ends the stream in error with ``payload`` (the family's error
  shape) as its last frame, the held text dropped (it may be the start of a stop); ``b""`` if
  the stream was over already.
- :attr:`~StreamFilter.done`: the response is complete (a cut of every output, the API's own
  end, an error, a frame over its limit): the caller ends the response. :attr:`~StreamFilter.cut`:
  it ended on a cut, so the upstream may be closed. :attr:`~StreamFilter.error`: why it ended
  in error (a :class:`~streamstop._faults.Fault`), else ``None``.
  :attr:`~StreamFilter.stop_strings`: the stop that cut each output, by index.

>>> from streamstop._families import FAMILIES
>>> [type(FAMILIES[name].stream_filter("</s>")).__name__ for name in ("openai", "anthropic")]
['SSEFilter', 'FamilyStream']
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ._faults import Fault

__all__ = ["StreamFilter"]


@runtime_checkable
class StreamFilter(Protocol):
    """What the middleware asks of a stream's filter (see the module's rules)."""

    @property
    def done(self) -> bool: ...

    @property
    def cut(self) -> bool: ...

    @property
    def error(self) -> Fault | None: ...

    @property
    def stop_strings(self) -> dict[int, str]: ...

    def feed(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...

    def fail(self, payload: dict[str, Any]) -> bytes: ...
