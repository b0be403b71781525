"""The stop-filter suites: what is measured, each a function from a :class:`Config` to results.

- :func:`per_token`: time per token at each stop count, on the measured text, for a **cold**
  automaton (built for the round, nothing memoized: the headline), the peers, and the floor of
  one C-level call per token. Every candidate is checked against :func:`streamstop.truncate`
  first.
- :func:`long_running`: time per token on the measured text after the automaton streamed
  ``n`` tokens of *other* traffic, for a few ``n`` up to millions: a server that has been up.
- :func:`held`: characters held back after each token.
- :func:`async_overhead`: :class:`~streamstop.StopStream` against a bare async pass-through.
- :func:`memory`: bytes per live stream, and per automaton (per stop character, and what its
  memo grows to over the measured text).
- :func:`profile`: where the time goes in the cold run, by cProfile, and which kinds of token
  the run met.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import pstats
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import _peers
import _workload
from _harness import Candidate, Timing, fresh, interleaved, progress, timed
from _peers import PEERS, Factory, Filter

from streamstop import StopAutomaton, StopBuffer, StopStream, truncate

__all__ = [
    "COLD",
    "FLOOR",
    "FULL",
    "QUICK",
    "REPLAY",
    "Config",
    "MemoryResult",
    "PerTokenResult",
    "ProfileResult",
    "async_overhead",
    "held",
    "long_running",
    "memory",
    "per_token",
    "profile",
]


@dataclass(frozen=True)
class Config:
    streams: int | None  # measured documents to run (None: all of them)
    length: int | None  # tokens of each to run (None: all of them)
    stop_counts: tuple[int, ...]
    rounds: int
    round_budget_s: float  # a slow peer is timed on fewer streams to fit this per round
    traffic: tuple[int, ...]  # tokens of other traffic before measuring, for long_running
    traffic_rounds: int
    async_rounds: int
    live_streams: int


FULL = Config(
    streams=None,
    length=None,
    stop_counts=_workload.STOP_COUNTS,
    rounds=7,
    round_budget_s=0.3,
    traffic=(0, 10_000, 100_000, 1_000_000, 3_000_000),
    traffic_rounds=2,
    async_rounds=4,
    live_streams=10_000,
)
QUICK = Config(
    streams=6,
    length=80,
    stop_counts=(1, 4, 1024),
    rounds=2,
    round_budget_s=0.01,
    traffic=(0, 3_000),
    traffic_rounds=1,
    async_rounds=2,
    live_streams=100,
)

COLD = "ours_cold"
REPLAY = "ours_replay"
FLOOR = "floor_rs"
FLOOR_PY = "floor_py"
FLOOR_DICT = "floor_dict"
FLOOR_SET = "floor_set"
LABELS = {name: label for name, (label, _) in PEERS.items()}
LABELS[COLD] = "streamstop StopBuffer, cold automaton"
LABELS[REPLAY] = "StopBuffer, memo has seen these streams (best case, not a headline)"
LABELS[FLOOR] = "floor: one ahocorasick-rs find_matches_as_indexes call per token"
LABELS[FLOOR_PY] = "floor: one pyahocorasick iter call per token, drained"
LABELS[FLOOR_DICT] = "floor: one dict.get per token"
LABELS[FLOOR_SET] = "floor: one frozenset.isdisjoint(token) per token (the stops' first characters)"
# Kept out of every headline ratio: its cost per token grows with the stream.
OUT_OF_HEADLINE = ("rescan", REPLAY)
ORDER = [
    COLD,
    REPLAY,
    FLOOR,
    FLOOR_PY,
    FLOOR_DICT,
    FLOOR_SET,
    "ac_prefixes",
    "pyahocorasick",
    "ahocorasick_rs",
    "fixed_hold",
    "per_stop",
    "rescan",
]
SLOW = ("fixed_hold", "per_stop", "rescan")
# The rescan peer's cost grows with the stream: above this many stops a round takes minutes.
RESCAN_MAX_STOPS = 64


def _streams(stops: Sequence[str], config: Config, *, plant: bool = True) -> list[tuple[str, ...]]:
    return [
        s.tokens for s in _workload.make_streams(stops, config.streams, config.length, plant=plant)
    ]


def _run_streams(make: Factory, streams: Sequence[Sequence[str]]) -> None:
    for tokens in streams:
        stream_filter = make()
        feed = stream_filter.feed
        for token in tokens:
            feed(token)
        stream_filter.flush()


def check_candidates(
    stops: Sequence[str], streams: Sequence[_workload.Stream], factories: dict[str, Factory]
) -> None:
    """Assert that every candidate gives exactly ``truncate``'s output on every stream."""
    for stream in streams:
        expected = truncate(stream.text, stops)
        if stream.planted is not None and expected == stream.text:
            raise AssertionError(f"the planted stop {stream.planted!r} was not found")
        for name, make in factories.items():
            peer = make()
            got = "".join(peer.feed(token) for token in stream.tokens) + peer.flush()
            if got != expected:
                raise AssertionError(
                    f"{name} disagrees with truncate at {len(stops)} stops: "
                    f"...{got[-60:]!r} != ...{expected[-60:]!r}"
                )


