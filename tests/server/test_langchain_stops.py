"""streamstop.langchain: stops for any runnable, against langchain-core's own fake chat models
and against ChatOpenAI talking to the echo model of ``streamstop serve`` on 127.0.0.1."""

from __future__ import annotations

import doctest
import importlib.util
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_openai import ChatOpenAI
from pydantic import Field, SecretStr

import streamstop.langchain
from streamstop.langchain import StopRunnable, with_stops

from ..public_api import public_definitions
from .conftest import LiveServer

STOPS = ["STOP", "</s>", "\n\nUser:", "<|im_end|>", "###", "Observation:"]


@pytest.fixture
def anyio_backend() -> str:
    """LangChain's async paths need asyncio (run_in_executor, asyncio tasks): not trio."""
    return "asyncio"


class CountingModel(GenericFakeChatModel):
    """Streams its message word by word, then ``more`` forever; counts what was pulled.

    ``closed_event`` is set when the stream is closed, in whatever thread closes it: on
    ``astream`` LangChain runs this sync ``_stream`` in a worker thread, and the generator is
    closed where its last reference goes, sometimes that worker's, a moment after the wrapper
    returned."""

    pulled: int = 0
    closed: bool = False
    closed_event: threading.Event = Field(default_factory=threading.Event)

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        try:
            for chunk in super()._stream(*args, **kwargs):
                self.pulled += 1
                yield chunk
            while True:
                self.pulled += 1
                yield ChatGenerationChunk(message=AIMessageChunk(content=" more"))
        finally:
            self.closed = True
            self.closed_event.set()


def _model(text: str) -> CountingModel:
    return CountingModel(messages=iter([AIMessage(content=text)]))


def test_module_all_and_doctests() -> None:
    assert set(streamstop.langchain.__all__) == public_definitions(streamstop.langchain)
    assert set(streamstop.langchain.__all__) == {"StopRunnable", "with_stops"}
    assert doctest.testmod(streamstop.langchain).failed == 0


def test_stream_is_cut_and_the_model_closed() -> None:
    model = _model("one two STOP three four")
    chunks = list(with_stops(model, STOPS).stream("hi"))
    assert "".join(str(c.content) for c in chunks) == "one two "
    assert chunks[-1].response_metadata["stop_sequence"] == "STOP"
    assert chunks[-1].response_metadata["finish_reason"] == "stop"
    assert model.closed
    # Word by word: "one", " ", "two", " ", "STOP": nothing was pulled after the stop.
    assert model.pulled == 5


def test_stop_split_across_chunks_and_held_text() -> None:
    chars = with_stops(FakeListChatModel(responses=["ab</s>cd", "x</y"]), STOPS)
    pieces = [str(c.content) for c in chars.stream("q")]
    assert "".join(pieces) == "ab"
    assert "<" not in pieces  # held until it was sure to be a stop: never sent
    assert "".join(str(c.content) for c in chars.stream("q")) == "x</y"  # released at the end


def test_invoke_and_batch_return_messages() -> None:
    model = with_stops(FakeListChatModel(responses=["a###b", "c", "d<|im_end|>e"]), STOPS)
    reply = model.invoke("q")
    assert isinstance(reply, AIMessage)
    assert reply.content == "a"
    assert reply.response_metadata["stop_sequence"] == "###"
    assert [m.content for m in model.batch(["1", "2"])] == ["c", "d"]


@pytest.mark.anyio
async def test_astream_ainvoke_abatch() -> None:
    model = _model("alpha beta Observation: gamma")
    wrapped = with_stops(model, STOPS, include_stop=True)
    chunks = [chunk async for chunk in wrapped.astream("q")]
    assert "".join(str(c.content) for c in chunks) == "alpha beta Observation:"
    assert model.pulled == 5  # "alpha", " ", "beta", " ", "Observation:": nothing after it
    # Closed by LangChain's worker thread or by this one (see CountingModel): wait for it.
    assert await anyio.to_thread.run_sync(model.closed_event.wait, 10.0)
    listed = with_stops(FakeListChatModel(responses=["x STOP y", "z"]), STOPS)
    assert (await listed.ainvoke("q")).content == "x "
    assert sorted(str(m.content) for m in await listed.abatch(["1", "2"])) == ["x ", "z"]


