"""Regex and gated stops per token, beside literal stops, on the same real tokens (issue 22).

Every row runs the stop set of 4 chat markers (``_workload.stop_set(4)``) over the measured
streams (half end with a planted marker), one fresh buffer per stream, all sharing what a server
shares (one automaton, one :class:`~streamstop.StopPatterns`):

- ``literal``: the 4 markers as literal stops, the plain :class:`~streamstop.StopBuffer`: the
  baseline;
- ``as_regex``: the same 4 markers written as patterns (``re.escape``): what a pattern costs
  where a literal stop would do;
- ``literal_and_regex``: the 4 literal stops and one pattern (``\\nQuestion \\d{1,3}:``), the
  usual use;
- ``gated_waiting``: the 4 literal stops with ``arm_after="</think>"``, a marker that never comes:
  a thinking block's cost;
- ``gated_armed``: the same with ``"</think>"`` as each stream's first token: the stops armed
  from there on, through the gated buffer.

Each candidate is first checked against :func:`streamstop.truncate` with the same rules (the
``as_regex`` row against the literal stops' own output).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import _workload
from _harness import Candidate, Timing, fresh, interleaved, progress

from streamstop import StopAutomaton, StopBuffer, StopPatterns, truncate

__all__ = ["RegexResult", "regex_per_token", "render"]

QUESTION = r"\nQuestion \d{1,3}:"
MARKER = "</think>"

LABELS = {
    "literal": "4 literal stops (baseline)",
    "as_regex": "the same 4 as regex patterns",
    "literal_and_regex": "4 literal stops + 1 pattern",
    "gated_waiting": "4 literal stops, arm_after not yet seen",
    "gated_armed": "4 literal stops, armed after arm_after",
}


@dataclass
class RegexResult:
    name: str
    label: str
    tokens: int
    timing: Timing


def _run(make: Callable[[], StopBuffer], streams: Sequence[Sequence[str]]) -> None:
    for tokens in streams:
        buffer = make()
        feed = buffer.feed
        for token in tokens:
            feed(token)
        buffer.flush()


def _setup(
    make: Callable[[], StopBuffer], lists: Sequence[Sequence[str]]
) -> Callable[[], Callable[[], None]]:
    def setup() -> Callable[[], None]:
        tokens = fresh(lists)
        return lambda: _run(make, tokens)

    return setup


def regex_per_token(streams: int | None, length: int | None, rounds: int) -> list[RegexResult]:
    stops = _workload.stop_set(4)
    measured = _workload.make_streams(stops, streams, length)
    lists = [stream.tokens for stream in measured]
    armed_lists = [(MARKER, *tokens) for tokens in lists]
    automaton = StopAutomaton(stops)
    escaped = StopPatterns([re.escape(stop) for stop in stops])
    question = StopPatterns(QUESTION)
    rows: dict[str, tuple[Callable[[], StopBuffer], list[tuple[str, ...]], Callable[[str], str]]]
    rows = {
        "literal": (lambda: StopBuffer(automaton), lists, lambda text: truncate(text, stops)),
        "as_regex": (
            lambda: StopBuffer(None, regex=escaped),
            lists,
            lambda text: truncate(text, stops),
        ),
        "literal_and_regex": (
            lambda: StopBuffer(automaton, regex=question),
            lists,
            lambda text: truncate(text, stops, regex=QUESTION),
        ),
        "gated_waiting": (
            lambda: StopBuffer(automaton, arm_after=MARKER),
            lists,
            lambda text: text,  # the marker is nowhere in the corpus: nothing is ever cut
        ),
        "gated_armed": (
            lambda: StopBuffer(automaton, arm_after=MARKER),
            armed_lists,
            lambda text: truncate(text, stops, arm_after=MARKER),
        ),
    }
    for name, (make, streams_of, expected) in rows.items():
        for tokens in streams_of:
            buffer = make()
            got = "".join(buffer.feed(token) for token in tokens) + buffer.flush()
            text = "".join(tokens)
            if got != expected(text):
                raise AssertionError(f"{name} disagrees with truncate: ...{got[-60:]!r}")
    candidates: dict[str, Candidate] = {
        name: (_setup(make, streams_of), sum(map(len, streams_of)))
        for name, (make, streams_of, _) in rows.items()
    }
    timings = interleaved(candidates, rounds)
    results = [RegexResult(name, LABELS[name], candidates[name][1], timings[name]) for name in rows]
    progress(
        "regex stops per token: "
        + ", ".join(f"{result.name} {result.timing.best:.0f} ns" for result in results)
    )
    return results


def render(results: Sequence[RegexResult]) -> str:
    baseline = results[0].timing.best
    lines = [
        "",
        "## Regex and gated stops, per token",
        "",
        f"The stop set of 4 chat markers on the same real tokens ({results[0].tokens} of them),"
        " one buffer per stream; the best round and the median (benchmarks/_regex_suite.py).",
        "",
        "| stops | ns/token (best) | ns/token (median) | vs literal |",
        "| --- | ---: | ---: | ---: |",
    ]
    for result in results:
        timing = result.timing
        lines.append(
            f"| {result.label} | {timing.best:.0f} | {timing.median:.0f} | "
            f"{timing.best / baseline:.2f}x |"
        )
    return "\n".join(lines) + "\n"
