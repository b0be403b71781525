"""Brute-force statements of regex and gated stops, slow and obviously right.

They share nothing with the implementation: matches are tried with the standard library's
``re.fullmatch`` on every substring (the implementation runs the ``regex`` package's searches
over a window), and "could still become a match" is decided by trying every completion over a
small alphabet (the implementation asks ``regex``'s partial matching).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Rules:
    """What a stream is cut by: literal stops, patterns (each with its width: the longest
    match that counts), and a marker the stops wait for."""

    stops: Sequence[str] = ()
    patterns: Sequence[tuple[str, int]] = ()
    arm_after: str | None = None


def armed_from(text: str, arm_after: str | None) -> int | None:
    """Where the stops are armed in ``text``: just past the first marker; ``None`` not yet."""
    if not arm_after:
        return 0
    at = text.find(arm_after)
    return None if at < 0 else at + len(arm_after)


def _matches(rules: Rules, piece: str) -> list[str | None]:
    """What ``piece`` is whole: a literal stop (``None``), and each pattern it matches."""
    found: list[str | None] = [None] if piece in rules.stops else []
    found += [
        pattern
        for pattern, width in rules.patterns
        if len(piece) <= width and re.fullmatch(pattern, piece)
    ]
    return found


def regex_match(text: str, rules: Rules) -> tuple[int, int, str | None] | None:
    """The cut: the match that ends first, the longest at that end, a literal stop before a
    pattern on the same text; ``(start, end, pattern)``."""
    armed = armed_from(text, rules.arm_after)
    if armed is None:
        return None
    for end in range(armed + 1, len(text) + 1):
        for start in range(armed, end):
            found = _matches(rules, text[start:end])
            if found:
                return start, end, found[0]
    return None


def could_match(piece: str, rules: Rules, alphabet: str) -> bool:
    """Whether ``piece`` is a proper prefix of a stop or of a pattern's match (of at most its
    width), every completion over ``alphabet`` tried."""
    if any(len(stop) > len(piece) and stop.startswith(piece) for stop in rules.stops):
        return True
    for pattern, width in rules.patterns:
        for count in range(1, width - len(piece) + 1):
            for tail in itertools.product(alphabet, repeat=count):
                if re.fullmatch(pattern, piece + "".join(tail)):
                    return True
    return False


def regex_hold_start(text: str, rules: Rules, alphabet: str) -> int:
    """Where what is held begins, once ``text`` (no cut in it) has been fed."""
    armed = armed_from(text, rules.arm_after)
    if armed is None:
        return len(text)
    for start in range(armed, len(text)):
        if could_match(text[start:], rules, alphabet):
            return start
    return len(text)


def regex_emitted(fed: str, rules: Rules, alphabet: str, include_stop: bool = False) -> str:
    """All a buffer may have emitted once ``fed`` has been fed, before any flush."""
    match = regex_match(fed, rules)
    if match is not None:
        return fed[: match[1] if include_stop else match[0]]
    if include_stop:
        return fed
    return fed[: regex_hold_start(fed, rules, alphabet)]
