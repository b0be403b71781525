"""Benchmark: streamstop's stop filter against the stop handling that servers ship.

    python benchmarks/stopfilter.py            # full run, a few minutes; writes benchmarks/results/
    python benchmarks/stopfilter.py --quick    # smoke run, a few seconds; writes to a temp folder

Everything is measured side by side in one run: the candidates are interleaved, each round runs
every candidate once on the same streams (in a rotating order), and the fastest round counts
(the median is shown too). The garbage collector is off during timed loops, for everyone.
Before any timing, every candidate's output is checked against :func:`streamstop.truncate`.

See benchmarks/README.md for the workload, the peers and the latest results.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _peers
import _workload
from _peers import PEERS, Factory, Filter

from streamstop import StopAutomaton, StopBuffer, StopStream, truncate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PREFIX = "stopfilter"


@dataclass(frozen=True)
class Config:
    streams: int  # streams per stop set in the per-token benchmark
    length: int  # tokens of ordinary text per stream
    rounds: int
    round_budget_s: float  # a slow candidate is timed on fewer streams to fit this per round
    async_streams: int
    async_rounds: int
    lengths: tuple[int, ...]  # stream lengths for the cost-against-length benchmark
    rescan_lengths: tuple[int, ...]
    length_rounds: int
    live_buffers: int


FULL = Config(
    streams=8,
    length=500,
    rounds=9,
    round_budget_s=0.4,
    async_streams=8,
    async_rounds=9,
    lengths=(1_000, 10_000, 100_000, 1_000_000),
    rescan_lengths=(1_000, 3_000, 10_000, 30_000),
    length_rounds=3,
    live_buffers=10_000,
)
QUICK = Config(
    streams=2,
    length=40,
    rounds=2,
    round_budget_s=0.02,
    async_streams=2,
    async_rounds=2,
    lengths=(1_000, 10_000),
    rescan_lengths=(1_000,),
    length_rounds=1,
    live_buffers=100,
)

# The per-token benchmark's candidates: the peers, plus ours on a fresh automaton every round
# (its per-token memo starts empty: what the first streams of a new stop set cost).
# Our automaton memoizes whole-token steps per state, so what it has seen before matters. Ours
# is timed three ways, each round:
# - "ours": a new automaton that first saw the warm-up streams (the other half of the corpus):
#   a server that has streamed some text before, but not these very streams. The headline.
# - REPLAY: one automaton for all rounds, that has seen these very streams: the best case.
# - COLD: a new automaton, nothing seen: a server's first stream for a new stop set.
REPLAY = "ours_replay"
COLD = "ours_cold"
LABELS = {name: label for name, (label, _) in PEERS.items()}
LABELS["ours"] = "streamstop StopBuffer"
LABELS[REPLAY] = "StopBuffer, memo has seen these streams"
LABELS[COLD] = "StopBuffer, fresh automaton"
ORDER = [
    "ours",
    REPLAY,
    COLD,
    "fixed_hold",
    "per_stop",
    "rescan",
    "pyahocorasick",
    "ahocorasick_rs",
]


# -- timing ----------------------------------------------------------------------------------


def _fresh(streams: Sequence[Sequence[str]]) -> list[list[str]]:
    """New str objects with the same text, as a detokenizer makes for every token: their hash is
    not computed yet, so that no candidate profits from a hash cached in an earlier round."""
    return [[(token + "\0")[:-1] for token in tokens] for tokens in streams]


def _run_streams(make: Factory, streams: Sequence[Sequence[str]]) -> None:
    for tokens in streams:
        stream_filter = make()
        feed = stream_filter.feed
        for token in tokens:
            feed(token)
        stream_filter.flush()


def _timed(run: Callable[[], None]) -> int:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        run()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


@dataclass
class Timing:
    """Nanoseconds per token of one candidate: the fastest round, and the median."""

    best: float
    median: float
    tokens: int  # tokens per round (a slow candidate runs on fewer streams)


def _interleaved(
    candidates: dict[str, tuple[Callable[[], Callable[[], None]], int]], rounds: int
) -> dict[str, Timing]:
    """Time candidates round by round. Each is ``(setup, tokens)``: ``setup()`` (untimed)
    returns the run to time, which handles ``tokens`` tokens."""
    samples: dict[str, list[int]] = {name: [] for name in candidates}
    names = list(candidates)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            setup, _ = candidates[name]
            run = setup()
            samples[name].append(_timed(run))
    return {
        name: Timing(
            best=min(samples[name]) / tokens,
            median=statistics.median(samples[name]) / tokens,
            tokens=tokens,
        )
        for name, (_, tokens) in candidates.items()
    }


# -- correctness -------------------------------------------------------------------------------


def _output(stream_filter: Filter, tokens: Sequence[str]) -> str:
    return "".join(stream_filter.feed(token) for token in tokens) + stream_filter.flush()


def check_candidates(
    stops: Sequence[str],
    streams: Sequence[_workload.Stream],
    factories: dict[str, Factory],
) -> None:
    """Assert that every candidate gives exactly ``truncate``'s output on every stream."""
    for stream in streams:
        expected = truncate(stream.text, stops)
        if stream.planted is not None and expected == stream.text:
            raise AssertionError(f"the planted stop {stream.planted!r} was not found")
        for name, make in factories.items():
            got = _output(make(), stream.tokens)
            if got != expected:
                raise AssertionError(
                    f"{name} disagrees with truncate at {len(stops)} stops: "
                    f"...{got[-60:]!r} != ...{expected[-60:]!r}"
                )


