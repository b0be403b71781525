r"""Regex stops: patterns compiled for the stream filter, held back exactly as literal stops are.

Their rules (everything about matching a pattern in a stream lives in this module):

- Syntax: Python's :mod:`re`, checked by the standard library's own parser (so what ``re``
  refuses is refused, with its message); the patterns run on the ``regex`` package (the
  ``regex`` extra), whose ``partial=True`` search says where a match could still begin if more
  text came, and whose ``timeout=`` bounds each search. The ``regex`` package's own additions
  (``\p{...}``, ``\K``, fuzzy matching, version-1 sets) are not ``re`` syntax and are refused.
- A pattern *matches* ``text[s:e]`` when it matches all of it (``fullmatch``), the text around
  unseen: a stop is judged by its own text, never by where the stream happened to be cut. So
  constructs that look outside the match are refused: anchors (``^``, ``$``, ``\A``, ``\Z``),
  word boundaries (``\b``, ``\B``), lookarounds; and atomic groups and possessive repeats,
  under which a longer text can hide a match that a shorter one shows (``(?>aab|a)a`` matches
  ``"aa"`` but no part of ``"aab"``), so that no search over a window could be exact. A
  pattern that matches the empty string is refused too: it would stop every stream at once.
- Every match has a maximum length, the pattern's *width* (``\d{1,3}``: 3): a pattern without
  one (``a.*b``) is refused unless ``max_match_chars`` bounds it, and then matches longer than
  that are not matches. The width bounds the work: each new piece of text is searched together
  with what is held, and what is held is shorter than the width, so the cost of a token does
  not grow with the stream.
- Which match cuts (the same rule as for literal stops): the one that ends first; at a tie, the
  longest. Patterns ``\d+\.`` and ``\.`` on ``"v1.2."`` cut at ``"1."``, which ends first;
  ``b|ab`` on ``"xab"`` gives ``"ab"``, the longer of the two that end there.
- What is held back: from the earliest position where a match could still begin (``regex``'s
  partial match), never more. With pattern ``\d{3}-\d{4}``, ``"call 555-12"`` emits
  ``"call "`` and holds ``"555-12"``; ``"call 55x"`` holds nothing.

Offsets are half-open, as everywhere: a match ``[start, end)`` covers ``text[start:end]``.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "DEFAULT_REGEX_TIMEOUT",
    "INSTALL_HINT",
    "StopPatternTimeout",
    "StopPatterns",
    "checked_rules",
    "first_characters",
    "normalize_patterns",
    "pattern_width",
]

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
