# The overlap of two token sequences: the largest k such that the last k tokens of `left` equal
# the first k tokens of `right`.
#
# Rules of this file:
# - Everything is exact. Tokens are compared with `==` and must equal themselves (`x == x`; a
#   float NaN is the one common value that does not), so the answer never depends on which path
#   below computed it.
# - The cost is O(m), m = min(len(left), len(right)), on every input. Only the last m tokens of
#   `left` can take part in an overlap, so nothing before them is ever read.
# - The usual case is served by C-level operations: `list.index` finds the few positions in the
#   tail of `left` where `right[0]` occurs (each such position i is a candidate overlap of length
#   k = len(left) - i), two O(1) probes reject most candidates, and one slice comparison confirms
#   a candidate. Candidates are tried longest first, so the first confirmed one is the answer.
# - Adversarial input (one token repeated, periodic text) can make many candidates survive the
#   probes, and each slice comparison costs O(k). Their total cost is metered; once it passes a
#   small multiple of m we switch to the Knuth-Morris-Pratt failure function, which is O(m) in
#   pure Python. The fast path never spends more than that allowance, so the worst case stays
#   linear.

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import describe as _describe

__all__ = ["overlap"]

# Slice-comparison work (in tokens) allowed to the fast path, as `_WORK_FACTOR * m + _WORK_SLACK`,
# before it hands over to KMP.
_WORK_FACTOR = 2
_WORK_SLACK = 64

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


def overlap_native(left: Any, right: Any) -> int:
    """`overlap` for two sequences of the same built-in type (list, tuple, str or bytes).

    No validation: this is the entry point of the stitcher, which has already checked its inputs.
    """
    n = len(left)
    m = min(n, len(right))
    if m == 0:
        return 0
    first = right[0]
    last = left[-1]
    index = left.index
    work = 0
    limit = _WORK_FACTOR * m + _WORK_SLACK
    i: int = n - m
    if isinstance(left, (str, bytes)):
        # str.index / bytes.index search for a subsequence; a one-element slice does that.
        first = right[:1]
    while True:
        try:
            i = index(first, i)
        except ValueError:
            return 0
        k = n - i
        # Two O(1) necessary conditions: the chunk's k-th token is the last token of `left`,
        # and (for k >= 2) the chunk's second token follows the candidate start.
        if right[k - 1] == last and (k < 2 or left[i + 1] == right[1]):
            work += k
            if work > limit:
                return _overlap_kmp(left, right, m)
            if left[i:] == right[:k]:
                return k
        i += 1


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
