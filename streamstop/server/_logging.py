"""Logging for ``streamstop serve`` and ``proxy``: repeated errors once per interval, and the
access log's handler.

A flood (half-open connections, a client hammering with bad requests, the process out of file
descriptors) makes the same warning or traceback thousands of times a second; written each
time, the log grows by hundreds of megabytes and its disk becomes the next fault. So
:class:`RepeatFilter` lets the first record of a kind through, drops the repeats for
``interval`` seconds, and lets the next one through with how many were dropped:
``Exceeded concurrency limit. (and 4,211 more like this in the last 10 s)``. A kind is the
logger, the level, the unformatted message and the exception's type: the same line with other
arguments (a client address) counts as a repeat.

Only the standard library: this module is imported by the CLI before uvicorn is.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["ACCESS_LOGGER", "FLOOD_LOGGERS", "RepeatFilter", "install_logging"]

ACCESS_LOGGER = "streamstop.access"
# Where a flood shows up: uvicorn's warnings and tracebacks, asyncio's accept() errors (out of
# file descriptors), and ours.
FLOOD_LOGGERS = ("uvicorn.error", "asyncio", "streamstop")

_Key = tuple[str, int, str, "type[BaseException] | None"]


@dataclass
class _Seen:
    since: float  # when the record that went through was logged
    dropped: int = 0


class RepeatFilter(logging.Filter):
    """Let one record of a kind through per ``interval`` seconds, with the count of the rest.

    ``clock`` is a monotonic clock in seconds (a test passes its own). At most ``max_kinds``
    kinds are remembered: past that the oldest are forgotten, so hostile variety in messages
    cannot grow memory without bound.
    """

    def __init__(
        self,
        interval: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = 1024,
    ) -> None:
        super().__init__()
        if not interval > 0:
            raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
        self.interval = interval
        self._clock = clock
        self._max_kinds = max_kinds
        self._seen: dict[_Key, _Seen] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        key: _Key = (
            record.name,
            record.levelno,
            str(record.msg),
            type(error) if error is not None else None,
        )
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.since < self.interval:
                seen.dropped += 1
                return False
            dropped = seen.dropped if seen is not None else 0
            elapsed = now - seen.since if seen is not None else 0.0
            self._seen.pop(key, None)
            self._seen[key] = _Seen(now)
            while len(self._seen) > self._max_kinds:
                del self._seen[next(iter(self._seen))]
        if dropped:
            record.msg = (
                f"{record.msg} (and {dropped:,} more like this in the last {elapsed:.0f} s)"
            )
        return True


class _MessageOnly(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


_installed: dict[str, logging.Filter] = {}


def install_logging(
    *,
    access_log: bool = True,
    interval: float = 10.0,
    loggers: Iterable[str] = FLOOD_LOGGERS,
) -> None:
    """Rate-limit the flood loggers and send the access log, one line per request, to stdout.

    Idempotent (each worker process calls it once it has built its app).
    """
    for name in loggers:
        logger = logging.getLogger(name)
        previous = _installed.pop(name, None)
        if previous is not None:
            logger.removeFilter(previous)
        repeat = RepeatFilter(interval)
        logger.addFilter(repeat)
        _installed[name] = repeat
    access = logging.getLogger(ACCESS_LOGGER)
    access.propagate = False
    for handler in list(access.handlers):
        if getattr(handler, "_streamstop", False):
            access.removeHandler(handler)
    if access_log:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(_MessageOnly())
        handler._streamstop = True  # type: ignore[attr-defined]
        access.addHandler(handler)
        access.setLevel(logging.INFO)
    else:
        access.setLevel(logging.CRITICAL + 1)