# -- floors: one C-level call per token, and nothing else ----------------------------------------


def _floor(stops: Sequence[str], kind: str) -> Callable[[list[list[str]]], None]:
    if kind == FLOOR:
        import ahocorasick_rs

        find = ahocorasick_rs.AhoCorasick(list(stops)).find_matches_as_indexes

        def run_rs(streams: list[list[str]]) -> None:
            for tokens in streams:
                for token in tokens:
                    find(token)

        return run_rs
    if kind == FLOOR_PY:
        import ahocorasick

        automaton = ahocorasick.Automaton()
        for stop in stops:
            automaton.add_word(stop, len(stop))
        automaton.make_automaton()
        iterate = automaton.iter

        def run_py(streams: list[list[str]]) -> None:
            for tokens in streams:
                for token in tokens:
                    for _ in iterate(token):
                        pass

        return run_py
    if kind == FLOOR_SET:
        disjoint = frozenset(stop[0] for stop in stops).isdisjoint

        def run_set(streams: list[list[str]]) -> None:
            for tokens in streams:
                for token in tokens:
                    disjoint(token)

        return run_set
    table: dict[str, int] = {}
    get = table.get

    def run_dict(streams: list[list[str]]) -> None:
        for tokens in streams:
            for token in tokens:
                get(token)

    return run_dict


# -- 1. time per token against the number of stops, cold ----------------------------------------


@dataclass
class PerTokenResult:
    stops: int
    longest_stop: int
    tokens: int
    build_ms: float  # building the automaton, once
    timings: dict[str, Timing]


def _fit_budget(
    make: Factory, streams: list[tuple[str, ...]], budget_s: float
) -> list[tuple[str, ...]]:
    """The first streams, as many as fit the round budget (at least two)."""
    per_token = timed(lambda: _run_streams(make, streams[:2])) / max(1, sum(map(len, streams[:2])))
    keep, tokens = 0, 0
    while keep < len(streams) and (
        keep < 2 or (tokens + len(streams[keep])) * per_token < budget_s * 1e9
    ):
        tokens += len(streams[keep])
        keep += 1
    return streams[:keep]


def per_token(config: Config) -> list[PerTokenResult]:
    results = []
    for count in config.stop_counts:
        stops = _workload.stop_set(count)
        streams = _workload.make_streams(stops, config.streams, config.length)
        names = [n for n in PEERS if n != "ours" and (n != "rescan" or count <= RESCAN_MAX_STOPS)]
        factories = {name: PEERS[name][1](stops) for name in ["ours", *names]}
        lists = [s.tokens for s in streams]
        # A slow peer is checked and timed on the first streams only, as many as fit the round
        # budget (half of them end with a stop, as in the whole set): its time per token is the
        # same, and a round of it on all the text would take minutes.
        subsets = {
            name: _fit_budget(factories[name], lists, config.round_budget_s) for name in names
        }
        check_candidates(stops, streams, {n: f for n, f in factories.items() if n not in SLOW})
        for name in SLOW:
            if name in names:
                check_candidates(stops, streams[: len(subsets[name])], {name: factories[name]})
        tokens = sum(map(len, lists))
        candidates: dict[str, Candidate] = {}
        candidates[COLD] = (_after_traffic(stops, [], lists), tokens)
        # factories["ours"] saw these very streams in check_candidates.
        candidates[REPLAY] = (_setup(factories["ours"], lists), tokens)
        for kind in (FLOOR, FLOOR_PY, FLOOR_DICT, FLOOR_SET):
            candidates[kind] = (_setup_floor(_floor(stops, kind), lists), tokens)
        for name in names:
            candidates[name] = (
                _setup(factories[name], subsets[name]),
                sum(map(len, subsets[name])),
            )
        started = time.perf_counter()
        StopAutomaton(stops)
        build_ms = (time.perf_counter() - started) * 1000
        timings = interleaved(candidates, config.rounds)
        results.append(PerTokenResult(count, max(map(len, stops)), tokens, build_ms, timings))
        progress(
            f"per token, {count} stops: cold {timings[COLD].best:.0f} ns, "
            f"floor {timings[FLOOR].best:.0f} ns"
        )
    return results


