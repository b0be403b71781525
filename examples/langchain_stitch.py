"""LangChain: merge overlapping retrieved chunks with `StitchCompressor`, within a budget.

A novel is cut by LangChain's RecursiveCharacterTextSplitter (1000 characters, 200 shared,
`add_start_index=True`); a toy retriever returns the chunks around a passage, best first (not
in reading order). `StitchCompressor` lays them out in document order, pastes each shared
passage once, and fits them in 740 o200k_base tokens (`bpe-openai`, offline). In a chain, pass
it to `ContextualCompressionRetriever(base_compressor=..., base_retriever=...)`.

Install, from a clone:   pip install -e '.[langchain,tokenizers]' langchain-text-splitters
Install, once published: pip install 'streamstop[langchain,tokenizers]' langchain-text-splitters
Start:                   nothing (offline: o200k_base ships with bpe-openai)
Run:                     python examples/langchain_stitch.py
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from ragstitch import count_tokens, load_tokenizer
from ragstitch.langchain import SOURCES_KEY, StitchCompressor

NOVEL = Path(__file__).resolve().parents[1] / "benchmarks" / "_corpus.txt"  # Pride and Prejudice
BUDGET = 740


def main() -> None:
    tokenizer = load_tokenizer("o200k_base")
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=1000, chunk_overlap=200, add_start_index=True
    )
    text = NOVEL.read_text(encoding="utf-8")
    chunks = splitter.create_documents([text], metadatas=[{"source": NOVEL.name}])
    retrieved: list[Document] = [chunks[i] for i in (11, 10, 12, 30)]  # best first

    pasted = "\n\n".join(d.page_content for d in retrieved)
    merged = StitchCompressor(budget=BUDGET, tokenizer=tokenizer).compress_documents(
        retrieved, "What did Mrs. Bennet say?"
    )
    context = "\n\n".join(d.page_content for d in merged)
    print(f"{len(retrieved)} chunks retrieved ({len(chunks)} in the novel)")
    print(f"  pasted as they are: {count_tokens(tokenizer, pasted)} tokens")
    print(f"  stitched:           {count_tokens(tokenizer, context)} tokens (budget {BUDGET})")
    for document in merged:
        start = document.metadata["start_index"]
        held = [s["start"] for s in document.metadata[SOURCES_KEY]]
        print(
            f"  {document.metadata['source']} chars {start}-{start + len(document.page_content)}"
            f" <- chunks starting at {held}"
        )


if __name__ == "__main__":
    main()
