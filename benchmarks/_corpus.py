"""The benchmark corpus: text no one here wrote, gathered at run time from files on the machine.

Nothing of megabytes is committed: the corpus is read from the Python installation that runs the
benchmark, deterministically (sorted paths, a fixed seed), and its SHA-256 is recorded with the
results, so two runs on the same installation read the same text. Five kinds of document:

- ``prose``: the Python reference documentation (``pydoc_data.topics``, English prose in reST)
  and the stdlib's module docstrings.
- ``dialogue``: the first five chapters of Jane Austen's *Pride and Prejudice* (1813, public
  domain), committed beside this file as ``_corpus.txt`` (30,000 characters): the one source of
  prose with dialogue, since nothing installed ships a novel.
- ``code``: stdlib ``.py`` files (not ``test/``, not ``site-packages``).
- ``markdown``: the long descriptions (README files, markdown or reST) in the ``METADATA`` of
  every installed distribution but streamstop itself.
- ``non_english``: Vim's tutor in its translations (``/usr/share/vim/vim*/tutor/tutor.*.utf-8``,
  where Vim is installed: some 30 languages, Bulgarian, Chinese, Greek, Japanese, Korean,
  Russian, Vietnamese and most European ones), the stdlib's test data in other scripts
  (``test/cjkencodings/*-utf8.txt``) and every line of ``test/*.py`` with a few non-ASCII
  characters.

Each source is cut at line boundaries into documents of :data:`DOC_CHARS` characters or so (a
completion each), and documents are split, per kind, into two disjoint sets: the *measured*
text (:data:`MEASURED_CHARS` in all, in :data:`MEASURED_SHARE` proportions) and the *traffic*
(every other document, shuffled): what a long-running server streamed before. The fallback, for
a Python without its sources or docs, is the committed Austen text alone; :class:`Corpus` says
which sources were found.
"""

from __future__ import annotations

import hashlib
import random
import re
import sysconfig
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

__all__ = [
    "DOC_CHARS",
    "KINDS",
    "MEASURED_CHARS",
    "MEASURED_SHARE",
    "Corpus",
    "Document",
    "austen_text",
    "build_corpus",
]

AUSTEN_PATH = Path(__file__).with_name("_corpus.txt")
SEED = 20_240_601
DOC_CHARS = 4_000
MEASURED_CHARS = 1_050_000
# Most LLM output is prose and code; the rest markdown, chat and other languages.
MEASURED_SHARE = {
    "prose": 0.32,
    "code": 0.34,
    "markdown": 0.20,
    "non_english": 0.09,
    "dialogue": 0.05,
}
KINDS = tuple(MEASURED_SHARE)
_TRAFFIC_CODE_DOCS = 2_500  # code documents in the traffic: a few million tokens in all
_OURS = ("streamstop",)
_LETTER_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@dataclass(frozen=True)
class Document:
    kind: str
    source: str  # where it came from, relative to its root
    text: str


@dataclass(frozen=True)
class Corpus:
    measured: tuple[Document, ...]
    traffic: tuple[Document, ...]
    sources: tuple[str, ...]  # which sources were found, for the report
    fallback: bool  # True: only the committed Austen text was found

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for doc in (*self.measured, *self.traffic):
            digest.update(doc.kind.encode())
            digest.update(doc.text.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()[:16]

    def chars(self, kind: str | None = None, *, traffic: bool = False) -> int:
        docs = self.traffic if traffic else self.measured
        return sum(len(d.text) for d in docs if kind is None or d.kind == kind)


@cache
def austen_text() -> str:
    """The committed Austen chapters, hard wraps undone: one line per paragraph."""
    raw = AUSTEN_PATH.read_text(encoding="utf-8")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw) if p.strip()]
    return "\n\n".join(paragraphs) + "\n"


def _cut(kind: str, source: str, text: str) -> list[Document]:
    """Cut ``text`` at line ends into documents of about :data:`DOC_CHARS` characters."""
    docs = []
    lines = text.splitlines(keepends=True)
    part: list[str] = []
    size = 0
    for line in lines:
        part.append(line)
        size += len(line)
        if size >= DOC_CHARS:
            docs.append(Document(kind, source, "".join(part)))
            part, size = [], 0
    if size >= DOC_CHARS // 8:
        docs.append(Document(kind, source, "".join(part)))
    return docs


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _stdlib() -> Path | None:
    root = Path(sysconfig.get_paths()["stdlib"])
    return root if (root / "os.py").is_file() else None