# -- 1. time per token against the number of stops ---------------------------------------------


@dataclass
class PerTokenResult:
    stops: int
    longest_stop: int
    tokens: int
    timings: dict[str, Timing]


def bench_per_token(config: Config) -> list[PerTokenResult]:
    results = []
    for count in _workload.STOP_COUNTS:
        stops = _workload.stop_set(count)
        streams = _workload.make_streams(stops, config.streams, config.length)
        factories = {name: prepare(stops) for name, (_, prepare) in PEERS.items()}
        check_candidates(stops, streams, factories)
        token_lists = [stream.tokens for stream in streams]

        warmup = _workload.warmup_streams(config.streams, config.length)
        candidates: dict[str, tuple[Callable[[], Callable[[], None]], int]] = {}
        for name in ORDER:
            if name in ("ours", COLD):

                def setup_ours(
                    stops: tuple[str, ...] = stops,
                    lists: list[tuple[str, ...]] = token_lists,
                    warmup: list[tuple[str, ...]] = warmup if name == "ours" else [],
                ) -> Callable[[], None]:
                    make = _peers.prepare_ours(stops)  # a new automaton: an empty memo
                    _run_streams(make, _fresh(warmup))
                    fresh = _fresh(lists)
                    return lambda: _run_streams(make, fresh)

                candidates[name] = (setup_ours, sum(map(len, token_lists)))
                continue
            # REPLAY's automaton (factories["ours"]) saw these streams in check_candidates.
            make = factories["ours" if name == REPLAY else name]
            # A slow candidate runs on the first streams only (half of them end with a stop, as
            # in the whole set), enough to fill the round budget: its time per token is the same.
            lists = _fit_budget(make, token_lists, config.round_budget_s)

            def setup(
                make: Factory = make, lists: list[tuple[str, ...]] = lists
            ) -> Callable[[], None]:
                fresh = _fresh(lists)
                return lambda: _run_streams(make, fresh)

            candidates[name] = (setup, sum(map(len, lists)))
        timings = _interleaved(candidates, config.rounds)
        results.append(PerTokenResult(count, max(map(len, stops)), timings["ours"].tokens, timings))
        _progress(f"per token, {count} stops: ours {timings['ours'].best:.0f} ns")
    return results


