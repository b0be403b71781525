"""Peers: the stop handling that servers ship, written here from its published behaviour.

Each peer is written as a good engineer would write it in Python, with its shared tables built
once per stop set (like our :class:`~streamstop.StopAutomaton`) and one small object per stream
with ``feed(chunk) -> str``, ``flush() -> str``, ``held`` and ``stopped``, as
:class:`~streamstop.StopBuffer` has. All of them cut at the stop that ends first (the longest at
a tie), as :func:`streamstop.truncate` does, so their outputs can be checked against it.

- :class:`FixedHold` (vLLM and several servers): ``str.find`` of each stop over the held text
  plus the new chunk, searching only where a match could end in the new chunk (vLLM's
  negative start offset), and always holding back ``longest stop - 1`` characters.
- :class:`PerStopPartial` (llama.cpp server): the same search for whole stops, then, for each
  stop, the longest suffix of the text that is a proper prefix of it (``find_partial_stop_string``:
  only the stop's positions holding the text's last character are tried, longest first); hold
  the longest such suffix.
- :class:`Rescan`: append each chunk to the whole text so far and search all of it again, every
  chunk; hold ``longest stop - 1`` characters. The search is one compiled ``re`` alternation
  or a ``str.find`` per stop, whichever is faster for the stop set (:func:`rescan_search`).
- :class:`PyAhoCorasick` and :class:`AhoCorasickRs`: a C or Rust Aho-Corasick automaton
  (pyahocorasick, ahocorasick-rs) finds whole stops in the held text plus the new chunk; the
  hold is a suffix scan, from the longest suffix down, against the set of all proper prefixes
  of the stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from streamstop import StopAutomaton, StopBuffer

__all__ = [
    "PEERS",
    "AhoCorasickPrefixes",
    "AhoCorasickRs",
    "Filter",
    "FixedHold",
    "PerStopPartial",
    "PyAhoCorasick",
    "Rescan",
    "prepare_ours",
    "rescan_search",
]


class Filter(Protocol):
    """What every candidate offers: StopBuffer's interface, for str chunks."""

    def feed(self, chunk: str, /) -> str: ...

    def flush(self) -> str: ...

    @property
    def held(self) -> str: ...

    @property
    def stopped(self) -> bool: ...


Factory = Callable[[], Filter]


def _earliest(found: list[tuple[int, int]]) -> tuple[int, int]:
    """The match that ends first, the longest at a tie, of ``(start, end)`` pairs."""
    return min(found, key=lambda match: (match[1], match[0]))


def _proper_prefixes(stops: Sequence[str]) -> frozenset[str]:
    return frozenset(stop[:k] for stop in stops for k in range(1, len(stop)))


# -- ours ------------------------------------------------------------------------------------


def prepare_ours(stops: Sequence[str]) -> Factory:
    """StopBuffer over one automaton built for the stop set and shared by every stream."""
    automaton = StopAutomaton(stops)

    def make() -> Filter:
        return StopBuffer(automaton)

    return make


# -- (a) fixed hold, vLLM style ----------------------------------------------------------------


class FixedHold:
    __slots__ = ("_held", "_hold", "_searches", "stop_string", "stopped")

    def __init__(self, searches: tuple[tuple[str, int], ...], hold: int) -> None:
        # (stop, 1 - len(stop)): with it, text.find(stop, back - len(chunk)) looks only at
        # matches that end in the new chunk, as vLLM's check_stop_strings does.
        self._searches = searches
        self._hold = hold
        self._held = ""
        self.stopped = False
        self.stop_string: str | None = None

    @classmethod
    def prepare(cls, stops: Sequence[str]) -> Factory:
        searches = tuple((stop, 1 - len(stop)) for stop in stops)
        hold = max(map(len, stops), default=1) - 1

        def make() -> Filter:
            return cls(searches, hold)

        return make

    @property
    def held(self) -> str:
        return self._held

    def feed(self, chunk: str) -> str:
        if self.stopped:
            return ""
        text = self._held + chunk
        n = len(chunk)
        found = None
        for stop, back in self._searches:
            start = text.find(stop, back - n)
            if start >= 0:
                if found is None:
                    found = [(start, start + len(stop))]
                else:
                    found.append((start, start + len(stop)))
        if found is not None:
            start, end = _earliest(found)
            self.stopped = True
            self.stop_string = text[start:end]
            self._held = ""
            return text[:start]
        cut = len(text) - self._hold
        if cut > 0:
            self._held = text[cut:]
            return text[:cut]
        self._held = text
        return ""

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# -- (b) per-stop partial scan, llama.cpp server style -----------------------------------------


