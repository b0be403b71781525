"""The LangChain compressor and the LlamaIndex postprocessor, against the real libraries and
their real splitters, offline."""

from __future__ import annotations

import random
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from langchain_text_splitters import RecursiveCharacterTextSplitter
from llama_index.core import Document as LlamaDocument
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from ragstitch._tokenizer import encode_text, load_tokenizer
from ragstitch.langchain import SOURCES_KEY, StitchCompressor
from ragstitch.llamaindex import StitchPostprocessor

ROOT = Path(__file__).resolve().parents[2]
NOVEL = (ROOT / "benchmarks" / "_corpus.txt").read_text(encoding="utf-8")[:12_000]
O200K: Any = load_tokenizer("o200k_base")


def count(text: str) -> int:
    return len(encode_text(O200K, text))


def covered(document: str, spans: list[tuple[int, int]], separator: str = "\n\n") -> str:
    runs: list[list[int]] = []
    for start, end in sorted(spans):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return separator.join(document[a:b] for a, b in runs)


# -- LangChain ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lc_chunks() -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=600, chunk_overlap=150, add_start_index=True
    )
    return splitter.create_documents([NOVEL], metadatas=[{"source": "pride.txt"}])


def test_langchain_compressor_merges_in_document_order(lc_chunks: list[Document]) -> None:
    picked = [lc_chunks[i] for i in (6, 2, 3, 7, 5, 12)]  # retrieval order, neighbours among them
    compressor = StitchCompressor(budget=100_000, tokenizer=O200K)
    assert isinstance(compressor, BaseDocumentCompressor)
    merged = compressor.compress_documents(picked, "a query")
    spans = [
        (d.metadata["start_index"], d.metadata["start_index"] + len(d.page_content)) for d in picked
    ]
    text = "\n\n".join(d.page_content for d in merged)
    assert text == covered(NOVEL, spans)
    assert len(merged) == len(covered(NOVEL, spans, "\0").split("\0"))
    first = merged[0]
    assert first.metadata["source"] == "pride.txt"
    assert first.page_content == NOVEL[first.metadata["start_index"] :][: len(first.page_content)]
    sources = first.metadata[SOURCES_KEY]
    assert [s["index"] for s in sources][:2] == [1, 2]
    for source in sources:
        original = picked[source["index"]]
        a, b = source["chars"]
        assert first.page_content[a:b] == original.page_content
        assert source["start"] == original.metadata["start_index"]
        assert source["metadata"] == original.metadata


def test_langchain_compressor_keeps_the_budget(lc_chunks: list[Document]) -> None:
    rng = random.Random(7)
    picked = rng.sample(lc_chunks, 10)
    for budget in (0, 50, 300, 700, 1500):
        compressor = StitchCompressor(budget=budget, tokenizer=O200K)
        merged = compressor.compress_documents(picked, "q")
        assert count("\n\n".join(d.page_content for d in merged)) <= budget


def test_langchain_compressor_async_and_retrieval_order(lc_chunks: list[Document]) -> None:
    picked = [lc_chunks[3], lc_chunks[2]]
    compressor = StitchCompressor(budget=10_000, tokenizer=O200K, order="retrieval")
    merged = anyio.run(compressor.acompress_documents, picked, "q")
    # Retrieval order: the later chunk first, and it does not end where the earlier begins.
    assert [d.page_content for d in merged] == [picked[0].page_content, picked[1].page_content]


