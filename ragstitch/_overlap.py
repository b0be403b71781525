"""The overlap of two token sequences: the largest k such that the last k tokens of `left` equal
the first k tokens of `right`.

Rules of this file:
- Everything is exact. Tokens are compared with `==` and must equal themselves (`x == x`; a
  float NaN is the one common value that does not), so the answer never depends on which path
  below computed it.
- The cost is O(m), m = min(len(left), len(right)), on every input. Only the last m tokens of
  `left` can take part in an overlap, so nothing before them is ever read.
- The usual case is served by C-level operations. A candidate is a start position s in the
  last m tokens of `left`, for an overlap of k = len(left) - s tokens. `list.index` finds the
  candidates: the positions where an *anchor* token `right[j]` occurs (at s + j). Two O(1)
  probes (the last token, the second one) and a comparison of the first `probe` tokens reject
  most of them, and one slice comparison confirms a candidate. Candidates are tried longest
  first, so the first confirmed one is the answer.
- The anchor is `right[0]` to begin with. If it is a frequent token (a space, "the", ",")
  and many candidates go by, the tokens `right[:anchors]` are counted in the next `sample`
  tokens of `left`, and `left[-1]` in the first `sample` places of `right` where it would
  have to be (`list.count`, C-level); scanning goes on with the rarest. With `right[j]`, the
  few short candidates (k <= j) that it cannot see are checked at the end; with `left[-1]`,
  found in `right` reversed, every candidate is seen, longest first.
- Adversarial input (one token repeated, periodic text) can make many candidates survive the
  probes, and each whole-slice comparison costs O(k). Their total cost is metered (the probes
  cost O(1) per candidate and need no meter); once it passes a small multiple of m we switch
  to the Knuth-Morris-Pratt failure function, which is O(m) in pure Python. The fast path
  never spends more than that allowance, so the worst case stays linear.
- The check of a candidate that passed the probes (whole slice if short, else the first
  `probe` tokens, the meter, the whole slice) is written out in each of the three search loops
  on purpose: as a helper it costs a call per such candidate, about 10% on text from a small
  alphabet, where many candidates pass the probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import describe as _describe

__all__ = ["Tuning", "overlap", "overlap_native"]


@dataclass(frozen=True)
class Tuning:
    """The thresholds of the search paths. They change which path answers, never the answer
    (the tests vary them to drive every path on small inputs)."""

    # Slice-comparison work (in tokens) allowed to the fast path, as `work_factor * m +
    # work_slack`, before it hands over to KMP.
    work_factor: int = 2
    work_slack: int = 64
    # Tokens compared before a candidate's whole slice is: most false candidates fail early.
    probe: int = 8
    # Candidates of `right[0]` examined before the rarest of `right[:anchors]` is looked for.
    switch: int = 8
    anchors: int = 4
    # Tokens of `left` in which the anchors are counted.
    sample: int = 32


_TUNING = Tuning()

_NATIVE = (list, tuple, str, bytes)


def overlap(left: Sequence[Any], right: Sequence[Any]) -> int:
    """Return the length of the longest suffix of `left` that is also a prefix of `right`.

    `0 <= overlap(left, right) <= min(len(left), len(right))`. Tokens are compared with `==`.
    Runs in time linear in the shorter input, whatever the input::

        >>> overlap(["a", "b", "c"], ["b", "c", "d"])
        2
        >>> overlap([1, 2], [1, 2])
        2
        >>> overlap([1, 2], [3])
        0

    Any sequences are accepted (lists, tuples, `range`...); a `str` or `bytes` is a sequence of
    characters or bytes. Raises `TypeError` naming the argument that is not a sequence.
    """
    if not isinstance(left, Sequence):
        raise TypeError(f"overlap: left must be a sequence of tokens, got {_describe(left)}")
    if not isinstance(right, Sequence):
        raise TypeError(f"overlap: right must be a sequence of tokens, got {_describe(right)}")
    n = len(left)
    m = min(n, len(right))
    if m == 0:
        return 0
    if type(left) is not type(right) or type(left) not in _NATIVE:
        # Bring both to lists; only the last m tokens of `left` can overlap.
        left = [left[i] for i in range(n - m, n)]
        right = [right[i] for i in range(m)]
    return overlap_native(left, right)


def overlap_native(left: Any, right: Any, tuning: Tuning = _TUNING) -> int:
    """`overlap` for two sequences of the same built-in type (list, tuple, str or bytes).

    No validation: this is the entry point of the stitcher, which has already checked its inputs.
    """
    n = len(left)
    m = min(n, len(right))
    if m == 0:
        return 0
    text = isinstance(left, (str, bytes))
    # str.index / bytes.index search for a subsequence: a one-element slice does that.
    first = right[:1] if text else right[0]
    second = right[1] if m > 1 else None
    last = left[-1]
    index = left.index
    probe = tuning.probe
    switch = tuning.switch
    limit = tuning.work_factor * m + tuning.work_slack
    work = 0
    seen = 0
    s: int = n - m
    while True:
        try:
            s = index(first, s)
        except ValueError:
            return 0
        k = n - s
        # Two O(1) necessary conditions: the chunk's k-th token is the last token of `left`,
        # and (for k >= 2) the chunk's second token follows the candidate start.
        if right[k - 1] == last and (k < 2 or left[s + 1] == second):
            if k <= probe:
                if left[s:] == right[:k]:
                    return k
            elif left[s : s + probe] == right[:probe]:
                work += k
                if work > limit:
                    return _overlap_kmp(left, right, m)
                if left[s:] == right[:k]:
                    return k
        s += 1
        seen += 1
        if seen == switch and n - s > 2 * tuning.anchors:
            return _overlap_rare_anchor(left, right, m, s, work, limit, text, tuning)


def _overlap_rare_anchor(
    left: Any, right: Any, m: int, start: int, work: int, limit: int, text: bool, tuning: Tuning
) -> int:
    """Go on from candidate `start` (overlaps of at most `n - start` tokens) with a rarer anchor.

    The anchors are `right[j]` for j < `tuning.anchors`, found in `left`, and `left[-1]`, found
    in `right` (reversed, so that the longest overlaps still come first); each is counted in a
    sample of `tuning.sample` tokens where it would be searched, and the rarest is used.
    """
    n = len(left)
    top = n - start  # the longest overlap still possible
    size = tuning.sample
    probe = tuning.probe
    sample = left[start : start + size]  # counting all of `left` would cost more than it saves
    counts = [
        sample.count(right[j : j + 1] if text else right[j]) for j in range(min(tuning.anchors, m))
    ]
    last_anchor = left[-1:] if text else left[-1]
    if right[max(top - size, 0) : top].count(last_anchor) < min(counts):
        reverse = right[top - 1 :: -1]  # right[top - 1], right[top - 2], ..., right[0]
        return _overlap_by_last(left, right, m, reverse, last_anchor, work, limit, probe)
    j = counts.index(min(counts))
    anchor = right[j : j + 1] if text else right[j]
    first = right[0]
    last = left[-1]
    index = left.index
    # Candidates with k > j: the anchor sits at p = s + j, inside `left`.
    p: int = start + j
    while True:
        try:
            p = index(anchor, p)
        except ValueError:
            break
        s = p - j
        k = n - s
        if right[k - 1] == last and left[s] == first:
            if k <= probe:
                if left[s:] == right[:k]:
                    return k
            elif left[s : s + probe] == right[:probe]:
                work += k
                if work > limit:
                    return _overlap_kmp(left, right, m)
                if left[s:] == right[:k]:
                    return k
        p += 1
    # Candidates with k <= j, which the anchor cannot see (at most `anchors - 1` of them).
    for k in range(min(j, top), 0, -1):
        if left[n - k :] == right[:k]:
            return k
    return 0


def _overlap_by_last(
    left: Any, right: Any, m: int, reverse: Any, last: Any, work: int, limit: int, probe: int
) -> int:
    """Candidates are where `right[k - 1] == left[-1]`; `reverse[q]` is `right[top - 1 - q]`."""
    n = len(left)
    top = len(reverse)
    first = right[0]
    index = reverse.index
    q: int = 0
    while True:
        try:
            q = index(last, q)
        except ValueError:
            return 0
        k = top - q
        s = n - k
        if left[s] == first:
            if k <= probe:
                if left[s:] == right[:k]:
                    return k
            elif left[s : s + probe] == right[:probe]:
                work += k
                if work > limit:
                    return _overlap_kmp(left, right, m)
                if left[s:] == right[:k]:
                    return k
        q += 1


def _overlap_kmp(left: Any, right: Any, m: int) -> int:
    """Knuth-Morris-Pratt: match the pattern `right[:m]` along the text `left[-m:]`.

    The automaton state after the last text token is the longest prefix of the pattern that is a
    suffix of the text, which is the overlap. O(m) comparisons, all in Python.
    """
    pattern = right[:m]
    fail = [0] * m
    k = 0
    for q in range(1, m):
        token = pattern[q]
        while k and pattern[k] != token:
            k = fail[k - 1]
        if pattern[k] == token:
            k += 1
        fail[q] = k
    k = 0
    # The text has m tokens, so k reaches m only after its last token: pattern[k] stays in range.
    for token in left[len(left) - m :]:
        while k and pattern[k] != token:
            k = fail[k - 1]
        if pattern[k] == token:
            k += 1
    return k
