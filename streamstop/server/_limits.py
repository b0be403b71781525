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

__all__ = ["RequestLimits", "set_by"]


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
    # Each regex stop is searched on every token over its window, so their number is the cost
    # per token: SGLang's users send one or two.
    max_stop_regex: int = field(
        default=16,
        metadata={"help": "regex stops per request (stop_regex)"},
    )
    max_stop_regex_length: int = field(
        default=512,
        metadata={"help": "characters in one regex stop's pattern"},
    )
    # The longest match a pattern may have is the window searched on each token and the most
    # text held back: as long as a literal stop may be.
    max_stop_regex_match_chars: int = field(
        default=1024,
        metadata={"help": "characters one regex stop may match (the width held back)"},
    )
    # An ordinary pattern searches a token in microseconds; one that backtracks catastrophically
    # is stopped here, so that it stalls the event loop no longer than a slow read would.
    max_stop_regex_ms: int = field(
        default=50,
        metadata={
            "help": "milliseconds one search of a regex stop may take (past it the response"
            " ends in error, code stop_regex_timeout)"
        },
    )
    # json.loads and json.dumps hold the GIL for 8-15 ms per MB of body in one C call (measured
    # on 2 shared cores; lists of token ids are the slowest), so no worker thread can keep a
    # larger body from stalling every stream: at 2 MiB the longest stall stays under 50 ms.
    # Raise it for image-heavy traffic, knowing the cost.
    max_body_bytes: int = field(
        default=2 * 1024 * 1024,
        metadata={"help": "bytes in a request body (413 beyond it)"},
    )
    # Embeddings of a batch or a long model list are whole responses of several MB: the proxy
    # holds them (to turn a truncated one into a 502) but parses them only up to
    # max_body_bytes, so a bigger one costs memory, not loop time; the middleware holds JSON
    # ones to cut them (parsed in a worker thread). A compressed body counts inflated: a gzip
    # bomb stops here.
    max_response_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "help": "bytes in a whole (not streamed) response held, and in the inflated size of"
            " a compressed one (502, or an error event in a stream, beyond it)"
        },
    )
    max_json_depth: int = field(
        default=64,
        metadata={"help": "nesting depth of a request's JSON body"},
    )
    # A chunk event is a few hundred bytes (a few KB with logprobs); each is parsed on the event
    # loop, at 8-15 ms per MB: 1 MiB keeps one event's parse well under 50 ms.
    max_sse_line_bytes: int = field(
        default=256 * 1024,
        metadata={"help": "bytes in one line of an upstream event stream"},
    )
    max_sse_event_bytes: int = field(
        default=1024 * 1024,
        metadata={"help": "bytes in one event of an upstream event stream"},
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RequestLimits.{item.name} must be a positive int, got {value!r}")


def set_by(name: str) -> str:
    """Where a refusal over the limit ``name`` says it is set: the flag and the variable of
    ``streamstop serve`` and ``proxy`` (the rule of :mod:`streamstop.server._commands`), so a
    client can tell its operator what to raise.

    >>> set_by("max_stops")
    "set by the server's --max-stops or STREAMSTOP_MAX_STOPS"
    """
    return f"set by the server's --{name.replace('_', '-')} or STREAMSTOP_{name.upper()}"
