"""The stop-filter report: targets, tables and plots from the suites' results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _corpus
import _workload
from _harness import Timing, environment_line, ns, table
from _suites import (
    ASYNC_LABELS,
    COLD,
    FLOOR,
    LABELS,
    ORDER,
    OUT_OF_HEADLINE,
    Config,
    CurveResult,
    MemoryResult,
    PerTokenResult,
    ProfileResult,
)

__all__ = ["PREFIX", "Target", "plot", "render", "targets"]

PREFIX = "stopfilter"


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    limit: float

    @property
    def met(self) -> bool:
        return self.measured <= self.limit


def targets(
    per_token: list[PerTokenResult], async_results: dict[str, dict[str, Timing]]
) -> list[Target]:
    by_count = {r.stops: r.timings for r in per_token}
    found = []
    if 4 in by_count and 1024 in by_count:
        found.append(
            Target(
                "cold: 1024 stops / 4 stops, time per token",
                by_count[1024][COLD].best / by_count[4][COLD].best,
                1.5,
            )
        )
    for loop, timings in async_results.items():
        found.append(
            Target(
                f"StopStream (4 stops, cold) / bare async pass-through ({loop})",
                timings["stopstream_4"].best / timings["passthrough"].best,
                1.3,
            )
        )
    for count in (4, 1024):
        if count in by_count:
            found.append(
                Target(
                    f"cold, {count} stops: time per token / one C call per token (ahocorasick-rs)",
                    by_count[count][COLD].best / by_count[count][FLOOR].best,
                    1.5,
                )
            )
    return found


def _corpus_lines() -> list[str]:
    corpus = _corpus.build_corpus()
    tokens = _workload.measured_tokens()
    count = sum(map(len, tokens))
    kinds = ", ".join(
        f"{kind} {corpus.chars(kind):,}" for kind in _corpus.KINDS if corpus.chars(kind)
    )
    return [
        f"Workload: {corpus.chars():,} characters of measured text in {len(corpus.measured)} "
        f"documents ({kinds}), cut by {_workload.tokenizer_name()}: {count:,} tokens, "
        f"{corpus.chars() / count:.2f} characters per token. Traffic (other documents, never "
        f"the measured ones): {corpus.chars(traffic=True):,} characters. Sources: "
        + "; ".join(corpus.sources)
        + f". Corpus SHA-256 (first 16 hex digits): `{corpus.sha256}`"
        + (" — FALLBACK corpus, not the headline." if corpus.fallback else "."),
    ]


def _proxy_memory_lines() -> list[str]:
    """Memory per proxy connection, from the tracked results of benchmarks/proxy_overhead.py (a
    run of servers, not of this script): what its report says, beside this one's."""
    path = Path(__file__).resolve().parent / "results" / "proxy_overhead.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        servers = ("proxy/h11", "relay/h11")
        runs = [r for r in raw["runs"] if r["server"] in servers and r["rss_peak"]]
        top = max(r["concurrency"] for r in runs)
        grown = {
            r["server"].split("/")[0]: (r["rss_peak"] - r["rss_idle"]) / r["concurrency"]
            for r in runs
            if r["concurrency"] == top
        }
        where = f"commit {raw['environment']['commit']}, {raw['environment']['date']}"
    except (OSError, ValueError, KeyError):
        return ["Per proxy connection: run `python benchmarks/proxy_overhead.py --write`.", ""]
    return [
        f"Per proxy connection (`benchmarks/proxy_overhead.py`, its tracked run at {where}): the "
        f"proxy's resident memory grew by {grown.get('proxy', float('nan')) / 1024:,.1f} KiB per "
        f"open stream at {top:,} streams, a bare relay's by "
        f"{grown.get('relay', float('nan')) / 1024:,.1f} KiB.",
        "",
    ]


