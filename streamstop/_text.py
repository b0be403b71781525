"""One-shot functions on whole strings, with the same semantics as :class:`StopBuffer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._automaton import StopAutomaton, StopMatch, Stops
from ._buffer import StopBuffer
from ._patterns import checked_rules

if TYPE_CHECKING:
    from ._patterns import StopPatterns

__all__ = ["StopRules", "find_stop", "split_safe", "truncate"]


class StopRules:
    """Literal stops, regex stops and a marker, built once, for whole texts: :meth:`find` is
    :meth:`StopAutomaton.find`'s, with the patterns and the marker (see :func:`find_stop`).

    >>> StopRules("</s>", regex=r"\\d{2}", arm_after="|").find("12|a 34</s>")
    StopMatch(start=5, end=7, stop='34', pattern='\\\\d{2}')
    """

    __slots__ = ("arm_after", "automaton", "patterns")

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        self.automaton = StopAutomaton.from_stops(stops)
        self.patterns, self.arm_after = checked_rules(regex, max_match_chars, arm_after)

    def find(self, text: str) -> StopMatch | None:
        return find_stop(text, self.automaton, regex=self.patterns, arm_after=self.arm_after)


def find_stop(
    text: str,
    stops: Stops | StopAutomaton,
    *,
    regex: str | Iterable[str] | StopPatterns | None = None,
    max_match_chars: int | None = None,
    arm_after: str | None = None,
) -> StopMatch | None:
    """The stop that would cut ``text``, as :class:`StopBuffer` would cut it: the match that
    ends first (the longest at a tie) among the literal stops and the ``regex`` patterns, only
    after ``arm_after`` if given; ``None`` if none. ``pattern`` is the regex that matched.

    >>> find_stop("ab12:c", "c", regex=r"\\d{2}:")
    StopMatch(start=2, end=5, stop='12:', pattern='\\\\d{2}:')
    >>> find_stop("x.</think>y.", ".", arm_after="</think>")
    StopMatch(start=11, end=12, stop='.')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}: {text!r}")
    if regex is None and arm_after is None and max_match_chars is None:
        return StopAutomaton.from_stops(stops).find(text)
    buffer = StopBuffer(stops, regex=regex, max_match_chars=max_match_chars, arm_after=arm_after)
    start = len(buffer.feed(text))
    stop = buffer.stop_string
    if stop is None:
        return None
    return StopMatch(start, start + len(stop), stop, buffer.stop_pattern)


def split_safe(text: str, stops: Stops | StopAutomaton) -> tuple[str, str]:
    """Split ``text`` into ``(emit, retain)`` by the hold rule alone, without stop detection.

    ``retain`` is the longest suffix of ``text`` that is a proper prefix of some stop: the part
    that could still become a stop if more text came. A completed stop is not a proper prefix,
    so it is not retained.

    >>> split_safe("hello<st", ["<stop>"])
    ('hello', '<st')
    >>> split_safe("ababa", ["ababx", "baq"])
    ('ab', 'aba')
    >>> split_safe("<stop>", ["<stop>"])
    ('<stop>', '')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}: {text!r}")
    automaton = StopAutomaton.from_stops(stops)
    # The automaton's state only depends on the last (longest stop) characters.
    window = automaton.max_stop_length
    if window <= 1:
        return text, ""
    keep = automaton.hold_length(automaton.run(0, text[-window:]))
    return (text[: len(text) - keep], text[len(text) - keep :]) if keep else (text, "")


def truncate(
    text: str,
    stops: Stops | StopAutomaton,
    *,
    include_stop: bool = False,
    regex: str | Iterable[str] | StopPatterns | None = None,
    max_match_chars: int | None = None,
    arm_after: str | None = None,
) -> str:
    """Cut a whole completion at its first completed stop, as :class:`StopBuffer` would (with
    regex stops and ``arm_after`` too: see :func:`find_stop`).

    >>> truncate("Hi!</s>junk", ["</s>"])
    'Hi!'
    >>> truncate("Hi!</s>junk", ["</s>"], include_stop=True)
    'Hi!</s>'
    >>> truncate("abcd", ["abcd", "bc"])
    'a'
    >>> truncate("Call 555-1234 now", None, regex=r"\\d{3}-\\d{4}")
    'Call '
    """
    match = find_stop(
        text, stops, regex=regex, max_match_chars=max_match_chars, arm_after=arm_after
    )
    if match is None:
        return text
    return text[: match.end if include_stop else match.start]
