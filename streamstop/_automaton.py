"""The stop-string automaton: an Aho-Corasick trie with failure links, and a DFA for its shallow
states.

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
- Whole tokens are stepped by ``_advance``, the per-token path, which returns a :class:`_Step`.
  Steps are memoized by (state, token): LLM tokens come from a fixed vocabulary, so a server
  soon answers most tokens with one dict lookup (``_root_step`` is the root's lookup, for the
  buffer; ``_advance_root`` works out what it did not know). A token the memo does not know
  costs one C-level test if it has none of the stops' first characters (from the root), or a
  dict test and the root's step if its first character does not continue the held partial
  stop; only tokens that continue a partial walk. The memo is shared by every stream using the
  automaton and bounded in bytes, entries small by construction; when full it refuses for a
  while, then forgets about half (see ``_remember`` for why).
- Where text cannot contain a stop at all, C-level string operations skip it: a compiled
  character class finds the next character that can start a stop.
- Threads: an automaton may be used from several threads at once (the server builds big ones in
  a worker thread and runs them on the event loop). Tables are read-only once built. The memo is
  read without a lock, each read a single dict lookup (atomic under the GIL, and per-dict locked
  on free-threaded builds); its common writes, an entry into a state's existing table within
  the budget or a refusal when full, are a store or two, atomic under the GIL, and take no lock
  either; new tables and forgetting are done under a lock, and so is every write on a
  free-threaded build. A memo entry, once written, never changes (it may be forgotten: a
  reader then misses and works the step out again).
  :meth:`StopAutomaton.from_stops`'s cache is guarded by a lock of its own.

Regex stops (:class:`StopPatterns`, in the last section) follow rules of their own, stated at
the head of that section: the same cut and the same exact hold as literal stops.

Offsets are half-open: a match ``[start, end)`` covers ``text[start:end]``.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
import warnings
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "DEFAULT_REGEX_TIMEOUT",
    "StopAutomaton",
    "StopMatch",
    "StopPatternTimeout",
    "StopPatterns",
    "Stops",
    "checked_rules",
    "first_characters",
    "normalize_patterns",
    "normalize_stops",
    "pattern_width",
]

Stops: TypeAlias = str | Iterable[str] | None

# The memo of whole-token steps (see StopAutomaton.advance and _remember). Only token-sized text
# is kept, and only steps whose output is short, so no entry keeps a long held text alive.
_MEMO_TEXT_LIMIT = 32
_MEMO_EMITTED_LIMIT = 2 * _MEMO_TEXT_LIMIT
# Bytes a memo may keep per automaton: about 75,000 entries (100-250 bytes each), the whole
# working set of 1,024 typical stops over a million characters of unseen text (15.6 MiB of
# (state, token) steps; 4 stops use 2.6 MiB), measured in benchmarks/README.md.
DEFAULT_MEMO_BYTES = 16 << 20
# Bytes all the automata kept by StopAutomaton.from_stops may take together, each charged its
# tables plus its whole memo budget: about 15 automata with full memos.
DEFAULT_CACHE_BYTES = 256 << 20
# The DFA tables of the shallow states (see the module docstring): at most this many bytes per
# state of the trie, plus a fixed allowance that covers every state of ordinary stop sets.
_DFA_BYTES_PER_STATE = 32
_DFA_BASE_BYTES = 1 << 20
# What one memo entry costs besides its strings: the dict slot (with the dict's spare room) and
# the step tuple. Checked against tracemalloc on real streams: the count runs above what is
# measured (the token strings are often the caller's too), so the budget is an upper bound.
_MEMO_SLOT_BYTES = 48
_MEMO_TABLE_BYTES = sys.getsizeof({"": 0})
_STEP_BYTES = 64
# Whether the interpreter runs with the GIL (so a single store is atomic; see _remember). A
# free-threaded build may turn it on later, never off.
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()
# A class of characters that can begin a stop longer than this is compiled outside re's cache.
_CACHED_CLASS = 512
# Text up to this long is stepped through character by character, without the regex skip.
_SHORT_TEXT = 8

# A node's children: none, the next node only (its edge character is _label[node + 1]), or a
# dict in _branches.
_LEAF, _CHAIN, _BRANCH = 0, 1, 2


_Step: TypeAlias = tuple[int, int, str | None]
"""What :meth:`StopAutomaton.advance` returns: one step of a stream over a piece of text, the
tuple ``(state, end, emitted)``:

