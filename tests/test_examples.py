"""Every example says what to install and what to start, and runs as it says.

Each file in examples/ opens with a docstring holding four lines:

    Install, from a clone:   pip install -e '.[extra,...]' [package ...]
    Install, once published: pip install 'streamstop[extra,...]' [package ...]
    Start:                   nothing (...) | streamstop serve (...) | nothing: this is the server
    Run:                     python examples/NAME.py

The install lines are checked against what the example imports: every package it imports that
is not the standard library's must be installed by the extras and packages named (their
requirements included, as pip resolves them). Then each example runs as its lines say: offline,
against ``streamstop serve`` started as its Start line says (on a free port), or, for the one
that is a server, started as a process on a free port and sent a request. Each extra is checked
the same way against the integration it is for.
"""

from __future__ import annotations

import ast
import os
import re
import runpy
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(path.name for path in (ROOT / "examples").glob("*.py"))
OURS = {"streamstop", "ragstitch"}

FIELDS = {
    "clone": re.compile(r"^Install, from a clone: +pip install -e (?:'\.\[([\w,]+)\]'|\.)(.*)$"),
    "published": re.compile(
        r"^Install, once published: +pip install (?:'streamstop\[([\w,]+)\]'|streamstop)(.*)$"
    ),
    "start": re.compile(r"^Start: +(.+)$"),
    "run": re.compile(r"^Run: +(.+)$"),
}


@dataclass(frozen=True)
class Docstring:
    extras: tuple[str, ...]
    packages: tuple[str, ...]
    start: str
    run: str


def docstring_of(name: str) -> Docstring:
    tree = ast.parse((ROOT / "examples" / name).read_text(encoding="utf-8"))
    text = ast.get_docstring(tree) or ""
    found: dict[str, re.Match[str]] = {}
    for line in text.splitlines():
        for key, pattern in FIELDS.items():
            match = pattern.match(line)
            if match:
                assert key not in found, f"{name}: two {key!r} lines"
                found[key] = match
    missing = set(FIELDS) - set(found)
    assert not missing, f"{name}: its docstring lacks the lines {sorted(missing)}"
    clone, published = found["clone"], found["published"]
    # The two install lines name the same extras and packages, in the same words.
    assert (clone.group(1), clone.group(2)) == (published.group(1), published.group(2)), name
    extras = tuple(clone.group(1).split(",")) if clone.group(1) else ()
    return Docstring(extras, tuple(clone.group(2).split()), found["start"][1], found["run"][1])


def imported_packages(path: Path) -> set[str]:
    """The top-level names of what ``path`` imports that are neither ours nor the stdlib's."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names} - OURS


def _requirements(distribution: str, extras: set[str]) -> list[Requirement]:
    wanted = []
    for line in metadata.requires(distribution) or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""}):
            wanted.append(requirement)
    return wanted


def installed_by(extras: tuple[str, ...], packages: tuple[str, ...] = ()) -> set[str]:
    """The distributions that ``pip install streamstop[extras] packages`` installs."""
    seen: set[str] = set()
    todo: list[tuple[str, set[str]]] = [("streamstop", set(extras))]
    todo += [(package, set()) for package in packages]
    while todo:
        name, wanted = todo.pop()
        key = f"{canonicalize_name(name)}{sorted(wanted)}"
        if key in seen:
            continue
        seen.add(key)
        for requirement in _requirements(name, wanted):
            if requirement.name == "streamstop" or _installed(requirement.name):
                todo.append((requirement.name, set(requirement.extras)))
    return {key.partition("[")[0] for key in seen}


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


@cache
def _providers() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def assert_provided(imports: set[str], installed: set[str], what: str) -> None:
    providers = _providers()
    for name in sorted(imports):
        from_distributions = {canonicalize_name(d) for d in providers.get(name, [])}
        assert from_distributions, f"{what}: nothing installed provides {name!r}"
        assert from_distributions & installed, (
            f"{what} imports {name!r} (from {sorted(from_distributions)}), which its install "
            f"line does not install"
        )


def test_every_example_has_a_runner() -> None:
    assert set(EXAMPLES) == set(RUNNERS)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_docstring_says_what_to_install_and_start(name: str) -> None:
    doc = docstring_of(name)
    known = set(metadata.metadata("streamstop").get_all("Provides-Extra") or [])
    assert set(doc.extras) <= known - {"test", "benchmarks", "docs", "dev"}, name
    assert doc.run == f"python examples/{name}"
    assert doc.start.startswith(("nothing", "streamstop serve")), doc.start
    assert_provided(imported_packages(ROOT / "examples" / name), installed_by(*_args(doc)), name)


def _args(doc: Docstring) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return doc.extras, doc.packages


# What each extra is for: the modules that need it (metrics and fast are add-ons of the
# server, installed with it: `streamstop[server,metrics]`).
INTEGRATIONS = {
    "server": (("server",), ["streamstop/server/_commands.py", "streamstop/server/_proxy.py"]),
    "metrics": (("server", "metrics"), ["streamstop/server/_observe.py"]),
    "fast": (
        ("server", "fast"),
        ["streamstop/_json.py", "streamstop/server/_protocol.py"],
    ),
    "tokenizers": (("tokenizers",), ["ragstitch/_tokenizer.py"]),
    "langchain": (("langchain",), ["streamstop/langchain.py", "ragstitch/langchain.py"]),
    "llamaindex": (("llamaindex",), ["ragstitch/llamaindex.py"]),
}
# Imported by name (importlib) rather than by an import statement, or optional on purpose.
DYNAMIC = {
    "streamstop/server/_commands.py": {"uvicorn", "httpx"},
    "streamstop/server/_observe.py": {"prometheus_client"},
    "streamstop/_json.py": {"orjson"},
    "streamstop/server/_protocol.py": {"httptools"},
    "ragstitch/_tokenizer.py": {"bpe_openai", "tokenizers"},
}
# tiktoken is the tokenizers' fallback (used if installed, never required).
OPTIONAL = {"tiktoken"}


@pytest.mark.parametrize("extra", INTEGRATIONS)
def test_each_extra_installs_what_its_integration_imports(extra: str) -> None:
    extras, modules = INTEGRATIONS[extra]
    installed = installed_by(extras)
    for module in modules:
        path = ROOT / module
        imports = (imported_packages(path) | DYNAMIC.get(module, set())) - OPTIONAL
        assert imports, f"{module}: no import found for the {extra} extra"
        assert_provided(imports, installed, f"{module} (the {extra} extra)")


# -- running them ------------------------------------------------------------------------------


def run(name: str, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the example as ``python examples/NAME.py`` would (as ``__main__``, with ``env``), in
    this process: its imports were checked against its install line above, and the
    interpreter's start (a second or more, importing LlamaIndex) is paid once."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.chdir(ROOT)
        runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def serve() -> Iterator[str]:
    """``streamstop serve``, as the examples' Start line says, on a free port: its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streamstop", "serve", "--port", "0", "--delay", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        urls = [word for word in banner.split() if word.startswith("http://")]
        assert urls, banner + (process.stderr.read() if process.stderr else "")
        yield urls[0]
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