def _fit_budget(
    make: Factory, token_lists: list[tuple[str, ...]], budget_s: float
) -> list[tuple[str, ...]]:
    per_stream_ns = _timed(lambda: _run_streams(make, token_lists[:2])) / 2
    fit = int(budget_s * 1e9 / max(per_stream_ns, 1.0))
    keep = max(2, min(len(token_lists), fit - fit % 2))
    return token_lists[:keep]


# -- 2. characters held back after each token --------------------------------------------------


@dataclass
class HeldResult:
    stops: int
    mean_held: dict[str, float]  # characters held back after each token, on average


def bench_held(config: Config) -> list[HeldResult]:
    results = []
    for count in _workload.STOP_COUNTS:
        stops = _workload.stop_set(count)
        streams = _workload.make_streams(stops, config.streams, config.length)
        mean_held = {}
        for name, (_, prepare) in PEERS.items():
            make = prepare(stops)
            total = samples = 0
            for stream in streams:
                stream_filter = make()
                for token in stream.tokens:
                    stream_filter.feed(token)
                    if stream_filter.stopped:
                        break
                    total += len(stream_filter.held)
                    samples += 1
            mean_held[name] = total / samples
        results.append(HeldResult(count, mean_held))
    return results


# -- 3. the async StopStream against a bare pass-through ---------------------------------------


async def _source(tokens: Sequence[str]) -> AsyncIterator[str]:
    for token in tokens:
        yield token


async def _passthrough(source: AsyncIterator[str]) -> AsyncIterator[str]:
    async for token in source:
        yield token


ASYNC_SHORT = {
    "source": "source\nalone",
    "passthrough": "pass-through\n(the floor)",
    "stopstream_4": "StopStream\n4 stops",
    "stopstream_1024": "StopStream\n1024 stops",
}
ASYNC_LABELS = {
    "source": "source generator alone",
    "passthrough": "bare pass-through generator (the floor)",
    "stopstream_4": "StopStream, 4 stops",
    "stopstream_1024": "StopStream, 1024 stops",
}


AsyncRun = Callable[[list[list[str]]], Awaitable[None]]


async def _time_async(
    setups: dict[str, Callable[[], AsyncRun]], streams: list[tuple[str, ...]], rounds: int
) -> dict[str, Timing]:
    """Time async consumers round by round; ``setup()`` (untimed) gives the run to time."""
    tokens = sum(map(len, streams))
    samples: dict[str, list[int]] = {name: [] for name in setups}
    names = list(setups)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            run = setups[name]()
            fresh = _fresh(streams)
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter_ns()
                await run(fresh)
                samples[name].append(time.perf_counter_ns() - start)
            finally:
                gc.enable()
    return {
        name: Timing(min(values) / tokens, statistics.median(values) / tokens, tokens)
        for name, values in samples.items()
    }


async def _source_alone(streams: list[list[str]]) -> None:
    for tokens in streams:
        async for _ in _source(tokens):
            pass


async def _passthrough_all(streams: list[list[str]]) -> None:
    for tokens in streams:
        async for _ in _passthrough(_source(tokens)):
            pass


def _stopstream_run(automaton: StopAutomaton) -> AsyncRun:
    async def run(streams: list[list[str]]) -> None:
        for tokens in streams:
            async for _ in StopStream(_source(tokens), automaton):
                pass

    return run


def _warmed_automaton(stops: Sequence[str], config: Config) -> StopAutomaton:
    """A new automaton that has seen the warm-up streams, as "ours" in the per-token table."""
    automaton = StopAutomaton(stops)
    _run_streams(
        lambda: StopBuffer(automaton),
        _fresh(_workload.warmup_streams(config.async_streams, config.length)),
    )
    return automaton


async def _check_async(streams: list[tuple[str, ...]], automaton: StopAutomaton) -> None:
    for tokens in streams:
        pieces = [piece async for piece in StopStream(_source(tokens), automaton)]
        if "".join(pieces) != truncate("".join(tokens), automaton):
            raise AssertionError("StopStream disagrees with truncate")


