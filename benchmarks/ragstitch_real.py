"""ragstitch on real text, cut by real splitters, budgeted with a real tokenizer (o200k_base).

Text no one here wrote:

- python-reference: the Python Language Reference as the running CPython ships it for `help()`
  (`pydoc_data.topics`, about 465,000 characters: 79 topics joined by blank lines);
- novel: the opening chapters of Jane Austen's *Pride and Prejudice* (public domain,
  benchmarks/_corpus.txt, 29,506 characters), the dialogue-heavy one.

Splitters, each writing the chunk's start offset as its library does:

- lc-recursive: LangChain's RecursiveCharacterTextSplitter, 1000 characters, 200 shared
  (`add_start_index=True`);
- lc-token: LangChain's token splitter (`split_text_on_tokens`, what TokenTextSplitter runs),
  256 o200k_base tokens, 64 shared (TokenTextSplitter itself would fetch tiktoken's files);
- li-sentence: LlamaIndex's SentenceSplitter, 256 tokens, 64 shared (o200k_base), which sets
  `start_char_idx`.

Tokens are counted with o200k_base from `bpe-openai` (offline; the same vocabulary as tiktoken).

Measured:

1. Neighbour overlaps: for every pair of consecutive chunks that share text, whether the
   overlap is found (and its full length), stitching their text, and stitching the token ids of
   each chunk encoded on its own (what `stitch` did with text chunks before: a BPE tokenizer
   cuts a chunk's first word differently from the same word inside its neighbour).
2. Tokens: retrieval returns runs of neighbouring chunks, in a random (relevance) order: 8 runs
   of 3. Cost in o200k tokens of: plain concatenation with a blank line (what LangChain's stuff
   chain and LlamaIndex's default synthesizers put in the prompt), ragstitch on token ids,
   ragstitch on text in retrieval order and in document order; against the true cost, the text
   the chunks cover, laid out in document order (runs joined by a blank line).
3. Budget exactness: each retrieval set assembled within 20 budgets from 0 to its true cost;
   how often `len(encode(text)) > budget` (must be never), and the largest gap between what
   was charged and that count.
4. Time per chunk of `stitch_result` on text, with o200k_base, in both orders, next to the
   time to encode the chunks once (per set the best of 5 runs; the median over the sets).
5. Coincidences: the longest suffix-prefix overlap of every pair of chunks that are not
   neighbours (lc-recursive at 1000, 400 and 200 characters), and the forty-speeches case:
   whole speeches of the novel, each between double quotes, stitched as text with the default
   `min_overlap_chars` and, as before, as WordTokenizer token lists (where the closing and
   opening quotes are a one-token overlap).

Samples are drawn with fixed seeds. Timings come from a shared 2-core machine: compare the
columns of one run, not runs.

Run: python benchmarks/ragstitch_real.py [--quick] [--write | --out FILE]. Prints the tables;
`--write` saves them to benchmarks/results/ragstitch_real.md (`--out` to another file);
`--quick` runs a smaller sample and writes nothing unless told to.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter, TextSplitter
from langchain_text_splitters.base import Tokenizer as LCTokenizer
from langchain_text_splitters.base import split_text_on_tokens
from llama_index.core import Document as LlamaDocument
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import TextNode

from ragstitch import (
    Chunk,
    StitchResult,
    TextChunk,
    WordTokenizer,
    count_tokens,
    load_tokenizer,
    stitch_result,
)
from ragstitch._overlap import overlap_native
from ragstitch._text import DEFAULT_MIN_OVERLAP_CHARS

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "ragstitch_real.md"
TOKENIZER: Any = load_tokenizer("o200k_base")
SEP = "\n\n"


def count(text: str) -> int:
    return count_tokens(TOKENIZER, text)


# -- corpora and splitters --------------------------------------------------------------------


def corpora() -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pydoc_data.topics import topics
    reference = SEP.join(topics[key] for key in sorted(topics))
    novel = (HERE / "_corpus.txt").read_text(encoding="utf-8")
    return {"python-reference": reference, "novel": novel}


@dataclass(frozen=True)
class Piece:
    text: str
    start: int


class _TokenSplitter(TextSplitter):
    """LangChain's TokenTextSplitter, with o200k_base from bpe-openai instead of tiktoken's."""

    def __init__(self, size: int, shared: int) -> None:
        super().__init__(chunk_size=size, chunk_overlap=shared, add_start_index=True)
        self._tokenizer = LCTokenizer(
            chunk_overlap=shared,
            tokens_per_chunk=size,
            decode=TOKENIZER.decode,
            encode=TOKENIZER.encode,
        )

    def split_text(self, text: str) -> list[str]:
        return split_text_on_tokens(text=text, tokenizer=self._tokenizer)


def langchain_token_misses(text: str) -> tuple[int, int]:
    """How many chunks LangChain's own start_index loses (-1) with the token splitter."""
    documents = _TokenSplitter(256, 64).create_documents([text])
    return sum(d.metadata["start_index"] < 0 for d in documents), len(documents)


