"""split_safe, truncate and the automaton underneath them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop import StopAutomaton, StopMatch, split_safe, truncate
from streamstop._automaton import normalize_stops

from .reference import reference_match, reference_split_safe, reference_truncate

SPLIT_SAFE_CASES = [
    # The contract's six.
    ("partial stop retained", "hello<st", ["<stop>"], ("hello", "<st")),
    ("nothing to retain", "hello", ["<stop>"], ("hello", "")),
    ("longest partial over several stops", "ababa", ["ababx", "baq"], ("ab", "aba")),
    ("no stops", "abc", [], ("abc", "")),
    ("a whole stop is not a proper prefix", "<stop>", ["<stop>"], ("<stop>", "")),
    ("stop longer than text, no prefix", "x", ["long"], ("x", "")),
    # More.
    ("whole text retained", "<st", ["<stop>"], ("", "<st")),
    ("whole stop followed by its start", "<stop><", ["<stop>"], ("<stop>", "<")),
    ("suffix of a whole stop is a partial", "xab", ["ab", "bc"], ("xa", "b")),
    ("single-char stops never retain", "abc", ["c", "b"], ("abc", "")),
    ("none stops", "abc", None, ("abc", "")),
    ("one str stop", "go </", "</s>", ("go ", "</")),
    ("empty text", "", ["</s>"], ("", "")),
    ("unicode", "好的。用", ["。用户"], ("好的", "。用")),
]


@pytest.mark.parametrize(
    ("text", "stops", "expected"),
    [case[1:] for case in SPLIT_SAFE_CASES],
    ids=[case[0] for case in SPLIT_SAFE_CASES],
)
def test_split_safe(text: str, stops: list[str] | str | None, expected: tuple[str, str]) -> None:
    assert split_safe(text, stops) == expected
    assert split_safe(text, StopAutomaton(stops)) == expected


TRUNCATE_CASES = [
    ("earliest end", "abcd", ["abcd", "bc"], False, "a"),
    ("longest at a tie", "ab", ["b", "ab"], False, ""),
    ("include stop", "Hi!</s>junk", ["</s>"], True, "Hi!</s>"),
    ("no match", "Hi!", ["</s>"], False, "Hi!"),
    ("partial at end kept", "Hi!</", ["</s>"], False, "Hi!</"),
    ("no stops", "Hi!</s>", None, False, "Hi!</s>"),
]


@pytest.mark.parametrize(
    ("text", "stops", "include_stop", "expected"),
    [case[1:] for case in TRUNCATE_CASES],
    ids=[case[0] for case in TRUNCATE_CASES],
)
def test_truncate(text: str, stops: list[str] | None, include_stop: bool, expected: str) -> None:
    assert truncate(text, stops, include_stop=include_stop) == expected


def test_find_reports_half_open_offsets() -> None:
    match = StopAutomaton(["</s>", "###"]).find("ok ### </s>")
    assert match == StopMatch(start=3, end=6, stop="###")
    assert "ok ### </s>"[match.start : match.end] == match.stop


def test_find_without_stops() -> None:
    assert StopAutomaton(None).find("anything") is None


ALPHABET = "abc<>"


@given(st.text(ALPHABET, max_size=60), st.lists(st.text(ALPHABET, max_size=6), max_size=6))
def test_split_safe_matches_reference(text: str, stops: list[str]) -> None:
    assert split_safe(text, stops) == reference_split_safe(text, stops)


@given(
    st.text(ALPHABET, max_size=60),
    st.lists(st.text(ALPHABET, max_size=6), max_size=6),
    st.booleans(),
)
def test_truncate_and_find_match_reference(text: str, stops: list[str], include: bool) -> None:
    assert truncate(text, stops, include_stop=include) == reference_truncate(text, stops, include)
    match = StopAutomaton(stops).find(text)
    expected = reference_match(text, stops)
    assert (None if match is None else (match.start, match.end, match.stop)) == expected


# -- stops: normalisation and bad input


def test_normalize_stops() -> None:
    assert normalize_stops(None) == ()
    assert normalize_stops("") == ()
    assert normalize_stops("</s>") == ("</s>",)
    assert normalize_stops(["b", "", "a", "b"]) == ("b", "a")
    assert normalize_stops(iter(["x"])) == ("x",)


@pytest.mark.parametrize(
    ("stops", "named"),
    [
        (["ok", 3], "int: 3"),
        (["ok", None], "NoneType: None"),
        (["ok", b"</s>"], "bytes: b'</s>'"),
        (b"</s>", "bytes: b'</s>'"),
        (42, "int: 42"),
    ],
)
def test_bad_stops_are_type_errors_naming_the_value(stops: object, named: str) -> None:
    with pytest.raises(TypeError, match=named.replace("(", r"\(")):
        StopAutomaton(stops)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=named.replace("(", r"\(")):
        truncate("text", stops)  # type: ignore[arg-type]


def test_text_must_be_str() -> None:
    with pytest.raises(TypeError, match="bytes"):
        truncate(b"text", ["x"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        split_safe(3, ["x"])  # type: ignore[arg-type]


# -- the automaton as a shared object


def test_from_stops_is_cached_and_accepts_an_automaton() -> None:
    first = StopAutomaton.from_stops(["x", "y"])
    assert StopAutomaton.from_stops(["y", "x", ""]) is first
    assert StopAutomaton.from_stops(first) is first
    assert StopAutomaton(["x", "y"]) is not first


def test_automaton_describes_itself() -> None:
    automaton = StopAutomaton(["</s>", "###"])
    assert len(automaton) == 2
    assert automaton.max_stop_length == 4
    assert automaton.start_chars == frozenset("<#")
    assert repr(automaton) == "StopAutomaton(['</s>', '###'])"


def test_memo_stays_within_its_bytes_and_results_stay_exact() -> None:
    budget = 2_000
    automaton = StopAutomaton(["abab", "bq"], memo_bytes=budget)
    empty = automaton.memory_size()
    texts = ["aba", "bab", "ab", "abq", "xab", "abab", *(f"x{i}" for i in range(100))] * 3
    for text in texts:
        _, end, _ = automaton._advance(0, text)
        assert (end >= 0) == (reference_match(text, ["abab", "bq"]) is not None)
        assert automaton.memory_size() <= empty + budget
    assert 0 < len(automaton._memo_items()) < len(set(texts))
