"""Benchmark: what a stop set costs the automaton, whatever a client sends; and the memo's policy
on real tokens.

    python benchmarks/automaton_resources.py            # full run, a few minutes; prints only
    python benchmarks/automaton_resources.py --write    # ... and writes benchmarks/results/
    python benchmarks/automaton_resources.py --quick    # smoke run, a few seconds; prints only
    python benchmarks/automaton_resources.py --out DIR  # write the table and JSON into DIR
    python benchmarks/automaton_resources.py --against /tmp/before  # and per-token cost on
        # ordinary stop sets against an earlier commit, unpacked there with
        # mkdir /tmp/before && git archive COMMIT | tar -x -C /tmp/before
    python benchmarks/automaton_resources.py --against /tmp/before --instructions  # and the
        # same counted in instructions (valgrind's cachegrind): a few minutes more

Three sections:

1. **Build**: for hostile stop sets (one 100,000-character stop over a large alphabet, one
   character 100,000 times, 10,000 random stops of 100 characters, stops that overlap each
   other) and typical ones, the build time (fastest of a few builds, untraced), the bytes kept
   per stop character (tracemalloc: what is still allocated once the build returns, so the
   input strings, made before, are not counted) and the peak while building, and what
   ``StopAutomaton.memory_size()`` says.
2. **Single calls**: the longest things one request can make the core do on the event loop
   besides building: a long token fed while a long partial stop is held, a long held text
   released, ``truncate``/``split_safe``/``find`` over long text against hostile sets.
3. **Memo policy**: real OpenAI ``o200k_base`` tokens (the ``bpe-openai`` package, offline) of
   text the code has never seen: the Python standard library's own sources, then its prose
   documentation (``pydoc_data/topics.py``), cut into completions of 500 tokens, all through
   one shared automaton as in a server. The hit rate by stretch of the stream as the memo fills,
   and the cost per token, for our policy and for the alternatives, under the same byte budget.
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import os
import pickle
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _workload
from _harness import environment, environment_line

import streamstop._automaton as automaton_module
from streamstop import StopAutomaton, StopBuffer, split_safe, truncate
from streamstop._memo import DEFAULT_MEMO_BYTES, _entry_cost, _Step

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PREFIX = "automaton_resources"
STDLIB = Path(codecs.__file__).resolve().parent
ALPHANUMERIC = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
CJK = "".join(chr(code) for code in range(0x4E00, 0xA000))  # 20,992 characters


@dataclass(frozen=True)
class Config:
    scale: int  # characters of the biggest hostile sets are divided by this
    builds: int  # untraced builds timed per set (the fastest counts)
    tokens: int  # real tokens in the memo-policy stream (0: all the text there is)
    window: int  # tokens per stretch of the hit-rate table
    budgets: tuple[int, ...]  # memo budgets compared
    rounds: int  # timed passes over the token stream, per policy


FULL = Config(
    scale=1, builds=3, tokens=0, window=500_000, budgets=(DEFAULT_MEMO_BYTES, 1 << 20), rounds=5
)
QUICK = Config(scale=50, builds=1, tokens=60_000, window=20_000, budgets=(1 << 18,), rounds=1)


# -- stop sets -----------------------------------------------------------------------------------


def _random_text(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _fibonacci_word(length: int) -> str:
    shorter, longer = "a", "ab"
    while len(longer) < length:
        shorter, longer = longer, longer + shorter
    return longer[:length]


def stop_sets(scale: int) -> dict[str, list[str]]:
    rng = random.Random(9)
    long = 100_000 // scale
    word = _fibonacci_word(long + 200)
    return {
        f"one {long:,}-char stop, {len(CJK):,}-char alphabet": [_random_text(rng, CJK, long)],
        f'"a" * {long:,}': ["a" * long],
        f"{10_000 // scale:,} random stops of 100 chars": [
            _random_text(rng, ALPHANUMERIC, 100) for _ in range(10_000 // scale)
        ],
        f"{1_000 // scale:,} overlapping stops of 100 chars": [
            word[i : i + 100] for i in range(0, 100 * (1_000 // scale), 100)
        ],
        f"{10_000 // scale:,} stops of 10 chars, CJK": [
            _random_text(rng, CJK, 10) for _ in range(10_000 // scale)
        ],
        "1,024 typical stops": list(_workload.stop_set(1024)),
        "16 typical stops": list(_workload.stop_set(16)),
    }


# -- 1. build ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    name: str
    stops: int
    chars: int
    states: int
    build_ms: float
    us_per_char: float
    retained_per_char: float
    peak_per_char: float
    memory_size_per_char: float


def bench_build(sets: dict[str, list[str]], config: Config) -> list[BuildResult]:
    results = []
    for name, stops in sets.items():
        chars = sum(map(len, stops))
        times = []
        for _ in range(config.builds):
            gc.collect()
            start = time.perf_counter()
            StopAutomaton(stops)
            times.append(time.perf_counter() - start)
        gc.collect()
        tracemalloc.start()
        try:
            automaton = StopAutomaton(stops)
            retained, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        build = min(times)
        results.append(
            BuildResult(
                name=name,
                stops=len(stops),
                chars=chars,
                states=len(automaton._depth),
                build_ms=build * 1e3,
                us_per_char=build * 1e6 / chars,
                retained_per_char=retained / chars,
                peak_per_char=peak / chars,
                memory_size_per_char=automaton.memory_size() / chars,
            )
        )
        del automaton
    return results


# -- 2. single calls -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CallResult:
    name: str
    ms: float


def _timed(action: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1e3


def bench_calls(sets: dict[str, list[str]], config: Config) -> list[CallResult]:
    long = 100_000 // config.scale
    run = StopAutomaton(["a" * long])
    many_name = next(name for name in sets if "random stops" in name)
    many = StopAutomaton(sets[many_name])
    rng = random.Random(3)
    text = _random_text(rng, ALPHANUMERIC, 1_000_000 // config.scale)
    results = []

    def held_then_long_token() -> None:
        buffer = StopBuffer(run)
        buffer.feed("a" * (long // 2))
        buffer.feed("a" * (long // 2 - 1) + "b" + "a" * (long // 2))

    buffer = StopBuffer(run)
    buffer.feed("a" * (long - 1))
    cases: list[tuple[str, Callable[[], object]]] = [
        (
            f'feed "a" * {long - 1:,} (one token) to stop "a" * {long:,}',
            lambda: StopBuffer(run).feed("a" * (long - 1)),
        ),
        (f"feed 1 char that releases {long - 1:,} held chars", lambda: buffer.feed("b")),
        (
            f"hold {long // 2:,} chars, then one {long:,}-char token that breaks and restarts it",
            held_then_long_token,
        ),
        (f"split_safe of {long:,} chars against it", lambda: split_safe("a" * long, run)),
        (f"truncate {2 * long:,} chars against it", lambda: truncate("a" * (2 * long), run)),
        (f"find in {len(text):,} random chars, {many_name}", lambda: many.find(text)),
        (
            f"feed {len(text):,} random chars (one token), {many_name}",
            lambda: StopBuffer(many).feed(text),
        ),
    ]
    for name, action in cases:
        results.append(CallResult(name, _timed(action)))
    return results


# -- 3. memo policy ------------------------------------------------------------------------------


class FirstComeAutomaton(StopAutomaton):
    """Adds entries until the budget is full, then never again (the policy before issue 9, by
    bytes)."""

    __slots__ = ()

    def _remember(self, state: int, text: str, result: _Step) -> None:
        cost = _entry_cost(text, result)
        with self._lock:
            if self._memo_used + cost + self._table_cost(state) <= self._memo_budget:
                self._insert(state, text, result, cost)


class ForgetAllAutomaton(StopAutomaton):
    """Forgets every entry when full and fills again (the policy of the bounded-memory rewrite)."""

    __slots__ = ()

    def _remember(self, state: int, text: str, result: _Step) -> None:
        cost = _entry_cost(text, result)
        budget = self._memo_budget
        if cost > budget:
            return
        with self._lock:
            if self._memo_used + cost + self._table_cost(state) > budget:
                self._forget(half=False)
                if cost + self._table_cost(state) > budget:
                    return
            self._insert(state, text, result, cost)


POLICIES: dict[str, type[StopAutomaton]] = {
    "refuse, then forget half (ours)": StopAutomaton,
    "forget all when full": ForgetAllAutomaton,
    "first come, then frozen": FirstComeAutomaton,
}


def _source_files() -> list[Path]:
    skipped = {"test", "tests", "site-packages", "idle_test", "pydoc_data"}
    return sorted(path for path in STDLIB.rglob("*.py") if not skipped & set(path.parts))


def real_tokens(limit: int) -> tuple[list[str], int]:
    """o200k_base tokens of the stdlib's sources, then its prose docs, as a server streams them:
    each token's bytes through an incremental UTF-8 decoder. Returns (tokens, code tokens)."""
    import bpe_openai

    encoding = bpe_openai.get_encoding("o200k_base")
    decode_token = encoding.decode_single_token_bytes

    def pieces(text: str) -> list[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        out = []
        for token in encoding.encode_ordinary(text):
            piece = decoder.decode(decode_token(token))
            if piece:
                out.append(piece)
        return out

    code: list[str] = []
    budget = limit // 2 if limit else 0
    for path in _source_files():
        code.extend(pieces(path.read_text(encoding="utf-8", errors="replace")))
        if budget and len(code) >= budget:
            del code[budget:]
            break
    prose = pieces((STDLIB / "pydoc_data" / "topics.py").read_text(encoding="utf-8"))
    if limit:
        prose = prose[: limit - len(code)]
    return code + prose, len(code)


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    budget: int
    hit_rates: list[float]  # per stretch of the stream: answered from the memo
    overall_hit_rate: float  # answered from the memo
    first_lookup_rate: float  # the same (kept for the JSON's readers)
    ns_per_token: float  # fastest of the rounds
    memory_size: int
    tables: int


COMPLETION = 500


def _completions(tokens: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(tokens), COMPLETION):
        yield tokens[start : start + COMPLETION]


def _fresh(tokens: Sequence[str]) -> list[str]:
    # New str objects, as a detokenizer makes them: no hash cached from an earlier pass.
    return ["".join(list(token)) if len(token) > 1 else token for token in tokens]


def _hit_rates(
    automaton: StopAutomaton, tokens: Sequence[str], window: int
) -> tuple[list[float], float, float]:
    """Tokens answered by the memo (a step it held when the token came), by stretch; the
    stream is stepped as StopBuffer steps it, through the public ``advance``."""
    hits = [0] * ((len(tokens) + window - 1) // window)
    counted = 0
    for completion in _completions(tokens):
        state = 0
        stopped = False
        for token in completion:
            if not stopped:
                if automaton._lookups[state](token) is not None:
                    hits[counted // window] += 1
                state, end, _ = automaton._advance(state, token)
                stopped = end >= 0
            counted += 1
    rates = [count / min(window, len(tokens) - i * window) for i, count in enumerate(hits)]
    overall = sum(hits) / len(tokens)
    return rates, overall, overall


def _time_stream(automaton: StopAutomaton, tokens: Sequence[str]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for completion in _completions(tokens):
            feed = StopBuffer(automaton).feed
            for token in completion:
                feed(token)
        return time.perf_counter() - start
    finally:
        gc.enable()


def bench_memo(stops: Sequence[str], tokens: Sequence[str], config: Config) -> list[PolicyResult]:
    results = []
    for budget in config.budgets:
        # The cost: each policy's own automaton over the whole stream from empty, the
        # policies interleaved round by round; the fastest round counts.
        times: dict[str, list[float]] = {policy: [] for policy in POLICIES}
        for round_ in range(config.rounds):
            order = list(POLICIES.items())
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for policy, cls in order:
                fresh = _fresh(tokens)
                times[policy].append(_time_stream(cls(stops, memo_bytes=budget), fresh))
        for policy, cls in POLICIES.items():
            automaton = cls(stops, memo_bytes=budget)
            tables = automaton.memory_size()
            rates, overall, first = _hit_rates(automaton, tokens, config.window)
            results.append(
                PolicyResult(
                    policy=policy,
                    budget=budget,
                    hit_rates=rates,
                    overall_hit_rate=overall,
                    first_lookup_rate=first,
                    ns_per_token=min(times[policy]) * 1e9 / len(tokens),
                    memory_size=automaton.memory_size(),
                    tables=tables,
                )
            )
    return results


# -- 4. against an earlier version ----------------------------------------------------------------


@dataclass(frozen=True)
class AgainstResult:
    name: str
    before: float
    after: float


def bench_against(source: Path, rounds: int) -> list[AgainstResult]:
    """Per-token cost on the ordinary stop sets, this version against the ``streamstop`` package
    in ``source`` (a checkout of an earlier commit), both in this process, interleaved round by
    round; the fastest round counts. Warm: a memo that has seen the stream; cold: no memo, so
    every token is worked out."""
    import importlib
    import shutil
    import tempfile

    import streamstop

    folder = Path(tempfile.mkdtemp(prefix="streamstop-before-"))
    shutil.copytree(source / "streamstop", folder / "streamstop_before")
    sys.path.insert(0, str(folder))
    before = importlib.import_module("streamstop_before")
    before_automaton = importlib.import_module("streamstop_before._automaton")
    # The measured documents, in order, up to 100,000 tokens of ordinary text.
    tokens = [token for doc in _workload.measured_tokens() for token in doc][:100_000]
    text = "".join(tokens)
    samples: dict[str, dict[str, list[float]]] = {}

    def record(name: str, side: str, value: float) -> None:
        samples.setdefault(name, {"before": [], "after": []})[side].append(value)

    def no_memo(module: Any, stops: Sequence[str]) -> Any:
        if module is before and hasattr(before_automaton, "_MEMO_LIMIT"):
            # Memoized up to a module-level number of entries, read per step: set to 0 below.
            return module.StopAutomaton(stops)
        return module.StopAutomaton(stops, memo_bytes=0)

    gc.disable()
    try:
        for count in (1, 4, 16, 256, 1024):
            stops = _workload.stop_set(count)
            sides = {"before": before, "after": streamstop}
            warm = {side: module.StopAutomaton(stops) for side, module in sides.items()}
            cold = {side: no_memo(module, stops) for side, module in sides.items()}
            for side, module in sides.items():
                feed = module.StopBuffer(warm[side]).feed
                for token in tokens:
                    feed(token)
            for round_ in range(rounds):
                for side, module in list(sides.items())[:: 1 if round_ % 2 else -1]:
                    fresh = _fresh(tokens)
                    start = time.perf_counter()
                    feed = module.StopBuffer(warm[side]).feed
                    for token in fresh:
                        feed(token)
                    record(
                        f"warm, {count} stops (ns/token)",
                        side,
                        (time.perf_counter() - start) / len(fresh) * 1e9,
                    )
                    fresh = _fresh(tokens[:20_000])
                    limit = getattr(before_automaton, "_MEMO_LIMIT", None)
                    if limit is not None:
                        before_automaton._MEMO_LIMIT = 0  # type: ignore[attr-defined]
                    start = time.perf_counter()
                    feed = module.StopBuffer(cold[side]).feed
                    for token in fresh:
                        feed(token)
                    record(
                        f"cold, {count} stops (ns/token)",
                        side,
                        (time.perf_counter() - start) / len(fresh) * 1e9,
                    )
                    if limit is not None:
                        before_automaton._MEMO_LIMIT = limit  # type: ignore[attr-defined]
                    start = time.perf_counter()
                    warm[side].find(text)
                    record(
                        f"find, {count} stops (ns/char)",
                        side,
                        (time.perf_counter() - start) / len(text) * 1e9,
                    )
                    start = time.perf_counter()
                    module.StopAutomaton(stops)
                    record(f"build, {count} stops (ms)", side, (time.perf_counter() - start) * 1e3)
    finally:
        gc.enable()
        sys.path.remove(str(folder))
        shutil.rmtree(folder, ignore_errors=True)
    return [
        AgainstResult(name, min(sides["before"]), min(sides["after"]))
        for name, sides in samples.items()
    ]


# -- 5. instructions per token, against an earlier version -------------------------------

# Run in a child process under cachegrind, with no import of this script (so that ``streamstop``
# is the tree's): the same streams as bench_against, ``reps`` times, either through a memo that
# has seen them ("warm") or with no memo ("memo off").
_COUNTED = """
import gc, pickle, sys
tree, count, reps, mode, data = sys.argv[1:6]
sys.path.insert(0, tree)
import streamstop
with open(data, "rb") as file:
    tokens, stop_sets = pickle.load(file)
stops = stop_sets[int(count)]
if mode == "memo off":
    try:
        automaton = streamstop.StopAutomaton(stops, memo_bytes=0)
    except TypeError:  # before the byte budget: an entry limit, read per step
        import streamstop._automaton
        streamstop._automaton._MEMO_LIMIT = 0
        automaton = streamstop.StopAutomaton(stops)
else:
    automaton = streamstop.StopAutomaton(stops)
    feed = streamstop.StopBuffer(automaton).feed
    for token in tokens:
        feed(token)
# Fresh copies, as a server gets them (hash not cached), made in every run alike: the
# difference between runs is the feeding alone.
streams = [[("x" + token)[1:] for token in tokens] for _ in range(2)]
gc.disable()
for stream in streams[: int(reps)]:
    feed = streamstop.StopBuffer(automaton).feed
    for token in stream:
        feed(token)
"""
INSTRUCTION_MODES = ("warm", "memo off")
_REPS = 2  # at most 2: the copies the child makes


def count_instructions(tree: Path, count: int, reps: int, mode: str, data: Path) -> int:
    """Instructions the child above executes, as cachegrind counts them (the hash seed fixed,
    so that dicts lay out alike from run to run)."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = subprocess.run(
        [
            *command,
            sys.executable,
            "-c",
            _COUNTED,
            str(tree),
            str(count),
            str(reps),
            mode,
            str(data),
        ],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in cachegrind's output: {done.stderr[-500:]!r}")
    return int(found[1].replace(",", ""))


def bench_instructions(
    source: Path,
    tokens: Sequence[str],
    counts: Sequence[int],
    count: Callable[[Path, int, int, str, Path], int] = count_instructions,
) -> list[AgainstResult]:
    """Instructions per token on the ordinary stop sets, this version against the ``streamstop``
    in ``source``: each run with the streams fed ``_REPS`` times less the same run with none,
    over the tokens fed. Deterministic where wall-clock time on a shared machine is not; blind to
    cache misses and to what an instruction costs."""
    with tempfile.TemporaryDirectory(prefix="streamstop-instructions-") as folder:
        data = Path(folder) / "tokens.pickle"
        data.write_bytes(pickle.dumps((list(tokens), {c: _workload.stop_set(c) for c in counts})))
        trees = {"before": source, "after": HERE.parent}
        jobs = [
            (mode, c, side, reps)
            for mode in INSTRUCTION_MODES
            for c in counts
            for side in trees
            for reps in (0, _REPS)
        ]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(
                pool.map(lambda job: count(trees[job[2]], job[1], job[3], job[0], data), jobs)
            )
    measured = dict(zip(jobs, results, strict=True))

    def per_token(mode: str, c: int, side: str) -> float:
        fed = measured[mode, c, side, _REPS] - measured[mode, c, side, 0]
        return fed / (_REPS * len(tokens))

    return [
        AgainstResult(
            f"{mode}, {c} stops (instructions/token)",
            per_token(mode, c, "before"),
            per_token(mode, c, "after"),
        )
        for mode in INSTRUCTION_MODES
        for c in counts
    ]


# -- report --------------------------------------------------------------------------------------


def report(
    config: Config,
    quick: bool,
    builds: list[BuildResult],
    calls: list[CallResult],
    memo: list[PolicyResult],
    token_info: dict[str, Any],
    against: list[AgainstResult] | None = None,
    against_info: str = "",
    instructions: list[AgainstResult] | None = None,
) -> str:
    lines = [
        "# Automaton resources"
        + (" (QUICK smoke run: sizes cut, numbers mean little)" if quick else ""),
        "",
        environment_line(environment()),
        "",
        f"Builds: fastest of {config.builds}; bytes from tracemalloc.",
        "",
        "## Build: time and memory per character of the stops",
        "",
        "| stop set | stops | chars | states | build ms | µs/char | kept B/char | peak B/char "
        "| memory_size() B/char |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for b in builds:
        lines.append(
            f"| {b.name} | {b.stops:,} | {b.chars:,} | {b.states:,} | {b.build_ms:,.1f} "
            f"| {b.us_per_char:.2f} | {b.retained_per_char:.0f} | {b.peak_per_char:.0f} "
            f"| {b.memory_size_per_char:.0f} |"
        )
    lines += [
        "",
        "## Single calls on the event loop (besides building)",
        "",
        "| call | ms |",
        "|---|--:|",
    ]
    lines += [f"| {c.name} | {c.ms:,.1f} |" for c in calls]
    lines += [
        "",
        "## Memo policy on real tokens",
        "",
        f"{token_info['tokens']:,} `o200k_base` tokens ({token_info['distinct']:,} distinct): "
        f"{token_info['code']:,} of the Python {platform.python_version()} standard library's "
        "sources, then its prose docs (`pydoc_data/topics.py`), in completions of "
        f"{COMPLETION} tokens through one automaton with the {token_info['stop_set']}. Hit rate: "
        "tokens answered from the memo (a step held for the state and the token when it came, "
        "steps that release held text included). Stretches of "
        f"{config.window:,} tokens; the prose begins in stretch "
        f"{token_info['code'] // config.window + 1}.",
        "",
    ]
    if memo:
        stretches = len(memo[0].hit_rates)
        lines.append(
            "| budget | policy | hit rate | "
            + " | ".join(f"#{i + 1}" for i in range(stretches))
            + " | ns/token | memo KiB |"
        )
        lines.append("|---|---|--:|" + "--:|" * stretches + "--:|--:|")
        for m in memo:
            lines.append(
                f"| {m.budget / (1 << 20):g} MiB | {m.policy} | {m.overall_hit_rate:.1%} | "
                + " | ".join(f"{rate:.1%}" for rate in m.hit_rates)
                + f" | {m.ns_per_token:.0f} "
                + f"| {(m.memory_size - m.tables) / 1024:,.0f} |"
            )
    if against:
        lines += [
            "",
            f"## Ordinary stop sets against {against_info}",
            "",
            "Both versions in one process, interleaved round by round; the fastest round counts.",
            "",
            "| measure | before | after | after/before |",
            "|---|--:|--:|--:|",
        ]
        lines += [
            f"| {r.name} | {r.before:,.1f} | {r.after:,.1f} | {r.after / r.before:.2f} |"
            for r in against
        ]
    if instructions:
        lines += [
            "",
            f"## Ordinary stop sets against {against_info}, in instructions",
            "",
            "The same streams, counted by valgrind's cachegrind (each version in a process of its "
            "own, the hash seed fixed): instructions per token fed. Deterministic, where times on "
            "this shared machine vary by tens of percent from run to run; blind to cache misses.",
            "",
            "| measure | before | after | after/before |",
            "|---|--:|--:|--:|",
        ]
        lines += [
            f"| {r.name} | {r.before:,.0f} | {r.after:,.0f} | {r.after / r.before:.2f} |"
            for r in instructions
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: cut sizes, prints only")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/")
    parser.add_argument("--out", type=Path, help="write the table and JSON into this folder")
    parser.add_argument(
        "--skip-memo", action="store_true", help="leave out the memo section (no bpe-openai)"
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="a checkout of an earlier commit: compare per-token costs on ordinary stop sets",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="with --against: also count instructions per token (needs valgrind)",
    )
    args = parser.parse_args(argv)
    if args.instructions and args.against is None:
        parser.error("--instructions compares against an earlier version: give --against too")
    config = QUICK if args.quick else FULL
    out: Path | None = args.out or (RESULTS if args.write else None)

    sets = stop_sets(config.scale)
    builds = bench_build(sets, config)
    calls = bench_calls(sets, config)
    memo: list[PolicyResult] = []
    token_info: dict[str, Any] = {"tokens": 0, "distinct": 0, "code": 0, "stop_set": ""}
    if not args.skip_memo:
        tokens, code = real_tokens(config.tokens)
        stops = _workload.stop_set(1024)
        token_info = {
            "tokens": len(tokens),
            "distinct": len(set(tokens)),
            "code": code,
            "stop_set": "benchmark's 1,024 typical stops",
        }
        memo = bench_memo(stops, tokens, config)
    against = None
    if args.against is not None:
        against = bench_against(args.against, 3 if args.quick else 15)
    instructions = None
    if args.instructions:
        tokens = [token for doc in _workload.measured_tokens() for token in doc]
        counts = (4,) if args.quick else (1, 4, 16, 256, 1024)
        instructions = bench_instructions(
            args.against, tokens[: 3_000 if args.quick else 30_000], counts
        )
    text = report(
        config,
        args.quick,
        builds,
        calls,
        memo,
        token_info,
        against,
        str(args.against),
        instructions,
    )
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{PREFIX}.md").write_text(text, encoding="utf-8")
        raw = {
            "config": asdict(config),
            "quick": args.quick,
            "dfa_base_bytes": automaton_module._DFA_BASE_BYTES,
            "builds": [asdict(b) for b in builds],
            "calls": [asdict(c) for c in calls],
            "memo": [asdict(m) for m in memo],
            "against": [asdict(a) for a in against or []],
            "instructions": [asdict(a) for a in instructions or []],
            "tokens": token_info,
            "python": sys.version,
        }
        (out / f"{PREFIX}.json").write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out / PREFIX}.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