def bench_async(config: Config) -> dict[str, dict[str, Timing]]:
    # Streams without a stop, so that every candidate pulls every token.
    streams = [
        s.tokens
        for s in _workload.make_streams((), config.async_streams, config.length, plant=False)
    ]
    stop_sets = {"stopstream_4": _workload.stop_set(4), "stopstream_1024": _workload.stop_set(1024)}
    setups: dict[str, Callable[[], AsyncRun]] = {
        "source": lambda: _source_alone,
        "passthrough": lambda: _passthrough_all,
    }
    for name, stops in stop_sets.items():

        def setup(stops: tuple[str, ...] = stops) -> AsyncRun:
            return _stopstream_run(_warmed_automaton(stops, config))

        setups[name] = setup

    async def main() -> dict[str, Timing]:
        for stops in stop_sets.values():
            await _check_async(streams, StopAutomaton(stops))
        return await _time_async(setups, streams, config.async_rounds)

    results = {"asyncio": asyncio.run(main())}
    _progress(f"async, asyncio: {_ratio_text(results['asyncio'])}")
    try:
        import trio
    except ImportError:  # pragma: no cover - trio is in the test extra
        return results
    results["trio"] = trio.run(main)
    _progress(f"async, trio: {_ratio_text(results['trio'])}")
    return results


def _ratio_text(timings: dict[str, Timing]) -> str:
    ratio = timings["stopstream_4"].best / timings["passthrough"].best
    return f"StopStream / pass-through = {ratio:.2f}"


# -- 4. memory per live stream -----------------------------------------------------------------


@dataclass
class MemoryResult:
    stops: int
    bytes_per_stream: dict[str, float]


MEMORY_PEERS = ["ours", "fixed_hold", "per_stop", "rescan", "pyahocorasick", "ahocorasick_rs"]
# At 1024 stops the str.find peers take 0.1-0.2 ms a token: (b) holds what ours holds and (c)
# the whole text, whatever the stops, so they are measured at 4 stops only.
SHORT = {
    "ours": "StopBuffer",
    "fixed_hold": "(a) fixed\nhold",
    "per_stop": "(b) per-stop\nscan",
    "rescan": "(c) rescan",
    "pyahocorasick": "(d) pyaho-\ncorasick",
    "ahocorasick_rs": "(d) aho-\ncorasick-rs",
}
MEMORY_SKIP_1024 = ("per_stop", "rescan")
MEMORY_FEED = 4  # tokens fed to each live filter


def bench_memory(config: Config) -> list[MemoryResult]:
    tokens = _workload.corpus_tokens()
    feeds = [
        tokens[(7 * i) % (len(tokens) - MEMORY_FEED) :][:MEMORY_FEED]
        for i in range(config.live_buffers)
    ]
    results = []
    for count in (4, 1024):
        stops = _workload.stop_set(count)
        per_stream = {}
        for name in MEMORY_PEERS:
            if count == 1024 and name in MEMORY_SKIP_1024:
                continue
            make = PEERS[name][1](stops)
            if name == "ours":
                # Warm up the automaton's per-token memo: it is shared by the stop set, bounded,
                # and not per stream, so that only what each stream owns is counted.
                for chunk in feeds:
                    _feed_all(make(), chunk)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            live = [make() for _ in feeds]
            for stream_filter, chunk in zip(live, feeds, strict=True):
                _feed_all(stream_filter, chunk)
            used = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            per_stream[name] = used / len(live)
            del live
        results.append(MemoryResult(count, per_stream))
    return results


def _feed_all(stream_filter: Filter, tokens: Sequence[str]) -> None:
    for token in tokens:
        stream_filter.feed(token)


# -- 5. cost against stream length ---------------------------------------------------------------


@dataclass
class LengthResult:
    label: str
    ns_per_token: dict[int, float] = field(default_factory=dict)