def render(
    config: Config,
    quick: bool,
    env: dict[str, str],
    per_token: list[PerTokenResult],
    curve: list[CurveResult],
    held: dict[int, dict[str, float]],
    async_results: dict[str, dict[str, Timing]],
    memory: list[MemoryResult],
    profiles: list[ProfileResult],
    found: list[Target],
) -> str:
    parts = [
        "# streamstop stop-filter benchmark"
        + (" (QUICK smoke run: the numbers mean nothing)" if quick else ""),
        "",
        environment_line(env),
        "",
        *_corpus_lines(),
        "",
        f"{config.rounds} interleaved rounds per table; times are the fastest round (the median "
        "in brackets). Regenerate with `python benchmarks/stopfilter.py --write`.",
        "",
        "## Targets (issue 12), measured side by side in this run",
        "",
        table(
            ["target", "measured", "limit", "met"],
            [
                [t.name, f"{t.measured:.2f}x", f"≤ {t.limit:g}x", "yes" if t.met else "**NO**"]
                for t in found
            ],
        ),
        "",
        "## Time per token against the number of stops, cold",
        "",
        "*Cold*: a new automaton for each round, nothing memoized, run once over the measured "
        "text (its memo fills during the run, as a freshly started server's does). The floors "
        "make one call per token and nothing else (no output, no hold). A slow peer is timed on "
        "the first streams only (listed below the table).",
        "",
    ]
    rows = []
    partial = []
    for name in ORDER:
        cells = [LABELS[name]]
        for result in per_token:
            timing = result.timings.get(name)
            cells.append("-" if timing is None else f"{ns(timing.best)} ({ns(timing.median)})")
            if timing is not None and timing.units < result.tokens:
                partial.append(f"{LABELS[name]} at {result.stops} stops on {timing.units:,}")
        rows.append(cells)
    header = ["candidate"] + [f"{r.stops} stops (longest {r.longest_stop})" for r in per_token]
    parts += [
        table(header, rows),
        "",
        "Tokens per round: "
        + ", ".join(f"{r.tokens:,} at {r.stops} stops" for r in per_token)
        + (
            " (the planted stops differ); timed on the first streams only: " + "; ".join(partial)
            if partial
            else ""
        )
        + ".",
        "",
    ]
    parts += [
        "Over the cold StopBuffer (the rescan peer and the replay are outside every headline "
        "ratio):",
        "",
        table(
            ["candidate"] + [str(r.stops) for r in per_token],
            [
                [LABELS[name]]
                + [
                    f"{r.timings[name].best / r.timings[COLD].best:.2f}x"
                    if name in r.timings
                    else "-"
                    for r in per_token
                ]
                for name in ORDER
                if name != COLD and name not in OUT_OF_HEADLINE
            ],
        ),
        "",
        "Building the automaton, once per stop set: "
        + ", ".join(f"{r.stops} stops {r.build_ms:.2f} ms" for r in per_token)
        + ".",
        "",
        "## A long-running server: time per token after other traffic",
        "",
        "A new automaton streams *n* tokens of other documents (untimed), then the measured text "
        "once (timed): the cost of text it has not seen, as the memo fills.",
        "",
    ]
    seen_counts = sorted({n for r in curve for n in r.ns_per_token})
    parts += [
        table(
            ["stops"] + [f"after {n:,} tokens" for n in seen_counts],
            [[str(r.stops)] + [ns(r.ns_per_token[n].best) for n in seen_counts] for r in curve],
        ),
        "",
        "## Characters held back after each token (mean)",
        "",
        table(
            ["stops", "StopBuffer (the exact peers hold the same)", "fixed hold (vLLM's rule)"],
            [
                [str(count), f"{means['ours']:.3f}", f"{means['fixed_hold']:.2f}"]
                for count, means in held.items()
            ],
        ),
        "",
        "## Async: StopStream against a bare async pass-through",
        "",
    ]
    for loop, timings in async_results.items():
        floor = timings["passthrough"].best
        parts += [
            f"On {loop}, time per token over the measured text (no stop planted):",
            "",
            table(
                ["consumer", "time per token", "over pass-through"],
                [
                    [ASYNC_LABELS[name], f"{ns(t.best)} ({ns(t.median)})", f"{t.best / floor:.2f}x"]
                    for name, t in timings.items()
                ],
            ),
            "",
        ]
    parts += [
        f"## Memory ({config.live_streams:,} live filters, tracemalloc)",
        "",
        table(
            [
                "stops",
                "automaton, built",
                "per stop character",
                "memo after the measured text",
                "per live stream: StopBuffer",
                "fixed hold",
                "(e) pyahocorasick + prefixes",
            ],
            [
                [
                    str(m.stops),
                    f"{m.automaton_bytes / 1024:,.0f} KiB",
                    f"{m.automaton_bytes / m.stop_chars:,.0f} B",
                    f"+{m.memo_bytes / 1024:,.0f} KiB ({m.memo_tokens:,} tokens)"
                    if m.memo_bytes >= 0
                    else "-",
                    f"{m.bytes_per_stream['ours']:,.0f} B",
                    f"{m.bytes_per_stream['fixed_hold']:,.0f} B",
                    f"{m.bytes_per_stream['ac_prefixes']:,.0f} B",
                ]
                for m in memory
            ],
        ),
        "",
        "A live stream was fed 4 tokens; counted are the filter objects, what they hold, and the "
        "list holding them (8 B each); not the tables shared by the stop set.",
        "",
        *_proxy_memory_lines(),
        "## Where the time goes (cProfile of the cold run)",
        "",
    ]
    for profiled in profiles:
        parts += [
            f"{profiled.stops} stops, {profiled.tokens:,} tokens: {profiled.arrive_held:.1%} of "
            f"tokens arrive while a partial stop is held; {profiled.root_disjoint:.1%} arrive "
            "with nothing held and contain no stop's first character (one C-level "
            f"`frozenset.isdisjoint` could pass them on); {profiled.new_pairs:.1%} are a (held "
            "text, token) pair the run had not met before.",
            "",
            table(
                ["function", "calls", "own time", "cumulative"],
                [
                    [f"`{name}`", f"{calls:,}", f"{own * 1000:.1f} ms", f"{cum * 1000:.1f} ms"]
                    for name, calls, own, cum in profiled.top
                ],
            ),
            "",
            f"StopStream, {profiled.stops} stops, cold, on asyncio:",
            "",
            table(
                ["function", "calls", "own time", "cumulative"],
                [
                    [f"`{name}`", f"{calls:,}", f"{own * 1000:.1f} ms", f"{cum * 1000:.1f} ms"]
                    for name, calls, own, cum in profiled.stream_top
                ],
            ),
            "",
        ]
    return "\n".join(parts)


