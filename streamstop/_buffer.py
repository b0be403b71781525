"""StopBuffer: the sans-I/O filter for one stream.

``feed(chunk)`` returns the text that may be shown now; ``flush()`` ends the input and returns
what was held. No I/O, no event loop: the async and sync wrappers are loops around this.

What is held back, with stop ``"<stop>"``: after ``"hello<st"`` the buffer emits ``"hello"``
and holds ``"<st"``, the longest suffix that could still grow into a stop. Nothing else is held:
``"hello<sx"`` is emitted whole. The held text is always the automaton state's string, so a
buffer stores one ``int`` of state, however long the stream.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

from ._automaton import StopAutomaton, Stops
from ._memo import _PASS_THROUGH, _Step
from ._patterns import StopPatterns, checked_rules

__all__ = ["RuleBuffer", "StopBuffer"]


def _checked_error_policy(errors: str) -> str:
    if not isinstance(errors, str):
        raise TypeError(f"errors must be a str naming a codec error handler, got {errors!r}")
    try:
        codecs.lookup_error(errors)
    except LookupError:
        raise ValueError(
            f"unknown errors policy {errors!r}: use 'strict', 'replace', 'ignore', "
            "'backslashreplace' or a handler registered with codecs.register_error"
        ) from None
    return errors


class StopBuffer:
    """Incremental stop-string filter for one stream of text.

    >>> buffer = StopBuffer(["<stop>"])
    >>> buffer.feed("hello<st"), buffer.held
    ('hello', '<st')
    >>> buffer.feed("op> world"), buffer.stopped, buffer.stop_string
    ('', True, '<stop>')

    ``stops`` is ``None``, a ``str``, an iterable of ``str``, or a prebuilt
    :class:`StopAutomaton` (build one per stop set and share it between streams).
    With ``include_stop=True`` the matched stop is part of the output, and nothing is ever held
    back: all text up to the end of a match is emitted anyway.

    Chunks are ``str`` or UTF-8 ``bytes``; bytes are decoded incrementally, so a character split
    across chunks comes out whole once complete. Invalid bytes follow ``errors`` as in
    :meth:`bytes.decode`: ``"strict"`` (the default) raises :class:`UnicodeDecodeError`,
    ``"replace"`` substitutes U+FFFD.

    ``regex`` adds stops written as patterns (one ``str``, several, or a prebuilt
    :class:`~streamstop.StopPatterns`; the ``regex`` extra), cut by the same rule: the match
    that ends first wins, the longest at a tie, and only what could still become a match is
    held. :attr:`stop_string` is then the matched text and :attr:`stop_pattern` the pattern:

    >>> buffer = StopBuffer("</s>", regex=r"Question \\d{1,3}:")
    >>> buffer.feed("Done. Question 1"), buffer.held
    ('Done. ', 'Question 1')
    >>> buffer.feed("2: next"), buffer.stop_string, buffer.stop_pattern
    ('', 'Question 12:', 'Question \\\\d{1,3}:')

    Patterns whose matches have no longest length (``a.*b``) are refused unless
    ``max_match_chars`` bounds them. ``arm_after`` keeps every stop dormant until that marker
    has appeared, then arms them for the text after it; the marker itself passes through:

    >>> buffer = StopBuffer("Question:", arm_after="</think>")
    >>> buffer.feed("<think>Question: why?</th"), buffer.held
    ('<think>Question: why?</th', '')
    >>> buffer.feed("ink>42. Question: next"), buffer.stop_string
    ('ink>42. ', 'Question:')

    The semantics, limits and costs: docs/regex-and-gated-stops.md.
    """

    __slots__ = (
        "_advance_held",
        "_advance_root",
        "_at_root",
        "_automaton",
        "_decoder",
        "_errors",
        "_fast_state",
        "_finished",
        "_include_stop",
        "_lookups",
        "_root_step",
        "_state",
        "_stop_string",
        "_stopped",
    )

    _at_root: bool

    def __new__(
        cls,
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        errors: str = "strict",
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> StopBuffer:
        # With patterns or a marker, the buffer is the subclass that searches them: this class's
        # per-token path stays the literal stops' alone.
        if cls is StopBuffer and (
            regex is not None or arm_after is not None or max_match_chars is not None
        ):
            cls = RuleBuffer
        return object.__new__(cls)

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
        self._automaton = StopAutomaton.from_stops(stops)
        self._include_stop = bool(include_stop)
        self._errors = _checked_error_policy(errors)
        self._decoder: codecs.IncrementalDecoder | None = None
        self._state = 0
        # The state again while plain str chunks may take the hot path, -1 once they may not
        # (stopped, flushed, or bytes of an unfinished character pending): one load tells both.
        self._fast_state = 0
        # Read-only for everyone else. Whether the buffer takes str chunks with nothing held
        # and no stop reached: then a token ``t`` with ``automaton._root_step(t) is
        # _PASS_THROUGH`` comes out of feed() whole and leaves the buffer as it is, so that a
        # loop may pass it on without the call. A plain attribute: the async shells read it
        # before every token, and a property costs a call.
        self._at_root = True
        self._stop_string: str | None = None
        self._stopped = False
        self._finished = False
        automaton = self._automaton
        # Bound once: the per-token path calls them on every token.
        self._root_step = automaton._root_step
        self._lookups = automaton._lookups
        self._advance_root = automaton._advance_root
        self._advance_held = automaton._advance_held

    def __repr__(self) -> str:
        status = f"stopped at {self._stop_string!r}" if self._stop_string is not None else "running"
        return f"<StopBuffer {status}, holding {self.held!r}, stops={list(self.stops)!r}>"

    @property
    def automaton(self) -> StopAutomaton:
        return self._automaton

    @property
    def stops(self) -> tuple[str, ...]:
        return self._automaton.stops

    @property
    def include_stop(self) -> bool:
        return self._include_stop

    # StopStream reads it after every chunk it feeds: a getter in C (no Python frame).
    if TYPE_CHECKING:

        @property
        def stopped(self) -> bool:
            """Whether a stop has completed; everything after it is discarded."""

    else:
        stopped = property(
            attrgetter("_stopped"),
            doc="Whether a stop has completed; everything after it is discarded.",
        )

    @property
    def stop_string(self) -> str | None:
        """The stop that ended the stream, or ``None``."""
        return self._stop_string

    @property
    def stop_pattern(self) -> str | None:
        """The regex stop whose match ended the stream, or ``None`` (no stop, or a literal
        one)."""
        return None

    @property
    def patterns(self) -> StopPatterns | None:
        """The regex stops, if any."""
        return None

    @property
    def arm_after(self) -> str | None:
        """The marker the stops wait for, if any."""
        return None

    @property
    def armed(self) -> bool:
        """Whether the stops are armed: no ``arm_after``, or its marker has appeared."""
        return True

    @property
    def held(self) -> str:
        """Text fed but not yet emitted, because it could still become a stop."""
        if self._include_stop or self._stop_string is not None:
            return ""
        return self._automaton.state_text(self._state)

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> str:
        """Take the next chunk; return the text that is now safe to emit (often all of it).

        After a stop has completed, returns ``""``: that text lies past the stop.
        """
        # The per-token path of every stream, for str chunks while running: from any state, one
        # dict lookup answers the tokens met before (the automaton's _root_step and
        # _lookups; keyed by str, so a chunk of another type misses); a token not met before
        # passes in one C-level test if it has none of the stops' first characters; any other
        # is worked out by the automaton. Lookups are read into locals before the call: called
        # straight off ``self``, a bound method is a lookup CPython 3.11 does not specialise.
        state = self._fast_state
        if not state:
            root_step = self._root_step
            try:
                step = root_step(chunk)  # type: ignore[arg-type]
            except TypeError:  # unhashable, so not text: reported by _feed_other
                return self._feed_other(chunk)
            if step is _PASS_THROUGH:
                # __class__ rather than type(): the same answer for str, at a third less, on
                # most tokens of every stream.
                if chunk.__class__ is str:
                    return chunk
                # Equal to a known token but a str subclass: given back as plain text, as the
                # first time it was seen, whatever the shared memo holds.
                return self._feed_other(chunk)
            if step is None:
                if type(chunk) is not str:
                    return self._feed_other(chunk)
                advance_root = self._advance_root
                step = advance_root(chunk)
                if step is _PASS_THROUGH:
                    return chunk
        else:
            if state < 0:
                return self._feed_other(chunk)
            lookups = self._lookups
            try:
                step = lookups[state](chunk)  # type: ignore[arg-type]
            except TypeError:
                return self._feed_other(chunk)
            if step is None:
                if type(chunk) is not str:
                    return self._feed_other(chunk)
                advance_held = self._advance_held
                step = advance_held(state, chunk)
        # Here the chunk is a str, maybe of a subclass (a memo hit), and the step is not
        # _PASS_THROUGH (only the root's can be), so its text is plain str anyway: slices and
        # joins of the plain text it was worked out from. No typing.cast: it is a call, on
        # every token.
        new_state, end, emitted = step
        if end < 0 and not self._include_stop:
            self._state = self._fast_state = new_state
            self._at_root = not new_state
            return emitted  # type: ignore[return-value]  # a str whenever end < 0
        return self._apply(state, chunk, step)  # type: ignore[arg-type]

    def _feed_other(self, chunk: object) -> str:
        if self._stop_string is not None or self._finished:
            return self._feed_after_end(chunk)
        text = self._decode(chunk)
        piece = self._advance(text)
        if self._decoder is not None and self._stop_string is None and self._decoder.getstate()[0]:
            # Bytes of an unfinished character are pending: a str chunk now would be an error,
            # which only the slow path checks.
            self._fast_state = -1
            self._at_root = False
        return piece

    def _advance(self, text: str) -> str:
        return self._apply(self._state, text, self._automaton._advance(self._state, text))

    def _apply(self, state: int, text: str, step: _Step) -> str:
        """Take the automaton's step by ``text`` from ``state`` (see StopAutomaton.advance)."""
        new_state, end, emitted = step
        if end < 0:
            self._state = self._fast_state = new_state
            self._at_root = not new_state
            if self._include_stop or emitted is None:  # None: passed through whole
                return str(text)  # plain text, for a chunk of a str subclass too
            return emitted
        automaton = self._automaton
        stop_length = automaton.match_length(new_state)
        if self._include_stop:
            self._stop(automaton.state_text(new_state)[-stop_length:])
            return text[:end]
        # The stop may have begun in the held text: cut in the combined text.
        pending = automaton.state_text(state) + text if state else text
        cut = len(pending) - len(text) + end - stop_length
        self._stop(pending[cut : cut + stop_length])
        return pending[:cut]

    def _stop(self, stop_string: str) -> None:
        self._stop_string = stop_string
        self._stopped = True
        self._state = 0
        self._fast_state = -1
        self._at_root = False

    def flush(self) -> str:
        """End of input: return the held text, which turned out not to be a stop.

        Returns ``""`` after a stop. Calling it twice is harmless; feeding after it is an error.
        """
        if self._finished:
            return ""
        tail = ""
        if self._decoder is not None and self._stop_string is None:
            # An unfinished character at the very end: an error under "strict", U+FFFD under
            # "replace". It may still complete a stop.
            decoded = self._decoder.decode(b"", final=True)
            if decoded:
                tail = self._apply(
                    self._state, decoded, self._automaton._advance(self._state, decoded)
                )
        self._finished = True
        self._fast_state = -1
        self._at_root = False
        if self._stop_string is not None:
            return tail
        held = self.held
        self._state = 0
        return tail + held

    def _decode(self, chunk: object) -> str:
        if isinstance(chunk, str):
            pending = self._decoder.getstate()[0] if self._decoder is not None else b""
            if pending:
                raise ValueError(
                    f"str chunk {chunk!r} arrived while the bytes of an unfinished UTF-8 "
                    f"character were pending: {pending!r}"
                )
            return str(chunk)
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError(f"chunks must be str or bytes, got {type(chunk).__name__}: {chunk!r}")
        if self._decoder is None:
            self._decoder = codecs.getincrementaldecoder("utf-8")(self._errors)
        return self._decoder.decode(chunk)

    def _feed_after_end(self, chunk: object) -> str:
        if not isinstance(chunk, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"chunks must be str or bytes, got {type(chunk).__name__}: {chunk!r}")
        if self._finished:
            raise RuntimeError(f"StopBuffer.feed({chunk!r}) called after flush()")
        # Past a completed stop: the text is discarded, undecoded (it is not ours to judge).
        return ""


