"""Regex stops and gated stops in StopBuffer: named cases replayed through every chunking and
checked after every piece against the brute-force reference, refusals, bounds, then
properties over random patterns."""

from __future__ import annotations

import builtins
import doctest
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstop import StopBuffer, StopPatterns, StopPatternTimeout
from streamstop._patterns import first_characters, pattern_width

from .reference import all_chunkings
from .regex_reference import Rules, regex_emitted, regex_match


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    output: str
    stop: str | None
    stops: list[str] = field(default_factory=list)
    regex: list[str] = field(default_factory=list)
    pattern: str | None = None  # the pattern that fired
    arm_after: str | None = None
    max_match_chars: int | None = None
    include_stop: bool = False


CASES = [
    # -- the rule: earliest end, then longest (the module docstring's examples)
    Case(
        "pattern ending first wins",
        "v1.2.",
        "v",
        "1.",
        regex=[r"\d{1,3}\.", r"\."],
        pattern=r"\d{1,3}\.",
    ),
    Case("longest at a tie of ends", "xab", "x", "ab", regex=["b|ab"], pattern="b|ab"),
    Case("earliest end beats earlier start", "abc", "a", "b", regex=["a.c|b"], pattern="a.c|b"),
    Case(
        "pattern ends before a literal stop",
        "a12:3</s>",
        "a",
        "12:",
        stops=["</s>"],
        regex=[r"\d\d:"],
        pattern=r"\d\d:",
    ),
    Case(
        "literal stop ends before a pattern",
        "a</s>12:",
        "a",
        "</s>",
        stops=["</s>"],
        regex=[r"\d\d:"],
    ),
    Case(
        "tie: the longer is the pattern", "xab", "x", "ab", stops=["b"], regex=["ab"], pattern="ab"
    ),
    Case("tie: the longer is the literal stop", "xab", "x", "ab", stops=["ab"], regex=["b"]),
    Case("tie on the same text: the literal stop", "xab", "x", "ab", stops=["ab"], regex=["a."]),
    Case(
        "include_stop",
        "say 12: x",
        "say 12:",
        "12:",
        regex=[r"\d{1,2}:"],
        pattern=r"\d{1,2}:",
        include_stop=True,
    ),
    Case("no match", "a1b2", "a1b2", None, regex=[r"\d\d"]),
    Case(
        "held partial released at the end",
        "call 555-12",
        "call 555-12",
        None,
        regex=[r"\d{3}-\d{4}"],
    ),
    Case(
        "phone number",
        "call 555-1234 now",
        "call ",
        "555-1234",
        regex=[r"\d{3}-\d{4}"],
        pattern=r"\d{3}-\d{4}",
    ),
    Case(
        "unbounded, bounded by max_match_chars",
        "a-------b xa----b",
        "a-------b x",
        "a----b",
        regex=["a-+b"],
        pattern="a-+b",
        max_match_chars=6,
    ),
    Case(
        "a match longer than max_match_chars is none",
        "a------b",
        "a------b",
        None,
        regex=["a-+b"],
        max_match_chars=6,
    ),
    Case("flags apply", "STOP here", "", "STOP", regex=["(?i)stop"], pattern="(?i)stop"),
    Case("backreference", "abba xyyx", "", "abba", regex=[r"(.)(.)\2\1"], pattern=r"(.)(.)\2\1"),
    Case("unicode", "好的。用户：", "好的", "。用户", regex=["。.{2}"], pattern="。.{2}"),
    # -- the uses
    # -- the uses (SGLang's stop_regex; asked of TGI and text-generation-webui)
    Case(
        "stop after the third sentence",
        "One. Two! Three? Four.",
        "One. Two! Three? ",
        "One. Two! Three? ",
        regex=[r"(?:[^.!?]{1,200}[.!?]){3}\s"],
        pattern=r"(?:[^.!?]{1,200}[.!?]){3}\s",
        include_stop=True,
    ),
    Case(
        "Question N, unbounded digits bounded by max_match_chars",
        "A: 7\nQuestion 123: b",
        "A: 7",
        "\nQuestion 123:",
        regex=[r"\nQuestion \d+:"],
        pattern=r"\nQuestion \d+:",
        max_match_chars=40,
    ),
    Case(
        "Observation line (ReAct)",
        "Thought: look\nAction: x\nObservation: 3",
        "Thought: look\nAction: x",
        "\nObservation:",
        regex=[r"\n(?:Observation|Question \d{1,3}):"],
        pattern=r"\n(?:Observation|Question \d{1,3}):",
    ),
    Case(
        "Question N line (lm-eval)",
        "A: 7\nQuestion 12: next",
        "A: 7",
        "\nQuestion 12:",
        regex=[r"\n(?:Observation|Question \d{1,3}):"],
        pattern=r"\n(?:Observation|Question \d{1,3}):",
    ),
    Case(
        "any </tool_call> variant",
        'x</ tool_call >{"a"',
        "x",
        "</ tool_call >",
        regex=[r"</\s{0,2}tool_call\s{0,2}>"],
        pattern=r"</\s{0,2}tool_call\s{0,2}>",
    ),
    Case(
        "a digit run",
        "The answer is 42 or 43",
        "The answer is ",
        "42",
        regex=[r"\d{2}"],
        pattern=r"\d{2}",
    ),
    Case(
        "earliest end: a repeat ends as soon as it may",
        "Hello\n\nWorld again",
        "Hello\n",
        "\nWo",
        regex=[r"\n[A-Z][a-z]{1,20}"],
        pattern=r"\n[A-Z][a-z]{1,20}",
        include_stop=False,
    ),
    # -- gated stops
    Case(
        "stop inside the thinking passes",
        "<think>Question: why?</think>42.\nQuestion: next",
        "<think>Question: why?</think>42.\n",
        "Question:",
        stops=["Question:"],
        arm_after="</think>",
    ),
    Case(
        "pattern dormant before the marker",
        "<think>Q1: a</think>Q2: b",
        "<think>Q1: a</think>",
        "Q2:",
        regex=[r"Q\d:"],
        pattern=r"Q\d:",
        arm_after="</think>",
    ),
    Case(
        "never armed",
        "<think>Question: why",
        "<think>Question: why",
        None,
        stops=["Question:"],
        arm_after="</think>",
    ),
    Case(
        "the marker is never a stop",
        "a</think>b",
        "a</think>b",
        None,
        stops=["</think>"],
        arm_after="</think>",
    ),
    Case(
        "a stop cannot begin inside the marker",
        "</think>Q",
        "</think>Q",
        None,
        stops=["k>Q"],
        arm_after="</think>",
    ),
    Case(
        "a stop right after the marker",
        "</think>Question:",
        "</think>",
        "Question:",
        stops=["Question:"],
        arm_after="</think>",
    ),
    Case("armed at the first marker", "ab!ab!", "ab", "!", stops=["!"], arm_after="ab"),
    Case(
        "gated, include_stop",
        "<t>x</t>a.b",
        "<t>x</t>a.",
        ".",
        stops=["."],
        arm_after="</t>",
        include_stop=True,
    ),
]