LENGTH_CANDIDATES = {
    "ours_4": ("StopBuffer, 4 stops", "ours", 4),
    "ours_1024": ("StopBuffer, 1024 stops", "ours", 1024),
    "fixed_hold_4": ("(a) fixed hold, 4 stops", "fixed_hold", 4),
    "rescan_4": ("(c) rescan, 4 stops", "rescan", 4),
}


def bench_length(config: Config) -> dict[str, LengthResult]:
    streams = {length: _workload.long_stream(length) for length in config.lengths}
    for length in config.rescan_lengths:
        streams.setdefault(length, _workload.long_stream(length))
    candidates: dict[str, tuple[Callable[[], Callable[[], None]], int]] = {}
    for key, (_, peer, count) in LENGTH_CANDIDATES.items():
        make = PEERS[peer][1](_workload.stop_set(count))
        lengths = config.rescan_lengths if peer == "rescan" else config.lengths
        for length in lengths:

            def setup(
                make: Factory = make, tokens: list[str] = streams[length]
            ) -> Callable[[], None]:
                fresh = _fresh([tokens])
                return lambda: _run_streams(make, fresh)

            candidates[f"{key}@{length}"] = (setup, length)
    timings = _interleaved(candidates, config.length_rounds)
    results = {key: LengthResult(label) for key, (label, _, _) in LENGTH_CANDIDATES.items()}
    for name, timing in timings.items():
        key, _, size = name.partition("@")
        results[key].ns_per_token[int(size)] = timing.best
    _progress("cost against length: done")
    return results


# -- targets -----------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    measured: float
    limit: float
    at_most: bool  # measured must be <= limit (else >=)
    note: str = ""

    @property
    def met(self) -> bool:
        return self.measured <= self.limit if self.at_most else self.measured >= self.limit


def targets(
    per_token: list[PerTokenResult],
    held: list[HeldResult],
    async_results: dict[str, dict[str, Timing]],
) -> list[Target]:
    by_stops = {r.stops: r.timings for r in per_token}
    held_by = {r.stops: r.mean_held for r in held}
    found = [
        Target(
            "4 stops: StopBuffer / fixed hold, time per token",
            by_stops[4]["ours"].best / by_stops[4]["fixed_hold"].best,
            0.5,
            at_most=True,
        ),
    ]
    for loop, timings in async_results.items():
        found.append(
            Target(
                f"4 stops: StopStream / bare pass-through, time per token ({loop})",
                timings["stopstream_4"].best / timings["passthrough"].best,
                2.0,
                at_most=True,
            )
        )
    found += [
        Target(
            "StopBuffer: 1024 stops / 4 stops, time per token",
            by_stops[1024]["ours"].best / by_stops[4]["ours"].best,
            2.5,
            at_most=True,
            note="when the memo has seen these streams: "
            f"{by_stops[1024][REPLAY].best / by_stops[4][REPLAY].best:.2f}x; "
            "on a fresh automaton: "
            f"{by_stops[1024][COLD].best / by_stops[4][COLD].best:.2f}x",
        ),
        Target(
            "256 stops: per-stop partial scan / StopBuffer, time per token",
            by_stops[256]["per_stop"].best / by_stops[256]["ours"].best,
            50.0,
            at_most=False,
        ),
    ]
    for count in _workload.STOP_COUNTS:
        ours, least = held_by[count]["ours"], min(held_by[count].values())
        found.append(
            Target(
                f"{count} stops: held-back characters per token, StopBuffer / fixed hold",
                held_by[count]["ours"] / held_by[count]["fixed_hold"],
                0.1,
                at_most=True,
                note=f"{ours:.3f} against {held_by[count]['fixed_hold']:.3f} chars; "
                + (
                    "the least any correct filter can hold (the exact peers hold the same)"
                    if ours <= least
                    else f"the least held by a peer is {least:.3f}"
                ),
            )
        )
    return found


# -- report ------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _ns(value: float) -> str:
    if value >= 100_000:
        return f"{value / 1000:,.0f} µs"
    if value >= 10_000:
        return f"{value / 1000:,.1f} µs"
    return f"{value:,.0f} ns"


