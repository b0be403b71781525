"""The memo of token steps and the cache of shared automata: what an automaton remembers, and
which automata are kept.

Rules of this module:

- A *step* is what :meth:`StopAutomaton._advance <streamstop._automaton.StopAutomaton>` returns
  for one token from one state (``_Step``). Steps are memoized by (state, token) in a table per
  state, bounded in bytes; a hit is one dict lookup that the buffer and the stream make
  themselves, through the bound ``dict.get`` of the state's table (``_lookups``). When full, the
  memo refuses for a while, then forgets about half (see ``_StepMemo._remember`` for why).
- The memo is a mixin of :class:`~streamstop._automaton.StopAutomaton`, not an object of its
  own: the per-token path reads the automaton's slots and calls its bound ``dict.get``s, with no
  attribute of a memo object between (an extra load on every token). The memo's slots are
  declared here, read at the same cost as the automaton's own (CPython specialises a slot load
  by the instance's type, wherever in the MRO the slot is); ``_StepMemo``'s methods set it up
  and write it, on misses only.
- Threads: the memo is read without a lock, each read a single dict lookup (atomic under the
  GIL, and per-dict locked on free-threaded builds); its common writes (an entry into a state's
  existing table within the budget, or a refusal when full) are a store or two, atomic under the
  GIL, and take no lock either; new tables and forgetting are done under the automaton's lock,
  and so is every write on a free-threaded build. An entry, once written, never changes (it may
  be forgotten: a reader then misses and works the step out again).
- :meth:`StopAutomaton.from_stops <streamstop._automaton.StopAutomaton.from_stops>` keeps its
  automata in ``_CACHE``, least recently used first out, within a byte budget, under a lock of
  its own.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from ._automaton import StopAutomaton

__all__ = ["DEFAULT_CACHE_BYTES", "DEFAULT_MEMO_BYTES"]

# The memo of whole-token steps (see StopAutomaton._advance and _remember). Only token-sized text
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
# What one memo entry costs besides its strings: the dict slot (with the dict's spare room) and
# the step tuple. Checked against tracemalloc on real streams: the count runs above what is
# measured (the token strings are often the caller's too), so the budget is an upper bound.
_MEMO_SLOT_BYTES = 48
_MEMO_TABLE_BYTES = sys.getsizeof({"": 0})
_STEP_BYTES = 64
# Whether the interpreter runs with the GIL (so a single store is atomic; see _remember). A
# free-threaded build may turn it on later, never off.
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()

_Step: TypeAlias = tuple[int, int, str | None]
"""What ``StopAutomaton._advance`` returns: one step of a stream over a piece of text, the
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

# The memo of every state that has none yet: read-only, shared (see _remember).
_NO_MEMO: dict[str, _Step] = {}
_NO_LOOKUP = _NO_MEMO.get


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


class _StepMemo:
    """The memo of :class:`~streamstop._automaton.StopAutomaton`: its setup and its writes (the
    reads are the automaton's and its callers', straight from the tables' ``dict.get``)."""

    # Slots, read by the per-token path as the automaton's own are (see the module's rules).
    __slots__ = (
        "_forgets",
        "_lock",
        "_lookups",
        "_memo_budget",
        "_memo_used",
        "_refused",
        "_root_memo",
        "_root_step",
        "_tables",
    )

    _memo_budget: int
    _memo_used: int
    _forgets: int
    _refused: int
    _lock: threading.Lock
    _root_memo: dict[str, _Step]
    _root_step: Callable[[str], _Step | None]
    _tables: dict[int, dict[str, _Step]]
    _lookups: list[Callable[[str], _Step | None]]

    def _start_memo(self, states: int) -> None:
        """An empty memo for an automaton of ``states`` states (``_memo_budget`` set already)."""
        # The memo: a table per state that has memoized steps, keyed by the token. The root's
        # is never replaced (see _forget), so kept at hand too.
        self._root_memo: dict[str, _Step] = {}
        self._tables: dict[int, dict[str, _Step]] = {0: self._root_memo}
        # Every state's lookup in its table (a bound dict.get; one shared empty table's for the
        # states with none): what the per-token path of StopBuffer calls, one C-level call with
        # no Python frame, read-only for everyone else. A lookup, not the table: ``_insert`` and
        # ``_forget`` swap them as tables come and go.
        self._lookups: list[Callable[[str], _Step | None]] = [_NO_LOOKUP] * states
        self._root_step = self._lookups[0] = self._root_memo.get
        self._memo_used = 0
        self._forgets = 0
        self._refused = 0
        self._lock = threading.Lock()

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


class _AutomatonCache:
    """The automata of :meth:`StopAutomaton.from_stops`, least recently used first out, within a
    byte budget; every method may be called from any thread."""

    def __init__(self, budget: int) -> None:
        self._lock = threading.Lock()
        self._budget = budget
        self._used = 0
        self._entries: OrderedDict[tuple[str, ...], StopAutomaton] = OrderedDict()
        self._building: dict[tuple[str, ...], threading.Event] = {}

    def get(
        self, key: tuple[str, ...], build: Callable[[tuple[str, ...]], StopAutomaton]
    ) -> StopAutomaton:
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
            return found if found is not None else build(key)
        try:
            automaton = build(key)
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