def make(case: Case) -> StopBuffer:
    return StopBuffer(
        case.stops,
        regex=case.regex or None,
        max_match_chars=case.max_match_chars,
        arm_after=case.arm_after,
        include_stop=case.include_stop,
    )


def rules_of(case: Case) -> Rules:
    patterns = [(item, pattern_width(item, case.max_match_chars)) for item in case.regex]
    return Rules(case.stops, patterns, case.arm_after)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_whole(case: Case) -> None:
    buffer = make(case)
    assert buffer.feed(case.text) + buffer.flush() == case.output
    assert buffer.stop_string == case.stop
    assert buffer.stop_pattern == case.pattern
    assert buffer.stopped is (case.stop is not None)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_reference_agrees(case: Case) -> None:
    match = regex_match(case.text, rules_of(case))
    found = (case.text[match[0] : match[1]], match[2]) if match else (None, None)
    assert found == (case.stop, case.pattern)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_chunking(case: Case) -> None:
    """Every chunking of a short text, or of the text's last 9 characters after a first
    piece: the output after each piece is what the reference says of the text fed so far."""
    rules = rules_of(case)
    alphabet = "".join(sorted(set(case.text) | {"\x00"}))
    # The reference tries every completion: only where there are few. (With max_match_chars
    # the hold may also run longer than the reference's: see the docs.)
    widest = max((width for _, width in rules.patterns), default=0)
    exact = not case.max_match_chars and len(alphabet) ** max(0, widest - 1) <= 20_000
    head = case.text[: max(0, len(case.text) - 9)]
    for chunks in all_chunkings(case.text[len(head) :]):
        buffer = make(case)
        emitted = buffer.feed(head) if head else ""
        fed = head
        for chunk in chunks:
            emitted += buffer.feed(chunk)
            fed += chunk
            if exact:
                assert emitted == regex_emitted(fed, rules, alphabet, case.include_stop), chunks
            if not buffer.stopped:
                assert emitted + buffer.held == fed or case.include_stop
        assert emitted + buffer.flush() == case.output, chunks
        assert buffer.stop_pattern == case.pattern


