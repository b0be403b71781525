"""The `ragstitch` command: JSON lines of chunks in, the assembled context and a report out.

Input: one JSON object per line, {"id": ..., "text": "..."} or {"id": ..., "tokens": [...]},
optionally with "metadata": {...}, and for text "source" and "start" (the document id and the
character offset of the chunk there; LangChain's and Haystack's metadata names are read too);
blank lines are ignored. When any chunk has "text", the context is text, stitched on its text
and charged in the tokens of --tokenizer (default `WordTokenizer`; "tokens" are then that
tokenizer's and are decoded), non-overlapping chunks are joined by --separator, and the text
is printed. Otherwise the tokens are printed as one JSON array. The report goes to stderr, so
stdout holds only the context; with --json, stdout holds one JSON object with the context and
every record.
Exit status: 0 on success, 1 for bad input, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from streamstop._version import __version__

from ._chunk import Chunk, TextChunk
from ._errors import describe
from ._result import ChunkRecord, StitchResult
from ._stitcher import Stitcher
from ._text import DEFAULT_MIN_OVERLAP_CHARS
from ._tokenizer import Tokenizer, WordTokenizer, load_tokenizer

__all__ = ["main"]

_PROG = "ragstitch"


class _InputError(Exception):
    """Bad input, reported as `ragstitch: error: <where>: <what>` with exit status 1."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=(
            "Assemble retrieved chunks into a context within a token budget, merging the tokens "
            "that neighbouring chunks share instead of pasting (and paying for) them twice."
        ),
        epilog=(
            'Input lines: {"id": ..., "text": "..."} or {"id": ..., "tokens": [...]}, '
            'optionally "metadata": {...}, and for text "source" and "start" (its document and '
            "character offset there, for --order document)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "file", nargs="?", default="-", help="JSON lines of chunks (default: stdin, also '-')"
    )
    parser.add_argument("--budget", type=int, required=True, help="token budget (int >= 0)")
    parser.add_argument(
        "--on-overflow",
        choices=("skip", "stop"),
        default="skip",
        help="when a chunk does not fit: skip it and try the next (default), or stop",
    )
    parser.add_argument(
        "--min-overlap",
        type=int,
        default=1,
        help="token chunks: shorter overlaps, in tokens, are not merged (default 1)",
    )
    parser.add_argument(
        "--min-overlap-chars",
        type=int,
        default=DEFAULT_MIN_OVERLAP_CHARS,
        help=(
            "text chunks: shorter overlaps, in characters, are not merged "
            f"(default {DEFAULT_MIN_OVERLAP_CHARS})"
        ),
    )
    parser.add_argument(
        "--tokenizer",
        default="word",
        help=(
            "what the budget counts for text: 'word' (built in, the default), an OpenAI "
            "encoding such as o200k_base or cl100k_base (needs bpe-openai or tiktoken), or a "
            "path to a Hugging Face tokenizer.json (needs tokenizers)"
        ),
    )
    parser.add_argument(
        "--order",
        choices=("retrieval", "document"),
        default="retrieval",
        help=(
            "text: append chunks in the order given (default), or lay them out in document "
            "order by their source and start"
        ),
    )
    parser.add_argument(
        "--separator",
        default=None,
        help="text put between chunks that do not overlap (text input only; default a blank line)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object with the context and records"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.budget < 0:
        parser.error(f"argument --budget: must be >= 0, got {args.budget}")
    if args.min_overlap < 1:
        parser.error(f"argument --min-overlap: must be >= 1, got {args.min_overlap}")
    if args.min_overlap_chars < 1:
        parser.error(f"argument --min-overlap-chars: must be >= 1, got {args.min_overlap_chars}")
    try:
        tokenizer: Tokenizer = load_tokenizer(args.tokenizer)
    except ValueError as error:
        parser.error(f"argument --tokenizer: {error}")
    try:
        if args.file == "-":
            chunks = _read(sys.stdin, "<stdin>")
        else:
            try:
                with open(args.file, encoding="utf-8") as stream:
                    chunks = _read(stream, args.file)
            except OSError as error:
                raise _InputError(f"{args.file}: {error.strerror or error}") from None
        text_mode = any(isinstance(chunk, TextChunk) for chunk, _ in chunks)
        if text_mode:
            if isinstance(tokenizer, WordTokenizer):
                _check_text_tokens(chunks)
            # Token chunks among text ones are the tokenizer's: decoded, they are stitched as
            # text, in the order given (the stitcher would do the same after a text chunk).
            chunks = [
                (
                    chunk
                    if isinstance(chunk, TextChunk)
                    else TextChunk(
                        tokenizer.decode(list(chunk.tokens)), id=chunk.id, metadata=chunk.metadata
                    ),
                    number,
                )
                for chunk, number in chunks
            ]
        elif args.separator is not None:
            raise _InputError("--separator applies to text chunks, and the input has none")
        elif args.order == "document":
            raise _InputError("--order document applies to text chunks, and the input has none")
        stitcher: Stitcher[Any] = Stitcher(
            args.budget,
            on_overflow=args.on_overflow,
            min_overlap=args.min_overlap,
            separator=("\n\n" if args.separator is None else args.separator) if text_mode else None,
            tokenizer=tokenizer if text_mode else None,
            min_overlap_chars=args.min_overlap_chars,
            order=args.order,
        )
        stitcher.extend(chunk for chunk, _ in chunks)
    except _InputError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 1
    result = stitcher.result()
    unread = len(chunks) - len(result.records)
    if args.json:
        json.dump(_as_json(result, unread, text_mode), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        if result.text is not None:
            sys.stdout.write(result.text + "\n")
        else:
            sys.stdout.write(json.dumps(list(result.tokens), ensure_ascii=False) + "\n")
        sys.stderr.write(_report(result, unread))
    return 0


def _read(stream: TextIO, name: str) -> list[tuple[Chunk[Any] | TextChunk, int]]:
    """Parse the JSON lines of `stream` into chunks, each with its line number."""
    chunks: list[tuple[Chunk[Any] | TextChunk, int]] = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise _InputError(f"{where}: invalid JSON: {error.msg}") from None
        if not isinstance(item, dict):
            raise _InputError(f"{where}: expected a JSON object, got {describe(item)}")
        unknown = sorted(set(item) - {"id", "text", "tokens", "metadata", "source", "start"})
        if unknown:
            raise _InputError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                "expected id, text or tokens, metadata, source, start"
            )
        source = item.get("source")
        start = item.get("start")
        if isinstance(source, (dict, list)):
            raise _InputError(
                f"{where}: source must be a string or a number, got {describe(source)}"
            )
        if start is not None and (type(start) is not int or start < 0):
            raise _InputError(f"{where}: start must be an integer >= 0, got {describe(start)}")
        metadata = item.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise _InputError(f"{where}: metadata must be an object, got {describe(metadata)}")
        if "tokens" in item:
            tokens = item["tokens"]
            if not isinstance(tokens, list):
                raise _InputError(f"{where}: tokens must be an array, got {describe(tokens)}")
            chunks.append((Chunk(tokens, id=item.get("id"), metadata=metadata), number))
        elif "text" in item:
            text = item["text"]
            if not isinstance(text, str):
                raise _InputError(f"{where}: text must be a string, got {describe(text)}")
            chunk = TextChunk(
                text, id=item.get("id"), metadata=metadata, source=source, start=start
            )
            chunks.append((chunk, number))
        else:
            raise _InputError(f'{where}: a chunk needs "text" or "tokens"')
    return chunks


def _check_text_tokens(chunks: list[tuple[Chunk[Any] | TextChunk, int]]) -> None:
    for chunk, number in chunks:
        if isinstance(chunk, Chunk):
            bad = next((t for t in chunk.tokens if not isinstance(t, str)), None)
            if bad is not None:
                raise _InputError(
                    f"line {number}: token {describe(bad)} is not a string; with text chunks in "
                    "the input, tokens must be WordTokenizer tokens (strings)"
                )


def _label(record: ChunkRecord) -> str:
    return f"#{record.index}" if record.id is None else str(record.id)


def _report(result: StitchResult[Any], unread: int) -> str:
    taken = result.taken
    skipped = result.skipped
    lines = [
        f"{_PROG}: {len(result.records) + unread} chunks, {len(taken)} taken, "
        f"{len(skipped)} skipped; {result.used}/{result.budget} tokens used, "
        f"{result.saved} saved by overlap"
    ]
    if taken:
        parts = [_label(r) + (f" (overlap {r.overlap})" if r.overlap else "") for r in taken]
        lines.append("  taken:   " + ", ".join(parts))
    if skipped:
        left = _remaining_before(result)
        parts = [f"{_label(r)} (cost {r.cost} > {left[r.index]} left)" for r in skipped]
        lines.append("  skipped: " + ", ".join(parts))
    if unread:
        why = "assembly stopped" if result.stopped else "budget full"
        lines.append(f"  unread:  {unread} ({why})")
    return "\n".join(lines) + "\n"


def _remaining_before(result: StitchResult[Any]) -> dict[int, int]:
    """The budget left when each chunk was offered."""
    left: dict[int, int] = {}
    remaining = result.budget
    for record in result.records:
        left[record.index] = remaining
        if record.taken:
            remaining -= record.cost
    return left


def _as_json(result: StitchResult[Any], unread: int, text_mode: bool) -> dict[str, Any]:
    records = []
    for record in result.records:
        entry: dict[str, Any] = {
            "index": record.index,
            "id": record.id,
            "taken": record.taken,
            "length": record.length,
            "overlap": record.overlap,
            "separator": record.separator,
            "cost": record.cost,
            "span": None if record.span is None else list(record.span),
        }
        if text_mode:
            chars = record.chars
            entry["chars"] = None if chars is None else list(chars)
            entry["overlap_chars"] = record.overlap_chars
            entry["source"] = record.source
            entry["start"] = record.start
        entry["metadata"] = dict(record.metadata)
        records.append(entry)
    out: dict[str, Any] = {"text": result.text} if text_mode else {"tokens": list(result.tokens)}
    out.update(
        budget=result.budget,
        used=result.used,
        charged=result.charged,
        remaining=result.remaining,
        saved=result.saved,
        stopped=result.stopped,
        chunks=len(result.records) + unread,
        taken=len(result.taken),
        skipped=len(result.skipped),
        unread=unread,
        records=records,
    )
    return out
