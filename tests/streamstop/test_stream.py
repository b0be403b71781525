"""StopStream on asyncio and trio, and SyncStopStream: life cycle of the source."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop import StopAutomaton, StopStream, SyncStopStream

from .reference import reference_match, reference_truncate

pytestmark = pytest.mark.anyio


class Source:
    """An async token source that records how far it was pulled and whether it was closed."""

    def __init__(
        self,
        tokens: list[str] | list[bytes],
        *,
        fail_after: int | None = None,
        hang_after: int | None = None,
    ) -> None:
        self.tokens = tokens
        self.fail_after = fail_after
        self.hang_after = hang_after
        self.pulled = 0
        self.closed = 0
        self.started_hanging = anyio.Event()
        self.closing = anyio.Event()

    def __aiter__(self) -> AsyncIterator[str | bytes]:
        return self._generate()

    async def _generate(self) -> AsyncIterator[str | bytes]:
        try:
            for token in self.tokens:
                if self.pulled == self.fail_after:
                    raise ConnectionError("model server went away")
                if self.pulled == self.hang_after:
                    self.started_hanging.set()
                    await anyio.sleep_forever()
                self.pulled += 1
                yield token
        finally:
            self.closed += 1
            self.closing.set()


TOKENS = ["Hel", "lo", " wor", "ld", "<|im", "_e", "nd|>", " never", " sent"]


async def test_stop_yields_final_piece_and_closes_the_source() -> None:
    source = Source(TOKENS)
    stream = StopStream(source, ["<|im_end|>"])
    pieces = [piece async for piece in stream]
    assert pieces == ["Hel", "lo", " wor", "ld"]
    assert stream.stopped
    assert stream.stop_string == "<|im_end|>"
    assert source.pulled == 7  # nothing pulled past the stop
    assert source.closed == 1
    assert stream.closed


async def test_source_is_closed_before_the_final_piece_is_seen() -> None:
    source = Source(["a", "b</s>", "never"])
    async with StopStream(source, "</s>") as stream:
        pieces = []
        async for piece in stream:
            pieces.append((piece, source.closed))
    assert pieces == [("a", 0), ("b", 1)]


async def test_no_stop_flushes_held_text_at_the_end() -> None:
    source = Source(["a", "b", "</"])
    stream = StopStream(source, "</s>")
    assert [piece async for piece in stream] == ["a", "b", "</"]
    assert not stream.stopped
    assert stream.stop_string is None
    assert source.closed == 1


async def test_never_yields_empty_strings() -> None:
    source = Source(["", "<", "|", "", "x", "<|im_", "end|>"])
    stream = StopStream(source, ["<|im_end|>"])
    assert [piece async for piece in stream] == ["<|x"]


async def test_include_stop() -> None:
    stream = StopStream(Source(TOKENS), ["<|im_end|>"], include_stop=True)
    assert "".join([piece async for piece in stream]) == "Hello world<|im_end|>"


async def test_bytes_source_split_mid_character() -> None:
    data = "café ☃ </s> x".encode()
    source = Source([data[i : i + 1] for i in range(len(data))])
    stream = StopStream(source, "</s>")
    assert "".join([piece async for piece in stream]) == "café ☃ "


async def test_prebuilt_automaton() -> None:
    automaton = StopAutomaton(["<|im_end|>"])
    stream = StopStream(Source(TOKENS), automaton)
    assert "".join([piece async for piece in stream]) == "Hello world"
    assert stream.buffer.automaton is automaton


async def test_early_break_inside_async_with_closes_the_source() -> None:
    source = Source(TOKENS)
    async with StopStream(source, ["<|im_end|>"]) as stream:
        async for _ in stream:
            break
    assert source.closed == 1
    assert source.pulled == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_early_break_of_a_bare_async_for_closes_the_source_when_finalized() -> None:
    # asyncio closes abandoned async generators quietly; trio closes them too but warns (use
    # ``async with``, as the docs say), which this strict suite would turn into an error.
    source = Source(TOKENS)
    stream = StopStream(source, ["<|im_end|>"])
    async for _ in stream:
        break
    del stream
    gc.collect()
    # The event loop finalizes the abandoned iterator in a task of its own.
    with anyio.fail_after(5):
        await source.closing.wait()
    assert source.closed == 1


async def test_aclose_twice_is_harmless() -> None:
    source = Source(TOKENS)
    stream = StopStream(source, "</s>")
    assert await stream.__anext__() == "Hel"
    await stream.aclose()
    await stream.aclose()
    assert source.closed == 1
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert [piece async for piece in stream] == []


async def test_aclose_before_iteration_closes_a_generator_source() -> None:
    async def generate() -> AsyncIterator[str]:
        yield "never"

    generator = generate()
    stream = StopStream(generator, "</s>")
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await generator.__anext__()


async def test_anext_api_matches_iteration() -> None:
    stream = StopStream(Source(TOKENS), ["<|im_end|>"])
    pieces = []
    while True:
        try:
            pieces.append(await stream.__anext__())
        except StopAsyncIteration:
            break
    assert pieces == ["Hel", "lo", " wor", "ld"]
    assert stream.closed


async def test_cancellation_closes_the_source() -> None:
    source = Source(TOKENS, hang_after=2)
    stream = StopStream(source, "</s>")
    received: list[str] = []

    async def consume() -> None:
        async with stream:
            async for piece in stream:
                received.append(piece)

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        await source.started_hanging.wait()
        group.cancel_scope.cancel()
    assert received == ["Hel", "lo"]
    assert source.closed == 1
    assert stream.closed


async def test_cancellation_while_text_is_held() -> None:
    source = Source(["ok", "</", "never"], hang_after=2)
    stream = StopStream(source, "</s>")
    with anyio.move_on_after(0.05):
        async for _ in stream:
            pass
    assert source.closed == 1
    assert stream.held == "</"


async def test_source_error_propagates_and_held_text_stays_readable() -> None:
    source = Source(["Hi", " <|im", "_en", "never"], fail_after=3)
    stream = StopStream(source, ["<|im_end|>"])
    assert await stream.__anext__() == "Hi"
    assert await stream.__anext__() == " "
    with pytest.raises(ConnectionError, match="went away"):
        await stream.__anext__()
    assert stream.held == "<|im_en"
    assert source.closed == 1
    assert not stream.stopped


async def test_bad_chunk_from_source_is_a_type_error_and_closes_it() -> None:
    source = Source(["ok", 42])  # type: ignore[arg-type]
    stream = StopStream(source, "</s>")
    assert await stream.__anext__() == "ok"
    with pytest.raises(TypeError, match="int: 42"):
        await stream.__anext__()
    assert source.closed == 1


async def test_source_without_aclose() -> None:
    class Plain:
        def __init__(self) -> None:
            self.tokens = iter(["a", "b</s>", "c"])

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> str:
            try:
                return next(self.tokens)
            except StopIteration:
                raise StopAsyncIteration from None

    stream = StopStream(Plain(), "</s>")
    assert [piece async for piece in stream] == ["a", "b"]


def test_source_must_be_async_iterable() -> None:
    with pytest.raises(TypeError, match="list"):
        StopStream(["sync", "list"], "</s>")  # type: ignore[arg-type]


# -- SyncStopStream


class SyncSource:
    def __init__(self, tokens: list[str], fail_after: int | None = None) -> None:
        self.tokens = tokens
        self.fail_after = fail_after
        self.pulled = 0
        self.closed = 0

    def __iter__(self) -> Iterator[str]:
        return self._generate()

    def _generate(self) -> Iterator[str]:
        try:
            for token in self.tokens:
                if self.pulled == self.fail_after:
                    raise ConnectionError("model server went away")
                self.pulled += 1
                yield token
        finally:
            self.closed += 1


def test_sync_stop_closes_the_source() -> None:
    source = SyncSource(TOKENS)
    stream = SyncStopStream(source, ["<|im_end|>"])
    assert list(stream) == ["Hel", "lo", " wor", "ld"]
    assert stream.stop_string == "<|im_end|>"
    assert source.pulled == 7
    assert source.closed == 1


def test_sync_early_exit_with_block_closes_the_source() -> None:
    source = SyncSource(TOKENS)
    with SyncStopStream(source, "</s>") as stream:
        assert next(stream) == "Hel"
    assert source.closed == 1
    stream.close()
    assert source.closed == 1


def test_sync_error_propagates_with_held_text() -> None:
    source = SyncSource(["a", "</", "never"], fail_after=2)
    stream = SyncStopStream(source, "</s>")
    with pytest.raises(ConnectionError):
        list(stream)
    assert stream.held == "</"
    assert source.closed == 1


def test_sync_flushes_at_end() -> None:
    stream = SyncStopStream(["a", "</"], "</s>")
    assert list(stream) == ["a", "</"]
    assert not stream.stopped


@pytest.mark.parametrize("source", ["a string", b"bytes", 42])
def test_sync_source_must_be_an_iterable_of_chunks(source: object) -> None:
    with pytest.raises(TypeError, match=type(source).__name__):
        SyncStopStream(source, "</s>")  # type: ignore[arg-type]


# -- properties: the streams say what the buffer says


@st.composite
def token_lists(draw: st.DrawFn) -> list[str]:
    return draw(st.lists(st.text("ab<>/\n", max_size=4), max_size=20))


@given(tokens=token_lists(), stops=st.lists(st.text("ab<>/", max_size=4), max_size=4))
def test_stop_stream_matches_reference(tokens: list[str], stops: list[str]) -> None:
    async def source() -> AsyncIterator[str]:
        for token in tokens:
            yield token

    async def collect() -> tuple[list[str], str | None]:
        async with StopStream(source(), stops) as stream:
            pieces = [piece async for piece in stream]
        return pieces, stream.stop_string

    pieces, stop_string = anyio.run(collect)
    text = "".join(tokens)
    assert "".join(pieces) == reference_truncate(text, stops)
    assert "" not in pieces
    match = reference_match(text, stops)
    assert stop_string == (match[2] if match else None)
    sync = SyncStopStream(tokens, stops)
    assert list(sync) == pieces
    assert sync.stop_string == stop_string


async def test_str_subclass_token_is_plain_text_after_the_memo_knows_it() -> None:
    class Token(str):
        pass

    automaton = StopAutomaton(["</s>"])
    assert [piece async for piece in StopStream(Source(["hi"]), automaton)] == ["hi"]
    tokens: list[str] = [Token("hi")]
    pieces = [piece async for piece in StopStream(Source(tokens), automaton)]
    assert [(piece, type(piece)) for piece in pieces] == [("hi", str)]