class _FixedRetriever(BaseRetriever):
    """A retriever that returns the same documents, best first, for every query."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


def test_langchain_compressor_inside_contextual_compression_retriever(
    lc_chunks: list[Document],
) -> None:
    picked = [lc_chunks[i] for i in (12, 11, 20)]  # 11 and 12 share 101 characters; 20 alone
    retriever = ContextualCompressionRetriever(
        base_compressor=StitchCompressor(budget=10_000, tokenizer=O200K),
        base_retriever=_FixedRetriever(documents=picked),
    )
    merged = retriever.invoke("what did Mrs Bennet say?")
    spans = [
        (d.metadata["start_index"], d.metadata["start_index"] + len(d.page_content)) for d in picked
    ]
    assert [d.page_content for d in merged] == covered(NOVEL, spans, "\0").split("\0")
    assert [s["index"] for s in merged[0].metadata[SOURCES_KEY]] == [1, 0]
    assert [s["index"] for s in merged[1].metadata[SOURCES_KEY]] == [2]


# -- LlamaIndex -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def li_nodes() -> list[Any]:
    document = LlamaDocument(text=NOVEL, metadata={"title": "Pride and Prejudice"})
    splitter = SentenceSplitter(chunk_size=160, chunk_overlap=40, tokenizer=O200K.encode)
    return list(splitter.get_nodes_from_documents([document]))


def test_llamaindex_postprocessor_merges_in_document_order(li_nodes: list[Any]) -> None:
    order = (5, 1, 2, 6, 4, 11)
    picked = [NodeWithScore(node=li_nodes[i], score=1.0 - n / 10) for n, i in enumerate(order)]
    postprocessor = StitchPostprocessor(budget=100_000, tokenizer=O200K)
    assert isinstance(postprocessor, BaseNodePostprocessor)
    merged = postprocessor.postprocess_nodes(picked, query_str="a query")
    spans = [
        (li_nodes[i].start_char_idx, li_nodes[i].start_char_idx + len(li_nodes[i].text))
        for i in order
    ]
    assert "\n\n".join(m.node.get_content() for m in merged) == covered(NOVEL, spans)
    assert len(merged) == len(covered(NOVEL, spans, "\0").split("\0"))
    first = merged[0]
    assert first.score == pytest.approx(0.9)  # the best of its nodes
    assert isinstance(first.node, TextNode)
    assert first.node.start_char_idx == li_nodes[1].start_char_idx
    assert first.node.metadata["title"] == "Pride and Prejudice"
    assert SOURCES_KEY not in first.node.get_content(metadata_mode=MetadataMode.LLM)
    sources = first.node.metadata[SOURCES_KEY]
    assert [s["id"] for s in sources][:2] == [li_nodes[1].node_id, li_nodes[2].node_id]
    assert {s["source"] for s in sources} == {li_nodes[1].ref_doc_id}
    assert first.node.source_node is not None
    assert first.node.source_node.node_id == li_nodes[1].ref_doc_id


def test_llamaindex_postprocessor_keeps_the_budget(li_nodes: list[Any]) -> None:
    rng = random.Random(3)
    picked = [NodeWithScore(node=n, score=0.5) for n in rng.sample(li_nodes, 12)]
    for budget in (0, 40, 200, 600):
        merged = StitchPostprocessor(budget=budget, tokenizer=O200K).postprocess_nodes(picked)
        assert count("\n\n".join(m.node.get_content() for m in merged)) <= budget


# -- the core stays free of them -----------------------------------------------------------


def test_importing_ragstitch_loads_no_integration_library() -> None:
    code = "import sys, ragstitch\nprint(sorted({m.split('.')[0] for m in sys.modules}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for name in ("langchain_core", "llama_index", "bpe_openai", "tiktoken", "tokenizers"):
        assert f"'{name}'" not in out.stdout
    assert "'ragstitch'" in out.stdout


@pytest.mark.parametrize("name", ["langchain_stitch.py", "llamaindex_stitch.py"])
def test_the_examples_run_offline_within_their_budget(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process: the libraries are imported already, a subprocess would import them again.
    runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    out = capsys.readouterr().out
    pasted = int(out.split("pasted as they are: ")[1].split()[0])
    stitched, budget = out.split("stitched:")[1].split("tokens (budget ")
    assert int(stitched) <= int(budget.split(")")[0]) < pasted
