"""RequestLimits: every bound on what one request may ask of the server, in one place.

A stop set, a body and an upstream's stream all come from outside; each bound on them is a named
field here with a default that says why it is that number. The middleware and the proxy enforce
them (over a limit: a 4xx in the OpenAI error shape naming the limit and the value); the CLI turns
every field into a flag and an environment variable (``max_stops``: ``--max-stops``,
``STREAMSTOP_MAX_STOPS``), so a field added here is configurable everywhere at once.

The library itself (:class:`~streamstop.StopAutomaton`) takes any stop set: limits belong to the
server layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["RequestLimits"]


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on one request and on what the upstream may send for it.

    Every field is a positive int; ``metadata["help"]`` is the CLI's help text.
    """

    max_stops: int = field(
        default=1024,
        metadata={"help": "stop strings per request (many stops are the point: hundreds pass)"},
    )
    max_stop_length: int = field(
        default=1024,
        metadata={"help": "characters in one stop string"},
    )
    max_stop_chars: int = field(
        default=65_536,
        metadata={"help": "characters in all of a request's stop strings together"},
    )
    # json.loads and json.dumps hold the GIL for about 8 ms per MB of body (one C call), so a
    # worker thread cannot keep a larger body from stalling every stream: at 4 MiB the longest
    # stall stays under 50 ms. Raise it for image-heavy traffic, knowing the cost.
    max_body_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata={
            "help": "bytes in a request body (413 beyond it), and in a whole upstream response"
        },
    )
    max_json_depth: int = field(
        default=64,
        metadata={"help": "nesting depth of a request's JSON body"},
    )
    max_sse_line_bytes: int = field(
        default=1024 * 1024,
        metadata={"help": "bytes in one line of an upstream event stream"},
    )
    max_sse_event_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata={"help": "bytes in one event of an upstream event stream"},
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RequestLimits.{item.name} must be a positive int, got {value!r}")
