"""Timing, side by side: what every benchmark here shares.

The rules, for every candidate alike:

- Candidates are interleaved: each round runs every candidate once, in a rotating order, so
  that a noisy neighbour on the machine slows them all. The fastest round counts; the median is
  kept too. Ratios are only ever taken between candidates of one run.
- A candidate is a ``setup`` that does the untimed work (building an automaton, copying the
  tokens) and returns the ``run`` to time.
- The garbage collector is off during a timed run.
- Every token is a new ``str`` object in every round (:func:`fresh`), as a detokenizer makes
  them, so nobody profits from a hash cached in an earlier round.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = [
    "Candidate",
    "Timing",
    "environment",
    "environment_line",
    "fresh",
    "interleaved",
    "ns",
    "progress",
    "table",
    "timed",
]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Timing:
    """Nanoseconds per unit (token, event) of one candidate: the fastest round, and the median."""

    best: float
    median: float
    units: int  # units per round


# (setup, units): setup() does the untimed work and returns the run to time.
Candidate = tuple[Callable[[], Callable[[], None]], int]


def fresh(streams: Sequence[Sequence[str]]) -> list[list[str]]:
    """New str objects with the same text, their hashes not computed yet."""
    return [[(token + "\0")[:-1] for token in tokens] for tokens in streams]


def timed(run: Callable[[], None]) -> int:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        run()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def interleaved(candidates: dict[str, Candidate], rounds: int) -> dict[str, Timing]:
    samples: dict[str, list[int]] = {name: [] for name in candidates}
    names = list(candidates)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            setup, _ = candidates[name]
            samples[name].append(timed(setup()))
    return {
        name: Timing(min(samples[name]) / units, statistics.median(samples[name]) / units, units)
        for name, (_, units) in candidates.items()
    }


def ns(value: float) -> str:
    """A duration in nanoseconds, as a reader wants it."""
    if value >= 1_000_000:
        return f"{value / 1e6:,.1f} ms"
    if value >= 100_000:
        return f"{value / 1000:,.0f} µs"
    if value >= 10_000:
        return f"{value / 1000:,.1f} µs"
    return f"{value:,.0f} ns"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or "unknown CPU"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def environment(*packages: str) -> dict[str, str]:
    """Where the numbers come from: commit, machine, Python, versions, and how busy it was."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        # The results themselves do not count: a run rewrites them.
        if _git("status", "--porcelain", "--", "streamstop", "benchmarks", ":!benchmarks/results"):
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    env = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "machine": f"{_cpu_model()}, {platform.machine()}, {platform.system()}",
        "cpus": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1),
        "load": f"{load[0]:.1f}",
    }
    for name in packages:
        env[name] = _version(name)
    return env


def environment_line(env: dict[str, str]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in env.items() if k not in _BASE)
    return (
        f"Run {env['date']} at commit {env['commit']}; {env['python']} on {env['machine']}, "
        f"{env['cpus']} CPUs (load average {env['load']} at the start: the machine is shared, "
        f"so only ratios measured side by side mean much); {versions}."
    )


_BASE = ("commit", "date", "python", "machine", "cpus", "load")
