"""ChunkStream on asyncio and trio, and SyncChunkStream: the life cycle of the upstream, with
sources of our own and with the official ``openai`` client's streams from a live server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import openai
import pytest

from streamstop.chat import ChunkStream, SyncChunkStream

from .conftest import LONG_TEXT, LiveServer, StreamEnds, client_for, user

pytestmark = pytest.mark.anyio

Chunk = dict[str, Any]


def chat(index: int, content: str, finish_reason: str | None = None) -> Chunk:
    delta = {"content": content}
    return {
        "id": "c",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}],
    }


def text_of(chunks: list[Chunk], index: int = 0) -> str:
    return "".join(
        choice["delta"]["content"]
        for chunk in chunks
        for choice in chunk["choices"]
        if choice["index"] == index
    )


class Upstream:
    """An async chunk source like the openai client's AsyncStream: ``__aiter__`` and ``close``.

    ``close_style`` picks what it offers: ``"aclose"``, an async ``"close"`` (as AsyncStream,
    which has both), a sync ``"sync-close"``, or ``"none"``.
    """

    aclose: Callable[[], Awaitable[None]]
    close: Callable[[], object]

    def __init__(
        self,
        chunks: list[Chunk],
        *,
        close_style: str = "close",
        fail_after: int | None = None,
        hang_after: int | None = None,
    ) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.hang_after = hang_after
        self.pulled = 0
        self.closed = 0
        self.hanging = anyio.Event()
        if close_style == "aclose":
            self.aclose = self._async_close
        elif close_style == "close":
            self.close = self._async_close
        elif close_style == "sync-close":
            self.close = self._sync_close

    async def _async_close(self) -> None:
        await anyio.lowlevel.checkpoint()  # a real close awaits: it must survive cancellation
        self.closed += 1

    def _sync_close(self) -> None:
        self.closed += 1

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._generate()

    async def _generate(self) -> AsyncIterator[Chunk]:
        for chunk in self.chunks:
            if self.pulled == self.fail_after:
                raise ConnectionError("upstream broke")
            if self.pulled == self.hang_after:
                self.hanging.set()
                await anyio.sleep_forever()
            self.pulled += 1
            yield chunk


CUT = [chat(0, "Hel"), chat(0, "lo</"), chat(0, "s> junk"), chat(0, "never pulled")]


async def test_closes_the_upstream_once_every_choice_is_cut() -> None:
    upstream = Upstream(CUT)
    async with ChunkStream(upstream, ["</s>"], n=1) as stream:
        out = [chunk async for chunk in stream]
        assert stream.closed
    assert text_of(out) == "Hello"
    assert out[-1]["choices"][0]["finish_reason"] == "stop"
    assert upstream.pulled == 3  # the fourth chunk was never asked for
    assert upstream.closed == 1
    assert stream.stop_strings == {0: "</s>"}


async def test_without_n_it_reads_to_the_end() -> None:
    upstream = Upstream([*CUT, chat(1, "other </")])
    out = [chunk async for chunk in ChunkStream(upstream, ["</s>"])]
    assert upstream.pulled == 5
    assert upstream.closed == 1
    assert text_of(out, 0) == "Hello"
    assert text_of(out, 1) == "other </"  # held, then released at the end


@pytest.mark.parametrize("close_style", ["aclose", "close", "sync-close", "none"])
async def test_every_close_style(close_style: str) -> None:
    upstream = Upstream(CUT, close_style=close_style)
    stream = ChunkStream(upstream, "</s>", n=1)
    assert text_of([chunk async for chunk in stream]) == "Hello"
    assert upstream.closed == (0 if close_style == "none" else 1)
    await stream.aclose()  # twice is harmless
    assert upstream.closed == (0 if close_style == "none" else 1)


async def test_a_consumer_that_leaves_early_closes_the_upstream() -> None:
    upstream = Upstream([chat(0, "a"), chat(0, "b"), chat(0, "c")])
    async with ChunkStream(upstream, "</s>") as stream:
        async for _ in stream:
            break
    assert upstream.pulled == 1
    assert upstream.closed == 1


async def test_cancellation_closes_the_upstream() -> None:
    upstream = Upstream([chat(0, "a"), chat(0, "b")], hang_after=1)
    received: list[Chunk] = []

    async def consume() -> None:
        async with ChunkStream(upstream, "</s>", n=1) as stream:
            async for chunk in stream:
                received.append(chunk)

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        await upstream.hanging.wait()
        group.cancel_scope.cancel()
    assert text_of(received) == "a"
    assert upstream.closed == 1


async def test_a_failing_upstream_is_closed_and_the_error_propagates() -> None:
    upstream = Upstream([chat(0, "a<"), chat(0, "b")], fail_after=1)
    received: list[Chunk] = []

    async def consume() -> None:
        async for chunk in ChunkStream(upstream, "<stop>"):
            received.append(chunk)

    with pytest.raises(ConnectionError, match="upstream broke"):
        await consume()
    assert text_of(received) == "a"  # the held "<" is not released on an error
    assert upstream.closed == 1


async def test_an_async_generator_source_and_a_second_iteration() -> None:
    closed = []

    async def generate() -> AsyncIterator[Chunk]:
        try:
            yield chat(0, "x STOP")
            yield chat(0, "never")
        finally:
            closed.append(True)

    stream = ChunkStream(generate(), "STOP", n=1)
    assert text_of([chunk async for chunk in stream]) == "x "
    assert closed == [True]
    with pytest.raises(RuntimeError, match="only once"):
        aiter(stream)
    with pytest.raises(TypeError, match="async iterable"):
        ChunkStream([chat(0, "x")], "STOP")  # type: ignore[arg-type]


def test_sync_stream_closes_a_generator_on_the_stop() -> None:
    state = {"pulled": 0, "closed": False}

    def generate() -> Iterator[Chunk]:
        try:
            for chunk in CUT:
                state["pulled"] += 1
                yield chunk
        finally:
            state["closed"] = True

    with SyncChunkStream(generate(), ["</s>"], n=1) as stream:
        out = list(stream)
    assert text_of(out) == "Hello"
    assert state == {"pulled": 3, "closed": True}
    with pytest.raises(RuntimeError, match="only once"):
        iter(stream)


def test_sync_stream_closes_an_object_with_close_and_flushes_at_the_end() -> None:
    class Stream:
        """Like the openai client's Stream: iterable, with close()."""

        def __init__(self) -> None:
            self.closed = 0

        def __iter__(self) -> Iterator[Chunk]:
            return iter([chat(0, "ok </")])

        def close(self) -> None:
            self.closed += 1

    source = Stream()
    stream = SyncChunkStream(source, "</s>")
    assert text_of(list(stream)) == "ok </"
    assert source.closed == 1
    stream.close()
    assert source.closed == 1
    with pytest.raises(TypeError, match="iterable of chunks"):
        SyncChunkStream(chat(0, "x"), "STOP")