def _setup_floor(
    run: Callable[[list[list[str]]], None], lists: list[tuple[str, ...]]
) -> Callable[[], Callable[[], None]]:
    def setup() -> Callable[[], None]:
        tokens = fresh(lists)
        return lambda: run(tokens)

    return setup


def _after_traffic(
    stops: Sequence[str], traffic: list[tuple[str, ...]], lists: list[tuple[str, ...]]
) -> Callable[[], Callable[[], None]]:
    """A new automaton (nothing memoized) that streams ``traffic`` untimed, the server's past,
    then the measured ``lists``, timed."""

    def setup() -> Callable[[], None]:
        make = _peers.prepare_ours(stops)
        _run_streams(make, traffic)
        measured = fresh(lists)
        return lambda: _run_streams(make, measured)

    return setup


def _setup(make: Factory, lists: list[tuple[str, ...]]) -> Callable[[], Callable[[], None]]:
    def setup() -> Callable[[], None]:
        tokens = fresh(lists)
        return lambda: _run_streams(make, tokens)

    return setup


# -- 2. a long-running server: the memo filled by other traffic ----------------------------------


@dataclass
class CurveResult:
    stops: int
    ns_per_token: dict[int, Timing]  # tokens of traffic seen before -> time per measured token


def long_running(config: Config) -> list[CurveResult]:
    traffic = list(_workload.traffic_streams(max(config.traffic)))
    results = []
    for count in config.stop_counts:
        stops = _workload.stop_set(count)
        lists = _streams(stops, config)
        tokens = sum(map(len, lists))
        candidates: dict[str, Candidate] = {}
        for seen in config.traffic:
            prefix = _traffic_prefix(traffic, seen)
            candidates[str(seen)] = (_after_traffic(stops, prefix, lists), tokens)
        timings = interleaved(candidates, config.traffic_rounds)
        results.append(CurveResult(count, {int(k): v for k, v in timings.items()}))
        progress(
            f"long-running, {count} stops: "
            + ", ".join(f"{k}: {v.best:.0f} ns" for k, v in timings.items())
        )
    return results


def _traffic_prefix(traffic: list[tuple[str, ...]], tokens: int) -> list[tuple[str, ...]]:
    prefix, sent = [], 0
    for stream in traffic:
        if sent >= tokens:
            break
        prefix.append(stream[: tokens - sent])
        sent += len(prefix[-1])
    return prefix


# -- 3. characters held back after each token ------------------------------------------------------


HELD_PEERS = ("ours", "fixed_hold")


def held(config: Config) -> dict[int, dict[str, float]]:
    """Mean characters held back after each token, for StopBuffer (the exact peers hold the
    same: tests/benchmarks checks it) and a fixed hold."""
    results = {}
    for count in config.stop_counts:
        stops = _workload.stop_set(count)
        streams = _streams(stops, config)
        means = {}
        for name in HELD_PEERS:
            make = PEERS[name][1](stops)
            total = samples = 0
            for tokens in streams:
                stream_filter = make()
                for token in tokens:
                    stream_filter.feed(token)
                    if stream_filter.stopped:
                        break
                    total += len(stream_filter.held)
                    samples += 1
            means[name] = total / samples
        results[count] = means
    return results


# -- 4. the async StopStream against a bare pass-through -----------------------------------------


async def _source(tokens: Sequence[str]) -> AsyncIterator[str]:
    for token in tokens:
        yield token


async def _passthrough(source: AsyncIterator[str]) -> AsyncIterator[str]:
    async for token in source:
        yield token