def _from_langchain(documents: list[Document]) -> list[Piece]:
    return [Piece(d.page_content, d.metadata["start_index"]) for d in documents]


def split(name: str, text: str) -> list[Piece]:
    if name == "lc-recursive":
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=1000, chunk_overlap=200, add_start_index=True
        )
        return _from_langchain(splitter.create_documents([text]))
    if name == "lc-token":
        # LangChain's add_start_index searches for a chunk from the previous start plus its
        # length minus chunk_overlap, which is in tokens here, not characters: it misses about
        # half of the chunks (start_index -1; see the note under the tables). The offsets are
        # found here the same way, from the previous chunk's start.
        pieces_tok = []
        at = 0
        for chunk in _TokenSplitter(256, 64).split_text(text):
            at = text.index(chunk, at)
            pieces_tok.append(Piece(chunk, at))
        return pieces_tok
    if name == "li-sentence":
        splitter_li = SentenceSplitter(chunk_size=256, chunk_overlap=64, tokenizer=TOKENIZER.encode)
        nodes = splitter_li.get_nodes_from_documents([LlamaDocument(text=text)])
        pieces = []
        for node in nodes:
            assert isinstance(node, TextNode)
            start = node.start_char_idx
            assert start is not None
            assert text[start:].startswith(node.get_content())
            pieces.append(Piece(node.get_content(), start))
        return pieces
    raise ValueError(name)


SPLITTERS = ["lc-recursive", "lc-token", "li-sentence"]


def text_chunks(pieces: Sequence[Piece], picks: Sequence[int]) -> list[TextChunk]:
    return [TextChunk(pieces[i].text, id=i, source="doc", start=pieces[i].start) for i in picks]


def covered(pieces: Sequence[Piece], picks: Sequence[int], document: str) -> str:
    """The true context: what the chunks cover, in document order, runs joined by SEP."""
    runs: list[list[int]] = []
    for start, end in sorted(
        (pieces[i].start, pieces[i].start + len(pieces[i].text)) for i in picks
    ):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return SEP.join(document[a:b] for a, b in runs)


# -- 1. neighbour overlaps ----------------------------------------------------------------------


def neighbours(pieces: Sequence[Piece]) -> dict[str, Any]:
    pairs = short = 0
    on_text = on_ids = 0
    for a, b in itertools.pairwise(pieces):
        shared = a.start + len(a.text) - b.start
        if shared <= 0:
            continue
        pairs += 1
        short += shared < DEFAULT_MIN_OVERLAP_CHARS
        pair = [TextChunk(a.text), TextChunk(b.text)]
        result: StitchResult[Any] = stitch_result(pair, 10**9, tokenizer=TOKENIZER, separator=SEP)
        on_text += result.records[1].overlap_chars == shared
        ids = [Chunk(TOKENIZER.encode(a.text)), Chunk(TOKENIZER.encode(b.text))]
        by_ids: StitchResult[Any] = stitch_result(ids, 10**9, tokenizer=TOKENIZER, separator=SEP)
        on_ids += by_ids.text == a.text + b.text[shared:]
    return {"pairs": pairs, "short": short, "text": on_text, "ids": on_ids}


# -- 2. tokens, 3. exactness, 4. time -------------------------------------------------------------