- ``state``: the state after the text (after the completed stop, if one completed);
- ``end``: the offset in the text just past the first completed stop, or -1 if none completed;
- ``emitted``: when no stop completed, the held text plus the text, less what ``state`` holds
  (what a buffer that does not include stops emits); ``None`` when a stop completed, and for
  :data:`_PASS_THROUGH`, whose output is the text itself.

With stop ``"</s>"``: from the root, ``"a</"`` is ``(2, -1, "a")`` (``"</"`` held, in state 2);
from there, ``"s>b"`` is ``(4, 2, None)`` (the stop ends at offset 2 of ``"s>b"``), and ``"x"``
is ``(0, -1, "</x")``.

A plain tuple, not a NamedTuple: CPython unpacks an exact tuple in one specialised instruction
and a tuple subclass through an iterator, which cost 60-130 ns on every token that is held or
starts a hold (measured with benchmarks/automaton_resources.py --against). Memoized steps are
shared, so never build one to compare with: test :data:`_PASS_THROUGH` by identity.
"""

# The step from the root over text that completes nothing and ends back at the root: the text
# passes through untouched. One shared object, so that callers can test it with ``is``.
_PASS_THROUGH: _Step = (0, -1, None)
_EMPTY_STEP: _Step = (0, -1, "")

# The memo of every state that has none yet: read-only, shared (see _remember).
_NO_MEMO: dict[str, _Step] = {}
_NO_LOOKUP = _NO_MEMO.get


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


def _checked_bytes(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be an int number of bytes, got {type(value).__name__}: {value!r}"
        )
    if value < 0:
        raise ValueError(f"{name} must be >= 0 bytes, got {value!r}")
    return value


def _entry_cost(text: str, step: _Step) -> int:
    """Bytes a memo entry keeps, strings included; more than any budget for one that keeps too
    much text (see _MEMO_EMITTED_LIMIT).

    A str takes ``sys.getsizeof``'s figure if ASCII, an upper bound otherwise (written out
    rather than asked: every memo miss comes here, and getsizeof's lookup, or a helper's call,
    costs more than the arithmetic).
    """
    size = _MEMO_SLOT_BYTES + (49 + len(text) if text.isascii() else 76 + 4 * len(text))
    if step is _PASS_THROUGH:
        return size
    emitted = step[2]
    if emitted is None or emitted is text:
        return size + _STEP_BYTES
    if len(emitted) > _MEMO_EMITTED_LIMIT:
        return sys.maxsize
    return size + _STEP_BYTES + (49 + len(emitted) if emitted.isascii() else 76 + 4 * len(emitted))


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


class StopAutomaton:
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
        "_forgets",
        "_hold_length",
        "_kind",
        "_label",
        "_lock",
        "_lookups",
        "_match_length",
        "_memo_budget",
        "_memo_used",
        "_owner",
        "_passes",
        "_refused",
        "_root_goto",
        "_root_memo",
        "_root_step",
        "_start_search",
        "_table_bytes",
        "_tables",
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
        size = len(self._depth)
        # The memo: a table per state that has memoized steps, keyed by the token. The root's
        # is never replaced (see _forget), so kept at hand too.
        self._root_memo: dict[str, _Step] = {}
        self._tables: dict[int, dict[str, _Step]] = {0: self._root_memo}
        # Every state's lookup in its table (a bound dict.get; one shared empty table's for the
        # states with none): what the per-token path of StopBuffer calls, one C-level call with
        # no Python frame, read-only for everyone else. A lookup, not the table: ``_insert`` and
        # ``_forget`` swap them as tables come and go.
        self._lookups: list[Callable[[str], _Step | None]] = [_NO_LOOKUP] * size
        self._root_step = self._lookups[0] = self._root_memo.get
        self._memo_used = 0
        self._forgets = 0
        self._refused = 0
        self._lock = threading.Lock()
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
        return _CACHE.get(tuple(sorted(normalize_stops(stops))))

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

    # -- the memo ------------------------------------------------------------------------------

    def _remember(self, state: int, text: str, result: _Step) -> None:
        """Memoize a step, within the memo's byte budget.

        When the memo is full, new steps are refused until the refused ones add up to what the
        memo holds; then about half of the entries are forgotten (a hash bit decides, a
        different bit each time) and the memo takes what is in use now. So a working set larger
        than the budget does not thrash: the memo keeps answering for the half it holds, as the
        first-come memo before it did, and still follows the traffic as it changes, at the cost
        of one pass over the entries per budget's worth of misses. A hit stays one dict lookup
        with no bookkeeping (LRU or CLOCK would write on every hit). Forgetting everything when
        full, the policy before, emptied the memo again and again once the working set (the
        1,024 typical stops over real tokens) outgrew 4 MiB; it follows a change of traffic
        faster, though (both measured in benchmarks/README.md).
        """
        entry = _entry_cost(text, result)
        budget = self._memo_budget
        if entry > budget:  # the memo is off (0), or a tiny budget
            return
        table = self._tables.get(state)
        used = self._memo_used + entry
        if used <= budget and table is not None and _GIL:
            # The common write, without the lock: with the GIL, each store is atomic, and
            # another thread's entry written between the read and the store of _memo_used is
            # left uncounted until the next _forget counts afresh. An uncontended lock costs
            # 60 ns to 1 us depending on the machine: up to as much as the rest of a miss.
            table[text] = result
            self._memo_used = used
            return
        if _GIL and used + (0 if table is not None else _MEMO_TABLE_BYTES) > budget:
            refused = self._refused + entry
            if refused < self._memo_used:
                # Refused, without the lock either: on a full memo that is every miss until
                # the next _forget. The count only says when to forget (a lost update delays
                # that by one entry).
                self._refused = refused
                return
        with self._lock:
            table = self._tables.get(state)
            if table is not None and self._memo_used + entry <= budget:
                table[text] = result
                self._memo_used += entry
                return
            if self._memo_used + entry + self._table_cost(state) > budget:
                self._refused += entry
                if self._refused < self._memo_used:
                    return
                self._refused = 0
                self._forget(half=True)
                if self._memo_used + entry + self._table_cost(state) > budget:
                    self._forget(half=False)
                    if entry + self._table_cost(state) > budget:
                        return
            self._insert(state, text, result, entry)

    def _table_cost(self, state: int) -> int:
        """What a new entry for ``state`` costs besides itself: the state's table, if new."""
        return 0 if state in self._tables else _MEMO_TABLE_BYTES

    def _insert(self, state: int, text: str, result: _Step, cost: int) -> None:
        # Under self._lock.
        table = self._tables.get(state)
        if table is None:
            table = self._tables[state] = {}
            self._lookups[state] = table.get
            cost += _MEMO_TABLE_BYTES
        table[text] = result
        self._memo_used += cost

    def _forget(self, *, half: bool) -> None:
        """Under self._lock: forget all the entries, or about half of them, chosen by one bit of
        a hash of (state, token), a different bit each time, so that none survives for long
        unused."""
        self._forgets += 1
        shift = self._forgets % 48 if half else 64
        used = 0
        for state, table in list(self._tables.items()):
            # A new, compact table rather than deletions in place, whose dict keeps its size.
            # A snapshot first (one C call): other threads may add entries meanwhile.
            kept = {
                text: step
                for text, step in list(table.items())
                if (hash(text) + state) >> shift & 1 and half
            }
            used += sum(_entry_cost(text, step) for text, step in kept.items())
            if not state:
                # In place: _root_step is bound to this table.
                table.clear()
                table.update(kept)
            elif kept:
                self._tables[state] = kept
                self._lookups[state] = kept.get
                used += _MEMO_TABLE_BYTES
            else:
                del self._tables[state]
                self._lookups[state] = _NO_LOOKUP
        self._memo_used = used

    def _memo_items(self) -> list[tuple[int, str, _Step]]:
        """What the memo holds now, as ``(state, text, step)``: a copy, to look at."""
        with self._lock:
            return [
                (state, text, step)
                for state, table in list(self._tables.items())
                for text, step in list(table.items())
            ]

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


