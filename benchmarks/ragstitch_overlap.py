"""ragstitch: how `overlap` and `stitch` scale, on typical and adversarial input.

Peers, implemented here:

- naive: try every overlap length k from the longest down, comparing slices
  (`left[-k:] == right[:k]`, C-level). What one writes first; quadratic on adversarial input.
- kmp: the Knuth-Morris-Pratt failure function alone, in pure Python. Always linear, never fast.
- ours: `ragstitch.overlap`, candidate starts found with `list.index` (anchored on a rare token
  when the first one is frequent), checked by probes and slice comparison, with KMP as the
  fallback once the slice work passes 2m.

Inputs, for a chunk size m (the overlap reads at most m tokens of each side):

- typical: two windows of m tokens of English (WordTokenizer tokens of benchmarks/_corpus.txt,
  or generated Zipf-distributed words when that file is absent) sharing m/8 tokens, like
  512-token chunks sharing 64; the mean over 16 places in the text (only for the sizes that
  the text is long enough for);
- one token repeated: left is m-1 copies of a token and a different last token, right is m
  copies (the answer is 0; naive compares ~m^2/2 tokens);
- mismatch in the middle: left is m copies, right has a different token in its middle
  (the answer is m/2-1; this defeats our slice checks and exercises the KMP fallback).

The stitch table assembles chunks of 512 tokens (typical: the text cut by a sliding window,
neighbours sharing 64; adversarial: 100 chunks of one repeated token, ending alternately in two
other tokens), with ours and with a stitcher that uses the naive overlap. Timings are the best of
3 runs. Prints a table, writes it to benchmarks/results/ragstitch_overlap.md and plots
benchmarks/results/ragstitch_overlap.png.

Run: python benchmarks/ragstitch_overlap.py --write (about 20 seconds; without --write or --out
it writes into a temporary folder).
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ragstitch import WordTokenizer, overlap, stitch
from ragstitch._overlap import _overlap_kmp

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
TARGET_SECONDS = 0.02  # per timed batch
REPEATS = 3


def naive_overlap(left: Sequence[Any], right: Sequence[Any]) -> int:
    for k in range(min(len(left), len(right)), 0, -1):
        if left[-k:] == right[:k]:
            return k
    return 0


def kmp_overlap(left: Sequence[Any], right: Sequence[Any]) -> int:
    m = min(len(left), len(right))
    return _overlap_kmp(left, right, m) if m else 0


IMPLEMENTATIONS: dict[str, Callable[[Sequence[Any], Sequence[Any]], int]] = {
    "ours": overlap,
    "naive": naive_overlap,
    "kmp": kmp_overlap,
}


def corpus_tokens() -> tuple[list[str], str]:
    path = HERE / "_corpus.txt"
    if path.exists():
        return WordTokenizer().encode(path.read_text(encoding="utf-8")), "_corpus.txt"
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(5000)]
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    words = rng.choices(vocab, weights, k=60_000)
    tokens: list[str] = []
    for word in words:
        tokens += [word, " "]
    return tokens, "generated Zipf words"


def cases(m: int, text: list[str]) -> dict[str, list[tuple[list[Any], list[Any]]]]:
    """Input pairs per case: typical is 16 pairs from different places in the text, when the
    text is long enough for two windows of m tokens (it is not repeated: that would make it
    periodic)."""
    shared = m // 8
    half = m // 2
    pairs: dict[str, list[tuple[list[Any], list[Any]]]] = {}
    if len(text) >= 2 * m + 16:
        rng = random.Random(m)
        starts = [rng.randrange(len(text) - 2 * m) for _ in range(16)]
        pairs["typical"] = [
            (text[s : s + m], text[s + m - shared : s + 2 * m - shared]) for s in starts
        ]
    pairs["one token repeated"] = [([0] * (m - 1) + [1], [0] * m)]
    pairs["mismatch in the middle"] = [([0] * m, [0] * (half - 1) + [1] + [0] * (m - half))]
    return pairs


def best_time(call: Callable[[], object]) -> float:
    """Seconds per call: batches of about TARGET_SECONDS, best of REPEATS."""
    number = 1
    while True:
        started = time.perf_counter()
        for _ in range(number):
            call()
        elapsed = time.perf_counter() - started
        if elapsed >= TARGET_SECONDS or number >= 1 << 16:
            break
        number *= 2
    best = elapsed / number
    for _ in range(REPEATS - 1):
        started = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, (time.perf_counter() - started) / number)
    return best


def naive_stitch(chunks: list[list[Any]], budget: int) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        k = naive_overlap(out, chunk)
        if len(chunk) - k <= budget - len(out):
            out += chunk[k:]
    return out


def stitch_workloads(text: list[str]) -> dict[str, list[list[Any]]]:
    size, shared = 512, 64
    step = size - shared
    typical = [text[i : i + size] for i in range(0, len(text) - size + 1, step)][:100]
    adversarial = [[0] * (size - 1) + [1 + i % 2] for i in range(100)]
    return {"typical": typical, "adversarial": adversarial}


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms"


def main(out: Path) -> None:
    started = time.perf_counter()
    text, source = corpus_tokens()
    timings: dict[tuple[str, str], list[float]] = {}
    rows = []
    for m in SIZES:
        for case, pairs in cases(m, text).items():
            expected = [naive_overlap(left, right) for left, right in pairs]
            shown = str(expected[0]) if len(pairs) == 1 else f"~{sum(expected) // len(pairs)}"
            row = [f"{m}", case, shown]
            for name, function in IMPLEMENTATIONS.items():
                assert [function(left, right) for left, right in pairs] == expected, (name, m)

                def run(f: Callable[..., int] = function, p: list[Any] = pairs) -> None:
                    for left, right in p:
                        f(left, right)

                seconds = best_time(run) / len(pairs)
                timings.setdefault((case, name), []).append(seconds)
                row.append(fmt(seconds))
            ours, naive = timings[(case, "ours")][-1], timings[(case, "naive")][-1]
            row.append(f"{naive / ours:.1f}x")
            rows.append(row)
    header = ["m", "input", "overlap", "ours", "naive", "kmp", "naive/ours"]

    stitch_rows = []
    for case, chunks in stitch_workloads(text).items():
        budget = sum(map(len, chunks))
        output = naive_stitch(chunks, budget)
        assert stitch(chunks, budget) == output
        ours = best_time(lambda c=chunks, b=budget: stitch(c, b))  # type: ignore[misc]
        naive = best_time(lambda c=chunks, b=budget: naive_stitch(c, b))  # type: ignore[misc]
        pasted = sum(map(len, chunks))
        stitch_rows.append(
            [
                case,
                f"{len(chunks)} x 512",
                f"{len(output)} of {pasted}",
                fmt(ours),
                fmt(naive),
                f"{naive / ours:.1f}x",
            ]
        )
    stitch_header = ["input", "chunks", "tokens out", "ours", "naive", "naive/ours"]

    machine = f"Python {platform.python_version()} on {platform.machine()} ({sys.platform})"
    lines = [
        "# ragstitch: overlap and stitch timings",
        "",
        f"{machine}; typical text: {source}. Best of {REPEATS}; produced by "
        "`python benchmarks/ragstitch_overlap.py --write`.",
        "",
        "## overlap(left, right), chunks of m tokens",
        "",
        *markdown_table(header, rows),
        "",
        "## stitch(chunks, budget), chunks of 512 tokens",
        "",
        *markdown_table(stitch_header, stitch_rows),
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "ragstitch_overlap.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    plot(timings, out)
    elapsed = time.perf_counter() - started
    print(f"wrote {out / 'ragstitch_overlap.md'} and .png in {elapsed:.0f} s")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"] + [
        line(r) for r in rows
    ]


def plot(timings: dict[tuple[str, str], list[float]], out: Path) -> None:
    inputs = ["typical", "one token repeated", "mismatch in the middle"]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    styles = {"ours": "o-", "naive": "s--", "kmp": "^:"}
    for axis, case in zip(axes, inputs, strict=True):
        for name, style in styles.items():
            times = timings[(case, name)]
            axis.plot(SIZES[: len(times)], [t * 1e6 for t in times], style, label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(case)
        axis.set_xlabel("chunk size m (tokens)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("time per overlap (µs)")
    axes[0].legend()
    figure.suptitle("ragstitch.overlap vs naive (every length) and pure-Python KMP")
    figure.tight_layout()
    figure.savefig(out / "ragstitch_overlap.png", dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/")
    parser.add_argument("--out", type=Path, help="write the table and plot into this folder")
    args = parser.parse_args()
    # Only an explicit --write or --out touches tracked results.
    main(args.out or (RESULTS if args.write else Path(tempfile.mkdtemp(prefix="ragstitch-"))))
