"""Fault: what went wrong with a response, one enum for every layer that names it.

The filters (:class:`~streamstop._sse_filter.SSEFilter`,
:class:`~streamstop._family.FamilyStream`) set one when a stream ends in error, the proxy when
its upstream fails, the middleware when a held body is over its bound; the request record keeps
it (``upstream_error``) and the metrics count it by kind (``streamstop_upstream_errors``).

It is a ``str`` enum (``(str, Enum)``: Python 3.10 has no ``StrEnum``) whose ``str()`` is its
value, so the record's JSON, the access log and the metric labels read exactly as the loose
strings did before (``"too_large"``, not ``"Fault.TOO_LARGE"``), on every Python version.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RECORDED", "Fault", "recorded"]


class Fault(str, Enum):
    """A fault's kind; the value is what records, logs and metric labels read."""

    # The stream carried an error event of its own, or the filter was told to fail it (a
    # filter's kind: the record keeps it as BROKEN).
    UPSTREAM = "upstream"
    # A line, an event or a held body over its limit.
    TOO_LARGE = "too_large"
    # The body ended in the middle of an event, or short of its length.
    TRUNCATED = "truncated"
    # The upstream's stream broke off.
    BROKEN = "broken"
    # The upstream did not answer, or stalled, in time.
    TIMEOUT = "timeout"
    # The upstream could not be reached.
    UNREACHABLE = "unreachable"
    # The upstream's whole body did not parse.
    INVALID = "invalid"
    # The upstream answered a 4xx or 5xx, passed on.
    STATUS = "status"

    def __str__(self) -> str:
        # Python 3.12 formats a mixed-in enum as "Fault.X"; the value is what everyone reads.
        return self.value


# What the request record keeps (and the metrics count) for each kind: a filter's UPSTREAM
# (the stream failed on its own) is recorded as BROKEN, the others as themselves.
RECORDED: dict[Fault, Fault] = {fault: fault for fault in Fault if fault is not Fault.UPSTREAM}
RECORDED[Fault.UPSTREAM] = Fault.BROKEN


def recorded(fault: Fault) -> Fault:
    """The kind the request record keeps for ``fault``."""
    return RECORDED[fault]
