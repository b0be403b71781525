"""The `ragstitch` command: JSON lines in, context out, report on stderr, errors named."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from ragstitch import count_tokens, load_tokenizer
from ragstitch._cli import main

TEXT_LINES: list[dict[str, Any]] = [
    {"id": "gettysburg#0", "text": "Four score and seven years ago our fathers"},
    {"id": "gettysburg#1", "text": "years ago our fathers brought forth on this continent"},
    {"id": "other#9", "text": "An unrelated chunk that is far too long for what is left"},
    {"id": "gettysburg#5", "text": "a new nation", "metadata": {"page": 1}},
]


def _write(path: Path, lines: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n", encoding="utf-8")
    return path


def _run(
    argv: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        status = main(argv)
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return status, out, err


def test_text_chunks_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "chunks.jsonl", TEXT_LINES)
    status, out, err = _run([str(path), "--budget", "31", "--min-overlap-chars", "8"], capsys)
    assert status == 0
    assert out == (
        "Four score and seven years ago our fathers brought forth on this continent\n\n"
        "a new nation\n"
    )
    assert err.splitlines() == [
        "ragstitch: 4 chunks, 3 taken, 1 skipped; 31/31 tokens used, 7 saved by overlap",
        "  taken:   gettysburg#0, gettysburg#1 (overlap 7), gettysburg#5",
        "  skipped: other#9 (cost 24 > 6 left)",
    ]


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "chunks.jsonl", TEXT_LINES)
    argv = [str(path), "--budget", "31", "--json", "--min-overlap-chars", "8"]
    status, out, err = _run(argv, capsys)
    assert status == 0
    assert err == ""
    report = json.loads(out)
    assert report["text"].startswith("Four score")
    assert {k: report[k] for k in ("budget", "used", "saved", "taken", "skipped", "unread")} == {
        "budget": 31,
        "used": 31,
        "saved": 7,
        "taken": 3,
        "skipped": 1,
        "unread": 0,
    }
    second = report["records"][1]
    assert second["overlap"] == 7
    assert second["span"] is None  # text is located by characters
    assert second["overlap_chars"] == len("years ago our fathers")
    start, end = second["chars"]
    assert report["text"][start:end] == TEXT_LINES[1]["text"]
    assert report["records"][2]["span"] is None
    assert report["records"][3]["metadata"] == {"page": 1}


def test_token_chunks_from_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    lines = "\n".join(json.dumps({"tokens": t}) for t in ([1, 2, 3], [2, 3, 4], [7, 8]))
    status, out, err = _run(["--budget", "5", "--on-overflow", "stop"], capsys, stdin=lines)
    assert status == 0
    assert out == "[1, 2, 3, 4]\n"
    assert "2 taken, 1 skipped" in err
    assert "#2 (cost 2 > 1 left)" in err


def test_unread_chunks_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    lines = "\n".join(json.dumps({"tokens": [i]}) for i in range(5))
    status, _, err = _run(["-", "--budget", "2"], capsys, stdin=lines)
    assert status == 0
    assert "unread:  3 (budget full)" in err


def test_min_overlap_and_separator(capsys: pytest.CaptureFixture[str]) -> None:
    lines = "\n".join(json.dumps({"text": t}) for t in ("of the", "the end"))
    args = ["--budget", "50", "--min-overlap", "2", "--separator", " / "]
    status, out, _ = _run(args, capsys, stdin=lines)
    assert status == 0
    assert out == "of the / the end\n"


BAD_INPUT: list[tuple[str, str, str]] = [
    ("invalid JSON", '{"text": "a"\n', r"<stdin>:1: invalid JSON"),
    ("not an object", '["a"]\n', r"<stdin>:1: expected a JSON object, got \['a'\] \(list\)"),
    ("no text or tokens", '\n{"id": 3}\n', r'<stdin>:2: a chunk needs "text" or "tokens"'),
    ("unknown key", '{"txt": "a"}\n', r"<stdin>:1: unknown key\(s\) 'txt'"),
    ("text not a string", '{"text": 5}\n', r"<stdin>:1: text must be a string, got 5 \(int\)"),
    ("tokens not a list", '{"tokens": "ab"}\n', r"<stdin>:1: tokens must be an array, got 'ab'"),
    ("metadata not an object", '{"text": "a", "metadata": 1}\n', r"metadata must be an object"),
    (
        "int tokens mixed with text",
        '{"text": "a"}\n{"tokens": [1]}\n',
        r"line 2: token 1 \(int\) is not a string",
    ),
    ("separator without text", '{"tokens": [1]}\n', r"--separator applies to text chunks"),
]


@pytest.mark.parametrize(
    ("stdin", "message"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_named(stdin: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--budget", "5"] + (["--separator", "|"] if "separator" in message else [])
    status, out, err = _run(argv, capsys, stdin=stdin)
    assert status == 1
    assert out == ""
    assert err.startswith("ragstitch: error: ")
    assert re.search(message, err), err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run([str(tmp_path / "nope.jsonl"), "--budget", "5"], capsys)
    assert status == 1
    assert "nope.jsonl: No such file or directory" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "-1"], "argument --budget: must be >= 0, got -1"),
        (["--budget", "2.5"], "argument --budget: invalid int value: '2.5'"),
        (["--budget", "5", "--min-overlap", "0"], "argument --min-overlap: must be >= 1, got 0"),
        (["--budget", "5", "--on-overflow", "truncate"], "invalid choice: 'truncate'"),
        ([], "the following arguments are required: --budget"),
        (
            ["--budget", "5", "--tokenizer", "o999k"],
            "argument --tokenizer: unknown tokenizer 'o999k'",
        ),
        (["--budget", "5", "--order", "rank"], "argument --order: invalid choice: 'rank'"),
        (["--budget", "5", "--min-overlap-chars", "0"], "--min-overlap-chars: must be >= 1, got 0"),
    ],
)
def test_bad_usage(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_python_dash_m(tmp_path: Path) -> None:
    path = _write(tmp_path / "chunks.jsonl", [{"tokens": ["a", "b"]}, {"tokens": ["b", "c"]}])
    result = subprocess.run(
        [sys.executable, "-m", "ragstitch", str(path), "--budget", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout)["tokens"] == ["a", "b", "c"]


NOVEL = (Path(__file__).resolve().parents[2] / "benchmarks" / "_corpus.txt").read_text("utf-8")


def test_tokenizer_and_document_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Windows of the novel given best first, with their offsets, as a splitter writes them.
    lines: list[dict[str, Any]] = [
        {"id": f"c{start}", "text": NOVEL[start : start + 400], "source": "pp", "start": start}
        for start in (600, 300, 0, 5000)
    ]
    lines.append(  # LangChain's metadata names are read too
        {"id": "lc", "text": NOVEL[5300:5700], "metadata": {"source": "pp", "start_index": 5300}}
    )
    path = _write(tmp_path / "chunks.jsonl", lines)
    argv = [str(path), "--budget", "1000", "--tokenizer", "o200k_base", "--order", "document"]
    status, out, err = _run([*argv, "--json"], capsys)
    assert status == 0, err
    report = json.loads(out)
    assert report["text"] == NOVEL[0:1000] + "\n\n" + NOVEL[5000:5700]
    assert report["used"] == count_tokens(load_tokenizer("o200k_base"), report["text"])
    assert report["used"] <= 1000
    assert [r["start"] for r in report["records"]] == [600, 300, 0, 5000, 5300]
    for record, line in zip(report["records"], lines, strict=True):
        start, end = record["chars"]
        assert report["text"][start:end] == line["text"]
    status, out, _ = _run(argv, capsys)
    assert out == report["text"] + "\n"


def test_tokenizer_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokenizer = HFTokenizer(models.WordLevel(unk_token="?"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        [NOVEL[:2000]], trainers.WordLevelTrainer(special_tokens=["?"], show_progress=False)
    )
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    text = NOVEL[:200]
    path = _write(tmp_path / "chunks.jsonl", [{"text": text}])
    argv = [str(path), "--budget", "100", "--tokenizer", str(tmp_path / "tokenizer.json")]
    status, out, err = _run([*argv, "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["used"] == len(tokenizer.encode(text).ids)


def test_token_chunks_among_text_keep_their_place(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [{"id": "t", "tokens": ["Four", " ", "score"]}, {"id": "x", "text": "and seven"}]
    stdin = "\n".join(json.dumps(line) for line in lines)
    status, out, _ = _run(["--budget", "50", "--json"], capsys, stdin=stdin)
    assert status == 0
    report = json.loads(out)
    assert report["text"] == "Four score\n\nand seven"
    assert [r["id"] for r in report["records"]] == ["t", "x"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import ragstitch

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"ragstitch {ragstitch.__version__}\n"


def test_a_mistyped_flag_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--budget", "5", "--jsno"])
    err = capsys.readouterr().err
    assert err.startswith("usage: ragstitch ")
    assert "--json" in err  # the flags, to pick the right one from
    assert err.rstrip().endswith("ragstitch: error: unrecognized arguments: --jsno")
