"""The stop-filter benchmark is fair only if every peer is correct: each must give exactly
:func:`streamstop.truncate`'s output, on the benchmark's workload and on named edge cases, fed
token by token and one character at a time. No timing is asserted here, ever."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from streamstop import StopBuffer, truncate

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _peers  # noqa: E402
import _workload  # noqa: E402

# The Aho-Corasick libraries and matplotlib come with the bench extra, which the test extra
# includes: a missing one fails here rather than being skipped.
PEER_NAMES = list(_peers.PEERS)
# The peers that hold back exactly the longest suffix that is a proper prefix of a stop.
EXACT = ["per_stop", "pyahocorasick", "ahocorasick_rs"]


def _prepare(name: str, stops: Sequence[str]) -> _peers.Factory:
    return _peers.PEERS[name][1](stops)


def _run(make: _peers.Factory, chunks: Sequence[str]) -> str:
    stream_filter = make()
    return "".join(stream_filter.feed(chunk) for chunk in chunks) + stream_filter.flush()


# -- the workload ------------------------------------------------------------------------------


def test_tokens_concatenate_back_to_the_corpus() -> None:
    tokens = _workload.corpus_tokens()
    assert "".join(tokens) == _workload.corpus_text()
    assert 3.0 <= sum(map(len, tokens)) / len(tokens) <= 5.0


@pytest.mark.parametrize("count", _workload.STOP_COUNTS)
def test_stop_sets(count: int) -> None:
    stops = _workload.stop_set(count)
    assert len(stops) == len(set(stops)) == count
    generated = [stop for stop in stops if stop not in _workload.CHAT_MARKERS]
    text = _workload.corpus_text() * 2
    assert not [stop for stop in generated if stop in text]


@pytest.mark.parametrize("count", _workload.STOP_COUNTS)
def test_planted_stops_end_the_streams(count: int) -> None:
    stops = _workload.stop_set(count)
    for stream in _workload.make_streams(stops, 4, 60):
        cut = truncate(stream.text, stops)
        if stream.planted is None:
            assert cut == stream.text
        else:
            assert cut + stream.planted == stream.text[: len(cut) + len(stream.planted)]
            assert len(cut) > len(stream.text) - 60


# -- every peer gives truncate's output ----------------------------------------------------------


@pytest.mark.parametrize("name", PEER_NAMES)
@pytest.mark.parametrize("count", _workload.STOP_COUNTS)
def test_peer_agrees_with_truncate_on_the_workload(name: str, count: int) -> None:
    stops = _workload.stop_set(count)
    make = _prepare(name, stops)
    for stream in _workload.make_streams(stops, 4, 120):
        assert _run(make, stream.tokens) == truncate(stream.text, stops)


CASES = {
    # name: (stops, text)
    "no stop": (["</s>"], "plain text, nothing to cut"),
    "stop at the end": (["</s>"], "Hello</s>"),
    "stop at the start": (["</s>"], "</s>Hello"),
    "partial stop at the end is released": (["<|im_end|>"], "Hello <|im_"),
    "the one that ends first wins": (["abcd", "bc"], "xabcdx"),
    "the longest wins a tie": (["b", "ab"], "xabx"),
    "a false start, then the stop": (["<|im_end|>"], "a <|im_x then <|im_end|> junk"),
    "overlapping prefixes": (["aab"], "aaaab"),
    "chat markers": (list(_workload.stop_set(4)), "Sure.\n\nUser: next"),
    "a stop held across chunks": (["\n\nUser:"], "Done.\n\nUs" + "er: more"),
    "single-character stop": (["#"], "a#b"),
    "repeated stop characters": (["###"], "## ## ###"),
}


@pytest.mark.parametrize("name", PEER_NAMES)
@pytest.mark.parametrize("case", CASES)
def test_peer_agrees_with_truncate_on_named_cases(name: str, case: str) -> None:
    stops, text = CASES[case]
    make = _prepare(name, stops)
    expected = truncate(text, stops)
    assert _run(make, [text]) == expected
    assert _run(make, list(text)) == expected
    assert _run(make, _workload.tokenize(text)) == expected


@pytest.mark.parametrize("method", ["find", "regex"])
@pytest.mark.parametrize("count", [1, 4, 64])
def test_rescan_searches_agree(method: str, count: int) -> None:
    stops = _workload.stop_set(count)
    make = _peers.Rescan.prepare(stops, method)
    for stream in _workload.make_streams(stops, 2, 80):
        assert _run(make, stream.tokens) == truncate(stream.text, stops)
    for stops_case, text in CASES.values():
        assert _run(_peers.Rescan.prepare(stops_case, method), list(text)) == truncate(
            text, stops_case
        )


# -- what is held back -------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("count", [4, 256])
def test_exact_peers_hold_what_stopbuffer_holds(name: str, count: int) -> None:
    stops = _workload.stop_set(count)
    make = _prepare(name, stops)
    for stream in _workload.make_streams(stops, 2, 150, plant=False):
        ours = StopBuffer(stops)
        peer = make()
        for token in stream.tokens:
            assert peer.feed(token) == ours.feed(token)
            assert peer.held == ours.held


@pytest.mark.parametrize("name", ["fixed_hold", "rescan"])
def test_fixed_holds_hold_longest_stop_minus_one(name: str) -> None:
    stops = _workload.stop_set(4)
    hold = max(map(len, stops)) - 1
    peer = _prepare(name, stops)()
    fed = 0
    for token in _workload.make_streams(stops, 1, 50, plant=False)[0].tokens:
        peer.feed(token)
        fed += len(token)
        assert len(peer.held) == min(hold, fed)


# -- the script runs end to end ------------------------------------------------------------------


def test_quick_run_writes_the_table_and_plots(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "stopfilter.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "## Targets" in done.stdout
    table = (tmp_path / "stopfilter.md").read_text(encoding="utf-8")
    assert "QUICK" in table
    for plot in ("per_token", "held", "async", "memory", "length"):
        assert (tmp_path / f"stopfilter_{plot}.png").stat().st_size > 0