class _AutomatonCache:
    """The automata of :meth:`StopAutomaton.from_stops`, least recently used first out, within a
    byte budget; every method may be called from any thread."""

    def __init__(self, budget: int) -> None:
        self._lock = threading.Lock()
        self._budget = budget
        self._used = 0
        self._entries: OrderedDict[tuple[str, ...], StopAutomaton] = OrderedDict()
        self._building: dict[tuple[str, ...], threading.Event] = {}

    def get(self, key: tuple[str, ...]) -> StopAutomaton:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
            building = self._building.get(key)
            if building is None:
                self._building[key] = threading.Event()
        if building is not None:
            # Another thread is building this set: its result, unless it could not be kept.
            building.wait()
            with self._lock:
                found = self._entries.get(key)
            return found if found is not None else StopAutomaton(key)
        try:
            automaton = StopAutomaton(key)
            with self._lock:
                self._add(key, automaton)
            return automaton
        finally:
            with self._lock:
                self._building.pop(key).set()

    def _add(self, key: tuple[str, ...], automaton: StopAutomaton) -> None:
        charge = automaton._cache_charge()
        if charge > self._budget:
            return
        self._entries[key] = automaton
        self._used += charge
        self._trim()

    def _trim(self) -> None:
        while self._used > self._budget:
            _, evicted = self._entries.popitem(last=False)
            self._used -= evicted._cache_charge()

    def set_budget(self, budget: int) -> None:
        with self._lock:
            self._budget = budget
            self._trim()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0

    @property
    def used(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._entries)


