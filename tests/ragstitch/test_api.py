"""The public surface: exports, signatures, documented examples, the README, the example."""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ragstitch
from ragstitch._cli import main

from ..handbook import handbook
from ..public_api import public_definitions

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_MODULES = [
    "_astitch",
    "_chunk",
    "_cli",
    "_errors",
    "_overlap",
    "_provenance",
    "_result",
    "_stitcher",
    "_text",
    "_tokenizer",
]
INTEGRATIONS = ["langchain", "llamaindex"]
PUBLIC = {
    "Chunk",
    "ChunkLike",
    "ChunkRecord",
    "HasIds",
    "HasText",
    "HasTokens",
    "OnOverflow",
    "Order",
    "Segment",
    "StitchResult",
    "Stitcher",
    "TextChunk",
    "Tokenizer",
    "WordTokenizer",
    "astitch",
    "astitch_result",
    "count_tokens",
    "load_tokenizer",
    "overlap",
    "stitch",
    "stitch_result",
    "stitch_text",
}


def _section() -> str:
    # The handbook's ragstitch pages (moved from the README's ragstitch section).
    return handbook("ragstitch/index.md", "ragstitch/text.md", "ragstitch/integrations.md")


def test_public_names() -> None:
    assert set(ragstitch.__all__) == PUBLIC
    for name in ragstitch.__all__:
        value = getattr(ragstitch, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("ragstitch._"), name


@pytest.mark.parametrize("module_name", PRIVATE_MODULES + INTEGRATIONS)
def test_module_all_lists_what_it_defines(module_name: str) -> None:
    module = importlib.import_module(f"ragstitch.{module_name}")
    defined = public_definitions(module)
    assert defined <= set(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_signatures_of_the_contract() -> None:
    assert list(inspect.signature(ragstitch.overlap).parameters) == ["left", "right"]
    heads: dict[Callable[..., Any], list[str]] = {
        ragstitch.stitch: ["chunks", "budget"],
        ragstitch.stitch_result: ["chunks", "budget"],
        ragstitch.astitch: ["source", "budget"],
        ragstitch.astitch_result: ["source", "budget"],
        ragstitch.Stitcher: ["budget"],
    }
    for function, head in heads.items():
        parameters = inspect.signature(function).parameters
        assert list(parameters)[: len(head)] == head, function
        for name in ("on_overflow", "min_overlap", "separator", "tokenizer"):
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (function, name)
        assert parameters["on_overflow"].default == "skip"
        assert parameters["min_overlap"].default == 1
    assert inspect.iscoroutinefunction(ragstitch.astitch)
    assert inspect.iscoroutinefunction(ragstitch.astitch_result)
    stitcher: ragstitch.Stitcher[int] = ragstitch.Stitcher(3)
    assert stitcher.add([1]) is True
    assert (stitcher.tokens, stitcher.used, stitcher.remaining) == ([1], 1, 2)


@pytest.mark.parametrize("module_name", ["", *(f".{m}" for m in PRIVATE_MODULES + INTEGRATIONS)])
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(f"ragstitch{module_name}")
    failures, _ = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert failures == 0


def test_the_core_does_not_import_anyio() -> None:
    for name in PRIVATE_MODULES:
        if name == "_astitch":
            continue
        tree = ast.parse((ROOT / "ragstitch" / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(not a.name.startswith("anyio") for a in node.names), name
            elif isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("anyio"), name


def test_handbook_examples() -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(_section(), {}, "docs/ragstitch", "docs/ragstitch", 0)
    assert len(test.examples) >= 25
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0


def test_handbook_command_line_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    section = _section()
    start = "```bash\n$ cat chunks.jsonl"
    block = section[section.index(start) + len("```bash\n") :]
    block = block[: block.index("```")]
    commands = block.split("$ ")[1:]
    cat, run = commands
    (tmp_path / "chunks.jsonl").write_text(cat.split("\n", 1)[1], encoding="utf-8")
    command, shown = run.split("\n", 1)
    argv = shlex.split(command)
    assert argv[0] == "ragstitch"
    monkeypatch.chdir(tmp_path)
    assert main(argv[1:]) == 0
    out, err = capsys.readouterr()
    assert out + err == shown


def test_example_runs_and_its_output_is_in_the_handbook() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ragstitch_citations.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "stitched     297/300 tokens, 72 saved, dropped nothing" in result.stdout
    assert "'all men are created equal'  <- [1] + [2], [5]" in result.stdout
    assert result.stdout in _section()