class PerStopPartial:
    __slots__ = ("_held", "_partials", "_searches", "stop_string", "stopped")

    def __init__(
        self,
        searches: tuple[tuple[str, int], ...],
        partials: tuple[dict[str, tuple[str, ...]], ...],
    ) -> None:
        self._searches = searches
        # Per stop: for each character, the proper prefixes of the stop that end with it,
        # longest first (the char_index loop of llama.cpp's find_partial_stop_string).
        self._partials = partials
        self._held = ""
        self.stopped = False
        self.stop_string: str | None = None

    @classmethod
    def prepare(cls, stops: Sequence[str]) -> Factory:
        searches = tuple((stop, 1 - len(stop)) for stop in stops)
        partials = []
        for stop in stops:
            by_last: dict[str, list[str]] = {}
            for k in range(len(stop) - 1, 0, -1):
                by_last.setdefault(stop[k - 1], []).append(stop[:k])
            partials.append({char: tuple(prefixes) for char, prefixes in by_last.items()})
        partials_tuple = tuple(partials)

        def make() -> Filter:
            return cls(searches, partials_tuple)

        return make

    @property
    def held(self) -> str:
        return self._held

    def feed(self, chunk: str) -> str:
        if self.stopped or not chunk:
            return ""
        text = self._held + chunk
        n = len(chunk)
        found = None
        for stop, back in self._searches:
            start = text.find(stop, back - n)
            if start >= 0:
                if found is None:
                    found = [(start, start + len(stop))]
                else:
                    found.append((start, start + len(stop)))
        if found is not None:
            start, end = _earliest(found)
            self.stopped = True
            self.stop_string = text[start:end]
            self._held = ""
            return text[:start]
        last = text[-1]
        keep = 0
        for by_last in self._partials:
            for prefix in by_last.get(last, ()):
                if len(prefix) <= keep:
                    break
                if text.endswith(prefix):
                    keep = len(prefix)
                    break
        if keep:
            self._held = text[-keep:]
            return text[:-keep]
        self._held = ""
        return text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# -- (c) rescan the whole text every chunk -----------------------------------------------------

Search = Callable[[str], "tuple[int, int] | None"]

# For a single stop the re search is faster; from two stops on, one str.find per stop beats the
# re alternation, by 2-3x at 4 to 1024 stops (measured on benchmarks/stopfilter.py's workload).
# Both are exact and give the same answer.


def rescan_search(stops: Sequence[str], method: str | None = None) -> Search:
    """A whole-text search: ``(start, end)`` of the stop that ends first (longest at a tie)."""
    if method is None:
        method = "regex" if len(stops) == 1 else "find"
    if method == "find":
        pairs = tuple((stop, len(stop)) for stop in stops)

        def search_find(text: str) -> tuple[int, int] | None:
            found = None
            for stop, length in pairs:
                start = text.find(stop)
                if start >= 0:
                    if found is None:
                        found = [(start, start + length)]
                    else:
                        found.append((start, start + length))
            return None if found is None else _earliest(found)

        return search_find
    if method != "regex":
        raise ValueError(f"unknown rescan method {method!r}: use 'find' or 'regex'")
    # Longest first, so that at one start the alternation takes the longest stop.
    pattern = re.compile("|".join(map(re.escape, sorted(stops, key=len, reverse=True))))
    search = pattern.search

    def search_regex(text: str) -> tuple[int, int] | None:
        match = search(text)
        if match is None:
            return None
        # The leftmost match need not end first: look for one that ends before it, starting no
        # earlier, until there is none.
        start, end = match.span()
        while (earlier := search(text, start, end - 1)) is not None:
            start, end = earlier.span()
        return start, end

    return search_regex


