"""Bounds whatever the stop set: memory linear in the stops, memo and cache within their bytes,
safe between threads; and through all of it the answers of the reference, unchanged."""

from __future__ import annotations

import contextlib
import gc
import itertools
import random
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import cache
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamstop._automaton as automaton_module
import streamstop._memo as memo_module
from streamstop import StopAutomaton, StopBuffer, StopStream, split_safe, truncate
from streamstop._memo import DEFAULT_CACHE_BYTES, DEFAULT_MEMO_BYTES

from .reference import all_chunkings, reference_emitted, reference_match, reference_split_safe

# What the README promises: retained bytes per character of the stops, over a fixed allowance
# for the DFA tables of the shallow states (_DFA_BASE_BYTES, 1 MiB, shrunk here so that small
# sets show the linear part) and small fixed objects.
BYTES_PER_CHAR = 150
DFA_BASE_BYTES = 16 << 10
FIXED_BYTES = DFA_BASE_BYTES + (16 << 10)


@contextlib.contextmanager
def without_dfa() -> Iterator[None]:
    """Automata built inside have no DFA table past the root: every state steps through its
    failure links, the path that deep states of big stop sets take."""
    with (
        mock.patch.object(automaton_module, "_DFA_BASE_BYTES", 0),
        mock.patch.object(automaton_module, "_DFA_BYTES_PER_STATE", 0),
    ):
        yield


def build(
    stops: list[str], *, tables: str = "full", memo_bytes: int = DEFAULT_MEMO_BYTES
) -> StopAutomaton:
    if tables == "none":
        with without_dfa():
            return StopAutomaton(stops, memo_bytes=memo_bytes)
    return StopAutomaton(stops, memo_bytes=memo_bytes)


def fibonacci_word(length: int) -> str:
    """A text full of repeats that overlap themselves: its windows overlap each other every way."""
    shorter, longer = "a", "ab"
    while len(longer) < length:
        shorter, longer = longer, longer + shorter
    return longer[:length]