@pytest.mark.parametrize(
    ("fed", "held"),
    [
        ("call 555-12", "555-12"),  # could still become a number
        ("call 55x", ""),  # cannot
        ("call 5", "5"),
        ("call 555-1", "555-1"),
        ("12 555-1", "555-1"),  # "12 " could not begin one
    ],
)
def test_held_is_exactly_what_could_still_match(fed: str, held: str) -> None:
    buffer = StopBuffer(None, regex=r"\d{3}-\d{4}")
    assert buffer.feed(fed) == fed[: len(fed) - len(held)]
    assert buffer.held == held


def test_before_the_marker_nothing_is_held() -> None:
    buffer = StopBuffer("Question:", arm_after="</think>")
    assert buffer.feed("Question") == "Question"
    assert buffer.feed("</thi") == "</thi"  # the marker's own prefix passes too
    assert not buffer.armed
    assert buffer.feed("nk>Quest") == "nk>"
    assert buffer.armed
    assert buffer.held == "Quest"


def test_bytes_split_inside_characters() -> None:
    data = "好的。用户：".encode()
    buffer = StopBuffer(None, regex="。.{2}", arm_after="的")
    out = "".join(buffer.feed(data[i : i + 1]) for i in range(len(data))) + buffer.flush()
    assert (out, buffer.stop_string) == ("好的", "。用户")


def test_a_shared_stop_patterns_object() -> None:
    patterns = StopPatterns([r"\d{2}"])
    first, second = StopBuffer(None, regex=patterns), StopBuffer(None, regex=patterns)
    assert first.feed("a12") == "a"
    assert second.feed("b1") == "b"
    assert (first.patterns, second.stop_string) == (patterns, None)


def test_without_regex_or_marker_the_buffer_is_the_literal_one() -> None:
    assert type(StopBuffer("x")) is StopBuffer
    assert type(StopBuffer("x", regex="y")) is not StopBuffer
    assert StopBuffer("x").stop_pattern is None


def test_feed_after_flush_is_an_error() -> None:
    buffer = StopBuffer(None, regex="ab")
    assert buffer.feed("a") == ""
    assert buffer.flush() == "a"
    assert buffer.flush() == ""
    with pytest.raises(RuntimeError, match="after flush"):
        buffer.feed("b")