ASYNC_LABELS = {
    "source": "source generator alone",
    "passthrough": "bare async pass-through generator (the floor)",
    "lookup": "pass-through + one dict lookup per token (any memo's floor)",
    "stopstream_4": "StopStream, 4 stops, cold automaton",
    "stopstream_1024": "StopStream, 1024 stops, cold automaton",
}
AsyncRun = Callable[[list[list[str]]], Awaitable[None]]


async def _source_alone(streams: list[list[str]]) -> None:
    for tokens in streams:
        async for _ in _source(tokens):
            pass


async def _passthrough_all(streams: list[list[str]]) -> None:
    for tokens in streams:
        async for _ in _passthrough(_source(tokens)):
            pass


def _lookup_run(vocabulary: dict[str, None]) -> AsyncRun:
    # What a filter that looks each token up once costs at the least: the pass-through plus one
    # dict.get of a new str (hashed once) per token, nothing else.
    lookup = vocabulary.get

    async def with_lookup(source: AsyncIterator[str]) -> AsyncIterator[str]:
        async for token in source:
            if lookup(token) is None:
                pass
            yield token

    async def run(streams: list[list[str]]) -> None:
        for tokens in streams:
            async for _ in with_lookup(_source(tokens)):
                pass

    return run


def _stopstream_run(stops: Sequence[str]) -> AsyncRun:
    automaton = StopAutomaton(stops)  # cold, built for the round

    async def run(streams: list[list[str]]) -> None:
        for tokens in streams:
            async for _ in StopStream(_source(tokens), automaton):
                pass

    return run


