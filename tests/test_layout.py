"""The layout shown in the handbook (docs/development.md) names every module of the two
packages, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layout_block() -> str:
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = page.split("## Layout\n", 1)[1]
    return section.split("```\n", 2)[1]


def test_the_handbook_layout_names_every_module() -> None:
    named: set[str] = set()
    package = ""
    for line in layout_block().splitlines():
        if not line.startswith(" "):
            package = line.split("/", 1)[0]
            continue
        # The names, then two spaces or more, then what they are.
        names = line.strip().split("  ")[0]
        for name in re.findall(r"[\w.]+\.py", names):
            named.add(f"{package}/{name}")
    modules = {
        str(path.relative_to(ROOT))
        for package in ("streamstop", "ragstitch")
        for path in (ROOT / package).glob("*.py")
    }
    assert named == modules
    assert (ROOT / "streamstop" / "server").is_dir()
