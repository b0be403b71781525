"""Assemble a RAG context from overlapping chunks, within a budget, and cite the sources.

Two public-domain texts are cut by a sliding-window chunker (64 tokens, 24 shared with the
previous chunk), a toy lexical retriever picks the chunks that match a question, and ragstitch
assembles them in document order: neighbours share 24 tokens, which are pasted and paid for
once. The records say where each chunk landed (its characters in the context), so a passage of
the context can be traced back to its sources.

Install, from a clone:   pip install -e .
Install, once published: pip install streamstop
Start:                   nothing (offline: the default WordTokenizer)
Run:                     python examples/ragstitch_citations.py
"""

from __future__ import annotations

import re
import textwrap

from ragstitch import StitchResult, TextChunk, WordTokenizer, stitch_result

DOCUMENTS = {
    "gettysburg": (
        "Abraham Lincoln, the Gettysburg Address (1863)",
        "Four score and seven years ago our fathers brought forth on this continent, a new "
        "nation, conceived in Liberty, and dedicated to the proposition that all men are created "
        "equal.\n\nNow we are engaged in a great civil war, testing whether that nation, or any "
        "nation so conceived and so dedicated, can long endure. We are met on a great "
        "battle-field of that war. We have come to dedicate a portion of that field, as a final "
        "resting place for those who here gave their lives that that nation might live. It is "
        "altogether fitting and proper that we should do this.\n\nBut, in a larger sense, we "
        "can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The "
        "brave men, living and dead, who struggled here, have consecrated it, far above our poor "
        "power to add or detract. The world will little note, nor long remember what we say "
        "here, but it can never forget what they did here. It is for us the living, rather, to "
        "be dedicated here to the unfinished work which they who fought here have thus far so "
        "nobly advanced. It is rather for us to be here dedicated to the great task remaining "
        "before us -- that from these honored dead we take increased devotion to that cause for "
        "which they gave the last full measure of devotion -- that we here highly resolve that "
        "these dead shall not have died in vain -- that this nation, under God, shall have a new "
        "birth of freedom -- and that government of the people, by the people, for the people, "
        "shall not perish from the earth.",
    ),
    "declaration": (
        "The Declaration of Independence (1776)",
        "We hold these truths to be self-evident, that all men are created equal, that they are "
        "endowed by their Creator with certain unalienable Rights, that among these are Life, "
        "Liberty and the pursuit of Happiness. That to secure these rights, Governments are "
        "instituted among Men, deriving their just powers from the consent of the governed.",
    ),
}

QUESTION = "Which proposition holds that all men are created equal, and what shall not perish?"
TOKENIZER = WordTokenizer()
CHUNK_SIZE, CHUNK_OVERLAP = 64, 24  # tokens: words, runs of spaces, punctuation
TOP_K, BUDGET, SEPARATOR = 4, 300, "\n\n[...]\n\n"
STOPWORDS = {"a", "all", "and", "are", "from", "in", "is", "it", "not", "of", "that", "the", "to"}


def sliding_window(doc: str, title: str, text: str) -> list[TextChunk]:
    """Cut `text` into windows of CHUNK_SIZE tokens, each sharing CHUNK_OVERLAP with the last."""
    tokens = TOKENIZER.encode(text)
    step = CHUNK_SIZE - CHUNK_OVERLAP
    chunks = []
    for n, start in enumerate(range(0, max(len(tokens) - CHUNK_OVERLAP, 1), step)):
        offset = len("".join(tokens[:start]))
        piece = "".join(tokens[start : start + CHUNK_SIZE])
        meta = {"title": title}
        chunks.append(TextChunk(piece, id=f"{doc}#{n}", metadata=meta, source=doc, start=offset))
    return chunks


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower())) - STOPWORDS


def retrieve(chunks: list[TextChunk], question: str) -> list[TextChunk]:
    """A toy retriever: the TOP_K chunks sharing the most words with the question, each with the
    chunk after it (as neighbour post-processors do), in reading order."""
    wanted = words(question)
    hits = sorted(range(len(chunks)), key=lambda i: -len(wanted & words(chunks[i].text)))[:TOP_K]
    picked = set(hits)
    for i in hits:
        after = i + 1
        if after < len(chunks) and chunks[after].metadata["title"] == chunks[i].metadata["title"]:
            picked.add(after)
    return [chunks[i] for i in sorted(picked)]


def cite(result: StitchResult[str], passage: str) -> list[str]:
    """The sources of each occurrence of `passage` in the context, from the records' spans."""
    assert result.text is not None
    found = []
    for match in re.finditer(re.escape(passage), result.text):
        cited = result.cite(match.start(), match.end())  # characters of the text
        found.append(" + ".join(f"[{r.index + 1}]" for r in cited))
    return found


def main() -> None:
    chunks = [
        c for doc, (title, text) in DOCUMENTS.items() for c in sliding_window(doc, title, text)
    ]
    retrieved = retrieve(chunks, QUESTION)
    result: StitchResult[str] = stitch_result(
        retrieved, BUDGET, tokenizer=TOKENIZER, separator=SEPARATOR, order="document"
    )
    # The same chunks pasted as they are: an overlap longer than any chunk is never merged.
    longest = max(len(c.text) for c in retrieved)
    pasted: StitchResult[str] = stitch_result(
        retrieved, BUDGET, tokenizer=TOKENIZER, separator=SEPARATOR, min_overlap_chars=longest + 1
    )

    print(f"Question: {QUESTION}")
    print(f"Retrieved {len(retrieved)} of {len(chunks)} chunks", end=" ")
    print(f"({CHUNK_SIZE} tokens, {CHUNK_OVERLAP} shared with the previous one).")
    for name, outcome in (("pasted as is", pasted), ("stitched", result)):
        dropped = ", ".join(str(r.id) for r in outcome.skipped) or "nothing"
        print(f"  {name:<12} {outcome.used:>3}/{BUDGET} tokens, {outcome.saved:>2} saved, ", end="")
        print(f"dropped {dropped}")
    assert result.text is not None
    wrapped = "\n".join(textwrap.fill(line, 88) for line in result.text.split("\n"))
    print("\nContext (wrapped for display):\n" + "-" * 72 + f"\n{wrapped}\n" + "-" * 72)
    print("\nSources:")
    for r in result.records:
        where = f"chars {r.chars[0]}-{r.chars[1]}" if r.chars else f"skipped (cost {r.cost})"
        assert r.start is not None
        title, end = r.metadata["title"], r.start + len(retrieved[r.index].text)
        print(f"  [{r.index + 1}] {r.id!s:<14} overlap {r.overlap:>2}  {where:<15}", end=" ")
        print(f"{title}, chars {r.start}-{end}")
    print()
    for passage in ("all men are created equal", "conceived in Liberty", "shall not perish"):
        print(f"{passage!r:<28} <- {', '.join(cite(result, passage))}")


if __name__ == "__main__":
    main()