def _docstring(text: str) -> str | None:
    found = re.match(r'\s*(?:#[^\n]*\n\s*)*[rRuU]?("""|\'\'\')(.*?)\1', text, re.DOTALL)
    return found.group(2).strip() + "\n" if found and len(found.group(2)) > 200 else None


def _gather() -> tuple[dict[str, list[Document]], list[str]]:
    docs: dict[str, list[Document]] = {kind: [] for kind in KINDS}
    sources = []
    docs["dialogue"] = _cut("dialogue", "_corpus.txt", austen_text())
    sources.append("Pride and Prejudice ch. 1-5 (committed)")
    stdlib = _stdlib()
    if stdlib is not None:
        files = sorted(
            p
            for p in stdlib.rglob("*.py")
            if "site-packages" not in p.parts and "test" not in p.parts and "tests" not in p.parts
        )
        docstrings = []
        for path in files:
            text = _read(path)
            if text is None:
                continue
            name = str(path.relative_to(stdlib))
            docs["code"] += _cut("code", name, text)
            doc = _docstring(text)
            if doc is not None:
                docstrings.append(doc)
        sources.append(f"{len(files):,} stdlib .py files and their module docstrings")
        docs["prose"] += _cut("prose", "module docstrings", "\n".join(docstrings))
        foreign = []
        for path in sorted((stdlib / "test" / "cjkencodings").glob("*-utf8.txt")):
            text = _read(path)
            if text is not None:
                foreign.append(text)
        for path in sorted((stdlib / "test").glob("*.py")):
            text = _read(path)
            if text is not None:
                foreign += [
                    line.strip() + "\n"
                    for line in text.splitlines()
                    if len(_LETTER_NON_ASCII.findall(line)) >= 4
                ]
        docs["non_english"] += _cut("non_english", "stdlib test data", "".join(foreign))
        sources.append("stdlib test/cjkencodings and non-ASCII lines of test/*.py")
    tutors = sorted(Path("/usr/share/vim").glob("vim*/tutor/tutor.*.utf-8"))
    for path in tutors:
        text = _read(path)
        if text is not None:
            docs["non_english"] += _cut("non_english", path.name, text)
    if tutors:
        sources.append(f"Vim's tutor in {len(tutors)} translations")
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - a Python without its docs
        pass
    else:
        reference = "\n\n".join(topics[key] for key in sorted(topics))
        docs["prose"] += _cut("prose", "pydoc_data.topics", reference)
        sources.append("the Python reference (pydoc_data.topics)")
    readmes = []
    for dist in sorted(metadata.distributions(), key=lambda d: str(d.metadata["Name"]).lower()):
        if str(dist.metadata["Name"]).lower() in _OURS:
            continue  # text someone here wrote
        body = dist.metadata.get_payload()  # type: ignore[attr-defined]
        if isinstance(body, str) and len(body) > 500:
            readmes.append(body)
    if readmes:
        docs["markdown"] += _cut("markdown", "METADATA", "\n".join(readmes))
        sources.append(f"{len(readmes)} installed distributions' README (METADATA)")
    return docs, sources


@cache
def build_corpus() -> Corpus:
    """The measured text and the traffic, the same on every run on this installation."""
    docs, sources = _gather()
    # Some files repeat others (the stdlib's codec tables): a repeated document would be text
    # the server has seen, so only the first of each is kept.
    unique: set[str] = set()
    for kind in KINDS:
        kept = []
        for doc in docs[kind]:
            if doc.text not in unique:
                unique.add(doc.text)
                kept.append(doc)
        docs[kind] = kept
    rng = random.Random(SEED)
    measured: list[Document] = []
    traffic: list[Document] = []
    fallback = not docs["code"]
    for kind in KINDS:
        pool = docs[kind]
        rng.shuffle(pool)
        if kind == "dialogue" or fallback:
            # The one source of dialogue is small: all of it is measured, none is traffic.
            measured += pool
            continue
        quota = int(MEASURED_CHARS * MEASURED_SHARE[kind])
        taken = 0
        for index, doc in enumerate(pool):
            if taken >= quota:
                rest = pool[index:]
                traffic += rest[:_TRAFFIC_CODE_DOCS] if kind == "code" else rest
                break
            measured.append(doc)
            taken += len(doc.text)
    rng.shuffle(measured)
    rng.shuffle(traffic)
    return Corpus(tuple(measured), tuple(traffic), tuple(sources), fallback)
