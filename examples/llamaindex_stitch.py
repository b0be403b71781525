"""LlamaIndex: merge overlapping retrieved nodes with `StitchPostprocessor`, within a budget.

A novel is cut by LlamaIndex's SentenceSplitter (256 tokens, 64 shared); a toy retriever
returns nodes around a passage with scores, best first. `StitchPostprocessor` lays them out in
document order, pastes each shared passage once, and fits them in 600 o200k_base tokens
(`bpe-openai`, offline). In a query engine, pass it in `node_postprocessors=[...]`.

Install, from a clone:   pip install -e '.[llamaindex,tokenizers]'
Install, once published: pip install 'streamstop[llamaindex,tokenizers]'
Start:                   nothing (offline: o200k_base ships with bpe-openai)
Run:                     python examples/llamaindex_stitch.py
"""

from __future__ import annotations

from pathlib import Path

from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeWithScore

from ragstitch import count_tokens, load_tokenizer
from ragstitch.llamaindex import SOURCES_KEY, StitchPostprocessor

NOVEL = Path(__file__).resolve().parents[1] / "benchmarks" / "_corpus.txt"  # Pride and Prejudice
BUDGET = 600


def main() -> None:
    tokenizer = load_tokenizer("o200k_base")
    document = Document(
        text=NOVEL.read_text(encoding="utf-8"), metadata={"title": "Pride and Prejudice"}
    )
    nodes = SentenceSplitter(chunk_size=256, chunk_overlap=64).get_nodes_from_documents([document])
    retrieved = [
        NodeWithScore(node=nodes[i], score=s) for i, s in ((8, 0.9), (7, 0.8), (9, 0.7), (20, 0.6))
    ]

    pasted = "\n\n".join(n.node.get_content() for n in retrieved)
    merged = StitchPostprocessor(budget=BUDGET, tokenizer=tokenizer).postprocess_nodes(
        retrieved, query_str="What did Mrs. Bennet say?"
    )
    context = "\n\n".join(n.node.get_content() for n in merged)
    print(f"{len(retrieved)} nodes retrieved ({len(nodes)} in the novel)")
    print(f"  pasted as they are: {count_tokens(tokenizer, pasted)} tokens")
    print(f"  stitched:           {count_tokens(tokenizer, context)} tokens (budget {BUDGET})")
    for scored in merged:
        sources = scored.node.metadata[SOURCES_KEY]
        print(
            f"  score {scored.score:.1f}, {len(scored.node.get_content())} chars"
            f" <- {len(sources)} node(s) starting at {[s['start'] for s in sources]}"
        )


if __name__ == "__main__":
    main()
