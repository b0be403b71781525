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

import _corpus  # noqa: E402
import _peers  # noqa: E402
import _workload  # noqa: E402

# The Aho-Corasick libraries and matplotlib come with the dev extra, with everything else the tests
# need: a missing one fails here rather than being skipped.
PEER_NAMES = list(_peers.PEERS)
# The peers that hold back exactly the longest suffix that is a proper prefix of a stop.
EXACT = ["per_stop", "pyahocorasick", "ahocorasick_rs"]


def _prepare(name: str, stops: Sequence[str]) -> _peers.Factory:
    return _peers.PEERS[name][1](stops)


def _run(make: _peers.Factory, chunks: Sequence[str]) -> str:
    stream_filter = make()
    return "".join(stream_filter.feed(chunk) for chunk in chunks) + stream_filter.flush()


# -- the workload ------------------------------------------------------------------------------


def test_tokens_concatenate_back_to_the_measured_documents() -> None:
    corpus = _corpus.build_corpus()
    tokens = _workload.measured_tokens()
    assert ["".join(doc) for doc in tokens] == [doc.text for doc in corpus.measured]
    count = sum(map(len, tokens))
    assert 3.0 <= corpus.chars() / count <= 5.0
    assert corpus.chars() >= 1_000_000


def test_the_corpus_is_varied_and_the_traffic_disjoint_from_the_measured_text() -> None:
    corpus = _corpus.build_corpus()
    assert not corpus.fallback
    for kind in _corpus.KINDS:
        assert corpus.chars(kind) > 0, kind
    measured = {doc.text for doc in corpus.measured}
    assert not [doc for doc in corpus.traffic if doc.text in measured]
    assert all("streamstop" not in doc.text.lower() for doc in corpus.measured)


DETOKENIZER_CASES = {
    # name: (token bytes, pieces streamed)
    "ascii": ([b"Hel", b"lo"], ["Hel", "lo"]),
    "a character split over two tokens": ([b"a\xc3", b"\xa9b"], ["a", "\u00e9b"]),
    "a token of half a character sends nothing": ([b"\xe6", b"\x97", b"\xa5!"], ["\u65e5!"]),
    "a token ending in a whole character": ([b"\xe6\x97\xa5"], ["\u65e5"]),
}


@pytest.mark.parametrize("case", DETOKENIZER_CASES)
def test_detokenizer_holds_bytes_until_a_character_completes(case: str) -> None:
    token_bytes, pieces = DETOKENIZER_CASES[case]
    assert _workload.detokenize(token_bytes) == pieces


def test_a_real_vocabulary_streams_non_english_text_in_whole_characters() -> None:
    text = "日本語のテキスト, \u0440\u0443\u0441\u0441\u043a\u0438\u0439 and 🐍"
    pieces = _workload.tokenize(text)
    assert "".join(pieces) == text
    assert len(pieces) > 5
    assert "o200k_base" in _workload.tokenizer_name()


@pytest.mark.parametrize("count", _workload.STOP_COUNTS)
def test_stop_sets(count: int) -> None:
    stops = _workload.stop_set(count)
    assert len(stops) == len(set(stops)) == count
    generated = [stop for stop in stops if stop not in _workload.CHAT_MARKERS]
    text = "".join(doc.text for doc in _corpus.build_corpus().measured)
    assert not [stop for stop in generated if stop in text]
    if count >= 64:
        assert len(generated) > count // 2


@pytest.mark.parametrize("count", _workload.STOP_COUNTS)
def test_planted_stops_end_the_streams(count: int) -> None:
    stops = _workload.stop_set(count)
    for stream in _workload.make_streams(stops, 4, 60):
        cut = truncate(stream.text, stops)
        if stream.planted is None:
            assert cut == stream.text
        else:
            assert cut + stream.planted == stream.text[: len(cut) + len(stream.planted)]
            assert len(cut) > len(stream.text) - 60 - len(_workload.STOP_TAIL)


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


def test_the_ac_peer_with_prefixes_holds_in_one_scan() -> None:
    peer = _peers.AhoCorasickPrefixes.prepare(["<|im_end|>", "abcd", "bc"])()
    assert peer.feed("text <|im") == "text "
    assert peer.held == "<|im"
    assert peer.feed("_e") == ""
    assert peer.feed("x") == "<|im_ex"
    assert peer.feed("xab") == "x"
    assert peer.feed("cd") == "a"
    assert peer.stopped
    assert peer.flush() == ""


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
    assert "o200k_base" in table
    for plot in ("per_token", "long_running", "async"):
        assert (tmp_path / f"stopfilter_{plot}.png").stat().st_size > 0
