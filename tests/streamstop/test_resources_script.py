"""benchmarks/automaton_resources.py runs, on sizes small enough for the suite; and its rival
memo policies do what their names say, so that the comparison it prints is fair."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from streamstop import StopAutomaton, StopBuffer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import automaton_resources as script  # noqa: E402

_NO_TOKENS = {"tokens": 0, "distinct": 0, "code": 0, "stop_set": ""}
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
    assert frozen._root_step(" a0<") is not None
    assert frozen._root_step(" b199<") is None
    forget_all = script.ForgetAllAutomaton(["</s>"], memo_bytes=8_000)
    _fill(forget_all, early + late)
    assert forget_all._root_step(" a0<") is None
    assert forget_all._root_step(" b199<") is not None
    ours = StopAutomaton(["</s>"], memo_bytes=8_000)
    _fill(ours, early + late)
    # Full, it refused the late tokens for a while, then forgot about half and took new ones
    # (which half depends on the process's string hashes, so only counts are checked).
    assert sum(ours._root_step(token) is not None for token in late) > 0
    assert sum(ours._root_step(token) is not None for token in early) < len(early)
    for automaton in (frozen, forget_all, ours):
        assert automaton.memory_size() - automaton._table_bytes <= 8_000


def test_instructions_section_counts_per_token_fed() -> None:
    # A stand-in for cachegrind: the runs with the streams fed count 10 (before) or 8 (after)
    # more per token than the same runs with none.
    tokens = ["a", "b", "</s>"]

    def count(tree: Path, stops: int, reps: int, mode: str, data: Path) -> int:
        assert data.exists()
        per_token = 10 if tree == Path("/before") else 8
        return 1_000_000 + reps * len(tokens) * per_token

    results = script.bench_instructions(Path("/before"), tokens, (4,), count)
    assert [(r.name, r.before, r.after) for r in results] == [
        ("warm, 4 stops (instructions/token)", 10.0, 8.0),
        ("memo off, 4 stops (instructions/token)", 10.0, 8.0),
    ]
    text = script.report(TINY, True, [], [], [], _NO_TOKENS, None, "/before", results)
    assert "| warm, 4 stops (instructions/token) | 10 | 8 | 0.80 |" in text


@pytest.mark.parametrize("mode", script.INSTRUCTION_MODES)
def test_counted_child_runs_on_a_tree(tmp_path: Path, mode: str) -> None:
    # What cachegrind would run, run plainly: it imports the tree's streamstop and feeds.
    data = tmp_path / "tokens.pickle"
    data.write_bytes(pickle.dumps((["a", "</", "s>", "b"], {4: ("</s>",)})))
    tree = BENCHMARKS.parent
    argv = [sys.executable, "-c", script._COUNTED, str(tree), "4", "2", mode, str(data)]
    subprocess.run(argv, check=True, timeout=60)
