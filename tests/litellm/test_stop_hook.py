"""StopHook without the proxy: its hooks called as LiteLLM calls them, on LiteLLM's own objects.

The request side is a table of named cases; the stream side is checked against the brute-force
reference of tests/streamstop/reference.py, fed whole and in every chunking; the SDK wrapper
runs against the fake provider.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop.server import RequestLimits
from tests.public_api import public_definitions
from tests.server.conftest import LiveServer
from tests.streamstop.reference import reference_match

from ..server.fake_families import FOREVER
from .conftest import SKIP_REASON
from .fake_provider import FakeProvider

pytest.importorskip("litellm", reason=SKIP_REASON)

import litellm
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyException
from litellm.types.utils import (
    Delta,
    ModelResponse,
    ModelResponseStream,
    StreamingChoices,
    TextChoices,
    TextCompletionResponse,
)

import streamstop.litellm
from streamstop.litellm import StopHook, stop_hook

# Pydantic warns, building LiteLLM's own models (deferred until first use), that its TypedDicts
# use ReadOnly: LiteLLM's business, not what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore:Item.* using the `ReadOnly` qualifier:UserWarning")

STOPS = ["<|im_end|>", "\nUser:", "###", "</s>", "[END]", "Observation:"]


def test_all_names_the_public_api() -> None:
    assert set(streamstop.litellm.__all__) == public_definitions(streamstop.litellm) | {"stop_hook"}


def test_the_ready_hook_is_a_litellm_callback_whose_pre_call_hook_runs() -> None:
    assert isinstance(stop_hook, StopHook)
    assert isinstance(stop_hook, CustomLogger)
    # LiteLLM's proxy calls a logger's pre-call hook only if its own class defines it.
    assert "async_pre_call_hook" in vars(StopHook)


def test_limits_must_be_request_limits() -> None:
    with pytest.raises(TypeError, match="RequestLimits, got dict"):
        StopHook(limits={"max_stops": 2})  # type: ignore[arg-type]


# -- the request ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestCase:
    name: str
    call_type: str
    data: dict[str, Any]
    left: dict[str, Any]  # the request sent on
    stops: tuple[str, ...] | None  # None: nothing to cut
    n: int | None = 1
    anthropic: bool = False
    hook: StopHook = field(default_factory=StopHook)


REQUEST_CASES = [
    RequestCase(
        "chat, six stops",
        "acompletion",
        {"model": "m", "messages": [], "stop": STOPS},
        {"model": "m", "messages": []},
        tuple(STOPS),
    ),
    RequestCase(
        "chat, as older releases name it",
        "completion",
        {"model": "m", "stop": "</s>"},
        {"model": "m"},
        ("</s>",),
    ),
    RequestCase(
        "chat, n choices",
        "acompletion",
        {"model": "m", "stop": ["</s>"], "n": 3},
        {"model": "m", "n": 3},
        ("</s>",),
        n=3,
    ),
    RequestCase(
        "text completion, two prompts of two choices",
        "atext_completion",
        {"model": "m", "prompt": ["a", "b"], "n": 2, "stop": ["</s>"]},
        {"model": "m", "prompt": ["a", "b"], "n": 2},
        ("</s>",),
        n=4,
    ),
    RequestCase(
        "text completion, one prompt of tokens",
        "text_completion",
        {"model": "m", "prompt": [1, 2, 3], "stop": ["</s>"]},
        {"model": "m", "prompt": [1, 2, 3]},
        ("</s>",),
    ),
    RequestCase(
        "messages, stop_sequences",
        "anthropic_messages",
        {"model": "m", "stop_sequences": STOPS, "stop": "kept"},
        {"model": "m", "stop": "kept"},
        tuple(STOPS),
        anthropic=True,
    ),
    RequestCase(
        "no stop: untouched",
        "acompletion",
        {"model": "m", "messages": []},
        {"model": "m", "messages": []},
        None,
    ),
    RequestCase(
        "empty stops: dropped, nothing to cut",
        "acompletion",
        {"model": "m", "stop": ["", ""]},
        {"model": "m"},
        None,
    ),
    RequestCase(
        "another call type: untouched",
        "aembedding",
        {"model": "m", "stop": ["</s>"]},
        {"model": "m", "stop": ["</s>"]},
        None,
    ),
    RequestCase(
        "forward_stop: sent on too",
        "acompletion",
        {"model": "m", "stop": ["</s>"]},
        {"model": "m", "stop": ["</s>"]},
        ("</s>",),
        hook=StopHook(forward_stop=True),
    ),
    RequestCase(
        "the hook's own stops, then the request's, once each",
        "acompletion",
        {"model": "m", "stop": ["</s>", "###"]},
        {"model": "m"},
        ("###", "[END]", "</s>"),
        hook=StopHook(stops=["###", "[END]"]),
    ),
    RequestCase(
        "the hook's own stops alone",
        "acompletion",
        {"model": "m"},
        {"model": "m"},
        ("[END]",),
        hook=StopHook(stops="[END]"),
    ),
]


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[case.name for case in REQUEST_CASES])
def test_take_stops(case: RequestCase) -> None:
    data = json.loads(json.dumps(case.data))
    plan = case.hook.take_stops(data, case.call_type)
    assert data == case.left
    if case.stops is None:
        assert plan is None
    else:
        assert plan is not None
        assert (plan.stops, plan.n, plan.anthropic) == (case.stops, case.n, case.anthropic)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("metadata", "where"),
    [
        ({"litellm_metadata": {"user": "u"}}, "litellm_metadata"),
        ({"metadata": {"user": "u"}}, "metadata"),
        ({}, "litellm_metadata"),
    ],
    ids=["litellm_metadata", "metadata", "none yet"],
)
async def test_the_plan_rides_in_litellm_metadata(metadata: dict[str, Any], where: str) -> None:
    data = {"model": "m", "stop": ["</s>"], **metadata}
    returned = await stop_hook.async_pre_call_hook(None, None, data, "acompletion")
    assert returned is data
    assert data[where]["streamstop"] == {"stops": ["</s>"], "n": 1, "anthropic": False}
    assert json.loads(json.dumps(data[where])) == data[where]  # plain JSON, for the loggers


@dataclass(frozen=True)
class RefusalCase:
    name: str
    call_type: str
    data: dict[str, Any]
    message: str
    param: str


REFUSAL_CASES = [
    RefusalCase(
        "over max_stops",
        "acompletion",
        {"stop": ["a", "b", "c"]},
        "Too many stops: 3 stop strings, over the limit max_stops=2, set by "
        "StopHook(limits=RequestLimits(max_stops=...)).",
        "stop",
    ),
    RefusalCase(
        "over max_stop_length",
        "atext_completion",
        {"stop": ["x" * 9]},
        "Too many stops: a stop string of 9 characters ('xxxxxxxxx'), over the limit "
        "max_stop_length=8, set by StopHook(limits=RequestLimits(max_stop_length=...)).",
        "stop",
    ),
    RefusalCase(
        "not strings",
        "acompletion",
        {"stop": 7},
        "Invalid type for 'stop': expected a string or an array of strings, got 7.",
        "stop",
    ),
    RefusalCase(
        "stop_sequences over max_stops",
        "anthropic_messages",
        {"stop_sequences": ["a", "b", "c"]},
        "Too many stops: 3 stop strings, over the limit max_stops=2, set by "
        "StopHook(limits=RequestLimits(max_stops=...)).",
        "stop_sequences",
    ),
    RefusalCase(
        "n of zero",
        "acompletion",
        {"stop": ["a"], "n": 0},
        "Invalid 'n': expected an integer of at least 1, got 0.",
        "n",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize("case", REFUSAL_CASES, ids=[case.name for case in REFUSAL_CASES])
async def test_a_refused_stop_set_is_a_400_in_the_openai_shape(case: RefusalCase) -> None:
    hook = StopHook(limits=RequestLimits(max_stops=2, max_stop_length=8))
    with pytest.raises(ProxyException) as raised:
        await hook.async_pre_call_hook(None, None, dict(case.data), case.call_type)
    error = raised.value.to_dict()
    assert raised.value.code == "400"
    assert error["message"] == case.message
    assert error["type"] == "invalid_request_error"
    assert error["param"] == case.param


# -- streams -------------------------------------------------------------------------------------


class Source:
    """An async iterator of chunks that records what was read and whether it was closed; with
    ``forever``, more chunks follow without end (only a close ends it)."""

    def __init__(self, chunks: list[Any], forever: Any = None) -> None:
        self.chunks = chunks
        self.forever = forever
        self.read = 0
        self.closed = False

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise StopAsyncIteration
        self.read += 1
        if self.read <= len(self.chunks):
            return self.chunks[self.read - 1]
        if self.forever is None:
            raise StopAsyncIteration
        return self.forever

    async def aclose(self) -> None:
        self.closed = True


def chat_chunk(text: str | None, finish_reason: str | None = None) -> ModelResponseStream:
    return ModelResponseStream(
        id="chatcmpl-1",
        created=1,
        model="m",
        choices=[StreamingChoices(index=0, delta=Delta(content=text), finish_reason=finish_reason)],
    )


def text_chunk(text: str) -> TextCompletionResponse:
    return TextCompletionResponse(
        id="cmpl-1", model="m", choices=[TextChoices(index=0, text=text, finish_reason=None)]
    )


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(min(cut, len(text)) for cut in cuts)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def plan(stops: list[str], anthropic: bool = False) -> Any:
    data: dict[str, Any] = {"stop_sequences" if anthropic else "stop": stops}
    result = StopHook().take_stops(data, "anthropic_messages" if anthropic else "acompletion")
    assert result is not None
    return result


async def run(hook: StopHook, source: Source, request: dict[str, Any]) -> list[Any]:
    return [
        chunk async for chunk in hook.async_post_call_streaming_iterator_hook(None, source, request)
    ]


def request_with(stops: list[str], anthropic: bool = False) -> dict[str, Any]:
    return {"litellm_metadata": {"streamstop": plan(stops, anthropic).to_metadata()}}


ALPHABET = "ab<>/s"
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), min_size=1, max_size=6)


@given(
    text=st.text(alphabet=ALPHABET, max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=8),
    stops=stop_lists,
)
def test_a_chat_stream_is_cut_as_the_reference_says(
    text: str, cuts: list[int], stops: list[str]
) -> None:
    chunks = [chat_chunk("", None), *(chat_chunk(p) for p in split(text, cuts))]
    source = Source([*chunks, chat_chunk(None, "length")])
    out = anyio.run(run, StopHook(), source, request_with(stops))
    sent = "".join(c.choices[0].delta.content or "" for c in out)
    last = out[-1].choices[0]
    match = reference_match(text, stops)
    if match is None:
        assert sent == text
        assert last.finish_reason == "length"  # the provider's own end, held text released
        assert getattr(last, "stop_reason", None) is None
    else:
        assert sent == text[: match[0]]
        assert (last.finish_reason, last.stop_reason) == ("stop", match[2])
    assert source.closed


@pytest.mark.anyio
async def test_the_provider_is_closed_at_the_cut_and_read_no_further() -> None:
    source = Source([chat_chunk("Hi <|im"), chat_chunk("_end|> junk")], forever=chat_chunk("."))
    out = await run(StopHook(), source, request_with(STOPS))
    assert [c.choices[0].delta.content for c in out] == ["Hi ", ""]
    assert out[-1].choices[0].finish_reason == "stop"
    assert out[-1].choices[0].stop_reason == "<|im_end|>"
    assert source.closed
    assert source.read == 2


class FailingSource(Source):
    """A source whose provider fails after its chunks (or, with ``block``, never answers)."""

    def __init__(self, chunks: list[Any], block: bool = False) -> None:
        super().__init__(chunks)
        self.block = block

    async def __anext__(self) -> Any:
        if self.read < len(self.chunks):
            self.read += 1
            return self.chunks[self.read - 1]
        if self.block:
            await anyio.sleep_forever()
        raise ConnectionError("the provider went away")


@pytest.mark.anyio
async def test_a_failing_provider_is_closed_and_its_error_propagates() -> None:
    source = FailingSource([chat_chunk("Hi <")])
    with pytest.raises(ConnectionError, match="went away"):
        await run(StopHook(), source, request_with(STOPS))
    assert source.closed


@pytest.mark.anyio
async def test_a_client_that_leaves_early_closes_the_provider() -> None:
    source = Source([chat_chunk("Hi "), chat_chunk("there")], forever=chat_chunk("."))
    stream = stop_hook.async_post_call_streaming_iterator_hook(None, source, request_with(STOPS))
    first = await stream.__anext__()
    assert first.choices[0].delta.content == "Hi "
    await stream.aclose()
    assert source.closed


@pytest.mark.anyio
async def test_a_cancelled_stream_closes_the_provider() -> None:
    source = FailingSource([chat_chunk("Hi ")], block=True)
    received = []
    with anyio.move_on_after(0.05):
        async for chunk in stop_hook.async_post_call_streaming_iterator_hook(
            None, source, request_with(STOPS)
        ):
            received.append(chunk)
    assert [c.choices[0].delta.content for c in received] == ["Hi "]
    assert source.closed


@pytest.mark.anyio
async def test_the_cut_chunk_is_written_as_litellm_serializes_it() -> None:
    source = Source([chat_chunk("Hi</s>junk")])
    (out,) = await run(StopHook(), source, request_with(STOPS))
    assert json.loads(out.model_dump_json(exclude_none=True, exclude_unset=True))["choices"] == [
        {"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop", "stop_reason": "</s>"}
    ]


@pytest.mark.anyio
async def test_a_text_completion_stream_is_cut() -> None:
    source = Source([text_chunk("Hi</"), text_chunk("s>junk")], forever=text_chunk("."))
    out = await run(StopHook(), source, request_with(STOPS))
    assert [c.choices[0].text for c in out] == ["Hi", ""]
    assert out[-1].choices[0].finish_reason == "stop"
    assert out[-1].choices[0].stop_reason == "</s>"
    assert source.closed


@pytest.mark.anyio
async def test_a_stream_without_a_plan_passes_as_it_is() -> None:
    chunks = [chat_chunk("Hi</s>junk"), chat_chunk(None, "stop")]
    out = await run(StopHook(), Source(chunks), {"metadata": {}})
    assert all(a is b for a, b in zip(out, chunks, strict=True))


@pytest.mark.anyio
async def test_include_stop_keeps_the_stop() -> None:
    out = await run(
        StopHook(include_stop=True), Source([chat_chunk("Hi</s>x")]), request_with(STOPS)
    )
    assert out[0].choices[0].delta.content == "Hi</s>"


def anthropic_events(text_pieces: list[str]) -> bytes:
    events = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1"}}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": p},
                },
            )
            for p in text_pieces
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode() for name, payload in events
    )


@given(cuts=st.lists(st.integers(0, 600), max_size=10))
def test_an_anthropic_event_stream_is_cut_however_its_bytes_are_split(cuts: list[int]) -> None:
    body = anthropic_events(["The answer", " is 42.<", "/s> and what follows"])
    points = sorted({0, len(body), *(min(cut, len(body)) for cut in cuts)})
    source = Source([body[a:b] for a, b in itertools.pairwise(points)])
    out = b"".join(anyio.run(run, StopHook(), source, request_with(STOPS, anthropic=True)))
    payloads = [json.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
    deltas = [p["delta"] for p in payloads if p["type"] == "content_block_delta"]
    assert "".join(delta["text"] for delta in deltas) == "The answer is 42."
    assert {"stop_reason": "stop_sequence", "stop_sequence": "</s>"} in [
        p.get("delta") for p in payloads if p["type"] == "message_delta"
    ]
    assert payloads[-1] == {"type": "message_stop"}
    assert source.closed


@pytest.mark.anyio
async def test_a_text_completion_wrapper_is_closed_down_to_the_provider() -> None:
    # LiteLLM's text completion stream has no close, and the generator it reads does not
    # close what it reads: the hook closes the innermost stream itself.
    provider = Source([chat_chunk("Hi</s>junk")], forever=chat_chunk("."))

    async def _async_streaming(response: Source) -> AsyncIterator[Any]:
        async for line in response:
            yield line

    wrapper = litellm.TextCompletionStreamWrapper(
        completion_stream=_async_streaming(provider), model="m"
    )
    out = await run(StopHook(), wrapper, request_with(STOPS))
    assert [c.choices[0].text for c in out] == ["Hi"]
    assert provider.closed


# -- whole responses -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_whole_chat_response_is_cut_in_place() -> None:
    response = ModelResponse(
        model="m",
        choices=[
            {"index": 0, "message": {"role": "assistant", "content": "Hi</s>junk"}},
            {"index": 1, "message": {"role": "assistant", "content": "no stop here"}},
        ],
    )
    request = request_with(STOPS)
    returned = await stop_hook.async_post_call_success_hook(request, None, response)
    assert returned is response
    first, second = response.choices
    assert first.message.content == "Hi"
    assert (first.finish_reason, first.stop_reason) == ("stop", "</s>")
    assert second.message.content == "no stop here"


@pytest.mark.anyio
async def test_a_whole_text_completion_is_cut() -> None:
    response = TextCompletionResponse(
        model="m", choices=[TextChoices(index=0, text="Hi###junk", finish_reason="length")]
    )
    await stop_hook.async_post_call_success_hook(request_with(STOPS), None, response)
    assert response.choices[0].text == "Hi"
    assert response.choices[0].finish_reason == "stop"


@pytest.mark.anyio
async def test_a_whole_anthropic_message_is_cut_in_place() -> None:
    message: dict[str, Any] = {
        "type": "message",
        "content": [{"type": "text", "text": "Hi[END]junk"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "_hidden_params": {"kept": True},
    }
    await stop_hook.async_post_call_success_hook(request_with(STOPS, anthropic=True), None, message)
    assert message["content"] == [{"type": "text", "text": "Hi"}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "[END]")
    assert message["_hidden_params"] == {"kept": True}


@pytest.mark.anyio
async def test_a_whole_response_without_a_plan_is_untouched() -> None:
    response = ModelResponse(
        model="m", choices=[{"index": 0, "message": {"role": "assistant", "content": "Hi</s>"}}]
    )
    await stop_hook.async_post_call_success_hook({"metadata": {}}, None, response)
    assert response.choices[0].message.content == "Hi</s>"


# -- the SDK -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, LiveServer]]:
    fake = FakeProvider()
    server = LiveServer(fake).start()
    try:
        yield fake, server
    finally:
        server.stop()


TEXT = "The answer is 42.</s>and what follows must not leak"


@pytest.mark.asyncio
async def test_the_sdk_stream_is_cut_and_the_provider_closed(
    provider: tuple[FakeProvider, LiveServer],
) -> None:
    fake, server = provider
    before = fake.ends.count("cancelled")
    stream = await stop_hook.acompletion(
        model="openai/fake-reasoner",
        api_base=server.url,
        api_key="sk-fake",
        messages=[{"role": "user", "content": TEXT + FOREVER}],
        stop=STOPS,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "The answer is 42."
    assert chunks[-1].choices[0].stop_reason == "</s>"
    assert "stop" not in fake.requests[-1][1]
    await fake.ends.wait_for("cancelled", before + 1)


@pytest.mark.asyncio
async def test_the_sdk_text_completion_stream_is_cut_and_the_provider_closed(
    provider: tuple[FakeProvider, LiveServer],
) -> None:
    fake, server = provider
    before = fake.ends.count("cancelled")
    stream = await stop_hook.atext_completion(
        model="text-completion-openai/fake-reasoner",
        api_base=server.url,
        api_key="sk-fake",
        prompt=TEXT + FOREVER,
        stop=STOPS,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text or "" for c in chunks) == "The answer is 42."
    await fake.ends.wait_for("cancelled", before + 1)


@pytest.mark.asyncio
async def test_the_sdk_whole_response_is_cut(provider: tuple[FakeProvider, LiveServer]) -> None:
    fake, server = provider
    response = await stop_hook.acompletion(
        model="openai/fake-reasoner",
        api_base=server.url,
        api_key="sk-fake",
        messages=[{"role": "user", "content": TEXT}],
        stop=STOPS,
    )
    assert response.choices[0].message.content == "The answer is 42."
    assert response.choices[0].finish_reason == "stop"
    assert "stop" not in fake.requests[-1][1]


@pytest.mark.asyncio
async def test_the_sdk_refuses_a_stop_set_over_the_limits() -> None:
    hook = StopHook(limits=RequestLimits(max_stops=2))
    with pytest.raises(ValueError, match="max_stops=2"):
        await hook.acompletion(model="openai/x", messages=[], stop=["a", "b", "c"])
