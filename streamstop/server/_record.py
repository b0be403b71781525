"""RequestRecord: what the filtering layers observed about one request, for metrics and logs.

The outermost layer (the observability wrapper of ``serve`` and ``proxy``) puts a fresh record in
the ASGI scope under :data:`RECORD_KEY` before calling the app; the middleware and the proxy fill
in what only they know (the model, the number of stops, which stop fired, upstream faults); the
wrapper reads it when the response is over. Layers find it with :func:`record_of`, which returns
``None`` when no wrapper is present, so every layer still works alone. A scope copied with
``{**scope, ...}`` keeps the same record object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._faults import Fault

__all__ = ["RECORD_KEY", "RequestRecord", "record_of"]

RECORD_KEY = "streamstop.record"


@dataclass
class RequestRecord:
    """Observations about one request; every field but the id is filled by whoever knows it."""

    request_id: str
    route: str = ""
    model: str | None = None
    stops: int = 0
    # The stop that cut the response (the first one, when several choices were cut).
    stop_fired: str | None = None
    # How many choices a stop cut.
    choices_cut: int = 0
    # What went wrong upstream, if anything: a Fault (a str, so the log's JSON reads "timeout",
    # "broken"...), never Fault.UPSTREAM (a filter's own kind, recorded as Fault.BROKEN). The
    # record is a seam an app of its own may fill too: a plain string is kept as it is, and
    # counted as its value if that is a Fault's, else as "other".
    upstream_error: Fault | str | None = None


def record_of(scope: Mapping[str, Any]) -> RequestRecord | None:
    """The request's record, or ``None`` when nothing upstream of this layer collects one."""
    record = scope.get(RECORD_KEY)
    return record if isinstance(record, RequestRecord) else None