_CACHE = _AutomatonCache(DEFAULT_CACHE_BYTES)


# -- regex stops -----------------------------------------------------------------------------------
#
# Regex stops: patterns compiled for the stream filter, held back exactly as literal stops are.
#
# Their rules (everything about matching a pattern in a stream lives in this section):
#
# - Syntax: Python's :mod:`re`, checked by the standard library's own parser (so what ``re``
#   refuses is refused, with its message); the patterns run on the ``regex`` package (the
#   ``regex`` extra), whose ``partial=True`` search says where a match could still begin if more
#   text came, and whose ``timeout=`` bounds each search. The ``regex`` package's own additions
#   (``\p{...}``, ``\K``, fuzzy matching, version-1 sets) are not ``re`` syntax and are refused.
# - A pattern *matches* ``text[s:e]`` when it matches all of it (``fullmatch``), the text around
#   unseen: a stop is judged by its own text, never by where the stream happened to be cut. So
#   constructs that look outside the match are refused: anchors (``^``, ``$``, ``\A``, ``\Z``),
#   word boundaries (``\b``, ``\B``), lookarounds; and atomic groups and possessive repeats,
#   under which a longer text can hide a match that a shorter one shows (``(?>aab|a)a`` matches
#   ``"aa"`` but no part of ``"aab"``), so that no search over a window could be exact. A
#   pattern that matches the empty string is refused too: it would stop every stream at once.
# - Every match has a maximum length, the pattern's *width* (``\d{1,3}``: 3): a pattern without
#   one (``a.*b``) is refused unless ``max_match_chars`` bounds it, and then matches longer than
#   that are not matches. The width bounds the work: each new piece of text is searched together
#   with what is held, and what is held is shorter than the width, so the cost of a token does
#   not grow with the stream.
# - Which match cuts (the same rule as for literal stops): the one that ends first; at a tie, the
#   longest. Patterns ``\d+\.`` and ``\.`` on ``"v1.2."`` cut at ``"1."``, which ends first;
#   ``b|ab`` on ``"xab"`` gives ``"ab"``, the longer of the two that end there.
# - What is held back: from the earliest position where a match could still begin (``regex``'s
#   partial match), never more. With pattern ``\d{3}-\d{4}``, ``"call 555-12"`` emits
#   ``"call "`` and holds ``"555-12"``; ``"call 55x"`` holds nothing.
#
# Offsets are half-open, as everywhere: a match ``[start, end)`` covers ``text[start:end]``.

# The standard library's own parser (sre_parse before 3.11, and deprecated from then on).
_NEW = sys.version_info >= (3, 11)
_parser: Any = importlib.import_module("re._parser" if _NEW else "sre_parse")
_sre: Any = importlib.import_module("re._constants" if _NEW else "sre_constants")