class Rescan:
    __slots__ = ("_hold", "_search", "_sent", "_text", "stop_string", "stopped")

    def __init__(self, search: Search, hold: int) -> None:
        self._search = search
        self._hold = hold
        self._text = ""
        self._sent = 0
        self.stopped = False
        self.stop_string: str | None = None

    @classmethod
    def prepare(cls, stops: Sequence[str], method: str | None = None) -> Factory:
        search = rescan_search(stops, method)
        hold = max(map(len, stops), default=1) - 1

        def make() -> Filter:
            return cls(search, hold)

        return make

    @property
    def held(self) -> str:
        return "" if self.stopped else self._text[self._sent :]

    def feed(self, chunk: str) -> str:
        if self.stopped:
            return ""
        self._text = text = self._text + chunk
        found = self._search(text)
        sent = self._sent
        if found is not None:
            self.stopped = True
            self.stop_string = text[found[0] : found[1]]
            return text[sent : found[0]]
        cut = len(text) - self._hold
        if cut > sent:
            self._sent = cut
            return text[sent:cut]
        return ""

    def flush(self) -> str:
        if self.stopped:
            return ""
        tail = self._text[self._sent :]
        self._sent = len(self._text)
        return tail


# -- (d) an Aho-Corasick library for whole matches, a suffix scan for the hold -----------------


class _SuffixHold:
    """The hold shared by the Aho-Corasick peers: the longest suffix that is a proper prefix."""

    __slots__ = ("_chars", "_held", "_longest", "_prefixes", "stop_string", "stopped")

    def __init__(self, prefixes: frozenset[str], chars: frozenset[str], longest: int) -> None:
        self._prefixes = prefixes
        self._chars = chars
        self._longest = longest
        self._held = ""
        self.stopped = False
        self.stop_string: str | None = None

    @property
    def held(self) -> str:
        return self._held

    def _emit(self, text: str) -> str:
        # A suffix can only be a prefix of a stop if its last character occurs in some stop.
        if not text or text[-1] not in self._chars:
            self._held = ""
            return text
        keep = min(self._longest, len(text))
        prefixes = self._prefixes
        while keep and text[-keep:] not in prefixes:
            keep -= 1
        if keep:
            self._held = text[-keep:]
            return text[:-keep]
        self._held = ""
        return text

    def _stop(self, text: str, start: int, end: int) -> str:
        self.stopped = True
        self.stop_string = text[start:end]
        self._held = ""
        return text[:start]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class PyAhoCorasick(_SuffixHold):
    __slots__ = ("_iter",)

    def __init__(
        self,
        iterate: Callable[[str], object],
        prefixes: frozenset[str],
        chars: frozenset[str],
        longest: int,
    ) -> None:
        super().__init__(prefixes, chars, longest)
        self._iter = iterate

    @classmethod
    def prepare(cls, stops: Sequence[str]) -> Factory:
        import ahocorasick

        automaton = ahocorasick.Automaton()
        for stop in stops:
            automaton.add_word(stop, len(stop))
        automaton.make_automaton()
        prefixes = _proper_prefixes(stops)
        chars = frozenset("".join(stops))
        longest = max(map(len, stops), default=1) - 1
        iterate = automaton.iter

        def make() -> Filter:
            return cls(iterate, prefixes, chars, longest)

        return make

    def feed(self, chunk: str) -> str:
        if self.stopped:
            return ""
        text = self._held + chunk
        best: tuple[int, int] | None = None
        # Matches come in order of their (inclusive) last index; at one index, keep the longest.
        for last, length in self._iter(text):  # type: ignore[attr-defined]
            if best is not None and last != best[1] - 1:
                break
            if best is None or length > best[1] - best[0]:
                best = (last + 1 - length, last + 1)
        if best is not None:
            return self._stop(text, *best)
        return self._emit(text)