def retrieval_sets(n_pieces: int, runs: int, length: int, sets: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    found = []
    for _ in range(sets):
        starts = rng.sample(range(n_pieces - length), runs)
        picks = sorted({s + j for s in starts for j in range(length)})
        rng.shuffle(picks)
        found.append(picks)
    return found


def encode_each(chunks: Sequence[TextChunk]) -> None:
    for chunk in chunks:
        TOKENIZER.encode(chunk.text)


def best_of(runs: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        began = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - began)
    return best


def assembly(
    pieces: Sequence[Piece], document: str, sets: list[list[int]], budgets: int
) -> dict[str, Any]:
    totals = {"true": 0, "plain": 0, "ids": 0, "retrieval": 0, "document": 0}
    over = 0
    worst_gap = 0.0
    trials = 0
    times: dict[str, list[float]] = {"retrieval": [], "document": [], "encode": []}
    for picks in sets:
        chunks = text_chunks(pieces, picks)
        true = count(covered(pieces, picks, document))
        totals["true"] += true
        totals["plain"] += count(SEP.join(c.text for c in chunks))
        ids = [Chunk(TOKENIZER.encode(c.text)) for c in chunks]
        by_ids: StitchResult[Any] = stitch_result(ids, 10**9, tokenizer=TOKENIZER, separator=SEP)
        assert by_ids.text is not None
        totals["ids"] += count(by_ids.text)
        for order in ("retrieval", "document"):
            result: StitchResult[Any] = stitch_result(
                chunks, 10**9, tokenizer=TOKENIZER, separator=SEP, order=order
            )
            totals[order] += result.used
            if order == "document":
                assert result.text == covered(pieces, picks, document)
            work = functools.partial(
                stitch_result, chunks, 10**9, tokenizer=TOKENIZER, separator=SEP, order=order
            )
            times[order].append(best_of(5, work) / len(chunks))
            for step in range(budgets):
                budget = true * step // (budgets - 1)
                limited: StitchResult[Any] = stitch_result(
                    chunks, budget, tokenizer=TOKENIZER, separator=SEP, order=order
                )
                assert limited.text is not None
                used = count(limited.text)
                over += used > budget
                if used:
                    worst_gap = max(worst_gap, abs(limited.charged - used) / used)
                trials += 1
        times["encode"].append(best_of(5, functools.partial(encode_each, chunks)) / len(chunks))
    return {
        "totals": totals,
        "over": over,
        "trials": trials,
        "worst_gap": worst_gap,
        "per_chunk_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
    }


# -- 5. coincidences ----------------------------------------------------------------------------


def coincidences(text: str, size: int, shared: int) -> dict[str, Any]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=shared)
    chunks = splitter.split_text(text)
    thresholds = (1, 2, 4, 8, 16, 32)
    counts = dict.fromkeys(thresholds, 0)
    pairs = 0
    longest = 0
    whole = 0
    for i, left in enumerate(chunks):
        for j, right in enumerate(chunks):
            if abs(i - j) <= 1:
                continue
            pairs += 1
            k = overlap_native(left, right)
            if k and k in (len(left), len(right)):
                whole += 1  # the text repeats a whole chunk: merging it drops a true duplicate
                continue
            longest = max(longest, k)
            for t in thresholds:
                counts[t] += k >= t
    return {
        "chunks": len(chunks),
        "pairs": pairs,
        "whole": whole,
        "counts": counts,
        "longest": longest,
    }


def speeches(novel: str) -> list[str]:
    found = []
    for paragraph in novel.split(SEP):
        line = " ".join(paragraph.split())
        if line.startswith('"') and line.endswith('"') and line.count('"') == 2:
            found.append(line)
    return found[:40]


def dialogue(novel: str) -> dict[str, int]:
    lines = speeches(novel)
    text_result: StitchResult[Any] = stitch_result(lines, 10**9, tokenizer=TOKENIZER)
    word = WordTokenizer()
    as_tokens = [Chunk(word.encode(line)) for line in lines]
    old: StitchResult[Any] = stitch_result(as_tokens, 10**9, tokenizer=word, separator=SEP)
    return {
        "boundaries": len(lines) - 1,
        "text_merged": sum(r.overlap_chars > 0 for r in text_result.records),
        "tokens_merged": sum(r.overlap > 0 for r in old.records),
    }