# Seconds one search may take (a piece of text costs one or two searches per pattern, a few
# more where a match ends). An ordinary pattern takes microseconds on a token; only one that
# backtracks catastrophically (``(a|aa)+b`` on a run of a's) comes near, and this keeps it from
# stalling an event loop for longer than a slow network read. Per search, not per piece: a
# process that the machine preempts between two searches is not a pattern that is too slow.
DEFAULT_REGEX_TIMEOUT = 0.05

INSTALL_HINT = (
    "regex stops need the 'regex' package, in the 'regex' extra: pip install 'streamstop[regex]' "
    "(from a clone: pip install -e '.[regex]')"
)

# Constructs that see past the match or commit to a choice (see the module's rules).
_REFUSED: dict[Any, str] = {
    _sre.AT: "an anchor or word boundary (^, $, \\A, \\Z, \\b, \\B)",
    _sre.ASSERT: "a lookaround ((?=...), (?<=...))",
    _sre.ASSERT_NOT: "a lookaround ((?!...), (?<!...))",
}
for _name, _what in (
    ("ATOMIC_GROUP", "an atomic group ((?>...))"),
    ("POSSESSIVE_REPEAT", "a possessive repeat (*+, ++, ?+, {m,n}+)"),
):
    if hasattr(_sre, _name):
        _REFUSED[getattr(_sre, _name)] = _what


class StopPatternTimeout(TimeoutError):
    """A regex stop took longer than its time bound on one piece of text: it backtracks
    catastrophically on this text. The stream cannot be judged and should end in error."""

    def __init__(self, pattern: str, timeout: float) -> None:
        super().__init__(
            f"regex stop {pattern!r} took over timeout={timeout}s on one piece of text (it "
            "backtracks catastrophically): simplify the pattern, or raise the timeout"
        )
        self.pattern = pattern
        self.timeout = timeout


def _regex_module() -> Any:
    try:
        import regex
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return regex


def normalize_patterns(patterns: str | Iterable[str] | None) -> tuple[str, ...]:
    """The distinct patterns, in first-seen order: ``None`` is none, a ``str`` is one.

    >>> normalize_patterns([r"\\d+", r"\\d+", "x"])
    ('\\\\d+', 'x')
    """
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        patterns = (patterns,)
    elif isinstance(patterns, (bytes, bytearray, memoryview)):
        raise TypeError(f"regex must be a str or an iterable of str, not bytes: {patterns!r}")
    try:
        items = list(patterns)
    except TypeError:
        raise TypeError(
            f"regex must be None, a str or an iterable of str, not {type(patterns).__name__}: "
            f"{patterns!r}"
        ) from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"every regex stop must be a str, got {type(item).__name__}: {item!r}")
    return tuple(dict.fromkeys(items))


def _refused(items: Any) -> str | None:
    """What ``items`` (a parsed pattern's ops) holds that a stop pattern may not, if anything."""
    stack = [items]
    while stack:
        for op, av in stack.pop():
            what = _REFUSED.get(op)
            if what is not None:
                return what
            if op is _sre.SUBPATTERN:
                stack.append(av[-1])
            elif op is _sre.BRANCH:
                stack.extend(av[1])
            elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):
                stack.append(av[2])
            elif op is _sre.GROUPREF_EXISTS:
                stack.extend(branch for branch in av[1:] if branch is not None)
    return None