# -- refusals: each names the pattern and what to change


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a.*b", "any length.*max_match_chars"),
        (r"\d+", "any length"),
        ("a{2,}", "any length"),
        ("x?", "empty string"),
        ("(?:ab)*", "empty string"),
        ("^Observation", "anchor"),
        ("end$", "anchor"),
        (r"\bword", "word boundary"),
        ("a(?=b)", "lookaround"),
        ("(?<!a)b", "lookaround"),
        ("(?>ab|a)", "atomic group"),
        ("a++", "possessive"),
        ("(unclosed", "not a valid pattern"),
        (r"\p{L}", "not a valid pattern"),  # the regex package's syntax, not re's
    ],
)
def test_refused_patterns(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        StopBuffer(None, regex=pattern)
    assert repr(pattern) in str(error.value)


def test_max_match_chars_is_checked() -> None:
    with pytest.raises(ValueError, match="max_match_chars must be >= 1"):
        StopBuffer(None, regex="a+", max_match_chars=0)
    with pytest.raises(TypeError, match="max_match_chars"):
        StopBuffer(None, regex="a+", max_match_chars="9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="regex is None"):
        StopBuffer("x", max_match_chars=9)
    with pytest.raises(ValueError, match="pass one or the other"):
        StopBuffer(None, regex=StopPatterns("a+", max_match_chars=4), max_match_chars=5)


@pytest.mark.parametrize("bad", [b"ab", 3, [b"ab"]])
def test_pattern_types(bad: Any) -> None:
    with pytest.raises(TypeError, match="regex"):
        StopBuffer(None, regex=bad)


def test_without_the_regex_package_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def no_regex(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "regex":
            raise ImportError("No module named 'regex'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_regex)
    with pytest.raises(ImportError, match=r"streamstop\[regex\].*pip install -e '\.\[regex\]'"):
        StopBuffer(None, regex="ab")
    # Literal stops and the marker alone need nothing.
    assert StopBuffer("x", arm_after="y").feed("ayx") == "ay"


# -- bounds: the work per piece is the window's, and a backtracking pattern cannot stall


@pytest.mark.parametrize(
    ("pattern", "max_match_chars"),
    [("(a|aa)+b", 200), ("(a+)+c", 200), ("(?:a|aa){1,150}b", None)],
)
def test_catastrophic_backtracking_times_out(pattern: str, max_match_chars: int | None) -> None:
    patterns = StopPatterns(pattern, max_match_chars=max_match_chars, timeout=0.01)
    buffer = StopBuffer(None, regex=patterns)
    fed = 0
    error: StopPatternTimeout | None = None
    while fed < 400:
        try:
            buffer.feed("a" * 8)
        except StopPatternTimeout as timeout:
            error = timeout
            break
        fed += 8
    assert error is not None, "the pattern never timed out"
    assert error.pattern == pattern
    assert "timeout=0.01s" in str(error)


def test_the_held_text_stays_within_the_width() -> None:
    buffer = StopBuffer(None, regex=r"a-+b", max_match_chars=8)
    for _ in range(1000):
        buffer.feed("a---")
        assert len(buffer.held) < 8
    assert not buffer.stopped


# -- properties: random patterns from a small grammar, over a small alphabet

ATOMS = st.sampled_from(["a", "b", "[ab]", "[^a]", ".", "ab", "(?:b|ab)"])


def _compose(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda pair: f"(?:{pair[0]}|{pair[1]})"),
        inner.map(lambda item: f"(?:{item})?"),
        st.tuples(inner, st.sampled_from(["{0,2}", "{1,2}", "{2}"])).map(
            lambda pair: f"(?:{pair[0]}){pair[1]}"
        ),
    )


def _usable(pattern: str) -> bool:
    try:
        return pattern_width(pattern) <= 4
    except ValueError:
        return False


patterns = st.recursive(ATOMS, _compose, max_leaves=4).filter(_usable)
TEXT = "abc"


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0, *[cut for cut in cuts if cut < len(text)], len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


@settings(max_examples=300)
@given(
    regex=st.lists(patterns, max_size=2),  # none: the literal stops alone, gated or not
    stops=st.lists(st.text("ab", min_size=1, max_size=3), max_size=2),
    arm_after=st.sampled_from([None, "c", "ca"]),
    text=st.text(TEXT, max_size=12),
    include_stop=st.booleans(),
    data=st.data(),
)
def test_matches_reference_in_any_chunking(
    regex: list[str],
    stops: list[str],
    arm_after: str | None,
    text: str,
    include_stop: bool,
    data: st.DataObject,
) -> None:
    rules = Rules(stops, [(item, pattern_width(item)) for item in regex], arm_after)
    match = regex_match(text, rules)
    expected = text if match is None else text[: match[1] if include_stop else match[0]]
    chunkings = [[text], list(text), data.draw(splits(text))]
    chunkings += [[text[:cut], text[cut:]] for cut in range(1, len(text))]
    for chunks in chunkings:
        buffer = StopBuffer(
            stops, regex=regex or None, arm_after=arm_after, include_stop=include_stop
        )
        emitted = ""
        fed = ""
        for chunk in chunks:
            emitted += buffer.feed(chunk)
            fed += chunk
            assert emitted == regex_emitted(fed, rules, TEXT, include_stop), chunks
        assert emitted + buffer.flush() == expected, chunks
        assert buffer.stop_string == (text[match[0] : match[1]] if match else None)
        assert buffer.stop_pattern == (match[2] if match else None)


def test_the_handbook_page_runs() -> None:
    """docs/regex-and-gated-stops.md: every example on the page, as written."""
    page = Path(__file__).resolve().parents[2] / "docs" / "regex-and-gated-stops.md"
    text = page.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, page.name, str(page), 0)
    assert len(test.examples) >= 20
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0


# The prefilter: the characters a match can begin with, as a standard-library class. Over an
# alphabet with case and line ends, and patterns with flags, classes and categories.
FIRST_ATOMS = st.sampled_from(
    ["a", "B", "[ab]", "[^a]", ".", r"\w", r"\W", r"\s", r"\d", "(?i:a)", "(?s:.)", "[A-Z]"]
)
first_patterns = st.recursive(FIRST_ATOMS, _compose, max_leaves=4).filter(_usable)


@given(
    pattern=first_patterns,
    flags=st.sampled_from(["", "(?i)", "(?s)", "(?a)"]),
    text=st.text("aAbB\n1 _é", min_size=1, max_size=6),
)
def test_every_match_begins_with_a_first_character(pattern: str, flags: str, text: str) -> None:
    pattern = flags + pattern
    first = first_characters(pattern)
    for start, end in itertools.combinations(range(len(text) + 1), 2):
        if re.fullmatch(pattern, text[start:end]):
            assert first is None or first(text[start], 0) is not None, (pattern, text[start:end])


def test_gated_literal_stops_take_bytes_and_str_as_the_literal_buffer_does() -> None:
    buffer = StopBuffer("。用", arm_after="好")
    data = "好的。用户".encode()
    assert buffer.feed(data[:4]) == "好"  # armed; one byte of 的 pending
    with pytest.raises(ValueError, match="unfinished UTF-8 character"):
        buffer.feed("x")
    assert buffer.feed(data[4:]) == "的"
    assert (buffer.stopped, buffer.stop_string) == (True, "。用")
    assert buffer.feed("more") == ""
    assert buffer.flush() == ""
    with pytest.raises(RuntimeError, match="after flush"):
        buffer.feed("late")
