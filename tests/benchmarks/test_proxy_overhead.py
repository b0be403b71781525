"""The proxy benchmark runs end to end: upstream, bare relay and ``streamstop proxy`` start,
stream real-token events to the client, and the report says what it measured. No timing is
asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_quick_run_reports_cpu_latency_and_memory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "proxy_overhead.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "proxy_overhead.md").read_text(encoding="utf-8")
    assert "QUICK" in report
    assert "proxy / bare relay, CPU per event" in report
    raw = json.loads((tmp_path / "proxy_overhead.json").read_text(encoding="utf-8"))
    servers = {run["server"] for run in raw["runs"]}
    assert {"direct", "relay/h11", "proxy/h11", "proxy, requests without stop/h11"} <= servers
    for run in raw["runs"]:
        assert run["events"] > 0
        assert run["p99_us"] >= run["p50_us"] > 0