def pattern_width(pattern: str, max_match_chars: int | None = None) -> int:
    """The longest text ``pattern`` can match, cut to ``max_match_chars``; ValueError for a
    pattern a stop cannot be (see the module's rules), naming what to change.

    >>> pattern_width(r"Question \\d{1,3}:")
    13
    >>> pattern_width(r"a.*b", max_match_chars=80)
    80
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a regex stop must be a str, got {type(pattern).__name__}: {pattern!r}")
    try:
        with warnings.catch_warnings():  # "possible nested set" and such: not ours to warn of
            warnings.simplefilter("ignore")
            parsed = _parser.parse(pattern)
    except _sre.error as error:
        raise ValueError(f"regex stop {pattern!r} is not a valid pattern: {error}") from None
    what = _refused(parsed.data)
    if what is not None:
        raise ValueError(
            f"regex stop {pattern!r} holds {what}: a stop pattern is matched against its own "
            "text alone, so it cannot test what lies around it (write the characters instead, "
            "e.g. \\n for the start of a line)"
        )
    low, high = (int(bound) for bound in parsed.getwidth())
    if low == 0:
        raise ValueError(
            f"regex stop {pattern!r} matches the empty string, so it would stop every stream "
            "before its first character"
        )
    if high >= _sre.MAXREPEAT:
        if max_match_chars is None:
            raise ValueError(
                f"regex stop {pattern!r} can match text of any length (*, + or {{m,}}), so no "
                "window is sure to hold a match: bound the repeats ({1,80} for *), or pass "
                "max_match_chars=N to take matches of at most N characters"
            )
        return max_match_chars
    return high if max_match_chars is None else min(high, max_match_chars)


_CATEGORIES = {
    _sre.CATEGORY_DIGIT: r"\d",
    _sre.CATEGORY_NOT_DIGIT: r"\D",
    _sre.CATEGORY_SPACE: r"\s",
    _sre.CATEGORY_NOT_SPACE: r"\S",
    _sre.CATEGORY_WORD: r"\w",
    _sre.CATEGORY_NOT_WORD: r"\W",
}
_ADD_FLAGS = ((re.IGNORECASE, "i"), (re.DOTALL, "s"), (re.ASCII, "a"), (re.UNICODE, "u"))
_FIRST_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII


def _code(char: int) -> str:
    return f"\\U{char:08x}"  # safe anywhere, in a class or out


def _one_char(op: Any, av: Any) -> str | None:
    """The source of a pattern for the one character ``(op, av)`` matches, if it is one."""
    if op is _sre.LITERAL:
        return _code(av)
    if op is _sre.NOT_LITERAL:
        return f"[^{_code(av)}]"
    if op is _sre.ANY:
        return "."
    if op is not _sre.IN:
        return None
    parts: list[str] = []
    for item, value in av:
        if item is _sre.NEGATE:
            parts.insert(0, "^")
        elif item is _sre.LITERAL:
            parts.append(_code(value))
        elif item is _sre.RANGE:
            parts.append(f"{_code(value[0])}-{_code(value[1])}")
        elif item is _sre.CATEGORY and value in _CATEGORIES:
            parts.append(_CATEGORIES[value])
        else:
            return None
    return f"[{''.join(parts)}]"


def _first(items: Any) -> tuple[list[str] | None, bool]:
    """The sources of the characters a match of ``items`` can begin with (``None``: any, or
    not known), and whether ``items`` can match the empty string."""
    sources: list[str] = []
    for op, av in items:
        single = _one_char(op, av)
        if single is not None:
            return [*sources, single], False
        if op is _sre.SUBPATTERN:
            inner, empty = _first(av[-1])
            if inner is None:
                return None, False
            added = "".join(letter for flag, letter in _ADD_FLAGS if av[1] & flag)
            removed = "".join(letter for flag, letter in _ADD_FLAGS[:2] if av[2] & flag)
            if added or removed:
                scope = f"(?{added}{'-' + removed if removed else ''}:"
                inner = [f"{scope}{source})" for source in inner]
            sources += inner
        elif op is _sre.BRANCH:
            empty = False
            for branch in av[1]:
                inner, branch_empty = _first(branch)
                if inner is None:
                    return None, False
                sources += inner
                empty = empty or branch_empty
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):
            if av[1] == 0:
                continue
            inner, empty = _first(av[2])
            if inner is None:
                return None, False
            sources += inner
            empty = empty or av[0] == 0
        elif op is _sre.GROUPREF_EXISTS:
            yes, yes_empty = _first(av[1])
            no, no_empty = _first(av[2]) if av[2] is not None else ([], True)
            if yes is None or no is None:
                return None, False
            sources += yes + no
            empty = yes_empty or no_empty
        else:  # a backreference: any character
            return None, False
        if not empty:
            return sources, False
    return sources, True


def first_characters(pattern: str) -> Callable[[str, int], re.Match[str] | None] | None:
    """The ``search`` of a standard-library pattern matching each character that a match of
    ``pattern`` (checked by :func:`pattern_width`) can begin with; ``None`` if that may be any.

    >>> first_characters(r"\\nQuestion \\d{1,3}:")("abc\\nQ", 0).start()
    3
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = _parser.parse(pattern)
    sources, _ = _first(parsed.data)
    if not sources or ("." in sources and not parsed.state.flags & re.DOTALL):
        return None
    try:
        return re.compile("|".join(sources), parsed.state.flags & _FIRST_FLAGS).search
    except (re.error, OverflowError):  # pragma: no cover - built from a parsed pattern
        return None


