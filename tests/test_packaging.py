"""The distribution: one version, the metadata an index shows, and a wheel of the two packages.

The wheel is the one CI built (``STREAMSTOP_WHEEL``, set by .ci/run after ``python -m build``
and ``twine check``), else one built here in-process with hatchling, from the same pyproject.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import ragstitch
import streamstop

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
PACKAGES = ("streamstop", "ragstitch")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    given = os.environ.get("STREAMSTOP_WHEEL")
    if given:
        path = Path(given)
    else:
        from hatchling.builders.wheel import WheelBuilder

        out = tmp_path_factory.mktemp("dist")
        (built,) = WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
        path = Path(built)
    with zipfile.ZipFile(path) as archive:
        yield archive


def test_one_version() -> None:
    source = (ROOT / "streamstop" / "_version.py").read_text(encoding="utf-8")
    (written,) = re.findall(r'^__version__ = "([^"]+)"$', source, re.MULTILINE)
    assert streamstop.__version__ == ragstitch.__version__ == written
    assert 'dynamic = ["version"]' in PYPROJECT
    assert '[tool.hatch.version]\npath = "streamstop/_version.py"' in PYPROJECT
    assert f"## {written}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", PACKAGES)
def test_each_command_says_its_version(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", command, "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout == f"{command} {streamstop.__version__}\n"


def test_the_wheel_holds_the_two_packages_and_nothing_else(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    (info,) = {name.split("/")[0] for name in names if ".dist-info/" in name}
    assert info == f"streamstop-{streamstop.__version__}.dist-info"
    top = {name.split("/")[0] for name in names} - {info}
    assert top == set(PACKAGES)
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
        assert f"{package}/__init__.py" in names
        shipped = {name for name in names if name.startswith(f"{package}/")}
        on_disk = {
            str(path.relative_to(ROOT))
            for path in (ROOT / package).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
        assert shipped == on_disk
    assert f"{info}/licenses/LICENSE" in names
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "MIT"
    assert meta["Description-Content-Type"] == "text/markdown"


def _metadata(wheel: zipfile.ZipFile) -> Message:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode())


def test_the_metadata_an_index_shows(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert meta["Version"] == streamstop.__version__
    classifiers = set(meta.get_all("Classifier") or [])
    low = re.fullmatch(r">=3\.(\d+)", meta["Requires-Python"])
    assert low is not None
    versions = {f"Programming Language :: Python :: 3.{minor}" for minor in range(int(low[1]), 14)}
    assert versions <= classifiers
    assert f"Programming Language :: Python :: 3.{sys.version_info.minor}" in classifiers
    assert {"Framework :: AnyIO", "Typing :: Typed"} <= classifiers
    assert any(item.startswith("Topic :: ") for item in classifiers)
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    urls = dict(item.split(", ", 1) for item in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(urls)
    assert all(url.startswith(urls["Homepage"]) for url in urls.values())
    # The README is the index's page: no link in it may be relative.
    readme = meta.get_payload()
    assert isinstance(readme, str)
    assert readme.startswith("# streamstop")
    prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", readme, flags=re.DOTALL))
    links = re.findall(r"\]\(([^)\s]+)\)", prose) + re.findall(r"^\[[^]]+\]: (\S+)", prose, re.M)
    assert links
    assert [link for link in links if not link.startswith("https://")] == []
