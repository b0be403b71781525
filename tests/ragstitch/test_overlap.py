"""`overlap`: named cases, every input type, both internal paths, against the brute force."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstitch import _overlap, overlap
from ragstitch._overlap import Tuning, _overlap_kmp, overlap_native

from .reference import ref_overlap

# (name, left, right, expected)
CASES: list[tuple[str, list[Any], list[Any], int]] = [
    ("both empty", [], [], 0),
    ("left empty", [], [1, 2], 0),
    ("right empty", [1, 2], [], 0),
    ("no overlap", [1, 2, 3], [4, 5], 0),
    ("one token", [1, 2, 3], [3, 4], 1),
    ("two tokens", ["a1", "b1", "c1"], ["b1", "c1", "d"], 2),
    ("identical", [1, 2], [1, 2], 2),
    ("right inside left's end", [1, 2, 3], [2, 3], 2),
    ("left is right's prefix", [1, 2], [1, 2, 3], 2),
    ("longest wins over shorter", [1, 2, 1, 2], [1, 2, 1, 2, 9], 4),
    ("shorter when longest fails", [1, 2, 1, 2], [1, 2, 9], 2),
    ("match in the middle is not an overlap", [1, 2, 3, 4], [2, 3, 9], 0),
    ("first token elsewhere only", [5, 1, 7], [1, 2], 0),
    ("repeated token", [7] * 10, [7] * 4 + [8], 4),
    ("repeated, last differs", [7] * 9 + [8], [7] * 10, 0),
    ("periodic", [1, 2] * 8, [1, 2] * 5 + [3], 10),
    ("mixed token types", [1, "1", 1.5], ["1", 1.5, None], 2),
    ("tuple tokens", [(1, 2), (3,)], [(3,), (4,)], 1),
]


@pytest.mark.parametrize(
    ("left", "right", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_named_cases(left: list[Any], right: list[Any], expected: int) -> None:
    assert ref_overlap(left, right) == expected
    assert overlap(left, right) == expected
    assert overlap(tuple(left), tuple(right)) == expected
    assert overlap(left, tuple(right)) == expected
    m = min(len(left), len(right))
    if m:
        assert _overlap_kmp(left, right, m) == expected


def test_strings_and_bytes_are_sequences_of_characters() -> None:
    assert overlap("hello wor", "world") == 3
    assert overlap(b"abcab", b"abx") == 2
    assert overlap("abc", ["b", "c", "d"]) == 2
    assert overlap(range(10), range(7, 20)) == 3


@pytest.mark.parametrize("bad", [5, None, {1, 2}, iter([1, 2])])
def test_not_a_sequence_is_a_type_error_naming_it(bad: object) -> None:
    with pytest.raises(TypeError, match=r"overlap: left must be a sequence of tokens, got"):
        overlap(bad, [1])  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"overlap: right must be a sequence .*" + type(bad).__name__
    ):
        overlap([1], bad)  # type: ignore[arg-type]


tokens = st.lists(st.integers(0, 2), max_size=40)


@settings(max_examples=400)
@given(tokens, tokens)
def test_matches_brute_force(left: list[int], right: list[int]) -> None:
    expected = ref_overlap(left, right)
    assert overlap(left, right) == expected
    assert overlap_native(left, right) == expected
    assert overlap("".join(map(str, left)), "".join(map(str, right))) == expected
    assert overlap(bytes(left), bytes(right)) == expected


@settings(max_examples=300)
@given(tokens, st.integers(0, 40), tokens)
def test_matches_brute_force_when_right_starts_inside_left(
    left: list[int], cut: int, tail: list[int]
) -> None:
    right = left[min(cut, len(left)) :] + tail
    assert overlap(left, right) == ref_overlap(left, right)


@settings(max_examples=300)
@given(
    st.lists(st.integers(0, 1), min_size=1, max_size=60),
    st.lists(st.integers(0, 1), min_size=1, max_size=60),
)
def test_kmp_matches_brute_force(left: list[int], right: list[int]) -> None:
    m = min(len(left), len(right))
    assert _overlap_kmp(left, right, m) == ref_overlap(left, right)


def _adversarial(n: int) -> list[tuple[str, list[int], list[int]]]:
    half = n // 2
    return [
        ("one token, last differs", [0] * (n - 1) + [1], [0] * n),
        ("one token, right ends differently", [0] * n, [0] * (n - 1) + [1]),
        ("mismatch in the middle (KMP fallback)", [0] * n, [0] * half + [1] + [0] * half),
        ("periodic with a break", [0, 1] * half, [0, 1] * (half // 2) + [1] + [0, 1] * half),
        ("all equal", [0] * n, [0] * n),
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 17, 300])
def test_adversarial_families_are_exact(n: int) -> None:
    for name, left, right in _adversarial(n):
        assert overlap(left, right) == ref_overlap(left, right), name


class CountingToken:
    """A token that counts how often it is compared."""

    comparisons = 0

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        CountingToken.comparisons += 1
        return isinstance(other, CountingToken) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_comparisons_grow_linearly_on_adversarial_input(n: int) -> None:
    # Not a timing assertion: a count of token comparisons, which the algorithm bounds.
    for name, left_values, right_values in _adversarial(n):
        left = [CountingToken(v) for v in left_values]
        right = [CountingToken(v) for v in right_values]
        CountingToken.comparisons = 0
        result = overlap(left, right)
        assert result == ref_overlap(left_values, right_values), name
        assert CountingToken.comparisons <= 12 * n + 200, (name, CountingToken.comparisons)


def test_only_the_last_tokens_of_left_are_read() -> None:
    class Guarded(Sequence[int]):
        def __init__(self, data: list[int], floor: int) -> None:
            self.data = data
            self.floor = floor

        def __len__(self) -> int:
            return len(self.data)

        def __getitem__(self, index: Any) -> Any:
            assert isinstance(index, int), index
            assert index >= self.floor, index
            return self.data[index]

    left = Guarded(list(range(1000)), floor=1000 - 3)
    assert overlap(left, [997, 998, 999]) == 3
    assert overlap(left, [5, 6]) == 0


# -- every path of the fast path, with its thresholds made small -----------------------------

frequent = st.lists(st.sampled_from([0, 0, 0, 0, 1, 2, 3]), max_size=80)


@settings(max_examples=500)
@given(
    frequent,
    st.integers(0, 80),
    frequent,
    st.integers(1, 4),
    st.integers(1, 8),
    st.integers(1, 4),
    st.integers(0, 8),
)
def test_matches_brute_force_on_every_path(
    left: list[int], cut: int, tail: list[int], switch: int, sample: int, probe: int, slack: int
) -> None:
    right = left[min(cut, len(left)) :] + tail if cut % 3 else tail
    expected = ref_overlap(left, right)
    tuning = Tuning(switch=switch, sample=sample, probe=probe, work_slack=slack)
    assert overlap_native(left, right, tuning) == expected
    assert overlap_native(tuple(left), tuple(right), tuning) == expected
    assert overlap_native("".join(map(str, left)), "".join(map(str, right)), tuning) == expected
    assert overlap_native(bytes(left), bytes(right), tuning) == expected


def test_a_frequent_first_token_hands_over_to_a_rarer_anchor() -> None:
    # Text-like tokens: a space between words. The chunk starts with the space.
    words = [f"w{i * 7919 % 1009}" for i in range(300)]  # no word repeats
    text = [t for w in words for t in (w, " ")]
    left, right = text[:400], text[351:700]
    with mock.patch.object(
        _overlap, "_overlap_rare_anchor", wraps=_overlap._overlap_rare_anchor
    ) as rare:
        assert overlap(left, right) == ref_overlap(left, right) == 49
    assert rare.call_count == 1


def test_periodic_input_falls_back_to_kmp() -> None:
    left, right = [0] * 500, [0] * 249 + [1] + [0] * 250
    with mock.patch.object(_overlap, "_overlap_kmp", wraps=_overlap._overlap_kmp) as kmp:
        assert overlap(left, right) == 249
    assert kmp.call_count == 1


def test_a_rare_last_token_is_searched_in_right() -> None:
    # left ends in a token that right never has: found by one C-level search, not m checks.
    left, right = [0] * 499 + [1], [0] * 500
    with mock.patch.object(
        _overlap, "_overlap_by_last", wraps=_overlap._overlap_by_last
    ) as by_last:
        assert overlap(left, right) == 0
    assert by_last.call_count == 1