def _checked_max(max_match_chars: object) -> int | None:
    if max_match_chars is None:
        return None
    if not isinstance(max_match_chars, int) or isinstance(max_match_chars, bool):
        raise TypeError(
            f"max_match_chars must be None or an int number of characters, got "
            f"{type(max_match_chars).__name__}: {max_match_chars!r}"
        )
    if max_match_chars < 1:
        raise ValueError(f"max_match_chars must be >= 1 character, got {max_match_chars!r}")
    return max_match_chars


def checked_rules(
    regex: str | Iterable[str] | StopPatterns | None,
    max_match_chars: int | None,
    arm_after: str | None,
) -> tuple[StopPatterns | None, str | None]:
    """``regex`` built (``None`` if there are no patterns) and ``arm_after`` checked (``None``
    if empty): for the filters that make a buffer per choice, so that errors come at once."""
    if arm_after is not None and not isinstance(arm_after, str):
        raise TypeError(
            f"arm_after must be None or a str, got {type(arm_after).__name__}: {arm_after!r}"
        )
    if regex is None:
        if max_match_chars is not None:
            raise ValueError(
                f"max_match_chars={max_match_chars!r} bounds regex stops, and regex is None"
            )
        return None, arm_after or None
    patterns = StopPatterns.of(regex, max_match_chars)
    return (patterns if len(patterns) else None), arm_after or None