class AhoCorasickRs(_SuffixHold):
    __slots__ = ("_find",)

    def __init__(
        self,
        find: Callable[[str], list[tuple[int, int, int]]],
        prefixes: frozenset[str],
        chars: frozenset[str],
        longest: int,
    ) -> None:
        super().__init__(prefixes, chars, longest)
        self._find = find

    @classmethod
    def prepare(cls, stops: Sequence[str]) -> Factory:
        import ahocorasick_rs

        # Standard semantics: the first match reported is the one that ends first.
        automaton = ahocorasick_rs.AhoCorasick(
            list(stops), matchkind=ahocorasick_rs.MatchKind.Standard
        )
        find: Callable[[str], list[tuple[int, int, int]]] = automaton.find_matches_as_indexes
        prefixes = _proper_prefixes(stops)
        chars = frozenset("".join(stops))
        longest = max(map(len, stops), default=1) - 1

        def make() -> Filter:
            return cls(find, prefixes, chars, longest)

        return make

    def feed(self, chunk: str) -> str:
        if self.stopped:
            return ""
        text = self._held + chunk
        matches = self._find(text)
        if matches:
            _, start, end = matches[0]
            return self._stop(text, start, end)
        return self._emit(text)


class AhoCorasickPrefixes:
    __slots__ = ("_held", "_iter", "_starts", "stop_string", "stopped")

    def __init__(self, iterate: Callable[[str], object], starts: frozenset[str]) -> None:
        self._iter = iterate
        self._starts = starts
        self._held = ""
        self.stopped = False
        self.stop_string: str | None = None

    @classmethod
    def prepare(cls, stops: Sequence[str]) -> Factory:
        import ahocorasick

        automaton = ahocorasick.Automaton()
        stop_set = frozenset(stops)
        for keyword in _proper_prefixes(stops) | stop_set:
            automaton.add_word(keyword, (len(keyword), keyword in stop_set))
        automaton.make_automaton()
        iterate = automaton.iter
        starts = frozenset(stop[0] for stop in stops)

        def make() -> Filter:
            return cls(iterate, starts)

        return make

    @property
    def held(self) -> str:
        return self._held

    def feed(self, chunk: str) -> str:
        if self.stopped:
            return ""
        held = self._held
        if not held:
            if self._starts.isdisjoint(chunk):
                return chunk
            text = chunk
        else:
            text = held + chunk
        last = len(text) - 1
        hold = 0
        stop_end = stop_length = -1
        # Matches come in order of their (inclusive) last index, the longest first at each. No
        # stop ends inside the held text (it would have stopped the stream already).
        for end, (length, is_stop) in self._iter(text):  # type: ignore[attr-defined]
            if stop_end >= 0 and end != stop_end:
                break
            if is_stop:
                if length > stop_length:
                    stop_end, stop_length = end, length
            elif end == last and not hold:
                hold = length
        if stop_end >= 0:
            start = stop_end + 1 - stop_length
            self.stopped = True
            self.stop_string = text[start : stop_end + 1]
            self._held = ""
            return text[:start]
        if hold:
            self._held = text[-hold:]
            return text[:-hold]
        self._held = ""
        return text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# name -> (label, prepare): build the shared tables for a stop set, get a per-stream factory.
PEERS: dict[str, tuple[str, Callable[[Sequence[str]], Factory]]] = {
    "ours": ("streamstop StopBuffer", prepare_ours),
    "fixed_hold": ("(a) fixed hold, vLLM's rule (Python reimpl.)", FixedHold.prepare),
    "per_stop": (
        "(b) per-stop partial scan, llama.cpp's rule (Python reimpl.)",
        PerStopPartial.prepare,
    ),
    "rescan": ("(c) rescan whole text", Rescan.prepare),
    "pyahocorasick": ("(d) pyahocorasick + suffix scan", PyAhoCorasick.prepare),
    "ahocorasick_rs": ("(d) ahocorasick-rs + suffix scan", AhoCorasickRs.prepare),
    "ac_prefixes": (
        "(e) pyahocorasick, stops + all prefixes, one scan",
        AhoCorasickPrefixes.prepare,
    ),
}
