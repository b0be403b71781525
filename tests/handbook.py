"""The handbook's pages (docs/) and the README, read by the tests that check what they say."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """Every page of the handbook (docs/**/*.md), then the README."""
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]


def handbook(*names: str) -> str:
    """The text of the handbook pages ``names`` (paths under docs/), one after the other."""
    return "\n".join((DOCS / name).read_text(encoding="utf-8") for name in names)


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of ``text``, as (language, code)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
