"""benchmarks/automaton_resources.py runs, on sizes small enough for the suite; and its rival
memo policies do what their names say, so that the comparison it prints is fair."""

from __future__ import annotations

import sys
from pathlib import Path

from streamstop import StopAutomaton, StopBuffer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import automaton_resources as script  # noqa: E402

TINY = script.Config(scale=1_000, builds=1, tokens=0, window=300, budgets=(6_000,), rounds=1)


def test_every_section_runs_and_reports() -> None:
    # The hostile sets, cut down (the typical ones are the same code on other strings).
    sets = {
        name: stops for name, stops in script.stop_sets(TINY.scale).items() if "typical" not in name
    }
    builds = script.bench_build(sets, TINY)
    calls = script.bench_calls(sets, TINY)
    tokens = [f" w{i % 97}" for i in range(1_000)] + ["</s>", " end"]
    memo = script.bench_memo(["</s>", "\n\nUser:"], tokens, TINY)
    info = {"tokens": len(tokens), "distinct": len(set(tokens)), "code": 500, "stop_set": "x"}
    text = script.report(TINY, True, builds, calls, memo, info)
    assert len(builds) == len(sets)
    assert all(build.retained_per_char > 0 for build in builds)
    assert {m.policy for m in memo} == set(script.POLICIES)
    for name in sets:
        assert name in text


def _fill(automaton: StopAutomaton, tokens: list[str]) -> None:
    buffer = StopBuffer(automaton)
    for token in tokens:
        buffer.feed(token)


def test_first_come_freezes_forget_all_forgets_ours_keeps_learning() -> None:
    early = [f" a{i}<" for i in range(200)]
    late = [f" b{i}<" for i in range(200)]
    frozen = script.FirstComeAutomaton(["</s>"], memo_bytes=8_000)
    _fill(frozen, early + late)
    assert frozen.root_step(" a0<") is not None
    assert frozen.root_step(" b199<") is None
    forget_all = script.ForgetAllAutomaton(["</s>"], memo_bytes=8_000)
    _fill(forget_all, early + late)
    assert forget_all.root_step(" a0<") is None
    assert forget_all.root_step(" b199<") is not None
    ours = StopAutomaton(["</s>"], memo_bytes=8_000)
    _fill(ours, early + late)
    # Full, it refused the late tokens for a while, then forgot about half and took new ones
    # (which half depends on the process's string hashes, so only counts are checked).
    assert sum(ours.root_step(token) is not None for token in late) > 0
    assert sum(ours.root_step(token) is not None for token in early) < len(early)
    for automaton in (frozen, forget_all, ours):
        assert automaton.memory_size() - automaton._table_bytes <= 8_000