def _environment() -> dict[str, str]:
    import ahocorasick_rs
    import tokenizers

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "streamstop"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if dirty:
            commit += " with uncommitted changes to streamstop/"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "cpus": str(len(__import__("os").sched_getaffinity(0))),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pyahocorasick": version("pyahocorasick"),
        "ahocorasick-rs": getattr(ahocorasick_rs, "__version__", version("ahocorasick-rs")),
        "tokenizers": tokenizers.__version__,
    }


def report(
    config: Config,
    quick: bool,
    per_token: list[PerTokenResult],
    held: list[HeldResult],
    async_results: dict[str, dict[str, Timing]],
    memory: list[MemoryResult],
    lengths: dict[str, LengthResult],
    found: list[Target],
    env: dict[str, str],
) -> str:
    tokens = _workload.corpus_tokens()
    mean_token = sum(map(len, tokens)) / len(tokens)
    parts = [
        "# streamstop benchmark results"
        + (" (QUICK smoke run: numbers mean nothing)" if quick else ""),
        "",
        f"Run {env['date']} at commit {env['commit']}: Python {env['python']}, {env['machine']}, "
        f"{env['cpus']} CPUs; pyahocorasick {env['pyahocorasick']}, ahocorasick-rs "
        f"{env['ahocorasick-rs']}. Regenerate with `python benchmarks/stopfilter.py`.",
        "",
        f"Workload: *Pride and Prejudice* ch. 1-5 cut by a {_workload.tokenizer_name()}: "
        f"{len(tokens):,} tokens, {mean_token:.2f} characters per token on average. "
        f"{config.streams} streams of {config.length} tokens per stop set (half end with a "
        f"chat marker and a tail), {config.rounds} interleaved rounds; times are the fastest "
        "round (median in brackets).",
        "",
        "## Targets",
        "",
        _table(
            ["target", "measured", "limit", "met", "note"],
            [
                [
                    t.name,
                    f"{t.measured:.3g}x",
                    ("≤ " if t.at_most else "≥ ") + f"{t.limit:g}x",
                    "yes" if t.met else "**NO**",
                    t.note,
                ]
                for t in found
            ],
        ),
        "",
        "## Time per token against the number of stops",
        "",
    ]
    header = ["stops (longest)"] + [LABELS[name] for name in ORDER]
    rows = []
    for result in per_token:
        row = [f"{result.stops} ({result.longest_stop})"]
        for name in ORDER:
            timing = result.timings[name]
            row.append(f"{_ns(timing.best)} ({_ns(timing.median)})")
        rows.append(row)
    parts += [_table(header, rows), ""]
    rows = []
    for result in per_token:
        ours = result.timings["ours"].best
        rows.append(
            [str(result.stops)]
            + [f"{result.timings[name].best / ours:.1f}x" for name in ORDER if name != "ours"]
        )
    parts += [
        "StopBuffer is timed three ways, because its automaton memoizes whole-token steps per "
        "state: **streamstop StopBuffer**, the headline, is a new automaton each round that "
        "first saw the other half of the corpus (a server that has streamed text before, but "
        "not these streams); *memo has seen these streams* keeps one automaton for all rounds "
        "(the best case); *fresh automaton* has seen nothing (a server's first streams for a "
        "new stop set). The peers have no such state.",
        "",
        "Each peer's time over StopBuffer's:",
        "",
        _table(["stops"] + [LABELS[name] for name in ORDER if name != "ours"], rows),
        "",
    ]
    slow = sorted(
        {
            f"{LABELS[name]} at {r.stops} stops: {r.timings[name].tokens:,}"
            for r in per_token
            for name in ORDER
            if r.timings[name].tokens < r.tokens
        }
    )
    if slow:
        parts += [
            "Timed on the first streams only, to keep a round short (tokens per round): "
            + "; ".join(slow)
            + ".",
            "",
        ]
    parts += ["## Characters held back after each token (mean)", ""]
    parts += [
        _table(
            ["stops"] + [LABELS[name] for name in PEERS],
            [[str(r.stops)] + [f"{r.mean_held[name]:.3f}" for name in PEERS] for r in held],
        ),
        "",
        "## Async: StopStream against a bare pass-through async generator",
        "",
    ]
    for loop, timings in async_results.items():
        floor = timings["passthrough"].best
        parts += [
            f"On {loop}, time per token ({config.async_streams} streams of "
            f"{config.length} tokens, no stop):",
            "",
            _table(
                ["consumer", "time per token", "over pass-through"],
                [
                    [
                        ASYNC_LABELS[name],
                        f"{_ns(t.best)} ({_ns(t.median)})",
                        f"{t.best / floor:.2f}x",
                    ]
                    for name, t in timings.items()
                ],
            ),
            "",
        ]
    parts += [
        f"## Memory per live stream ({config.live_buffers:,} live filters, tracemalloc)",
        "",
        _table(
            ["stops"] + [LABELS[name] for name in MEMORY_PEERS],
            [
                [str(r.stops)]
                + [
                    f"{r.bytes_per_stream[name]:,.0f} B" if name in r.bytes_per_stream else "-"
                    for name in MEMORY_PEERS
                ]
                for r in memory
            ],
        ),
        "",
        f"Each filter was fed {MEMORY_FEED} tokens. Counted: the filter objects, what they hold, "
        "and the list holding them (8 B each). Not counted: the automaton or tables shared by "
        "the stop set (built once). (b) and (c) are not run at 1024 stops: (b) holds what "
        "StopBuffer holds, (c) the whole text, whatever the stops (so (c) grows with the "
        "stream: 4 tokens are about 15 characters here).",
        "",
        "## Time per token against stream length",
        "",
        "One stream of each length: the corpus read round and round, no stop. The automaton is "
        "shared by the rounds, so its memo is warm (the text repeats). (c) is run up to "
        f"{max(config.rescan_lengths):,} tokens only: its time per token grows with the length.",
        "",
    ]
    all_lengths = sorted({n for r in lengths.values() for n in r.ns_per_token})
    parts += [
        _table(
            ["candidate"] + [f"{n:,} tokens" for n in all_lengths],
            [
                [r.label]
                + [_ns(r.ns_per_token[n]) if n in r.ns_per_token else "" for n in all_lengths]
                for r in lengths.values()
            ],
        ),
        "",
    ]
    return "\n".join(parts)


