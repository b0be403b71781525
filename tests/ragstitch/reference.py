"""Brute-force references: every overlap length is checked, every rule is spelled out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def ref_overlap(left: Sequence[Any], right: Sequence[Any]) -> int:
    """The largest k with left[-k:] == right[:k], by trying every k."""
    best = 0
    for k in range(min(len(left), len(right)) + 1):
        if list(left[len(left) - k :]) == list(right[:k]):
            best = k
    return best


@dataclass(frozen=True)
class RefRecord:
    taken: bool
    overlap: int
    separator: int
    cost: int
    span: tuple[int, int] | None


def ref_stitch(
    chunks: Sequence[Sequence[Any]],
    budget: int,
    on_overflow: str = "skip",
    min_overlap: int = 1,
    separator: Sequence[Any] = (),
    *,
    stop_when_full: bool = True,
) -> tuple[list[Any], list[RefRecord]]:
    """The contract, one chunk at a time.

    With `stop_when_full`, no chunk is offered once the budget is used up (what `stitch` does);
    without it every chunk is offered, which must give the same tokens.
    """
    out: list[Any] = []
    records: list[RefRecord] = []
    for chunk in chunks:
        if stop_when_full and len(out) >= budget:
            break
        k = ref_overlap(out, chunk)
        if k < min_overlap:
            k = 0
        sep = len(separator) if k == 0 and out and chunk else 0
        cost = len(chunk) - k + sep
        if cost <= budget - len(out):
            out.extend(separator[:sep])
            start = len(out)
            out.extend(chunk[k:])
            records.append(RefRecord(True, k, sep, cost, (start, len(out))))
        else:
            records.append(RefRecord(False, k, sep, cost, None))
            if on_overflow == "stop":
                break
    return out, records