def run_offline(name: str, serve_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    return run(name, {}, capsys)


def run_against_serve(name: str, serve_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    return run(name, {"OPENAI_BASE_URL": serve_url, "OPENAI_API_KEY": "unused"}, capsys)


def run_the_server(name: str, serve_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Start the example (a server) on a free port, as uvicorn reports it; ask it once."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / name)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PORT": "0"},
    )
    try:
        assert process.stderr is not None
        url = ""
        for line in process.stderr:
            found = re.search(r"running on (http://[\d.]+:\d+)", line)
            if found:
                url = found[1]
                break
        assert url, "the example did not say where it listens"
        request = {
            "model": "toy",
            "stop": ["</s>", "Glad", "###", "Observation:", "<|im_end|>"],
            "messages": [{"role": "user", "content": "hi"}],
        }
        response = httpx.post(f"{url}/v1/chat/completions", json=request, timeout=30)
        return str(response.json()["choices"][0]["message"]["content"])
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


# Each example, how it runs, and a part of what it prints that shows it did its job.
def run_in_the_litellm_suite(name: str, url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The gateway example needs LiteLLM's proxy, which only LiteLLM's own venv has (its pins
    would rule the other extras): tests/litellm/test_example.py runs it there, in CI too."""
    pytest.skip(f"{name} runs in tests/litellm/test_example.py, in LiteLLM's venv (.ci/run)")


RUNNERS = {
    "async_stream.py": (run_offline, "stop: '<|im_end|>'"),
    "sync_stream.py": (run_offline, "stop: '\\n\\nUser:'"),
    "ragstitch_citations.py": (run_offline, "stitched     297/300 tokens"),
    "langchain_stitch.py": (run_offline, "stitched:           727 tokens (budget 740)"),
    "llamaindex_stitch.py": (run_offline, "stitched:           565 tokens (budget 600)"),
    "openai_stream_filter.py": (run_against_serve, "stopped at: '\\n\\nUser:'"),
    "langchain_stop_chat.py": (
        run_against_serve,
        "The answer is 42.\n'The answer is 42.' \n\nUser:",
    ),
    "starlette_middleware.py": (run_the_server, "You said: 'hi'. "),
    "litellm_gateway.py": (run_in_the_litellm_suite, ""),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_runs_as_its_docstring_says(
    name: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = docstring_of(name)
    runner, shown = RUNNERS[name]
    if runner is run_in_the_litellm_suite:
        runner(name, "", capsys)
    # The Start line and the way the test runs it agree.
    assert (runner is run_against_serve) == doc.start.startswith("streamstop serve"), doc.start
    assert (runner is run_the_server) == doc.start.startswith("nothing: this is the server")
    url = request.getfixturevalue("serve") if runner is run_against_serve else ""
    output = runner(name, url, capsys)
    assert shown in output, output