# -- plots -------------------------------------------------------------------------------------


def _stop_count_axes(ax: Any, counts: Sequence[int], ylabel: str, title: str) -> None:
    """Log-log axes over the stop counts, as every per-stop-count figure has them."""
    ax.set(xscale="log", yscale="log", xlabel="number of stop strings", ylabel=ylabel, title=title)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot(
    out: Path,
    per_token: list[PerTokenResult],
    held: list[HeldResult],
    async_results: dict[str, dict[str, Timing]],
    memory: list[MemoryResult],
    lengths: dict[str, LengthResult],
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    counts = [r.stops for r in per_token]

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in ORDER:
        style = "-" if name in ("ours", COLD) else "--"
        width = 2.5 if name == "ours" else 1.2
        ax.plot(
            counts,
            [r.timings[name].best for r in per_token],
            style,
            marker="o",
            linewidth=width,
            label=LABELS[name],
        )
    _stop_count_axes(
        ax, counts, "time per token (ns, log)", "Stop filtering: time per token (lower is better)"
    )
    written.append(_save(fig, out / f"{PREFIX}_per_token.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    held_series = {
        "ours": "StopBuffer (the exact peers (b) and (d) hold the same)",
        "fixed_hold": "(a) fixed hold and (c) rescan: longest stop - 1",
    }
    for name, label in held_series.items():
        values = [r.mean_held[name] for r in held]
        ax.plot(counts, values, marker="o", linewidth=2.5 if name == "ours" else 1.5, label=label)
        for x, y in zip(counts, values, strict=True):
            ax.annotate(f"{y:.2g}", (x, y), textcoords="offset points", xytext=(0, 6), fontsize=7)
    _stop_count_axes(
        ax,
        counts,
        "characters held back after each token (mean, log)",
        "Latency a user sees: text held back (lower is better)",
    )
    written.append(_save(fig, out / f"{PREFIX}_held.png"))

    fig, axes = plt.subplots(1, len(async_results), figsize=(5 * len(async_results), 4.5))
    axes_list = list(axes) if len(async_results) > 1 else [axes]
    for ax, (loop, timings) in zip(axes_list, async_results.items(), strict=True):
        names = list(timings)
        values = [timings[name].best for name in names]
        colors = ["#999999", "#555555", "#1f77b4", "#2ca02c"][: len(names)]
        ax.bar(range(len(names)), values, color=colors)
        ax.set_xticks(range(len(names)), [ASYNC_SHORT[n] for n in names])
        ax.tick_params(axis="x", labelsize=8)
        ax.set(ylabel="time per token (ns)", title=f"Async streams on {loop}")
        ax.axhline(2 * timings["passthrough"].best, color="red", linestyle=":", label="2x floor")
        ax.legend(fontsize=8)
    written.append(_save(fig, out / f"{PREFIX}_async.png"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(memory)
    for index, result in enumerate(memory):
        ax.bar(
            [i + index * width for i in range(len(MEMORY_PEERS))],
            [result.bytes_per_stream.get(name, 0.0) for name in MEMORY_PEERS],
            width,
            label=f"{result.stops} stops",
        )
    ax.set_xticks(
        [i + width * (len(memory) - 1) / 2 for i in range(len(MEMORY_PEERS))],
        [SHORT[n] for n in MEMORY_PEERS],
    )
    ax.tick_params(axis="x", labelsize=8)
    ax.set(ylabel="bytes per live stream", title="Memory per stream (10,000 live filters)")
    ax.legend(fontsize=8)
    written.append(_save(fig, out / f"{PREFIX}_memory.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    for series in lengths.values():
        points = sorted(series.ns_per_token.items())
        ax.plot([n for n, _ in points], [v for _, v in points], marker="o", label=series.label)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="stream length (tokens)",
        ylabel="time per token (ns, log)",
        title="Cost against stream length (flat = linear total cost)",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save(fig, out / f"{PREFIX}_length.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the table and plots (default: benchmarks/results, or a temporary "
        "folder with --quick)",
    )
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    out: Path = args.out or (
        Path(tempfile.mkdtemp(prefix="stopfilter-")) if args.quick else RESULTS
    )
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    env = _environment()
    per_token = bench_per_token(config)
    held = bench_held(config)
    async_results = bench_async(config)
    memory = bench_memory(config)
    _progress("memory: done")
    lengths = bench_length(config)
    found = targets(per_token, held, async_results)

    text = report(config, args.quick, per_token, held, async_results, memory, lengths, found, env)
    (out / f"{PREFIX}.md").write_text(text + "\n", encoding="utf-8")
    raw = {
        "config": asdict(config),
        "environment": env,
        "per_token": [asdict(r) for r in per_token],
        "held": [asdict(r) for r in held],
        "async": {loop: {k: asdict(v) for k, v in t.items()} for loop, t in async_results.items()},
        "memory": [asdict(r) for r in memory],
        "length": {k: asdict(v) for k, v in lengths.items()},
        "targets": [dict(asdict(t), met=t.met) for t in found],
    }
    (out / f"{PREFIX}.json").write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    written = plot(out, per_token, held, async_results, memory, lengths)
    print(text)
    print()
    print(f"Wrote {out / (PREFIX + '.md')}, {out / (PREFIX + '.json')} and:")
    for path in written:
        print(f"  {path}")
    print(f"Total time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
