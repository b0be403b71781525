"""One-shot functions on whole strings, with the same semantics as :class:`StopBuffer`."""

from __future__ import annotations

from ._automaton import StopAutomaton, Stops

__all__ = ["split_safe", "truncate"]


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


def truncate(text: str, stops: Stops | StopAutomaton, *, include_stop: bool = False) -> str:
    """Cut a whole completion at its first completed stop, as :class:`StopBuffer` would.

    >>> truncate("Hi!</s>junk", ["</s>"])
    'Hi!'
    >>> truncate("Hi!</s>junk", ["</s>"], include_stop=True)
    'Hi!</s>'
    >>> truncate("abcd", ["abcd", "bc"])
    'a'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}: {text!r}")
    match = StopAutomaton.from_stops(stops).find(text)
    if match is None:
        return text
    return text[: match.end if include_stop else match.start]
