"""MkDocs hook: files of the repository that the handbook shows where they are, so that it keeps
no copy that could go stale: the benchmarks' plots from benchmarks/results/ (where the scripts
write them), and CHANGELOG.md as the changelog page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def on_files(files: Files, config: Any) -> Files:
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{plot.name}", abs_src_path=str(plot)))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    return files
