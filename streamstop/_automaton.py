"""The stop-string automaton: an Aho-Corasick trie with failure links, and a DFA for its shallow
states.

Why this module runs past 600 lines: it is one class, whose builders (trie, failure links,
DFA) and per-token path read and write the same private table layout (``_deep``, ``_kind``,
``_label``, ``_depth``, ``_owner``...). Split in two, that layout would be a contract between
modules, and the per-token path cannot afford an accessor. The memo and the cache
(``_memo.py``) and regex stops (``_patterns.py``), which need only a narrow seam, live apart.

Rules of this module (everything about matching lives here):

- A *state* is a node of the trie, identified by an ``int``; state 0 is the root (the empty
  string). After reading text, the state is the longest suffix of that text which is a prefix
  of some stop. So the text a buffer must hold back is exactly the state's string: the buffer
  stores one ``int`` per stream, never the text itself.
- A stop *completes* at the first position where the state's string has a stop as a suffix
  (earliest end). If several stops end there, the longest wins: it is the longest stop that is
  a suffix of the state's string, precomputed per state in ``_match_length``.
- Memory is linear in the total length of the stops, whatever they contain. States are numbered
  as they are made, so the nodes a stop adds are consecutive and each one's child is the next:
  such a *chain* node needs no table, only the character on its edge (``_label``, one string).
  Only nodes where stops part hold a dict of children (``_branches``, at most one per stop). No
  node keeps its string: a state's text is a slice of a stop that passes through it
  (``_owner``), cut to the state's depth, made only when asked.
- Transitions: from any state, a character either keeps a partial stop of two or more
  characters alive or leads where it would lead from the root (``_root_goto``). The shallowest
  states, breadth first and up to a byte budget, get a DFA table of the first kind (``_deep``:
  the state's own edges over its failure state's table), so each character costs one or two dict
  lookups; this covers every state of an ordinary stop set. Deeper states have ``None`` there
  and follow failure links down to a state with a table (amortised O(1) per character). So
  adversarial sets (long runs of one character, huge alphabets, stops that overlap each other)
  cannot blow the tables up.
- Whole tokens are stepped by ``_advance``, the per-token path, which returns a ``_Step``.
  Steps are memoized by (state, token): LLM tokens come from a fixed vocabulary, so a server
  soon answers most tokens with one dict lookup (``_root_step`` is the root's lookup, for the
  buffer; ``_advance_root`` works out what it did not know). A token the memo does not know
  costs one C-level test if it has none of the stops' first characters (from the root), or a
  dict test and the root's step if its first character does not continue the held partial
  stop; only tokens that continue a partial walk. The memo (``_memo.py``, a mixin of
  :class:`StopAutomaton`) is shared by every stream using the automaton and bounded in bytes.
- Where text cannot contain a stop at all, C-level string operations skip it: a compiled
  character class finds the next character that can start a stop.
- Threads: an automaton may be used from several threads at once (the server builds big ones in
  a worker thread and runs them on the event loop). Tables are read-only once built; the memo's
  rules for threads, and the cache of :meth:`StopAutomaton.from_stops`, are in ``_memo.py``.

Regex stops (:class:`~streamstop._patterns.StopPatterns`, in ``_patterns.py``) follow rules of
their own, stated at the head of that module: the same cut and the same exact hold as literal
stops.

Offsets are half-open: a match ``[start, end)`` covers ``text[start:end]``.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from ._memo import (
    _CACHE,
    _GIL,
    _MEMO_SLOT_BYTES,
    _MEMO_TEXT_LIMIT,
    _PASS_THROUGH,
    DEFAULT_MEMO_BYTES,
    _checked_bytes,
    _Step,
    _StepMemo,
)

__all__ = [
    "StopAutomaton",
    "StopMatch",
    "Stops",
    "normalize_stops",
]

Stops: TypeAlias = str | Iterable[str] | None

# The DFA tables of the shallow states (see the module docstring): at most this many bytes per
# state of the trie, plus a fixed allowance that covers every state of ordinary stop sets.
_DFA_BYTES_PER_STATE = 32
_DFA_BASE_BYTES = 1 << 20
# A class of characters that can begin a stop longer than this is compiled outside re's cache.
_CACHED_CLASS = 512
# Text up to this long is stepped through character by character, without the regex skip.
_SHORT_TEXT = 8

# A node's children: none, the next node only (its edge character is _label[node + 1]), or a
# dict in _branches.
_LEAF, _CHAIN, _BRANCH = 0, 1, 2


_EMPTY_STEP: _Step = (0, -1, "")


@dataclass(frozen=True, slots=True, repr=False)
class StopMatch:
    """A completed stop in some text: ``text[start:end] == stop``; ``pattern`` is the regex stop
    that matched it (``None`` for a literal stop)."""

    start: int
    end: int
    stop: str
    pattern: str | None = None

    def __repr__(self) -> str:
        # The pattern only when there is one: a literal stop's match reads as it always did.
        pattern = "" if self.pattern is None else f", pattern={self.pattern!r}"
        return f"StopMatch(start={self.start!r}, end={self.end!r}, stop={self.stop!r}{pattern})"


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


def _compile_class(chars: str) -> re.Pattern[str]:
    """A character class, compiled. Past a few hundred characters, not through re's own cache:
    a pattern there outlives the automaton, and hostile stop sets would fill it with big ones."""
    source = f"[{chars}]"
    if len(chars) <= _CACHED_CLASS:
        return re.compile(source)
    uncached = getattr(getattr(re, "_compiler", None), "compile", None)  # Python 3.11+
    return re.compile(source) if uncached is None else uncached(source, 0)


def _table_size(table: dict[str, int], own: dict[str, int]) -> int:
    """Bytes of a transition table with its own keys and values: the state numbers (ints above
    256 are objects) and the characters past Latin-1 (CPython caches only those as objects)."""
    size = sys.getsizeof(table) + 28 * len(own)
    for char in own:
        if char > "\xff":
            size += sys.getsizeof(char)
    return size


class StopAutomaton(_StepMemo):
    """Aho-Corasick automaton over a set of stop strings; build once, share between streams.

    Which stop wins, with stops ``["abcd", "bc"]`` and text ``"abcd"``: ``"bc"`` completes at
    offset 3, before ``"abcd"`` does at 4, so the match is ``[1, 3)``. With stops
    ``["b", "ab"]`` and text ``"ab"``, both end at offset 2 and the longer, ``"ab"``, wins:

    >>> StopAutomaton(["abcd", "bc"]).find("abcd")
    StopMatch(start=1, end=3, stop='bc')
    >>> StopAutomaton(["b", "ab"]).find("ab")
    StopMatch(start=0, end=2, stop='ab')

    Any stop set is accepted. Building takes time linear in the total number of characters of
    the stops (a microsecond or two each; see benchmarks/README.md) and keeps memory linear in
    it (at most 150 bytes per character, plus up to 1 MiB of DFA tables); ``memo_bytes`` bounds
    the memo of token steps on top of that (0 turns it off). :meth:`memory_size` tells what an
    automaton keeps.

    The automaton holds no per-stream state and is safe to share, between threads too;
    :meth:`from_stops` caches automata by stop set, within a byte budget
    (:meth:`set_cache_budget`).
    """

    __slots__ = (
        "_branches",
        "_deep",
        "_depth",
        "_fail",
        "_hold_length",
        "_kind",
        "_label",
        "_match_length",
        "_owner",
        "_passes",
        "_root_goto",
        "_start_search",
        "_table_bytes",
        "max_stop_length",
        "start_chars",
        "stops",
    )

    stops: tuple[str, ...]
    max_stop_length: int
    start_chars: frozenset[str]

    def __init__(self, stops: Stops, *, memo_bytes: int = DEFAULT_MEMO_BYTES) -> None:
        self._memo_budget = _checked_bytes("memo_bytes", memo_bytes)
        self.stops = normalize_stops(stops)
        self.max_stop_length = max(map(len, self.stops), default=0)
        self._build_trie()
        order = self._link()
        self._build_dfa(order)
        del order
        self._start_memo(len(self._depth))
        root_goto = self._root_goto
        # The characters that can begin a stop: text with none of them cannot affect the root.
        self.start_chars = frozenset(root_goto)
        self._passes = self.start_chars.isdisjoint
        self._start_search = (
            _compile_class("".join(re.escape(c) for c in sorted(root_goto))).search
            if root_goto
            else None
        )
        self._table_bytes += sys.getsizeof(self._lookups) + 2 * sys.getsizeof(self.start_chars)

    # -- building ----------------------------------------------------------------------------

    def _build_trie(self) -> None:
        stops = self.stops
        depth = array("i", [0])
        owner = array("i", [0])
        kind = bytearray(1)
        # -1 marks a stop's end until _link replaces it by the match length.
        match_length = [0]
        branches: dict[int, dict[str, int]] = {}
        labels = ["\0"]  # the root has no edge; a placeholder keeps _label[node] aligned
        for index, stop in enumerate(stops):
            state = 0
            position = 0
            length = len(stop)
            # Follow the part of the stop already in the trie.
            while position < length:
                char = stop[position]
                node_kind = kind[state]
                if node_kind == _CHAIN:
                    following = state + 1
                    if stops[owner[following]][position] != char:
                        break
                elif node_kind == _BRANCH:
                    following = branches[state].get(char, 0)
                    if not following:
                        break
                else:
                    break
                state = following
                position += 1
            if position == length:
                match_length[state] = -1
                continue
            # The rest becomes a run of new consecutive nodes, each the child of the one before.
            new = len(depth)
            char = stop[position]
            node_kind = kind[state]
            if node_kind == _BRANCH:
                branches[state][char] = new
            elif node_kind == _CHAIN:
                kind[state] = _BRANCH
                chain_char = stops[owner[state + 1]][depth[state]]
                branches[state] = {chain_char: state + 1, char: new}
            elif new == state + 1:
                kind[state] = _CHAIN
            else:
                kind[state] = _BRANCH
                branches[state] = {char: new}
            count = length - position
            depth.extend(range(position + 1, length + 1))
            owner.extend(array("i", [index]) * count)
            kind.extend(b"\x01" * (count - 1) + b"\x00")
            match_length.extend([0] * (count - 1))
            match_length.append(-1)
            labels.append(stop[position:])
        # A list, not the array: list[int] indexing is the faster on the per-token paths.
        self._depth = depth.tolist()
        self._owner = owner
        self._kind = kind
        self._branches = branches
        self._label = "".join(labels)
        self._match_length = match_length
        root_kind = kind[0]
        self._root_goto: dict[str, int] = (
            branches[0] if root_kind == _BRANCH else {self._label[1]: 1} if root_kind else {}
        )

    def _link(self) -> array[int]:
        """Failure links, match and hold lengths, breadth first; returns the order."""
        depth = self._depth
        kind = self._kind
        label = self._label
        branches = self._branches
        size = len(depth)
        fail = array("i", [0]) * size
        hold_length = array("i", [0]) * size
        match_length = self._match_length
        order = array("i", [0])
        head = 0
        while head < len(order):
            state = order[head]
            head += 1
            node_kind = kind[state]
            if node_kind == _LEAF:
                continue
            children = (
                branches[state].items()
                if node_kind == _BRANCH
                else ((label[state + 1], state + 1),)
            )
            for char, child in children:
                order.append(child)
                target = 0
                if state:
                    # The failure state's child by ``char``, down the failure chain.
                    link = fail[state]
                    while True:
                        link_kind = kind[link]
                        if link_kind == _CHAIN:
                            target = link + 1 if label[link + 1] == char else 0
                        elif link_kind == _BRANCH:
                            target = branches[link].get(char, 0)
                        if target or not link:
                            break
                        link = fail[link]
                    fail[child] = target
                child_depth = depth[child]
                # The longest stop that is a suffix of this state's string: the state itself if
                # it is a stop (no suffix is longer), otherwise the answer for its failure state.
                match_length[child] = (
                    child_depth if match_length[child] < 0 else match_length[target]
                )
                # The longest suffix that is a *proper* prefix of some stop: the first state on
                # the failure chain that still has children.
                hold_length[child] = child_depth if kind[child] else hold_length[target]
        self._fail = fail
        self._hold_length = hold_length
        return order

    def _build_dfa(self, order: array[int]) -> None:
        """The DFA tables of the shallow states, breadth first, within the byte budget.

        A state's table maps each character that leads to a state of depth 2 or more (the
        partial stop lives on) to that state: the state's own edges over its failure state's
        table. Every other character leads where it leads from the root. A state without edges
        shares its failure state's table. A state whose failure state has no table gets none.
        """
        fail = self._fail
        kind = self._kind
        label = self._label
        branches = self._branches
        size = len(order)
        deep: list[dict[str, int] | None] = [None] * size
        deep[0] = {}
        budget = _DFA_BYTES_PER_STATE * size + _DFA_BASE_BYTES
        spent = 0
        for index in range(1, size):
            state = order[index]
            inherited = deep[fail[state]]
            if inherited is None:
                continue
            node_kind = kind[state]
            if node_kind == _LEAF:
                deep[state] = inherited
                continue
            own = branches[state] if node_kind == _BRANCH else {label[state + 1]: state + 1}
            # An estimate first, so that a table over the budget is never built.
            if spent + 64 + 40 * (len(inherited) + len(own)) > budget:
                continue
            table = {**inherited, **own}
            spent += _table_size(table, own)
            deep[state] = table
        self._deep = deep
        stops = self.stops
        self._table_bytes = (
            spent
            + sum(map(sys.getsizeof, (self._depth, self._owner, self._kind, self._label)))
            + sum(map(sys.getsizeof, (self._fail, self._hold_length, deep, self._match_length)))
            + sys.getsizeof(branches)
            + sum(_table_size(table, table) for table in branches.values())
            + sys.getsizeof(stops)
            + sum(map(sys.getsizeof, stops))
            # The match lengths of stop ends, the depths past 256 (ints up to 256 are shared),
            # and the state numbers the tables return.
            + 28 * len(stops)
            + 28 * sum(map((256).__lt__, self._depth))
            + 2 * sys.getsizeof(self._root_goto)
        )

    # -- sharing -----------------------------------------------------------------------------

    @classmethod
    def from_stops(cls, stops: Stops | StopAutomaton) -> StopAutomaton:
        """Return a shared automaton for ``stops`` from a cache keyed by the stop set.

        An automaton passed in is returned as it is, so callers accept either. The cache keeps
        the automata used last within a byte budget (see :meth:`set_cache_budget`); one larger
        than the whole budget is built and returned but not kept. Safe to call from several
        threads: a thread asking for a set another thread is building waits for that build
        rather than doing it again.
        """
        if isinstance(stops, StopAutomaton):
            return stops
        # Sorted, so that the same set in another order shares one automaton: which stop wins
        # never depends on the order of the list.
        return _CACHE.get(tuple(sorted(normalize_stops(stops))), cls)

    @staticmethod
    def set_cache_budget(max_bytes: int) -> None:
        """Bound the bytes that the automata cached by :meth:`from_stops` may keep together.

        Each cached automaton is charged its tables and its whole memo budget, so the bound
        holds however much their memos grow. The least recently used go first, at once if the
        new budget is smaller. 0 turns the cache off. The default is 256 MiB.
        """
        _CACHE.set_budget(_checked_bytes("max_bytes", max_bytes))

    def memory_size(self) -> int:
        """Approximate bytes this automaton keeps: its tables, its stops and its memo."""
        return self._table_bytes + self._memo_used

    def _cache_charge(self) -> int:
        return self._table_bytes + self._memo_budget

    def __repr__(self) -> str:
        return f"StopAutomaton({list(self.stops)!r})"

    def __len__(self) -> int:
        """The number of distinct stops."""
        return len(self.stops)

    # -- running the automaton ---------------------------------------------------------------

    def _next(self, state: int, char: str) -> int:
        """The state after ``char`` from ``state``, for states without a DFA table."""
        deep = self._deep
        kind = self._kind
        while True:
            table = deep[state]
            if table is not None:
                return table.get(char) or self._root_goto.get(char, 0)
            node_kind = kind[state]
            if node_kind == _CHAIN:
                if self._label[state + 1] == char:
                    return state + 1
            elif node_kind == _BRANCH:
                child = self._branches[state].get(char)
                if child is not None:
                    return child
            state = self._fail[state]

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
        # The loops below read DFA tables only; a state without one (deep[state] is None: an
        # AttributeError, free until raised) hands over to _scan_deep at the same character.
        if length <= _SHORT_TEXT:
            # A token: stepping through it costs less than a call into the regex engine.
            try:
                for position, char in enumerate(text):
                    state = deep[state].get(char) or root_goto.get(char, 0)  # type: ignore[union-attr]
                    if match_length[state]:
                        return state, position + 1
            except AttributeError:
                return self._scan_deep(state, text, position)
            return state, -1
        position = 0
        try:
            while position < length:
                if not state:
                    # At the root nothing is pending: jump, in C, to the next character that
                    # can begin a stop. Most of a typical text is skipped here.
                    found = start_search(text, position)
                    if found is None:
                        return 0, -1
                    position = found.start()
                char = text[position]
                position += 1
                state = deep[state].get(char) or root_goto.get(char, 0)  # type: ignore[union-attr]
                if match_length[state]:
                    return state, position
        except AttributeError:
            return self._scan_deep(state, text, position - 1)
        return state, -1

    def _scan_deep(self, state: int, text: str, position: int) -> tuple[int, int]:
        """:meth:`scan` from ``position`` on, for any state."""
        start_search = self._start_search
        assert start_search is not None
        next_state = self._next
        match_length = self._match_length
        length = len(text)
        while position < length:
            if not state:
                found = start_search(text, position)
                if found is None:
                    return 0, -1
                position = found.start()
            state = next_state(state, text[position])
            position += 1
            if match_length[state]:
                return state, position
        return state, -1

    def run(self, state: int, text: str) -> int:
        """The state after ``text`` from ``state``, reading past completed stops."""
        deep = self._deep
        root_goto = self._root_goto
        position = 0
        try:
            for char in text:
                state = deep[state].get(char) or root_goto.get(char, 0)  # type: ignore[union-attr]
                position += 1
        except AttributeError:
            next_state = self._next
            for char in text[position:]:
                state = next_state(state, char)
        return state

    def _advance(self, state: int, text: str) -> _Step:
        """:meth:`scan` from ``state``, with what a buffer emits: the per-token path of every
        stream (see :class:`_Step`).

        From the root, text that passes untouched is answered with the one object
        :data:`_PASS_THROUGH` (its output is the text itself), so that callers can test for it by
        identity.

        >>> automaton = StopAutomaton(["</s>"])
        >>> automaton._advance(0, "a</")  # "</" held, in state 2; "a" out
        (2, -1, 'a')
        >>> automaton._advance(2, "s>b"), automaton._advance(2, "x")  # a stop ends at 2; released
        ((4, 2, None), (0, -1, '</x'))
        >>> automaton._advance(0, "hello") is _PASS_THROUGH
        True

        Three answers cost no walk, whatever the number of stops. At the root, steps are
        memoized by the token alone (LLM tokens come from a fixed vocabulary, so a server soon
        answers most with one dict lookup, :attr:`_root_step`), and a token not met before with
        none of the stops' first characters passes after one C-level ``frozenset.isdisjoint``.
        In a held state, steps are memoized by (state, token): a token whose first character
        does not continue the partial stop releases the held text and is then the root's answer
        (one dict test); only tokens that continue a partial walk, a character or two (see
        :meth:`_walk_from`).
        """
        if not state:
            result = self._root_memo.get(text)
            return self._advance_root(text) if result is None else result
        result = self._lookups[state](text)
        return self._advance_held(state, text) if result is None else result

    def _advance_root(self, text: str) -> _Step:
        """:meth:`_advance` from the root for a text that :attr:`_root_step` did not know: the
        walk, memoized, without looking in the memo again (for the buffer's per-token path)."""
        if self._passes(text):
            # No stop's first character: nothing to walk (one C-level test).
            if not text:
                return _EMPTY_STEP
            if len(text) <= _MEMO_TEXT_LIMIT and self._memo_budget:
                # _remember's common write, inlined for the commonest entry (an ASCII token
                # that passes): a new server makes one per token it has not met before.
                used = self._memo_used + _MEMO_SLOT_BYTES + 49 + len(text)
                if used <= self._memo_budget and _GIL and text.isascii():
                    self._root_memo[text] = _PASS_THROUGH
                    self._memo_used = used
                else:
                    self._remember(0, text, _PASS_THROUGH)
            return _PASS_THROUGH
        new_state, end = self.scan(0, text)
        result: _Step
        if end >= 0:
            result = (new_state, end, None)
        elif not new_state:
            result = _PASS_THROUGH
        else:
            # Nothing was held: out goes the text less what the new state holds.
            result = (new_state, -1, text[: len(text) - self._depth[new_state]])
        if len(text) <= _MEMO_TEXT_LIMIT and self._memo_budget:
            self._remember(0, text, result)
        return result

    def _advance_held(self, state: int, text: str) -> _Step:
        """:meth:`_advance` from a state that holds text (not the root) for a text that its
        lookup in ``_lookups`` did not know: the walk, memoized, without looking in the
        memo again (for the buffer's per-token path)."""
        deep = self._deep[state]
        depth = self._depth
        result: _Step
        if text and (
            text[0] not in deep if deep is not None else depth[self._next(state, text[0])] <= 1
        ):
            # The first character ends the held partial stop, so from there on the walk is the
            # root's over the same text: release the held text, then the root's answer.
            root_state, end, emitted = self._root_memo.get(text) or self._advance_root(text)
            if end >= 0:
                result = (root_state, end, None)
            else:
                held = self.stops[self._owner[state]][: depth[state]]
                result = (root_state, -1, held + (text if emitted is None else emitted))
            if len(text) <= _MEMO_TEXT_LIMIT and self._memo_budget:
                self._remember(state, text, result)
            return result
        new_state, end = self._walk_from(state, text)
        if end >= 0:
            result = (new_state, end, None)
        else:
            # The held text plus ``text``, less what the new state holds; sliced from a stop
            # through the state, so that it costs what it returns, however much is held.
            held_length = depth[state]
            count = held_length + len(text) - depth[new_state]
            if count <= 0:
                emitted = ""
            elif count <= held_length:
                emitted = self.stops[self._owner[state]][:count]
            else:
                emitted = self.stops[self._owner[state]][:held_length] + text[: count - held_length]
            result = (new_state, -1, emitted)
        if len(text) <= _MEMO_TEXT_LIMIT and self._memo_budget:
            self._remember(state, text, result)
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
        consumed = 0
        try:
            for consumed, char in enumerate(text, 1):  # read in the except
                state = deep[state].get(char) or root_goto.get(char, 0)  # type: ignore[union-attr]
                if match_length[state]:
                    return state, consumed
                if depth[state] <= consumed:
                    new_state, end, _ = self._advance(0, text)
                    return new_state, end
        except AttributeError:
            # Deep in a long partial stop (no DFA table): the same walk, through failure links.
            next_state = self._next
            for consumed, char in enumerate(text[consumed - 1 :], consumed):  # noqa: B020
                state = next_state(state, char)
                if match_length[state]:
                    return state, consumed
                if depth[state] <= consumed:
                    new_state, end, _ = self._advance(0, text)
                    return new_state, end
        return state, -1

    # -- what states stand for -----------------------------------------------------------------

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
        """The text the state stands for (a prefix of some stop), made when asked."""
        return self.stops[self._owner[state]][: self._depth[state]] if state else ""
