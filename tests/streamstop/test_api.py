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
from ..public_api import public_definitions, public_members

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_MODULES = ["_automaton", "_memo", "_patterns", "_buffer", "_stream", "_text", "_extras"]
PRIVATE_MODULES += ["_version"]


# What users call (issue 24): the automaton, the buffer, the streams, the whole-string functions,
# and what regex stops added. The chat layer and the server are their own modules.
PUBLIC_NAMES = {
    "StopAutomaton",
    "StopBuffer",
    "StopMatch",
    "StopPatternTimeout",
    "StopPatterns",
    "StopRules",
    "StopStream",
    "Stops",
    "SyncStopStream",
    "find_stop",
    "split_safe",
    "truncate",
}
# What each class of the core offers (issue 24): a new public member is a decision, made here.
PUBLIC_MEMBERS: dict[type, set[str]] = {
    streamstop.StopAutomaton: {"find", "scan", "run", "from_stops", "set_cache_budget"}
    | {"hold_length", "match_length", "state_text", "memory_size"}
    | {"max_stop_length", "start_chars", "stops"},
    streamstop.StopBuffer: {"feed", "flush", "held", "stopped", "stop_string", "stop_pattern"}
    | {"automaton", "stops", "patterns", "include_stop", "arm_after", "armed"},
    streamstop.StopStream: {"aclose", "buffer", "closed", "held", "stopped", "stop_string"}
    | {"stop_pattern"},
    streamstop.SyncStopStream: {"close", "buffer", "closed", "held", "stopped", "stop_string"}
    | {"stop_pattern"},
}
# The per-token seam between buffer and stream, public before issue 24: private now.
OLD_PLUMBING = ["PASS_THROUGH", "Step", "root_step", "step_lookups", "advance_root"]
OLD_PLUMBING += ["advance_held", "advance", "at_root", "memo_items"]


def test_public_names() -> None:
    assert set(streamstop.__all__) == PUBLIC_NAMES
    for name in streamstop.__all__:
        value = getattr(streamstop, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("streamstop."), name


@pytest.mark.parametrize("cls", list(PUBLIC_MEMBERS), ids=lambda cls: cls.__name__)
def test_public_members(cls: type) -> None:
    assert public_members(cls) == PUBLIC_MEMBERS[cls]


@pytest.mark.parametrize("name", OLD_PLUMBING)
def test_the_old_plumbing_is_not_public(name: str) -> None:
    assert name not in streamstop.__all__
    assert not hasattr(streamstop, name)
    automaton = streamstop.StopAutomaton(["</s>"])
    buffer = streamstop.StopBuffer(automaton)
    assert not hasattr(automaton, name)
    assert not hasattr(buffer, name)
    for module_name in PRIVATE_MODULES:
        assert name not in importlib.import_module(f"streamstop.{module_name}").__all__


def test_what_users_call_is_there() -> None:
    automaton = streamstop.StopAutomaton(["</s>"])
    assert automaton.find("a</s>b") == streamstop.StopMatch(1, 5, "</s>")
    assert automaton.scan(0, "a</s") == (3, -1)  # "</s" held, in state 3
    assert automaton.scan(3, ">") == (4, 1)  # the stop ends at offset 1 of ">"
    buffer = streamstop.StopBuffer(automaton)
    assert (buffer.feed("hi </"), buffer.held) == ("hi ", "</")
    assert (buffer.feed("s> x"), buffer.stopped, buffer.stop_string) == ("", True, "</s>")
    assert buffer.flush() == ""


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