async def _time_async(
    setups: dict[str, Callable[[], AsyncRun]], streams: list[tuple[str, ...]], rounds: int
) -> dict[str, Timing]:
    tokens = sum(map(len, streams))
    samples: dict[str, list[int]] = {name: [] for name in setups}
    names = list(setups)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            run = setups[name]()
            measured = fresh(streams)
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter_ns()
                await run(measured)
                samples[name].append(time.perf_counter_ns() - start)
            finally:
                gc.enable()
    return {
        name: Timing(min(values) / tokens, sorted(values)[len(values) // 2] / tokens, tokens)
        for name, values in samples.items()
    }


def async_overhead(config: Config) -> dict[str, dict[str, Timing]]:
    # Streams without a stop, so that every consumer pulls every token.
    streams = _streams((), config, plant=False)
    stop_sets = {"stopstream_4": _workload.stop_set(4), "stopstream_1024": _workload.stop_set(1024)}
    vocabulary = dict.fromkeys(token for tokens in streams for token in tokens)
    setups: dict[str, Callable[[], AsyncRun]] = {
        "source": lambda: _source_alone,
        "passthrough": lambda: _passthrough_all,
        "lookup": lambda: _lookup_run(vocabulary),
    }
    for name, stops in stop_sets.items():
        setups[name] = lambda stops=stops: _stopstream_run(stops)  # type: ignore[misc]

    async def main() -> dict[str, Timing]:
        for stops in stop_sets.values():
            automaton = StopAutomaton(stops)
            for tokens in streams[:20]:
                pieces = [piece async for piece in StopStream(_source(tokens), automaton)]
                if "".join(pieces) != truncate("".join(tokens), automaton):
                    raise AssertionError("StopStream disagrees with truncate")
        return await _time_async(setups, streams, config.async_rounds)

    results = {"asyncio": asyncio.run(main())}
    import trio

    results["trio"] = trio.run(main)
    for loop, timings in results.items():
        ratio = timings["stopstream_4"].best / timings["passthrough"].best
        progress(f"async, {loop}: StopStream / pass-through = {ratio:.2f}")
    return results


# -- 5. memory -------------------------------------------------------------------------------------


@dataclass
class MemoryResult:
    stops: int
    stop_chars: int
    automaton_bytes: int  # just built
    memo_bytes: int  # what it grew by over the measured text (-1: not measured)
    memo_tokens: int  # ... which is this many tokens
    bytes_per_stream: dict[str, float] = field(default_factory=dict)


MEMORY_PEERS = ("ours", "fixed_hold", "ac_prefixes")
MEMORY_FEED = 4  # tokens fed to each live filter


def _traced(build: Callable[[], object]) -> tuple[object, int]:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        gc.collect()
        return built, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def memory(config: Config) -> list[MemoryResult]:
    results = []
    for count in config.stop_counts:
        stops = _workload.stop_set(count)
        streams = _streams(stops, config)
        automaton, built = _traced(partial(StopAutomaton, stops))
        assert isinstance(automaton, StopAutomaton)
        ours = _buffers(automaton)
        # Tracing every allocation of a run is slow: the memo's growth at two stop counts.
        grown = _traced(partial(_run_streams, ours, streams))[1] if count in (4, 1024) else -1
        result = MemoryResult(count, sum(map(len, stops)), built, grown, sum(map(len, streams)))
        feeds = [s[:MEMORY_FEED] for s in streams]
        feeds = [feeds[i % len(feeds)] for i in range(config.live_streams)]
        for name in MEMORY_PEERS:
            factory: Factory = ours if name == "ours" else PEERS[name][1](stops)
            for chunk in feeds[: len(streams)]:  # the shared memo learns these, not counted
                _feed(factory(), chunk)
            _, used = _traced(partial(_live, factory, feeds))
            result.bytes_per_stream[name] = used / len(feeds)
        results.append(result)
    progress("memory: done")
    return results


def _buffers(automaton: StopAutomaton) -> Factory:
    def make() -> Filter:
        return StopBuffer(automaton)

    return make


def _live(factory: Factory, feeds: list[tuple[str, ...]]) -> list[Filter]:
    filters = [factory() for _ in feeds]
    for stream_filter, chunk in zip(filters, feeds, strict=True):
        _feed(stream_filter, chunk)
    return filters


def _feed(stream_filter: Filter, tokens: Sequence[str]) -> None:
    for token in tokens:
        stream_filter.feed(token)


# -- 6. where the time goes ------------------------------------------------------------------------


@dataclass
class ProfileResult:
    stops: int
    tokens: int
    arrive_held: float  # share of tokens that arrive while a partial stop is held
    root_disjoint: float  # share that arrive with nothing held and hold no stop's first character
    new_pairs: float  # share of tokens whose (held text, token) pair the run had not met before
    top: list[tuple[str, int, float, float]]  # function, calls, own seconds, cumulative seconds
    stream_top: list[tuple[str, int, float, float]]  # the same for StopStream on asyncio


def _rows(profiler: cProfile.Profile) -> list[tuple[str, int, float, float]]:
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename.rsplit("/", 1)[-1]
        rows.append((f"{where}:{line} {function}", calls, own, cumulative))
    rows.sort(key=lambda row: row[2], reverse=True)
    return rows


def _profile_stream(
    stops: Sequence[str], streams: list[list[str]]
) -> list[tuple[str, int, float, float]]:
    run = _stopstream_run(stops)
    measured = fresh(streams)

    async def main() -> None:
        await run(measured)

    async def first() -> None:  # whatever the first run imports is not the cost of a token
        await _stopstream_run(stops)(fresh(streams[:1]))

    asyncio.run(first())
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(main())
    profiler.disable()
    return _rows(profiler)[:10]


def profile(config: Config, counts: Sequence[int] = (4, 1024)) -> list[ProfileResult]:
    """cProfile of the cold run, and the kinds of token that make its cost."""
    results = []
    for count in counts:
        stops = _workload.stop_set(count)
        streams = fresh(_streams(stops, config))
        make = _peers.prepare_ours(stops)
        profiler = cProfile.Profile()
        profiler.enable()
        _run_streams(make, streams)
        profiler.disable()
        rows = _rows(profiler)
        stream_top = _profile_stream(stops, streams)

        make = _peers.prepare_ours(stops)
        seen: set[tuple[str, str]] = set()
        held_count = new = total = disjoint = 0
        starts = frozenset(stop[0] for stop in stops)
        for tokens in streams:
            stream_filter = make()
            for token in tokens:
                pair = (stream_filter.held, token)
                held_count += bool(pair[0])
                disjoint += not pair[0] and starts.isdisjoint(token)
                if pair not in seen:
                    seen.add(pair)
                    new += 1
                total += 1
                stream_filter.feed(token)
                if stream_filter.stopped:
                    break
        results.append(
            ProfileResult(
                count,
                total,
                held_count / total,
                disjoint / total,
                new / total,
                rows[:10],
                stream_top,
            )
        )
    progress("profile: done")
    return results
