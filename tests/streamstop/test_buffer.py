"""StopBuffer: named cases replayed through every feeding path, then properties."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop import StopAutomaton, StopBuffer

from .reference import all_chunkings, reference_emitted, reference_match, reference_truncate


@dataclass(frozen=True)
class Case:
    name: str
    stops: list[str]
    text: str
    output: str
    stop: str | None
    include_stop: bool = False


CASES = [
    # -- the contract's examples
    Case("earliest end wins over earlier start", ["abcd", "bc"], "abcd", "a", "bc"),
    Case("longest wins at a tie", ["b", "ab"], "ab", "", "ab"),
    Case("tie, longest listed last", ["ab", "b"], "ab", "", "ab"),
    # -- basics
    Case("no stops", [], "hello</s>", "hello</s>", None),
    Case("no match", ["</s>"], "hello", "hello", None),
    Case("stop at start", ["</s>"], "</s>hello", "", "</s>"),
    Case("stop at end", ["</s>"], "hello</s>", "hello", "</s>"),
    Case("text after the stop is dropped", ["</s>"], "a</s>b</s>c", "a", "</s>"),
    Case("partial stop at end is released", ["</s>"], "hello</", "hello</", None),
    Case("whole text is a partial stop", ["<|im_end|>"], "<|im", "<|im", None),
    Case("stop equals text", ["stop"], "stop", "", "stop"),
    Case("single-char stop", ["."], "Hi. There", "Hi", "."),
    Case("chat marker", ["\n\nUser:"], "Sure.\n\nUser: hi", "Sure.", "\n\nUser:"),
    Case("near miss of chat marker", ["\n\nUser:"], "Sure.\n\nUsers", "Sure.\n\nUsers", None),
    # -- overlaps between stops and with the text
    Case("self-overlapping stop", ["aab"], "aaab", "a", "aab"),
    Case("restart inside a partial", ["abab"], "abaabab", "aba", "abab"),
    Case("stop is a suffix of another, tie", ["xabc", "bc"], "yxabc", "y", "xabc"),
    Case("stop is a prefix of another", ["ab", "abc"], "abc", "", "ab"),
    Case("stop inside another", ["abcde", "bcd"], "abcde", "a", "bcd"),
    Case("overlapping candidates", ["ababx", "baq"], "ababaq", "aba", "baq"),
    Case("duplicates are harmless", ["</s>", "</s>"], "a</s>", "a", "</s>"),
    Case("empty stops are ignored", ["", "</s>"], "a</s>", "a", "</s>"),
    Case("only empty stops", ["", ""], "abc", "abc", None),
    # -- include_stop
    Case("include stop", ["</s>"], "hello</s>x", "hello</s>", "</s>", True),
    Case("include stop, earliest end", ["abcd", "bc"], "abcd", "abc", "bc", True),
    Case("include stop, tie", ["b", "ab"], "ab", "ab", "ab", True),
    Case("include stop, no match", ["</s>"], "hello</", "hello</", None, True),
    # -- unicode
    Case("non-ascii stop", ["ÿ∑"], "aÿb∑ÿ∑c", "aÿb∑", "ÿ∑"),
    Case("astral characters", ["🛑"], "go 🙂🛑 no", "go 🙂", "🛑"),
    Case("combining marks are separate chars", ["e\u0301"], "cafe\u0301!", "caf", "e\u0301"),
    Case("CJK", ["。用户"], "好的。用户：", "好的", "。用户"),
]


def feed_all(buffer: StopBuffer, chunks: list[str] | list[bytes]) -> str:
    return "".join(buffer.feed(chunk) for chunk in chunks) + buffer.flush()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_whole(case: Case) -> None:
    buffer = StopBuffer(case.stops, include_stop=case.include_stop)
    assert feed_all(buffer, [case.text]) == case.output
    assert buffer.stop_string == case.stop
    assert buffer.stopped is (case.stop is not None)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_chunking(case: Case) -> None:
    automaton = StopAutomaton(case.stops)
    for chunks in all_chunkings(case.text[:12]):
        expected_output = reference_truncate("".join(chunks), case.stops, case.include_stop)
        buffer = StopBuffer(automaton, include_stop=case.include_stop)
        assert feed_all(buffer, chunks) == expected_output, chunks
    # The full text one character at a time, against the table itself.
    buffer = StopBuffer(automaton, include_stop=case.include_stop)
    assert feed_all(buffer, list(case.text)) == case.output
    assert buffer.stop_string == case.stop


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bytes_split_anywhere(case: Case) -> None:
    data = case.text.encode()
    for cut in range(len(data) + 1):
        buffer = StopBuffer(case.stops, include_stop=case.include_stop)
        assert feed_all(buffer, [data[:cut], data[cut:]]) == case.output, cut
        assert buffer.stop_string == case.stop
    buffer = StopBuffer(case.stops, include_stop=case.include_stop)
    assert feed_all(buffer, [data[i : i + 1] for i in range(len(data))]) == case.output


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_emitted_so_far_after_each_chunk(case: Case) -> None:
    buffer = StopBuffer(case.stops, include_stop=case.include_stop)
    emitted = ""
    for position in range(1, len(case.text) + 1):
        emitted += buffer.feed(case.text[position - 1])
        fed = case.text[:position]
        assert emitted == reference_emitted(fed, case.stops, case.include_stop), fed
        if not buffer.stopped:
            assert emitted + buffer.held == fed


# -- the hold rule while streaming


def test_holds_only_what_could_still_become_a_stop() -> None:
    buffer = StopBuffer(["<stop>"])
    assert buffer.feed("hello<st") == "hello"
    assert buffer.held == "<st"
    assert buffer.feed("x") == "<stx"
    assert buffer.held == ""


def test_unrelated_text_is_not_delayed() -> None:
    # A fixed window of (longest stop - 1) characters would hold back 9 characters here.
    buffer = StopBuffer(["<|im_end|>", "</s>"])
    assert buffer.feed("The answer is 42.") == "The answer is 42."


def test_include_stop_holds_nothing() -> None:
    buffer = StopBuffer(["<stop>"], include_stop=True)
    assert buffer.feed("hello<st") == "hello<st"
    assert buffer.held == ""
    assert buffer.feed("op>tail") == "op>"
    assert buffer.stop_string == "<stop>"


def test_feed_after_stop_returns_nothing() -> None:
    buffer = StopBuffer("</s>")
    assert buffer.feed("a</s>b") == "a"
    assert buffer.feed("more") == ""
    assert buffer.feed(b"\xff not even decoded") == ""
    assert buffer.flush() == ""
    assert buffer.stop_string == "</s>"


def test_flush_releases_held_text_and_is_idempotent() -> None:
    buffer = StopBuffer("</s>")
    assert buffer.feed("a</") == "a"
    assert buffer.flush() == "</"
    assert buffer.flush() == ""
    assert not buffer.stopped


def test_feed_after_flush_is_an_error() -> None:
    buffer = StopBuffer("</s>")
    buffer.flush()
    with pytest.raises(RuntimeError, match=r"feed\('late'\) called after flush\(\)"):
        buffer.feed("late")


def test_empty_chunks_are_fine() -> None:
    buffer = StopBuffer("</s>")
    assert buffer.feed("") == ""
    assert buffer.feed(b"") == ""
    assert buffer.feed("a</") == "a"
    assert buffer.feed("") == ""
    assert buffer.held == "</"


def test_shared_automaton_keeps_streams_apart() -> None:
    automaton = StopAutomaton(["</s>"])
    first, second = StopBuffer(automaton), StopBuffer(automaton)
    assert first.feed("x</") == "x"
    assert second.feed("y") == "y"
    assert second.flush() == ""
    assert first.feed("s>") == ""
    assert first.stop_string == "</s>"
    assert first.automaton is second.automaton


def test_buffers_from_equal_stop_sets_share_an_automaton() -> None:
    assert StopBuffer(["a", "b"]).automaton is StopBuffer(("b", "a", "b")).automaton


def test_repr_names_state() -> None:
    buffer = StopBuffer(["</s>"])
    buffer.feed("x</")
    assert "'</'" in repr(buffer)
    assert "running" in repr(buffer)


# -- bytes


def test_multibyte_character_split_is_never_emitted_broken() -> None:
    buffer = StopBuffer("</s>")
    snowman = "☃".encode()
    assert buffer.feed(b"a" + snowman[:1]) == "a"
    assert buffer.feed(snowman[1:2]) == ""
    assert buffer.feed(snowman[2:]) == "☃"


def test_stop_split_inside_a_multibyte_character() -> None:
    buffer = StopBuffer("→end")
    data = "go→end".encode()
    assert [buffer.feed(data[i : i + 1]) for i in range(len(data))] == ["g", "o"] + [""] * 6
    assert buffer.stop_string == "→end"


def test_invalid_bytes_raise_under_strict() -> None:
    buffer = StopBuffer("</s>")
    with pytest.raises(UnicodeDecodeError):
        buffer.feed(b"ok\xff")


def test_invalid_bytes_are_replaced_under_replace() -> None:
    buffer = StopBuffer("</s>", errors="replace")
    assert buffer.feed(b"ok\xff!") == "ok\ufffd!"


def test_truncated_character_at_end_under_replace() -> None:
    buffer = StopBuffer("</s>", errors="replace")
    assert buffer.feed(b"ok\xe2\x98") == "ok"
    assert buffer.flush() == "\ufffd"


def test_truncated_character_at_end_under_strict() -> None:
    buffer = StopBuffer("</s>")
    buffer.feed(b"ok\xe2\x98")
    with pytest.raises(UnicodeDecodeError):
        buffer.flush()


def test_replacement_character_can_complete_a_stop() -> None:
    buffer = StopBuffer("x\ufffd", errors="replace")
    assert buffer.feed(b"ax") == "a"
    assert buffer.feed(b"\xe2") == ""
    assert buffer.flush() == ""
    assert buffer.stop_string == "x\ufffd"


def test_str_and_bytes_may_alternate_between_characters() -> None:
    buffer = StopBuffer("</s>")
    assert buffer.feed(b"a") + buffer.feed("b") + buffer.feed(b"c</") + buffer.feed("s>") == "abc"
    assert buffer.stopped


def test_str_while_a_character_is_pending_is_an_error() -> None:
    buffer = StopBuffer("</s>")
    buffer.feed(b"\xe2\x98")
    with pytest.raises(ValueError, match=r"'late'.*pending.*\\xe2\\x98"):
        buffer.feed("late")


def test_bytearray_and_memoryview_are_bytes() -> None:
    buffer = StopBuffer("</s>")
    assert buffer.feed(bytearray(b"ab")) + buffer.feed(memoryview(b"c</s>")) == "abc"


# -- bad input


@pytest.mark.parametrize("chunk", [None, 42, ["a"], 3.5])
def test_non_text_chunk_is_a_type_error_naming_it(chunk: object) -> None:
    buffer = StopBuffer("</s>")
    with pytest.raises(TypeError, match=type(chunk).__name__):
        buffer.feed(chunk)  # type: ignore[arg-type]


def test_non_text_chunk_after_stop_is_still_a_type_error() -> None:
    buffer = StopBuffer("x")
    buffer.feed("x")
    with pytest.raises(TypeError, match="int"):
        buffer.feed(42)  # type: ignore[arg-type]


def test_unknown_errors_policy_is_named() -> None:
    with pytest.raises(ValueError, match="'bogus'"):
        StopBuffer("</s>", errors="bogus")


def test_errors_policy_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="None"):
        StopBuffer("</s>", errors=None)  # type: ignore[arg-type]


def test_str_subclass_chunk_is_plain_text() -> None:
    class Token(str):
        pass

    buffer = StopBuffer("</s>")
    piece = buffer.feed(Token("hi"))
    assert piece == "hi"
    assert type(piece) is str


def test_str_subclass_chunk_is_plain_text_after_the_memo_knows_it() -> None:
    # The shared automaton has memoized "hi" as a plain str first: the subclass still comes out
    # as plain text (before, the answer depended on what earlier buffers had fed).
    class Token(str):
        pass

    automaton = StopAutomaton(["</s>"])
    assert StopBuffer(automaton).feed("hi") == "hi"
    piece = StopBuffer(automaton).feed(Token("hi"))
    assert (piece, type(piece)) == ("hi", str)


@pytest.mark.parametrize("include_stop", [False, True])
def test_str_subclass_chunks_while_text_is_held_are_plain_text(include_stop: bool) -> None:
    # Every step memoized from plain text first (the shared automaton), then the same tokens
    # as a str subclass, from a state that holds "<" and from the root.
    class Token(str):
        pass

    automaton = StopAutomaton(["</s>"])
    tokens = ["a<", "b", "<", "/", "x", "c<", "/s", ">d"]
    expected = StopBuffer(automaton, include_stop=include_stop)
    wanted = [expected.feed(token) for token in tokens]
    buffer = StopBuffer(automaton, include_stop=include_stop)
    pieces = [buffer.feed(Token(token)) for token in tokens]
    assert pieces == wanted
    assert [type(piece) for piece in pieces] == [str] * len(tokens)
    assert buffer.stop_string == "</s>"


# -- properties against the brute-force reference

ALPHABET = "ab<>/\n"
stop_lists = st.lists(st.text(ALPHABET, max_size=5), max_size=5)


@st.composite
def chunked_text(draw: st.DrawFn) -> list[str]:
    text = draw(st.text(ALPHABET, max_size=40))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0, *[cut for cut in cuts if cut < len(text)], len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


@given(stops=stop_lists, chunks=chunked_text(), include_stop=st.booleans())
def test_matches_reference_in_any_chunking(
    stops: list[str], chunks: list[str], include_stop: bool
) -> None:
    text = "".join(chunks)
    buffer = StopBuffer(stops, include_stop=include_stop)
    emitted = ""
    fed = ""
    for chunk in chunks:
        piece = buffer.feed(chunk)
        fed += chunk
        emitted += piece
        assert emitted == reference_emitted(fed, stops, include_stop)
        if not buffer.stopped:
            assert emitted + buffer.held == fed
    emitted += buffer.flush()
    assert emitted == reference_truncate(text, stops, include_stop)
    match = reference_match(text, stops)
    assert buffer.stop_string == (match[2] if match else None)


@given(stops=stop_lists, chunks=chunked_text())
def test_bytes_feeding_equals_str_feeding(stops: list[str], chunks: list[str]) -> None:
    def widen(text: str) -> str:
        return text.replace("a", "α").replace("b", "🅱")

    stops = [widen(stop) for stop in stops]
    text = widen("".join(chunks))
    data = text.encode()
    by_bytes = StopBuffer(stops)
    out = "".join(by_bytes.feed(data[i : i + 3]) for i in range(0, len(data), 3))
    out += by_bytes.flush()
    assert out == reference_truncate(text, stops)


# One automaton for every example: its memo and tables warm up across streams, as in a server,
# and must never change an answer.
SHARED_STOPS = ["ab", "abab", "b<", "<>/", "\n\n", "a\nb"]
SHARED = StopAutomaton(SHARED_STOPS)


@given(chunks=chunked_text(), include_stop=st.booleans())
def test_a_warm_shared_automaton_matches_reference(chunks: list[str], include_stop: bool) -> None:
    for _ in range(2):  # the second pass meets a memo filled by the first
        buffer = StopBuffer(SHARED, include_stop=include_stop)
        emitted = ""
        fed = ""
        for chunk in chunks:
            emitted += buffer.feed(chunk)
            fed += chunk
            assert emitted == reference_emitted(fed, SHARED_STOPS, include_stop)
        emitted += buffer.flush()
        assert emitted == reference_truncate(fed, SHARED_STOPS, include_stop)
