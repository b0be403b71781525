"""The public surface: exports, documented examples, runnable examples."""

from __future__ import annotations

import doctest
import importlib
import inspect
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import streamstop

from ..handbook import handbook
from ..public_api import public_definitions

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_MODULES = ["_automaton", "_buffer", "_stream", "_text", "_extras", "_version"]


def test_public_names() -> None:
    assert set(streamstop.__all__) >= {
        "StopAutomaton",
        "StopBuffer",
        "StopStream",
        "SyncStopStream",
        "split_safe",
        "truncate",
    }
    for name in streamstop.__all__:
        value = getattr(streamstop, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("streamstop."), name


@pytest.mark.parametrize("module_name", PRIVATE_MODULES)
def test_module_all_lists_what_it_defines(module_name: str) -> None:
    module = importlib.import_module(f"streamstop.{module_name}")
    defined = public_definitions(module)
    assert defined <= set(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_signatures_of_the_contract() -> None:
    assert list(inspect.signature(streamstop.split_safe).parameters) == ["text", "stops"]
    truncate_params = inspect.signature(streamstop.truncate).parameters
    assert truncate_params["include_stop"].kind is inspect.Parameter.KEYWORD_ONLY
    for cls in (streamstop.StopBuffer, streamstop.StopStream):
        parameters = inspect.signature(cls).parameters
        assert parameters["include_stop"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["include_stop"].default is False
        # The contract for regex stops (issue 22).
        assert parameters["regex"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["regex"].default is None


@pytest.mark.parametrize("module_name", PRIVATE_MODULES)
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(f"streamstop.{module_name}")
    failures, _ = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert failures == 0


def test_handbook_examples() -> None:
    # The semantics and the internals, with their tiny examples (moved from the README).
    section = handbook("streamstop/semantics.md", "streamstop/internals.md")
    parser = doctest.DocTestParser()
    test = parser.get_doctest(section, {}, "docs/streamstop", "docs/streamstop", 0)
    assert len(test.examples) >= 15
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0


def test_async_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "async_stream.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "It sits on the Seine.\n" in result.stdout
    assert "<|im" not in result.stdout.splitlines()[0]
    assert "stop: '<|im_end|>'" in result.stdout
    assert "generated 17 of 22 tokens, then: <model stopped>" in result.stdout


def test_sync_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(ROOT / "examples" / "sync_stream.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "'caf'\n'é '" in out
    assert "stop: '\\n\\nUser:'" in out