# -- plots -------------------------------------------------------------------------------------


def plot(
    out: Path,
    per_token: list[PerTokenResult],
    curve: list[CurveResult],
    async_results: dict[str, dict[str, Timing]],
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    counts = [r.stops for r in per_token]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    # More lines than the default cycle has colours: one colour each.
    ax.set_prop_cycle(color=[*_TAB10, "black", "#ff00ff"])
    for name in ORDER:
        points = [(r.stops, r.timings[name].best) for r in per_token if name in r.timings]
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            "-" if name == COLD else ("--" if not name.startswith("floor") else ":"),
            marker="o",
            linewidth=2.5 if name == COLD else 1.2,
            label=LABELS[name],
        )
    _log_axes(ax, counts, "time per token (ns, log)", "Cold: time per token (lower is better)")
    written.append(_save(fig, out / f"{PREFIX}_per_token.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    for series in curve:
        seen = sorted(series.ns_per_token)
        ax.plot(
            [max(n, 1) for n in seen],
            [series.ns_per_token[n].best for n in seen],
            marker="o",
            label=f"{series.stops} stops",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="tokens of other traffic streamed before (log; 0 shown at 1)",
        ylabel="time per token on unseen text (ns, log)",
        title="A long-running server: cost per token as the memo fills",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save(fig, out / f"{PREFIX}_long_running.png"))

    fig, axes = plt.subplots(1, len(async_results), figsize=(5 * len(async_results), 4.5))
    axes_list = list(axes) if len(async_results) > 1 else [axes]
    for ax, (loop, timings) in zip(axes_list, async_results.items(), strict=True):
        names = list(timings)
        ax.bar(range(len(names)), [timings[n].best for n in names])
        ax.set_xticks(range(len(names)), [ASYNC_LABELS[n].replace(", ", "\n") for n in names])
        ax.tick_params(axis="x", labelsize=7)
        ax.set(ylabel="time per token (ns)", title=f"Async streams on {loop}")
        ax.axhline(1.3 * timings["passthrough"].best, color="red", linestyle=":", label="1.3x")
        ax.legend(fontsize=8)
    written.append(_save(fig, out / f"{PREFIX}_async.png"))
    return written


# matplotlib's "tab10" colours.
_TAB10 = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def _log_axes(ax: Any, counts: Sequence[int], ylabel: str, title: str) -> None:
    ax.set(xscale="log", yscale="log", xlabel="number of stop strings", ylabel=ylabel, title=title)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
