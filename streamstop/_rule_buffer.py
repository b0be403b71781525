"""The stop buffer with regex stops, or with stops armed only after a marker (``arm_after``).

Rules of this module (the literal-only buffer's per-token path is untouched by any of it: a
:class:`~streamstop.StopBuffer` made with ``regex=`` or ``arm_after=`` is this subclass):

- Before the marker has appeared, nothing is a stop and nothing is held: every piece passes
  whole. The marker is found across pieces (its own automaton keeps the partial marker as one
  state); the text up to its end passes, and the stops are armed for the text after it, as if a
  new stream began there (a stop cannot begin inside the marker).
- Armed, the buffer holds ``pending``: the stream's text from the earliest position where a
  literal stop or a pattern's match could still begin. A new piece is searched together with
  it: the literal stops by their automaton (its state is the literal stop's partial, a suffix of
  ``pending``), the patterns by :class:`~streamstop._patterns.StopPatterns`. The cut is at the
  match that ends first, the longest at a tie (a literal stop and a pattern tie on the same
  text: the literal stop is reported).
- ``pending`` never holds a completed match, and is shorter than the widest stop or pattern,
  so each piece costs a search over at most that width plus the piece.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer
from ._patterns import StopPatterns, checked_rules

__all__ = ["RuleBuffer"]


class RuleBuffer(StopBuffer):
    """:class:`StopBuffer` with ``regex`` patterns or an ``arm_after`` marker (see the module's
    rules); made by ``StopBuffer(...)`` itself when either is given."""

    __slots__ = (
        "_armed",
        "_literal",
        "_marker",
        "_marker_state",
        "_patterns",
        "_pending",
        "_stop_pattern",
    )

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        super().__init__(stops, include_stop=include_stop, errors=errors)
        self._patterns, marker = checked_rules(regex, max_match_chars, arm_after)
        # From the shared cache: a server makes one buffer per choice, all with the same marker.
        self._marker = StopAutomaton.from_stops((marker,)) if marker else None
        self._marker_state = 0
        self._armed = self._marker is None
        self._literal = 0  # the literal stops' automaton state
        self._pending = ""
        self._stop_pattern: str | None = None
        # Every piece goes through feed(): the streams' shortcut for a token that passes the
        # literal stops would skip the patterns and the marker.
        self._fast_state = -1
        self.at_root = False

    def __repr__(self) -> str:
        status = f"stopped at {self._stop_string!r}" if self._stop_string is not None else "running"
        patterns = list(self._patterns.patterns) if self._patterns is not None else []
        marker = self._marker.stops[0] if self._marker is not None else None
        return (
            f"<StopBuffer {status}, holding {self.held!r}, stops={list(self.stops)!r}, "
            f"regex={patterns!r}, arm_after={marker!r}>"
        )

    @property
    def patterns(self) -> StopPatterns | None:
        return self._patterns

    @property
    def arm_after(self) -> str | None:
        return self._marker.stops[0] if self._marker is not None else None

    @property
    def armed(self) -> bool:
        """Whether the stops are armed: no ``arm_after``, or its marker has appeared."""
        return self._armed

    @property
    def stop_pattern(self) -> str | None:
        """The regex stop whose match ended the stream, or ``None`` (none did, or a literal
        stop did)."""
        return self._stop_pattern

    @property
    def held(self) -> str:
        if self._include_stop or self._stop_string is not None:
            return ""
        return self._pending

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> str:
        if self._stopped or self._finished:
            return self._feed_after_end(chunk)
        return self._take(self._decode(chunk))

    def _take(self, text: str) -> str:
        if self._armed:
            return self._search(text) if text else ""
        marker = self._marker
        assert marker is not None
        state, end, _ = marker.advance(self._marker_state, text)
        if end < 0:
            self._marker_state = state
            return text  # nothing can be a stop yet: all of it passes
        self._armed = True
        rest = text[end:]
        return text[:end] + self._search(rest) if rest else text[:end]

    def _search(self, piece: str) -> str:
        """Search the held text and ``piece``; cut, or emit all but what could still match."""
        pending = self._pending
        text = pending + piece if pending else piece
        old = len(pending)
        length = len(text)
        automaton = self._automaton
        # The cut so far: (end, start, pattern), pattern None for a literal stop.
        cut: tuple[int, int, str | None] | None = None
        literal, found, _ = automaton.advance(self._literal, piece)
        if found >= 0:
            end = old + found
            cut = (end, end - automaton.match_length(literal), None)
        patterns = self._patterns
        hold = -1
        if patterns is not None:
            match, hold = patterns.scan(text, old, cut[0] if cut is not None else length)
            if match is not None and (cut is None or (match[1], match[0]) < cut[:2]):
                cut = (match[1], match[0], match[2])
        if cut is not None:
            end, start, pattern = cut
            self._stop_pattern = pattern
            self._pending = ""
            self._literal = 0
            self._stop(text[start:end])
            return text[old:end] if self._include_stop else text[:start]
        literal_hold = length - automaton.hold_length(literal)
        hold = literal_hold if hold < 0 else min(hold, literal_hold)
        self._literal = literal
        self._pending = text[hold:]
        return piece if self._include_stop else text[:hold]

    def flush(self) -> str:
        if self._finished:
            return ""
        tail = ""
        if self._decoder is not None and self._stop_string is None:
            decoded = self._decoder.decode(b"", final=True)
            if decoded:
                tail = self._take(decoded)
        self._finished = True
        if self._stop_string is not None:
            return tail
        held = self.held
        self._pending = ""
        return tail + held
