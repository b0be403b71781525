"""The stop-string automaton: an Aho-Corasick trie with failure links, compiled to a sparse DFA.

Rules of this module (everything about matching lives here):

- A *state* is a node of the trie, identified by an ``int``; state 0 is the root (the empty
  string). After reading text, the state is the longest suffix of that text which is a prefix
  of some stop. So the text a buffer must hold back is exactly the state's string: the buffer
  stores one ``int`` per stream, never the text itself.
- A stop *completes* at the first position where the state's string has a stop as a suffix
  (earliest end). If several stops end there, the longest wins: it is the longest stop that is
  a suffix of the state's string, precomputed per state in ``_match_length``.
- Transitions are a DFA, built once, whose tables stay small: from any state, a character either
  keeps a partial stop of two or more characters alive (listed in the state's ``_deep`` table)
  or leads where it would lead from the root (``_root_goto``: a stop's first character, or the
  root). So each character costs one or two dict lookups, whatever the number of stops, and
  "does this character end the held partial?" is one membership test.
- Whole tokens are memoized per state (``advance``): LLM tokens come from a fixed vocabulary, so
  a server soon answers most tokens with one dict lookup. The memo is shared by every stream
  using the automaton and bounded.
- Where text cannot contain a stop at all, C-level string operations skip it: a compiled
  character class finds the next character that can start a stop.

Offsets are half-open: a match ``[start, end)`` covers ``text[start:end]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias

__all__ = ["PASS_THROUGH", "Step", "StopAutomaton", "StopMatch", "Stops", "normalize_stops"]

Stops: TypeAlias = str | Iterable[str] | None

# The memo of whole-token steps (see StopAutomaton.advance): only token-sized text is kept, and
# only so many entries per automaton (about 100 bytes each), first come first kept: the tokens
# met first are mostly the frequent ones.
_MEMO_TEXT_LIMIT = 32
_MEMO_LIMIT = 1 << 15
# Automata kept by StopAutomaton.from_stops: with full memos, a few MB each.
_CACHED_AUTOMATA = 32
# Text up to this long is stepped through character by character, without the regex skip.
_SHORT_TEXT = 8

# A memoized step (see StopAutomaton.advance): the new state, the end of a completed stop in the
# text or -1, and (when no stop completed) what a buffer emits.
Step: TypeAlias = tuple[int, int, str | None]

# The step from the root over text that completes nothing and ends back at the root: the text
# passes through untouched. One shared object, so the per-token paths can test it with ``is``.
PASS_THROUGH: Step = (0, -1, None)


@dataclass(frozen=True, slots=True)
class StopMatch:
    """A completed stop in some text: ``text[start:end] == stop``."""

    start: int
    end: int
    stop: str


def normalize_stops(stops: Stops) -> tuple[str, ...]:
    """Return the distinct non-empty stops, in first-seen order.

    ``None`` means no stops; a single ``str`` is one stop; otherwise every item must be a
    ``str``. Empty strings are dropped (an empty stop would match before any text).

    >>> normalize_stops(["</s>", "", "</s>", "###"])
    ('</s>', '###')
    """
    if stops is None:
        return ()
    if isinstance(stops, str):
        return (stops,) if stops else ()
    if isinstance(stops, (bytes, bytearray, memoryview)):
        raise TypeError(f"stops must be str or an iterable of str, not bytes: {stops!r}")
    try:
        items = iter(stops)
    except TypeError:
        raise TypeError(
            f"stops must be None, a str or an iterable of str, not {type(stops).__name__}: "
            f"{stops!r}"
        ) from None
    seen: dict[str, None] = {}
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"every stop must be a str, got {type(item).__name__}: {item!r}")
        if item:
            seen[item] = None
    return tuple(seen)


class StopAutomaton:
    """Aho-Corasick automaton over a set of stop strings; build once, share between streams.

    Which stop wins, with stops ``["abcd", "bc"]`` and text ``"abcd"``: ``"bc"`` completes at
    offset 3, before ``"abcd"`` does at 4, so the match is ``[1, 3)``. With stops
    ``["b", "ab"]`` and text ``"ab"``, both end at offset 2 and the longer, ``"ab"``, wins:

    >>> StopAutomaton(["abcd", "bc"]).find("abcd")
    StopMatch(start=1, end=3, stop='bc')
    >>> StopAutomaton(["b", "ab"]).find("ab")
    StopMatch(start=0, end=2, stop='ab')

    The automaton holds no per-stream state and is safe to share; :meth:`from_stops` caches
    automata by stop set.
    """

    __slots__ = (
        "_deep",
        "_depth",
        "_hold_length",
        "_match_length",
        "_memo",
        "_memo_size",
        "_prefix",
        "_root_goto",
        "_start_search",
        "max_stop_length",
        "start_chars",
        "stops",
    )

    stops: tuple[str, ...]
    max_stop_length: int
    start_chars: frozenset[str]

    def __init__(self, stops: Stops) -> None:
        self.stops = normalize_stops(stops)
        self.max_stop_length = max(map(len, self.stops), default=0)

        goto: list[dict[str, int]] = [{}]
        prefix = [""]
        for stop in self.stops:
            state = 0
            for char in stop:
                following = goto[state].get(char)
                if following is None:
                    following = len(goto)
                    goto[state][char] = following
                    goto.append({})
                    prefix.append(prefix[state] + char)
                state = following

        stop_set = frozenset(self.stops)
        fail = [0] * len(goto)
        match_length = [0] * len(goto)
        hold_length = [0] * len(goto)
        # Breadth-first, so that a state's failure target (a shorter string) is finished first.
        order = [0]
        for state in order:
            for char, child in goto[state].items():
                if state:
                    target = fail[state]
                    while target and char not in goto[target]:
                        target = fail[target]
                    fail[child] = goto[target].get(char, 0)
                order.append(child)
            if state:
                # The longest stop that is a suffix of this state's string: the state itself if
                # it is a stop (no suffix is longer), otherwise the answer for its failure state.
                match_length[state] = (
                    len(prefix[state]) if prefix[state] in stop_set else match_length[fail[state]]
                )
                # The longest suffix that is a *proper* prefix of some stop: the first state on
                # the failure chain that still has children.
                hold_length[state] = len(prefix[state]) if goto[state] else hold_length[fail[state]]

        # The DFA. A state's deep table maps each character that leads to a state of depth 2
        # or more (the partial stop lives on) to that state: the state's own edges over those
        # of its failure state. Every other character leads where it leads from the root. A
        # state without edges shares its failure state's table.
        deep: list[dict[str, int]] = [{}] * len(goto)
        for state in order[1:]:
            inherited = deep[fail[state]]
            deep[state] = {**inherited, **goto[state]} if goto[state] else inherited
        self._deep = deep
        self._root_goto = goto[0]
        self._prefix = prefix
        self._depth = [len(p) for p in prefix]
        self._match_length = match_length
        self._hold_length = hold_length
        self._memo: list[dict[str, Step]] = [{} for _ in goto]
        self._memo_size = 0
        # The characters that can begin a stop: text with none of them cannot affect the root.
        self.start_chars = frozenset(goto[0])
        self._start_search = (
            re.compile("[" + "".join(re.escape(c) for c in sorted(goto[0])) + "]").search
            if goto[0]
            else None
        )

    @classmethod
    def from_stops(cls, stops: Stops | StopAutomaton) -> StopAutomaton:
        """Return a shared automaton for ``stops`` (an LRU cache keyed by the stop set).

        An automaton passed in is returned as it is, so callers accept either.
        """
        if isinstance(stops, StopAutomaton):
            return stops
        # Sorted, so that the same set in another order shares one automaton: which stop wins
        # never depends on the order of the list.
        return _cached_automaton(tuple(sorted(normalize_stops(stops))))

    def __repr__(self) -> str:
        return f"StopAutomaton({list(self.stops)!r})"

    def __len__(self) -> int:
        """The number of distinct stops."""
        return len(self.stops)

    # -- running the automaton ---------------------------------------------------------------

    def scan(self, state: int, text: str) -> tuple[int, int]:
        """Run ``text`` from ``state``; stop at the first completed stop.

        Returns ``(state, end)``: ``end`` is the offset in ``text`` just past the completed
        stop, or ``-1`` if none completed (then ``state`` is the state after all of ``text``).
        The completed stop is ``self.match_length(state)`` characters long and may begin
        before ``text`` (in the text that led to the initial ``state``).
        """
        start_search = self._start_search
        if start_search is None:
            return 0, -1
        deep = self._deep
        root_goto = self._root_goto
        match_length = self._match_length
        length = len(text)
        if length <= _SHORT_TEXT:
            # A token: stepping through it costs less than a call into the regex engine.
            for position, char in enumerate(text, 1):
                state = deep[state].get(char) or root_goto.get(char, 0)
                if match_length[state]:
                    return state, position
            return state, -1
        position = 0
        while position < length:
            if not state:
                # At the root nothing is pending: jump, in C, to the next character that can
                # begin a stop. Most of a typical text is skipped here.
                found = start_search(text, position)
                if found is None:
                    return 0, -1
                position = found.start()
            char = text[position]
            position += 1
            state = deep[state].get(char) or root_goto.get(char, 0)
            if match_length[state]:
                return state, position
        return state, -1

    def run(self, state: int, text: str) -> int:
        """The state after ``text`` from ``state``, reading past completed stops."""
        deep = self._deep
        root_goto = self._root_goto
        for char in text:
            state = deep[state].get(char) or root_goto.get(char, 0)
        return state

    def advance(self, state: int, text: str) -> Step:
        """:meth:`scan` from ``state``, with what a buffer emits, memoized for token-sized text.

        Returns ``(new_state, end, emitted)``: ``end`` as from :meth:`scan`; when no stop
        completed (``end < 0``), ``emitted`` is the state's held text plus ``text`` less what
        the new state holds, the output of a buffer that does not include stops. From the root,
        text that passes untouched is answered with the one object :data:`PASS_THROUGH` (its
        output is the text itself), so that callers can test for it by identity.

        LLM tokens come from a fixed vocabulary and a stream spends most of its time at a few
        states, so a server soon sees the same (state, token) pairs over and over: one dict
        lookup then answers, whatever the number of stops.
        """
        result = self._memo[state].get(text)
        return self.step(state, text) if result is None else result

    def step(self, state: int, text: str) -> Step:
        """:meth:`advance` without looking in the memo first (for callers that just did), then
        memoized."""
        if not state and self.start_chars.isdisjoint(text):
            result = PASS_THROUGH if text else (0, -1, "")
        else:
            if not state:
                new_state, end = self.scan(0, text)
            elif text and text[0] not in self._deep[state]:
                # The first character ends the held partial stop, so from there on the walk is
                # the root's over the same text.
                new_state, end, _ = self.advance(0, text)
            else:
                new_state, end = self._walk_from(state, text)
            emitted: str | None = None
            if end < 0:
                pending = self._prefix[state] + text
                emitted = pending[: len(pending) - self._depth[new_state]]
            result = (new_state, end, emitted)
        if len(text) <= _MEMO_TEXT_LIMIT and self._memo_size < _MEMO_LIMIT:
            self._memo[state][text] = result
            self._memo_size += 1
        return result

    def _walk_from(self, state: int, text: str) -> tuple[int, int]:
        """From inside a partial stop: walk ``text`` only until the partial is left behind.

        Once the state's string lies wholly inside the consumed part of ``text``, the walk is in
        the state a walk from the root over ``text`` would be in, and goes on the same: its
        result is the root's, usually memoized. (A stop completed by then would have been
        found already, at or before the root walk found it.) So a token that follows held text
        costs a character or two, not a walk of its own.
        """
        deep = self._deep
        root_goto = self._root_goto
        match_length = self._match_length
        depth = self._depth
        for consumed, char in enumerate(text, 1):
            state = deep[state].get(char) or root_goto.get(char, 0)
            if match_length[state]:
                return state, consumed
            if depth[state] <= consumed:
                new_state, end, _ = self.advance(0, text)
                return new_state, end
        return state, -1

    def buffer_tables(self) -> tuple[list[dict[str, Step]], list[str]]:
        """For StopBuffer's per-token path, to read only: the memo (per state) and the states'
        texts."""
        return self._memo, self._prefix

    def find(self, text: str) -> StopMatch | None:
        """The first completed stop in ``text`` (earliest end, then longest), or ``None``."""
        state, end = self.scan(0, text)
        if end < 0:
            return None
        length = self._match_length[state]
        return StopMatch(end - length, end, text[end - length : end])

    def match_length(self, state: int) -> int:
        """Length of the stop completed at ``state`` (the longest one ending there), or 0."""
        return self._match_length[state]

    def hold_length(self, state: int) -> int:
        """Length of the longest suffix of the state's text that is a proper prefix of a stop."""
        return self._hold_length[state]

    def state_text(self, state: int) -> str:
        """The text the state stands for (a prefix of some stop)."""
        return self._prefix[state]


@lru_cache(maxsize=_CACHED_AUTOMATA)
def _cached_automaton(stops: tuple[str, ...]) -> StopAutomaton:
    return StopAutomaton(stops)