# -- report ------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table; the first two columns are left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---" if i < 2 else "--:" for i in range(len(header))) + "|")
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def run(quick: bool) -> str:
    texts = corpora()
    if quick:
        texts["python-reference"] = texts["python-reference"][:120_000]
    sets_n, budgets = (2, 5) if quick else (6, 20)
    sizes = ", ".join(f"{name} ({len(text):,} characters)" for name, text in texts.items())
    out = [
        "# ragstitch on real text",
        "",
        f"Python {platform.python_version()} on {platform.machine()} ({sys.platform}); tokens "
        f"are o200k_base (bpe-openai); {'quick run' if quick else 'full run'}. Corpora: {sizes}.",
        "",
        "## Neighbour overlaps found",
        "",
        f"Consecutive chunks that share text; `short`: those sharing fewer than "
        f"{DEFAULT_MIN_OVERLAP_CHARS} characters (the default `min_overlap_chars`, below which "
        "retrieval order does not merge; document order merges them by their offsets).",
        "",
    ]
    rows = []
    pieces_of: dict[tuple[str, str], list[Piece]] = {}
    for corpus, text in texts.items():
        for splitter in SPLITTERS:
            pieces = split(splitter, text)
            pieces_of[corpus, splitter] = pieces
            f = neighbours(pieces)
            rows.append(
                [corpus, splitter, len(pieces), f["pairs"], f["short"], f["text"], f["ids"]]
            )
    out += table(
        ["corpus", "splitter", "chunks", "sharing", "short", "found on text", "found on ids"],
        rows,
    )
    out += [
        "",
        "## Tokens of the context",
        "",
        "Retrieval sets of 8 runs of 3 neighbouring chunks, in a random order; totals over the "
        "sets, as a multiple of the true cost (the text they cover, in document order, runs "
        "joined by a blank line). `plain`: the chunks joined by a blank line, as LangChain's "
        "stuff chain and LlamaIndex's synthesizers do by default; `ids`: ragstitch on each "
        "chunk's token ids; `retrieval`, `document`: ragstitch on text, in each order.",
        "",
    ]
    rows = []
    exact_rows = []
    for (corpus, splitter), pieces in pieces_of.items():
        seed = sum(map(ord, corpus + splitter))
        sets = retrieval_sets(len(pieces), 8, 3, sets_n, seed=seed)
        measured = assembly(pieces, texts[corpus], sets, budgets)
        t = measured["totals"]
        ratio = {k: f"{t[k] / t['true']:.3f}x" for k in t}
        rows.append(
            [corpus, splitter, f"{t['true']:,}"]
            + [ratio[k] for k in ("plain", "ids", "retrieval", "document")]
        )
        per = measured["per_chunk_us"]
        exact_rows.append(
            [corpus, splitter, measured["trials"], measured["over"]]
            + [f"{measured['worst_gap'] * 100:.2f}%"]
            + [f"{per[k]:.0f} µs" for k in ("encode", "retrieval", "document")]
        )
    out += table(["corpus", "splitter", "true", "plain", "ids", "retrieval", "document"], rows)
    out += [
        "",
        "## Budget exactness and time per chunk",
        "",
        f"Each set assembled within {budgets} budgets from 0 to its true cost, in both orders: "
        "how many texts cost more than their budget, and the largest gap between what was "
        "charged and the count of the text. Time per chunk (the median over the sets of the "
        "best of 5): encoding it once, and `stitch_result` in each order, final encoding of the "
        "context included.",
        "",
    ]
    out += table(
        ["corpus", "splitter", "assemblies", "over", "gap", "encode", "retrieval", "document"],
        exact_rows,
    )
    out += [
        "",
        "## Coincidences: chunks that are not neighbours",
        "",
        "Pairs of chunks (RecursiveCharacterTextSplitter) that are not neighbours, by the length "
        "of their longest suffix-prefix overlap in characters; `whole`: pairs where one chunk "
        "is all of that overlap (a repeated passage: merging drops a true duplicate), not "
        "counted in the other columns.",
        "",
    ]
    settings = [(400, 50), (200, 0)] if quick else [(1000, 200), (400, 50), (200, 0)]
    rows = []
    for corpus, text in texts.items():
        sample = text if corpus == "novel" else text[: 60_000 if quick else 150_000]
        name = corpus if sample is text else f"{corpus} (first {len(sample):,})"
        for size, shared in settings:
            found = coincidences(sample, size, shared)
            c = found["counts"]
            rows.append(
                [name, f"{size} / {shared}", found["chunks"], f"{found['pairs']:,}", found["whole"]]
                + [f"{c[t]:,}" for t in (1, 2, 4, 8, 16, 32)]
                + [found["longest"]]
            )
    out += table(
        ["corpus", "size / shared", "chunks", "pairs", "whole"]
        + [f">= {t}" for t in (1, 2, 4, 8, 16, 32)]
        + ["longest"],
        rows,
    )
    talk = dialogue(texts["novel"])
    misses = {corpus: langchain_token_misses(text) for corpus, text in texts.items()}
    out += [
        "",
        f"Forty speeches of the novel, each between double quotes, far apart: of "
        f"{talk['boundaries']} boundaries, {talk['text_merged']} merged as text "
        f"(min_overlap_chars={DEFAULT_MIN_OVERLAP_CHARS}), {talk['tokens_merged']} merged as "
        "WordTokenizer token lists with min_overlap=1 (the closing and opening quotes).",
        "",
        "Note: with the token splitter, LangChain's `add_start_index` writes -1 for "
        + ", ".join(f"{m} of {n} chunks of {c}" for c, (m, n) in misses.items())
        + " (it searches from the previous start plus the previous length minus "
        "`chunk_overlap`, which is in tokens there); ragstitch reads -1 as no offset. The "
        "lc-token rows use offsets found by searching from the previous chunk's start.",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smaller sample; writes nothing")
    parser.add_argument(
        "--write", action="store_true", help=f"write {DEFAULT_OUT.relative_to(HERE.parent)}"
    )
    parser.add_argument("--out", type=Path, help="write the tables to this file")
    args = parser.parse_args(argv)
    report = run(args.quick)
    print(report)
    target = args.out if args.out is not None else (DEFAULT_OUT if args.write else None)
    if target is not None:
        target.write_text(report, encoding="utf-8")
        print(f"\nwrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
