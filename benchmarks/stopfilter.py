"""Benchmark: streamstop's stop filter on real tokens, cold and long-running, against peers.

    python benchmarks/stopfilter.py --write    # full run; writes benchmarks/results/stopfilter*
    python benchmarks/stopfilter.py --quick    # smoke run, a few seconds, into a temp folder
    python benchmarks/stopfilter.py --out DIR  # full run into DIR

Only ``--write`` (or an explicit ``--out``) writes into the tracked results. The modules beside
this script: ``_corpus`` (the text), ``_workload`` (tokens, streams, stop sets), ``_peers`` (what
servers ship), ``_harness`` (timing side by side), ``_suites`` (what is measured) and
``_report`` (tables and plots). See benchmarks/README.md for the workload and the latest results.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import _regex_suite
import _report
import _suites
import _workload
from _harness import environment, progress

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--write", action="store_true", help="write into benchmarks/results (the tracked results)"
    )
    where.add_argument(
        "--out", type=Path, default=None, help="folder for the report (default: a temp folder)"
    )
    args = parser.parse_args(argv)
    if args.quick and args.write:
        parser.error("--quick results are not for the tracked results: use --out")
    config = _suites.QUICK if args.quick else _suites.FULL
    out: Path = RESULTS if args.write else args.out or Path(tempfile.mkdtemp(prefix="stopfilter-"))
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    env = environment("bpe-openai", "pyahocorasick", "ahocorasick-rs")
    progress("building the corpus and tokenizing it")
    for count in config.stop_counts:
        _workload.stop_set(count)
    # The vocabulary and the corpus are millions of objects that live to the end: out of the
    # collector's sight, so that the gc.collect() before each timed run stays cheap.
    gc.freeze()
    per_token = _suites.per_token(config)
    curve = _suites.long_running(config)
    held = _suites.held(config)
    async_results = _suites.async_overhead(config)
    memory = _suites.memory(config)
    profiles = _suites.profile(config)
    regex_rows = _regex_suite.regex_per_token(config.streams, config.length, config.rounds)
    found = _report.targets(per_token, async_results)
    text = _report.render(
        config, args.quick, env, per_token, curve, held, async_results, memory, profiles, found
    )
    text += _regex_suite.render(regex_rows)
    elapsed = time.perf_counter() - started
    text += f"\nThis run took {elapsed:.0f} s.\n"

    (out / f"{_report.PREFIX}.md").write_text(text, encoding="utf-8")
    raw = {
        "config": asdict(config),
        "environment": env,
        "per_token": [asdict(r) for r in per_token],
        "long_running": [asdict(r) for r in curve],
        "held": held,
        "async": {loop: {k: asdict(v) for k, v in t.items()} for loop, t in async_results.items()},
        "memory": [asdict(r) for r in memory],
        "profile": [asdict(r) for r in profiles],
        "regex": [asdict(r) for r in regex_rows],
        "targets": [dict(asdict(t), met=t.met) for t in found],
        "seconds": round(elapsed),
    }
    (out / f"{_report.PREFIX}.json").write_text(json.dumps(raw, indent=1) + "\n", "utf-8")
    written = _report.plot(out, per_token, curve, async_results)
    print(text)
    print(f"Wrote {out / (_report.PREFIX + '.md')}, {out / (_report.PREFIX + '.json')} and:")
    for path in written:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