def random_text(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


CJK = "".join(chr(code) for code in range(0x4E00, 0x4E00 + 3000))
FIB = fibonacci_word(3000)


# -- adversarial stop sets: the answers of the reference -------------------------------------


@dataclass(frozen=True)
class Hostile:
    name: str
    make_stops: Callable[[], list[str]]
    make_texts: Callable[[list[str]], list[str]]


def _long_stop_texts(stops: list[str]) -> list[str]:
    stop = stops[0]
    return [
        stop[:-1] + "!" + stop,  # held to the last character, released, then the stop
        stop[: len(stop) // 2] + stop,  # a partial that the stop itself restarts
        stop[:-1],  # held to the end
    ]


def _many_stop_texts(stops: list[str]) -> list[str]:
    rng = random.Random(len(stops))
    alphabet = "".join(sorted(set("".join(stops))))
    pieces = [stop[: rng.randint(1, len(stop))] for stop in rng.sample(stops, 12)]
    return [
        "".join(pieces),
        random_text(rng, alphabet, 120),
        "".join(pieces) + stops[-1],
    ]


HOSTILE = [
    Hostile("long run of one char", lambda: ["a" * 300], _long_stop_texts),
    Hostile(
        "runs of every length",
        lambda: ["a" * k + "b" for k in range(1, 40)],
        lambda _: ["a" * 50 + "b", "a" * 45 + "c" + "a" * 20],
    ),
    Hostile(
        "large alphabet, one long stop",
        lambda: [random_text(random.Random(1), CJK, 400)],
        _long_stop_texts,
    ),
    Hostile(
        "many distinct chars, many stops",
        lambda: [random_text(random.Random(i), CJK, 8) for i in range(400)],
        _many_stop_texts,
    ),
    Hostile(
        "overlapping windows of a Fibonacci word",
        lambda: sorted({FIB[i : i + length] for i in range(200) for length in (5, 13, 34, 89)}),
        lambda _: [FIB[:600], FIB[:33] + "b" + FIB[:200], "ab" * 50],
    ),
    Hostile(
        "each stop a prefix of the next",
        lambda: ["ab" * k + "c" for k in range(1, 30)] + ["ab" * 40],
        lambda _: ["ab" * 39 + "a" + "ab" * 10 + "c", "ab" * 41, "ab" * 20 + "c"],
    ),
    Hostile(
        "10,000 stops",
        lambda: sorted({random_text(random.Random(i), "abcd", 8) for i in range(10_000)}),
        _many_stop_texts,
    ),
]


@cache
def _expected(stops: tuple[str, ...], text: str) -> tuple[str, str | None, str]:
    """(output, stop, held at the end if no stop) by the reference."""
    match = reference_match(text, stops)
    if match is not None:
        return text[: match[0]], match[2], ""
    return text, None, reference_split_safe(text, stops)[1]


def _chunkings(text: str) -> list[list[str]]:
    rng = random.Random(len(text))
    tokens: list[str] = []
    position = 0
    while position < len(text):
        size = rng.randint(1, 6)
        tokens.append(text[position : position + size])
        position += size
    return [[text], list(text), tokens, [text[: len(text) // 2], text[len(text) // 2 :]]]


@pytest.mark.parametrize(
    "memo_bytes", [DEFAULT_MEMO_BYTES, 3_000, 0], ids=["memo", "tiny-memo", "no-memo"]
)
@pytest.mark.parametrize("tables", ["full", "none"])
@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda hostile: hostile.name)
def test_hostile_sets_answer_as_the_reference(
    hostile: Hostile, tables: str, memo_bytes: int
) -> None:
    stops = hostile.make_stops()
    automaton = build(stops, tables=tables, memo_bytes=memo_bytes)
    for text in hostile.make_texts(stops):
        output, stop, held = _expected(tuple(stops), text)
        for chunks in _chunkings(text):
            buffer = StopBuffer(automaton)
            emitted = "".join(buffer.feed(chunk) for chunk in chunks)
            assert buffer.stop_string == stop
            if stop is None:
                assert buffer.held == held
                assert emitted + held == text
            assert emitted + buffer.flush() == output
        assert truncate(text, automaton) == output
        if stop is None:
            assert split_safe(text, automaton) == (text[: len(text) - len(held)], held)


@given(
    stops=st.lists(st.text("ab<", min_size=1, max_size=6), min_size=1, max_size=5),
    text=st.text("ab<", max_size=9),
    memo_bytes=st.sampled_from([0, 700, 2_000, DEFAULT_MEMO_BYTES]),
    tables=st.sampled_from(["full", "none"]),
)
def test_bounded_memo_and_tables_match_reference_in_every_chunking(
    stops: list[str], text: str, memo_bytes: int, tables: str
) -> None:
    # One automaton for every chunking: a tiny memo is emptied many times.
    automaton = build(stops, tables=tables, memo_bytes=memo_bytes)
    for chunks in all_chunkings(text):
        buffer = StopBuffer(automaton)
        emitted = ""
        fed = ""
        for chunk in chunks:
            emitted += buffer.feed(chunk)
            fed += chunk
            assert emitted == reference_emitted(fed, stops), chunks
        match = reference_match(text, stops)
        assert buffer.stop_string == (match[2] if match else None)
        assert memo_bytes == 0 or automaton.memory_size() - _tables(automaton) <= memo_bytes


def _tables(automaton: StopAutomaton) -> int:
    return automaton.memory_size() - automaton._memo_used


# -- memory linear in the stops --------------------------------------------------------------


MEMORY_SETS = {
    "one char 10,000 times": lambda: ["a" * 10_000],
    "one 10,000-char stop over 3,000 chars": lambda: [random_text(random.Random(2), CJK, 10_000)],
    "100 random stops of 100 chars": lambda: [
        random_text(random.Random(i), "abcdefghijklmnopqrstuvwxyz0123456789", 100)
        for i in range(100)
    ],
    "1,000 stops of 10 chars over 3,000 chars": lambda: [
        random_text(random.Random(i), CJK, 10) for i in range(1_000)
    ],
    "overlapping windows": lambda: [FIB[i : i + 100] for i in range(0, 2_000, 20)],
}


@pytest.mark.parametrize("make_stops", MEMORY_SETS.values(), ids=MEMORY_SETS.keys())
def test_memory_is_linear_in_the_stops_and_memory_size_says_it(
    make_stops: Callable[[], list[str]],
) -> None:
    stops = make_stops()
    chars = sum(map(len, stops))
    gc.collect()
    with mock.patch.object(automaton_module, "_DFA_BASE_BYTES", DFA_BASE_BYTES):
        tracemalloc.start()
        try:
            automaton = StopAutomaton(stops)
            retained, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert retained <= BYTES_PER_CHAR * chars + FIXED_BYTES
    assert peak <= 2 * (BYTES_PER_CHAR * chars + FIXED_BYTES)
    # memory_size() counts the stops too, which existed before the trace began.
    held = retained + sum(map(sys.getsizeof, stops))
    assert 0.8 * held <= automaton.memory_size() <= 1.3 * held


def test_held_text_of_a_long_stop_is_rebuilt_not_kept() -> None:
    stop = random_text(random.Random(3), CJK, 20_000)
    automaton = StopAutomaton([stop])
    buffer = StopBuffer(automaton)
    assert buffer.feed(stop[:15_000]) == ""
    assert buffer.held == stop[:15_000]
    # A long token while the partial is held: a walk through it, then through the root.
    token = stop[15_000:-1] + "!" + stop[:100]
    assert buffer.feed(token) == stop[:-1] + "!"
    assert buffer.held == stop[:100]
    assert buffer.feed(stop[100:]) == ""
    assert buffer.stop_string == stop


# -- the memo: within its bytes, serving what is used ------------------------------------------


def test_memo_stays_within_its_budget_and_keeps_learning() -> None:
    budget = 50_000
    automaton = StopAutomaton(["</s>", "<|im_end|>"], memo_bytes=budget)
    tables = _tables(automaton)
    rng = random.Random(4)
    thinned = 0
    used = 0
    learned_late = 0
    frequent_known = 0
    for round_ in range(5_000):
        token = f" w{rng.randrange(10**9)}<"
        frequent_known += automaton._root_step(" the<") is not None
        automaton._advance(0, token)
        automaton._advance(0, " the<")  # a frequent token between rare ones
        assert automaton.memory_size() - tables <= budget
        # Rare tokens met long after the memo first filled are still memoized, many of them (a
        # memo that stopped adding when full would keep none).
        learned_late += round_ >= 2_500 and automaton._root_step(token) is not None
        thinned += automaton.memory_size() - tables < used
        used = automaton.memory_size() - tables
    assert thinned >= 10  # it filled and was thinned again and again
    assert learned_late >= 500
    # The frequent token is nearly always known: forgotten, it comes back at its next use.
    assert frequent_known >= 4_500


def test_memo_entries_never_keep_long_held_text() -> None:
    stop = "x" * 5_000
    automaton = StopAutomaton([stop])
    buffer = StopBuffer(automaton)
    for _ in range(len(stop) - 1):
        assert buffer.feed("x") == ""
    assert buffer.feed("y") == stop[:-1] + "y"
    entries = [step for _, _, step in automaton._memo_items()]
    assert entries
    assert all(len(step[2] or "") <= 2 * memo_module._MEMO_TEXT_LIMIT for step in entries)
    assert automaton.memory_size() - _tables(automaton) < 5_000 * 1_000


def test_memo_of_zero_bytes_keeps_nothing() -> None:
    automaton = StopAutomaton(["ab"], memo_bytes=0)
    buffer = StopBuffer(automaton)
    assert [buffer.feed(chunk) for chunk in ["xa", "a", "b", "c"]] == ["x", "a", "", ""]
    assert buffer.stop_string == "ab"
    assert not automaton._memo_items()


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (-1, ValueError, "-1"),
        ("4MB", TypeError, "'4MB'"),
        (True, TypeError, "True"),
        (1.5, TypeError, "1.5"),
    ],
)
def test_memo_budget_is_checked(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        StopAutomaton(["x"], memo_bytes=value)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        StopAutomaton.set_cache_budget(value)  # type: ignore[arg-type]


# -- the cache: within its bytes, least recently used out --------------------------------------


@pytest.fixture
def automata_cache() -> Iterator[memo_module._AutomatonCache]:
    memo_module._CACHE.clear()
    yield memo_module._CACHE
    StopAutomaton.set_cache_budget(DEFAULT_CACHE_BYTES)
    memo_module._CACHE.clear()


def _charge(stops: list[str]) -> int:
    return StopAutomaton(stops)._cache_charge()


def test_cache_keeps_what_fits_least_recently_used_out(
    automata_cache: memo_module._AutomatonCache,
) -> None:
    sets = [[f"stop{i}"] for i in range(3)]
    StopAutomaton.set_cache_budget(2 * _charge(sets[0]) + 100)
    first = StopAutomaton.from_stops(sets[0])
    second = StopAutomaton.from_stops(sets[1])
    assert StopAutomaton.from_stops(sets[0]) is first  # now the most recently used
    third = StopAutomaton.from_stops(sets[2])
    assert len(automata_cache) == 2
    assert StopAutomaton.from_stops(sets[0]) is first
    assert StopAutomaton.from_stops(sets[2]) is third
    assert StopAutomaton.from_stops(sets[1]) is not second  # evicted, built again
    assert automata_cache.used == sum(a._cache_charge() for a in automata_cache._entries.values())
    assert automata_cache.used <= 2 * _charge(sets[0]) + 100


def test_cache_budget_shrinks_at_once_and_zero_turns_it_off(
    automata_cache: memo_module._AutomatonCache,
) -> None:
    for i in range(5):
        StopAutomaton.from_stops([f"s{i}"])
    assert len(automata_cache) == 5
    StopAutomaton.set_cache_budget(_charge(["s0"]) + 10)
    assert len(automata_cache) == 1
    assert StopAutomaton.from_stops(["s4"]) is StopAutomaton.from_stops(["s4"])
    StopAutomaton.set_cache_budget(0)
    assert len(automata_cache) == 0
    assert StopAutomaton.from_stops(["s4"]) is not StopAutomaton.from_stops(["s4"])
    assert automata_cache.used == 0


def test_an_automaton_over_the_whole_budget_is_built_but_not_kept(
    automata_cache: memo_module._AutomatonCache,
) -> None:
    StopAutomaton.from_stops(["small"])
    StopAutomaton.set_cache_budget(_charge(["small"]) + 1_000)
    big = ["q" * 20_000]
    automaton = StopAutomaton.from_stops(big)
    assert automaton.stops == tuple(big)
    assert len(automata_cache) == 1  # and the small one stayed
    assert StopAutomaton.from_stops(big) is not automaton


def test_from_stops_from_many_threads(automata_cache: memo_module._AutomatonCache) -> None:
    sets = [[f"<{i}>", f"</{i}>", "x" * 500 + str(i)] for i in range(4)]
    threads = 12
    barrier = threading.Barrier(threads)
    results: list[list[StopAutomaton]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait()
            for round_ in range(20):
                stops = sets[(index + round_) % len(sets)]
                automaton = StopAutomaton.from_stops(reversed(stops))
                assert automaton.stops == tuple(sorted(stops))
                results[index].append(automaton)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    # Every thread got the one automaton per set: none was built twice and none was lost.
    by_stops = {a.stops: a for a in itertools.chain.from_iterable(results)}
    for automaton in itertools.chain.from_iterable(results):
        assert automaton is by_stops[automaton.stops]
    assert len(automata_cache) == len(sets)
    assert automata_cache.used == sum(a._cache_charge() for a in automata_cache._entries.values())


def test_one_automaton_shared_by_threads_answers_as_alone() -> None:
    stops = ["abab", "bba", "a" * 40, "ba" * 15]
    rng = random.Random(5)
    texts = [random_text(rng, "ab", rng.randint(20, 200)) for _ in range(60)]
    expected = {text: _expected(tuple(stops), text)[:2] for text in texts}
    with without_dfa():
        automaton = StopAutomaton(stops, memo_bytes=1_500)  # emptied again and again
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        local = random.Random(seed)
        try:
            for text in local.sample(texts, len(texts)):
                buffer = StopBuffer(automaton)
                cuts = sorted(local.sample(range(1, len(text)), len(text) // 4))
                chunks = [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]
                output = "".join(buffer.feed(chunk) for chunk in chunks) + buffer.flush()
                assert (output, buffer.stop_string) == expected[text]
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert automaton.memory_size() - _tables(automaton) <= 1_500
    # Counted afresh from what the memo holds, not from its running count (written without a
    # lock under the GIL).
    held = automaton._memo_items()
    assert sum(memo_module._entry_cost(text, step) for _, text, step in held) <= 1_500


@pytest.mark.anyio
async def test_stream_keeps_its_root_table_while_the_memo_is_emptied() -> None:
    automaton = StopAutomaton(["</s>"], memo_bytes=800)

    async def tokens() -> AsyncIterator[str]:
        for index in range(300):
            yield f" t{index}"
        yield "</s>"

    pieces = [piece async for piece in StopStream(tokens(), automaton)]
    assert "".join(pieces) == "".join(f" t{index}" for index in range(300))
    assert automaton.memory_size() - _tables(automaton) <= 800