class StopPatterns:
    """Regex stops compiled once, to share between streams (like :class:`StopAutomaton` for
    literal stops). Needs the ``regex`` extra.

    >>> patterns = StopPatterns([r"Question \\d+:", r"</tool_call\\s{0,4}>"], max_match_chars=64)
    >>> patterns.widths
    (64, 16)

    ``timeout`` is the time, in seconds, that one search may take (a piece of text costs one or
    two per pattern, a few more where a match ends); past it the search raises
    :class:`StopPatternTimeout`.
    """

    __slots__ = (
        "_any_first",
        "_engines",
        "_patterns",
        "_widths",
        "max_match_chars",
        "timeout",
        "width",
    )

    def __init__(
        self,
        patterns: str | Iterable[str],
        *,
        max_match_chars: int | None = None,
        timeout: float = DEFAULT_REGEX_TIMEOUT,
    ) -> None:
        self._patterns = normalize_patterns(patterns)
        self.max_match_chars = _checked_max(max_match_chars)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self._widths = tuple(pattern_width(item, self.max_match_chars) for item in self._patterns)
        self.width = max(self._widths, default=0)
        compiled = []
        regex: Any = _regex_module() if self._patterns else None
        for item in self._patterns:
            try:
                compiled.append(regex.compile(item, regex.VERSION0))
            except regex.error as error:  # pragma: no cover - re's parser took it
                raise ValueError(f"regex stop {item!r} is not a valid pattern: {error}") from None
        # (compiled, width, pattern, first) of each: what the searches read; ``first`` is the
        # ``search`` of a standard-library pattern for the characters a match can begin with.
        self._engines: tuple[tuple[Any, int, str, Any], ...] = tuple(
            zip(
                compiled,
                self._widths,
                self._patterns,
                [first_characters(item) for item in self._patterns],
                strict=True,
            )
        )
        # One search for every pattern's first characters: most pieces need nothing more.
        firsts = [engine[3] for engine in self._engines]
        self._any_first: Any = None
        if firsts and all(first is not None for first in firsts):
            parts = []
            for first in firsts:
                compiled_first = first.__self__
                letters = "".join(
                    letter
                    for flag, letter in ((re.IGNORECASE, "i"), (re.DOTALL, "s"), (re.ASCII, "a"))
                    if compiled_first.flags & flag
                )
                parts.append(f"(?{letters}:{compiled_first.pattern})")
            self._any_first = re.compile("|".join(parts)).search

    @classmethod
    def of(
        cls, patterns: str | Iterable[str] | StopPatterns, max_match_chars: int | None = None
    ) -> StopPatterns:
        """``patterns`` itself if it is built already, else :class:`StopPatterns` of it."""
        if isinstance(patterns, StopPatterns):
            if max_match_chars is not None and max_match_chars != patterns.max_match_chars:
                raise ValueError(
                    f"max_match_chars={max_match_chars!r} given with StopPatterns built with "
                    f"max_match_chars={patterns.max_match_chars!r}: pass one or the other"
                )
            return patterns
        return cls(patterns, max_match_chars=max_match_chars)

    @property
    def patterns(self) -> tuple[str, ...]:
        return self._patterns

    @property
    def widths(self) -> tuple[int, ...]:
        """The longest match of each pattern, in order (see :func:`pattern_width`)."""
        return self._widths

    def __len__(self) -> int:
        return len(self._patterns)

    def __repr__(self) -> str:
        return f"StopPatterns({list(self._patterns)!r}, max_match_chars={self.max_match_chars!r})"

    def scan(self, text: str, old: int, limit: int) -> tuple[tuple[int, int, str] | None, int]:
        """Search ``text`` (the held text, ``old`` characters, then the new piece) for what
        ends in ``(old, limit]``: ``(cut, hold)``. ``cut`` is the match that ends first (the
        longest at that end) as ``(start, end, pattern)``, or ``None``; ``hold`` is where a
        match could still begin if more text came (``len(text)`` if nowhere), meaningful only
        without a cut and when ``limit`` is ``len(text)``.

        Given (what the buffer ensures) that no match lies wholly in ``text[:old]``.
        """
        length = len(text)
        any_first = self._any_first
        if any_first is not None and any_first(text, max(0, old - self.width + 1)) is None:
            return None, length  # no pattern's match, nor its beginning, can start anywhere
        best: tuple[int, int, str] | None = None
        hold = length
        timeout = self.timeout
        for compiled, width, pattern, first in self._engines:
            low = max(0, old - width + 1)
            if first is not None:
                # Neither a match nor its beginning can start where no first character is: most
                # tokens are answered here, at C speed, without the regex engine's call.
                candidate = first(text, low)
                if candidate is None:
                    continue
                low = candidate.start()
            try:
                if limit == length:
                    # One search for both: a complete match if there is one anywhere (the
                    # partial search prefers those), else where a partial one begins.
                    found = compiled.search(text, low, length, partial=True, timeout=timeout)
                else:
                    found = compiled.search(text, low, limit, timeout=timeout)
                if found is None:
                    continue
                if not found.partial:
                    match = self._first_end(compiled, width, text, old, limit, found.start())
                    if match is not None:
                        start, end = match
                        if best is None or (end, start) < (best[1], best[0]):
                            best = (start, end, pattern)
                            limit = end
                        continue
                    if limit < length:
                        continue
                    found = None  # only matches longer than max_match_chars: not matches
                floor = length - width + 1
                if found is None or found.start() < floor:
                    # A beginning longer than the width is no match's (with max_match_chars).
                    found = compiled.search(
                        text, max(low, floor, 0), length, partial=True, timeout=timeout
                    )
                if found is not None and found.start() < hold:
                    hold = found.start()
            except TimeoutError:
                raise StopPatternTimeout(pattern, self.timeout) from None
        return best, hold

    def _first_end(
        self, compiled: Any, width: int, text: str, old: int, limit: int, leftmost: int
    ) -> tuple[int, int] | None:
        """``(start, end)`` of the match of at most ``width`` characters that ends first in
        ``(old, limit]``, the longest at that end; none begins before ``leftmost``."""
        timeout = self.timeout
        low = max(0, old - width + 1, leftmost)
        # No match begins before the leftmost one, so none ends before it begins; from there, a
        # search over [end - width, end) finds one only if a match of at most ``width`` ends
        # there (one that ended before would have been found at its own end).
        for end in range(max(old, leftmost) + 1, limit + 1):
            start = max(low, end - width)
            if compiled.search(text, start, end, timeout=timeout):
                break
        else:
            return None
        while not compiled.fullmatch(text, start, end, timeout=timeout):
            start += 1  # the longest: the first start that matches up to ``end``
        return start, end
