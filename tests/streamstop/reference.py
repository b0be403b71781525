"""Brute-force statements of the contract, slow and obviously right, to test the core against."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


def reference_stops(stops: Iterable[str]) -> list[str]:
    return [stop for stop in stops if stop]


def reference_match(text: str, stops: Sequence[str]) -> tuple[int, int, str] | None:
    """The first completed stop: earliest end, then longest; as (start, end, stop)."""
    stops = reference_stops(stops)
    for end in range(1, len(text) + 1):
        ending_here = [stop for stop in stops if text[:end].endswith(stop)]
        if ending_here:
            stop = max(ending_here, key=len)
            return end - len(stop), end, stop
    return None


def reference_truncate(text: str, stops: Sequence[str], include_stop: bool = False) -> str:
    match = reference_match(text, stops)
    if match is None:
        return text
    start, end, _ = match
    return text[: end if include_stop else start]


def reference_hold(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop."""
    stops = reference_stops(stops)
    for length in range(len(text), 0, -1):
        suffix = text[len(text) - length :]
        if any(len(stop) > length and stop.startswith(suffix) for stop in stops):
            return length
    return 0


def reference_split_safe(text: str, stops: Sequence[str]) -> tuple[str, str]:
    keep = reference_hold(text, stops)
    return text[: len(text) - keep], text[len(text) - keep :]


def reference_emitted(fed: str, stops: Sequence[str], include_stop: bool = False) -> str:
    """All a buffer may have emitted once ``fed`` has been fed, before any flush."""
    if reference_match(fed, stops) is not None:
        return reference_truncate(fed, stops, include_stop)
    if include_stop:
        return fed
    return reference_split_safe(fed, stops)[0]


def all_chunkings(text: str) -> Iterator[list[str]]:
    """Every way to cut ``text`` into non-empty consecutive chunks (2 ** (n - 1) of them)."""
    if not text:
        yield []
        return
    for mask in range(1 << (len(text) - 1)):
        chunks: list[str] = []
        start = 0
        for position in range(1, len(text)):
            if mask >> (position - 1) & 1:
                chunks.append(text[start:position])
                start = position
        chunks.append(text[start:])
        yield chunks
