"""Every benchmark script: ``--help`` answers and writes nothing; only an explicit ``--write``
(or ``--out``) touches the tracked results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
# Scripts that print their figures and write no results at all.
PRINT_ONLY = {"family_event_cost.py"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_writes_nothing(script: str) -> None:
    results = BENCHMARKS / "results"
    before = {p: p.stat().st_mtime_ns for p in results.iterdir()}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert ("--write" in done.stdout) is (script not in PRINT_ONLY)
    assert {p: p.stat().st_mtime_ns for p in results.iterdir()} == before