# -- the buffer with regex stops or a marker -------------------------------------------------------
#
# The stop buffer with regex stops, or with stops armed only after a marker (``arm_after``).
#
# Its rules (the literal-only buffer's per-token path is untouched by any of it: a
# :class:`~streamstop.StopBuffer` made with ``regex=`` or ``arm_after=`` is this subclass):
#
# - Before the marker has appeared, nothing is a stop and nothing is held: every piece passes
#   whole. The marker is found across pieces (its own automaton keeps the partial marker as one
#   state); the text up to its end passes, and the stops are armed for the text after it, as if a
#   new stream began there (a stop cannot begin inside the marker).
# - Armed, the buffer holds ``pending``: the stream's text from the earliest position where a
#   literal stop or a pattern's match could still begin. A new piece is searched together with
#   it: the literal stops by their automaton (its state is the literal stop's partial, a suffix of
#   ``pending``), the patterns by :class:`StopPatterns`. The cut is at the match that ends
#   first, the longest at a tie (a literal stop and a pattern tie on the same text: the
#   literal stop is reported).
# - ``pending`` never holds a completed match, and is shorter than the widest stop or pattern,
#   so each piece costs a search over at most that width plus the piece.


class RuleBuffer(StopBuffer):
    """:class:`StopBuffer` with ``regex`` patterns or an ``arm_after`` marker (see the module's
    rules); made by ``StopBuffer(...)`` itself when either is given."""

    __slots__ = (
        "_armed",
        "_armed_plain",
        "_literal",
        "_literal_only",
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
        # With no patterns, the armed text goes through a literal-only buffer and its
        # per-token path (the marker's text is decoded already, so its errors do not matter).
        self._literal_only = (
            StopBuffer(self._automaton, include_stop=include_stop)
            if self._patterns is None
            else None
        )
        # The literal-only buffer while a str chunk may go straight to it (armed, running, no
        # bytes of an unfinished character pending): the gated stream's per-token path.
        self._armed_plain: StopBuffer | None = self._literal_only if self._armed else None
        self._literal = 0  # the literal stops' automaton state
        self._pending = ""
        self._stop_pattern: str | None = None
        # Every piece goes through feed(): the streams' shortcut for a token that passes the
        # literal stops would skip the patterns and the marker.
        self._fast_state = -1
        self._at_root = False

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
        return self._pending if self._literal_only is None else self._literal_only.held

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> str:
        plain = self._armed_plain
        if plain is not None and chunk.__class__ is str:
            piece = plain.feed(chunk)
            if plain.stopped:
                self._stop(plain.stop_string or "")
                self._armed_plain = None
            return piece
        if self._stopped or self._finished:
            return self._feed_after_end(chunk)
        piece = self._take(self._decode(chunk))
        decoder = self._decoder
        if self._armed and not self._stopped and not (decoder and decoder.getstate()[0]):
            self._armed_plain = self._literal_only
        else:
            self._armed_plain = None
        return piece

    def _take(self, text: str) -> str:
        if self._armed:
            return self._armed_text(text)
        marker = self._marker
        assert marker is not None
        state, end, _ = marker._advance(self._marker_state, text)
        if end < 0:
            self._marker_state = state
            return text  # nothing can be a stop yet: all of it passes
        self._armed = True
        rest = text[end:]
        return text[:end] + self._armed_text(rest) if rest else text[:end]

    def _armed_text(self, text: str) -> str:
        inner = self._literal_only
        if inner is None:
            return self._search(text) if text else ""
        piece = inner.feed(text)
        if inner.stopped:
            self._stop(inner.stop_string or "")
        return piece

    def _search(self, piece: str) -> str:
        """Search the held text and ``piece``; cut, or emit all but what could still match."""
        pending = self._pending
        text = pending + piece if pending else piece
        old = len(pending)
        length = len(text)
        automaton = self._automaton
        # The cut so far: (end, start, pattern), pattern None for a literal stop.
        cut: tuple[int, int, str | None] | None = None
        literal, found, _ = automaton._advance(self._literal, piece)
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
        self._armed_plain = None
        if self._stop_string is not None:
            return tail
        inner = self._literal_only
        held = inner.flush() if inner is not None else self.held
        self._pending = ""
        return tail + held
