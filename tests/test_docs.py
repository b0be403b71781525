"""Every page of the handbook (docs/**/*.md) and the README: its examples run.

- The ``>>>`` examples of each page are one doctest (ELLIPSIS on), run offline: a page's
  examples share their names, top to bottom, as a reader types them.
- Every ``python`` block compiles (top-level ``await`` allowed, as in a notebook), and its
  imports run: a snippet that is not a doctest still names modules and names that exist.
- Shell commands are in ``bash`` blocks; blocks of output are ``text``, ``json`` or none.

A page added to docs/ is tested here without more ado.
"""

from __future__ import annotations

import ast
import doctest
import importlib
from pathlib import Path

import pytest

from .handbook import ROOT, blocks, pages

PAGES = {str(path.relative_to(ROOT)): path for path in pages()}
LANGUAGES = {"python", "bash", "text", "json", "yaml", ""}  # yaml: a config to copy


@pytest.mark.parametrize("name", PAGES)
def test_the_doctests_of_the_page_pass(name: str) -> None:
    text = PAGES[name].read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, name, str(PAGES[name]), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, f"{runner.failures} of {len(test.examples)} examples failed"


def _code(block: str) -> str:
    """A block's Python: a doctest's sources, or the block as it is."""
    if ">>>" not in block:
        return block
    examples = doctest.DocTestParser().get_examples(block)
    return "".join(example.source for example in examples)


# Packages installed only in a venv of their own (.ci/run), whose pages' imports are checked by
# that venv's suite: tests/litellm/test_example.py calls check_python_blocks.
OWN_VENV = {"litellm"}


@pytest.mark.parametrize("name", PAGES)
def test_every_python_block_compiles_and_its_imports_run(name: str) -> None:
    try:
        check_python_blocks(name)
    except ModuleNotFoundError as error:
        if error.name not in OWN_VENV:
            raise
        pytest.skip(f"{name} imports {error.name}, checked in its own venv's suite")


def check_python_blocks(name: str) -> None:
    """Every python block of the page ``name`` compiles, and what it imports is there."""
    found = blocks(PAGES[name].read_text(encoding="utf-8"))
    assert {language for language, _ in found} <= LANGUAGES, name
    for language, block in found:
        if language != "python":
            continue
        code = _code(block)
        tree = compile(code, name, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or _submodule(module.__name__, alias.name), (
                        f"{name}: {node.module} has no {alias.name}"
                    )


def _submodule(package: str, name: str) -> bool:
    try:
        importlib.import_module(f"{package}.{name}")
    except ImportError:
        return False
    return True


def test_every_page_is_in_the_site() -> None:
    """Each page under docs/ is in mkdocs.yml's nav, or is one of the pages the merge adds."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.md")):
        page = str(path.relative_to(ROOT / "docs"))
        assert f": {page}\n" in nav, f"{page} is not in mkdocs.yml's nav"


def test_the_site_names_no_missing_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    generated = {"changelog.md"}  # added at build time by docs/hooks.py, from CHANGELOG.md
    for line in nav.splitlines():
        if line.strip().startswith("- ") and line.rstrip().endswith(".md"):
            page = line.rsplit(": ", 1)[1].strip()
            assert page in generated or Path(ROOT / "docs" / page).is_file(), page


def test_ci_runs_the_readmes_test_and_docs_commands() -> None:
    """.ci/run holds the README's commands as they are written, from their ``pip install``."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [
        line[line.index("pip install") :]
        for _, block in blocks(readme)
        for line in block.splitlines()
        if "python -m pytest" in line or "mkdocs build" in line
    ]
    assert len(commands) == 2
    for command in commands:
        assert command in ci, command