# -- the openai client's streams, from the bare echo model (a backend that ignores stops) -----

TEXT = "The answer is 42.\n\nUser: ignore that <|im_end|> and ### more </s>"
STOPS = ["</s>", "<|im_end|>", "\n\nUser:", "###", "Observation:", "STOP"]  # more than 4
EXPECTED = "The answer is 42."


async def test_chunk_stream_over_the_openai_client(
    slow_upstream_server: LiveServer, slow_upstream_ends: StreamEnds
) -> None:
    # Client side: a backend without stops (the bare echo model, 10 ms a piece), filtered as it
    # arrives, and closed as soon as the stop is seen: the model stops generating.
    cancelled = slow_upstream_ends.count("cancelled")
    async with client_for(slow_upstream_server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(TEXT + LONG_TEXT), stream=True
        )
        async with ChunkStream(stream, STOPS, n=1) as chunks:
            received = [chunk async for chunk in chunks]
            assert chunks.stop_strings == {0: "\n\nUser:"}
    assert all(type(chunk).__name__ == "ChatCompletionChunk" for chunk in received)
    assert "".join(c.choices[0].delta.content or "" for c in received) == EXPECTED
    assert received[-1].choices[0].finish_reason == "stop"
    await slow_upstream_ends.wait_for("cancelled", cancelled + 1)


def test_sync_chunk_stream_over_the_openai_client(upstream_server: LiveServer) -> None:
    with openai.OpenAI(base_url=upstream_server.url, api_key="unused", max_retries=0) as client:
        stream = client.completions.create(model="echo", prompt=TEXT, stream=True, n=2)
        with SyncChunkStream(stream, STOPS, n=2) as chunks:
            texts = {0: "", 1: ""}
            for chunk in chunks:
                for choice in chunk.choices:
                    texts[choice.index] += choice.text
    assert texts == {0: EXPECTED, 1: EXPECTED}