class WordsRunnable(Runnable[Any, str]):
    """Streams ``words`` from an async generator of its own: what the wrapper closes is the
    generator itself, with no LangChain layer (and no worker thread) in between."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.pulled = 0
        self.closed = False

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        return "".join(self.words)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> AsyncIterator[str]:
        try:
            for word in self.words:
                self.pulled += 1
                yield word
        finally:
            self.closed = True


@pytest.mark.anyio
async def test_astream_closes_its_source_before_it_returns() -> None:
    source = WordsRunnable(["a", "bE", "ND", "c", "d"])
    pieces = [piece async for piece in with_stops(source, ["END"]).astream("q")]
    assert pieces == ["a", "b", ""]  # "ND" completes the stop: its chunk comes out empty
    assert source.closed
    assert source.pulled == 3


def test_string_runnables_and_stop_keyword() -> None:
    def words(text: str) -> Iterator[str]:
        yield from text.split("|")

    runnable = RunnableLambda(words)
    assert "".join(with_stops(runnable, ["END"]).stream("a|bE|ND|c")) == "ab"
    echo = RunnableLambda(lambda text: text)
    assert with_stops(echo, []).invoke("a.b", stop=["."]) == "a"
    assert with_stops(echo, ["b"]).invoke("xbz") == "x"


def test_chunks_without_text_pass_through() -> None:
    tool = AIMessageChunk(
        content="",
        tool_call_chunks=[
            {"name": "f", "args": "{}", "id": "1", "index": 0, "type": "tool_call_chunk"}
        ],
    )

    def source(_: Any) -> Iterator[AIMessageChunk]:
        yield AIMessageChunk(content="ok")
        yield tool
        yield AIMessageChunk(content=" then STOP")

    chunks = list(with_stops(RunnableLambda(source), STOPS).stream("q"))
    assert chunks[1] is tool
    assert "".join(str(c.content) for c in chunks) == "ok then "


# name: (the model's reply, include_stop, the response_metadata of the reply)
WHICH_STOP: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "cut": (
        "a</s>b",
        False,
        {"finish_reason": "stop", "stop_reason": "</s>", "stop_sequence": "</s>"},
    ),
    "cut, the stop kept": (
        "a\n\nUser: b",
        True,
        {"finish_reason": "stop", "stop_reason": "\n\nUser:", "stop_sequence": "\n\nUser:"},
    ),
    "the first stop to end": (
        "x Observation: ### y",
        False,
        {"finish_reason": "stop", "stop_reason": "Observation:", "stop_sequence": "Observation:"},
    ),
    "not cut: the model's own": ("fine", False, {"finish_reason": "length"}),
}


class EndingModel(GenericFakeChatModel):
    """Streams its message word by word, the last chunk saying ``finish_reason: "length"``."""

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield from super()._stream(*args, **kwargs)
        metadata = {"finish_reason": "length"}
        yield ChatGenerationChunk(message=AIMessageChunk(content="", response_metadata=metadata))


@pytest.mark.parametrize("case", WHICH_STOP)
def test_which_stop_fired_streamed_and_invoked(case: str) -> None:
    text, include_stop, metadata = WHICH_STOP[case]

    def model() -> StopRunnable:
        return with_stops(
            EndingModel(messages=iter([AIMessage(content=text)])), STOPS, include_stop=include_stop
        )

    chunks = list(model().stream("q"))
    said = [chunk.response_metadata for chunk in chunks if chunk.response_metadata]
    assert said == [metadata]  # said once
    if "stop_reason" in metadata:
        assert chunks[-1].response_metadata == metadata  # by the last chunk: the stream ends
    assert model().invoke("q").response_metadata == metadata


def test_a_non_runnable_is_refused() -> None:
    with pytest.raises(TypeError, match="Runnable"):
        StopRunnable("not a model", STOPS)  # type: ignore[arg-type]


def test_chat_openai_against_the_echo_model(upstream_server: LiveServer) -> None:
    """The bare echo model of ``streamstop serve`` ignores stops: every cut here is the
    wrapper's. Six stops: past OpenAI's cap of four."""
    chat = ChatOpenAI(
        base_url=upstream_server.url, api_key=SecretStr("unused"), model="echo", max_retries=0
    )
    model = with_stops(chat, STOPS)
    text = "The answer is 42.\n\nUser: and this never shows"
    streamed = list(model.stream(text))
    assert "".join(str(c.content) for c in streamed) == "The answer is 42."
    reply = model.invoke(text)
    assert reply.content == "The answer is 42."
    assert reply.response_metadata["stop_sequence"] == "\n\nUser:"


@pytest.mark.anyio
async def test_chat_openai_async_against_streamstop_serve(echo_server: LiveServer) -> None:
    chat = ChatOpenAI(
        base_url=echo_server.url, api_key=SecretStr("unused"), model="echo", max_retries=0
    )
    model = with_stops(chat, STOPS)
    chunks = [c async for c in model.astream("Thought: x### Observation: y")]
    assert "".join(str(c.content) for c in chunks) == "Thought: x"


def test_the_example_runs(upstream_server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).parents[2] / "examples" / "langchain_stop_chat.py"
    spec = importlib.util.spec_from_file_location("example_langchain_stop_chat", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    old = os.environ.get("OPENAI_BASE_URL")
    os.environ["OPENAI_BASE_URL"] = upstream_server.url
    try:
        spec.loader.exec_module(module)
        import asyncio

        asyncio.run(module.main())
    finally:
        if old is None:
            del os.environ["OPENAI_BASE_URL"]
        else:
            os.environ["OPENAI_BASE_URL"] = old
        sys.modules.pop("example_langchain_stop_chat", None)
    out = capsys.readouterr().out
    assert out == "The answer is 42.\n'The answer is 42.' \n\nUser:\n"
