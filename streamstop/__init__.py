"""streamstop: incremental stop-string filtering for LLM token streams.

The core (:class:`StopAutomaton`, :class:`StopBuffer`, :func:`split_safe`, :func:`truncate`) is
sans-I/O; :class:`StopStream` and :class:`SyncStopStream` are thin loops around it.
:mod:`streamstop.chat` applies it to OpenAI-style chunk streams, and :mod:`streamstop.server`
puts it in front of any OpenAI-compatible server (the ``server`` extra).
"""

from ._automaton import StopAutomaton, StopMatch, Stops
from ._buffer import StopBuffer
from ._patterns import StopPatterns, StopPatternTimeout
from ._stream import StopStream, SyncStopStream
from ._text import StopRules, find_stop, split_safe, truncate
from ._version import __version__ as __version__

__all__ = [
    "StopAutomaton",
    "StopBuffer",
    "StopMatch",
    "StopPatternTimeout",
    "StopPatterns",
    "StopRules",
    "StopStream",
    "Stops",
    "SyncStopStream",
    "find_stop",
    "split_safe",
    "truncate",
]
