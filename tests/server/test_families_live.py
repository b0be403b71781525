"""Real clients of each API family through ``streamstop proxy``, in front of a fake upstream that
speaks each API as its server does (:mod:`tests.server.fake_families`), all on 127.0.0.1.

The anthropic SDK (raw events, the streaming helper, whole messages), the ollama client (chat
and generate, streamed and not), the openai SDK's ``client.responses`` (raw events, the
streaming helper, whole responses), the OpenAI Agents SDK and the google-genai SDK (Gemini's
streams, thoughts, candidates, whole responses and errors) read what the proxy writes;
llama.cpp and TGI, which have no client offline, are read with httpx. A text with
``[forever]`` never ends on its own: that such a stream ends, and that the fake upstream records
it ``cancelled``, proves the cut closed the upstream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from openai.types.responses import (
    ResponseContentPartDoneEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDoneEvent,
)

from streamstop.server import ProxyApp, StopMiddleware

from .conftest import LiveServer, _serve
from .fake_families import FOREVER, FUNCTION_CALL, SUMMARY_PART, FakeFamilies

STOPS = ["STOP", "</s>", "\n\nHuman:", "<|im_end|>", "END"]  # more than TGI's default cap of 4


class Ends:
    """How the fake upstream's streams ended; waited on without sleeping."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.outcomes: list[str] = []

    def __call__(self, outcome: str) -> None:
        with self._condition:
            self.outcomes.append(outcome)
            self._condition.notify_all()

    def wait_cancelled(self, count: int, seconds: float = 10.0) -> None:
        with self._condition:
            ok = self._condition.wait_for(
                lambda: self.outcomes.count("cancelled") >= count, seconds
            )
        assert ok, f"expected {count} upstream streams cancelled, got {self.outcomes}"

    def cancelled(self) -> int:
        with self._condition:
            return self.outcomes.count("cancelled")


@pytest.fixture(scope="module")
def ends() -> Ends:
    return Ends()


@pytest.fixture(scope="module")
def fake(ends: Ends) -> FakeFamilies:
    return FakeFamilies(on_stream_end=ends)


@pytest.fixture(scope="module")
def upstream(fake: FakeFamilies) -> Iterator[LiveServer]:
    yield from _serve(fake)


@pytest.fixture(scope="module")
def proxy(upstream: LiveServer) -> Iterator[LiveServer]:
    """``streamstop proxy --upstream http://host:port/v1``: the /v1 suffix names the root."""
    yield from _serve(StopMiddleware(ProxyApp(upstream.url)))


@pytest.fixture(scope="module")
def root_proxy(upstream: LiveServer) -> Iterator[LiveServer]:
    """``--upstream http://host:port`` (the root itself), forwarding other paths too."""
    yield from _serve(StopMiddleware(ProxyApp(upstream.base_url, forward_other=True)))


@pytest.fixture
def claude(proxy: LiveServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
        yield client


@pytest.fixture
def llama(proxy: LiveServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=proxy.base_url) as client:
        yield client


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# -- Anthropic -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_anthropic_raw_events_end_with_the_stop(
    proxy: LiveServer, ends: Ends, fake: FakeFamilies
) -> None:
    cancelled = ends.cancelled()
    client = anthropic.AsyncAnthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    async with client:
        stream: Any = await client.messages.create(
            model="claude-fake",
            max_tokens=100,
            messages=_user(f"Hello there STOP and more {FOREVER}"),
            stop_sequences=STOPS,
            stream=True,
        )
        events: list[Any] = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Hello there "
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "stop_sequence"
    assert delta.delta.stop_sequence == "STOP"
    ends.wait_cancelled(cancelled + 1)
    path, request = fake.requests[-1]
    assert path == "/v1/messages"
    assert "stop_sequences" not in request  # taken out: the upstream's cap does not apply


def test_anthropic_streaming_helper_and_blocks_that_are_not_text(
    claude: anthropic.Anthropic,
) -> None:
    with claude.messages.stream(
        model="claude-fake",
        max_tokens=100,
        messages=_user("Think of it.</s> never seen"),
        stop_sequences=STOPS,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "get", "input_schema": {"type": "object"}}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Think of it."
    assert final.stop_reason == "stop_sequence"
    assert final.stop_sequence == "</s>"
    thinking, answer = final.content  # the tool_use block came after the cut: dropped
    assert thinking.type == "thinking"
    assert thinking.thinking == "Let me think."
    assert thinking.signature == "sig"
    assert answer.type == "text"
    assert answer.text == "Think of it."


def test_anthropic_tool_use_passes_when_no_stop_fires(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-fake",
        max_tokens=100,
        messages=_user("Calling a tool <|im"),
        stop_sequences=STOPS,
        tools=[{"name": "get", "input_schema": {"type": "object"}}],
    ) as stream:
        final = stream.get_final_message()
    answer, tool = final.content
    assert answer.type == "text"
    assert answer.text == "Calling a tool <|im"  # held, then released at the block's end
    assert tool.type == "tool_use"
    assert tool.input == {"q": "x"}
    assert final.stop_reason == "end_turn"


def test_anthropic_whole_message(claude: anthropic.Anthropic, fake: FakeFamilies) -> None:
    message = claude.messages.create(
        model="claude-fake",
        max_tokens=100,
        messages=_user("One. END two."),
        stop_sequences=STOPS,
    )
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "One. "  # type: ignore[union-attr]
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "END"


def test_anthropic_bad_stop_sequences_are_a_400_naming_the_field(
    claude: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as error:
        claude.messages.create(
            model="claude-fake",
            max_tokens=10,
            messages=_user("x"),
            stop_sequences=[1, 2],  # type: ignore[list-item]
        )
    assert "stop_sequences" in str(error.value)


# -- Ollama --------------------------------------------------------------------------------------


def test_ollama_chat_stream(llama: ollama.Client, ends: Ends, fake: FakeFamilies) -> None:
    cancelled = ends.cancelled()
    parts = list(
        llama.chat(
            model="llama3.2",
            messages=_user(f"Why is the sky blue?<|im_end|>junk {FOREVER}"),
            options={"stop": STOPS, "temperature": 0},
            stream=True,
        )
    )
    assert "".join(part.message.content or "" for part in parts) == "Why is the sky blue?"
    assert parts[-1].done is True
    assert parts[-1].done_reason == "stop"
    assert all(part.done is False for part in parts[:-1])
    ends.wait_cancelled(cancelled + 1)
    path, request = fake.requests[-1]
    assert path == "/api/chat"
    assert request["options"] == {"temperature": 0}


def test_ollama_generate_stream_and_whole(llama: ollama.Client) -> None:
    parts = list(
        llama.generate(model="m", prompt="a b STOP c", options={"stop": STOPS}, stream=True)
    )
    assert "".join(part.response or "" for part in parts) == "a b "
    assert parts[-1].done_reason == "stop"
    whole = llama.generate(model="m", prompt="a b STOP c", options={"stop": STOPS}, stream=False)
    assert whole.response == "a b "
    assert whole.done_reason == "stop"
    chat = llama.chat(model="m", messages=_user("x END y"), options={"stop": STOPS}, stream=False)
    assert chat.message.content == "x "


def test_ollama_without_a_stop_is_untouched(llama: ollama.Client) -> None:
    parts = list(llama.chat(model="m", messages=_user("plain <| text"), stream=True))
    assert "".join(part.message.content or "" for part in parts) == "plain <| text"
    assert parts[-1].eval_count == 5  # the upstream's own last line, passed as it was


def test_ollama_client_that_leaves_stops_the_upstream(llama: ollama.Client, ends: Ends) -> None:
    cancelled = ends.cancelled()
    stream = llama.chat(
        model="m", messages=_user(f"going on {FOREVER}"), options={"stop": STOPS}, stream=True
    )
    next(iter(stream))
    stream.close()  # type: ignore[attr-defined]
    ends.wait_cancelled(cancelled + 1)


# -- llama.cpp and TGI (httpx: no offline clients) ----------------------------------------------


def _sse_data(body: bytes) -> list[dict[str, Any]]:
    out = []
    for line in body.splitlines():
        if line.startswith(b"data:"):
            out.append(json.loads(line[5:]))
    return out


def test_llamacpp_completion(root_proxy: LiveServer, ends: Ends, fake: FakeFamilies) -> None:
    cancelled = ends.cancelled()
    with httpx.Client(base_url=root_proxy.base_url) as client:
        streamed = client.post(
            "/completion",
            json={
                "prompt": f"Once upon a time</s> {FOREVER}",
                "stop": STOPS,
                "stream": True,
                "timings_per_token": True,
            },
        )
        many = client.post(
            "/completion",
            json={"prompt": ["a.STOP.b", "c.END.d"], "stop": STOPS, "stream": True},
        )
        whole = client.post("/completion", json={"prompt": "x STOP y", "stop": STOPS})
    events = _sse_data(streamed.content)
    assert "".join(event["content"] for event in events) == "Once upon a time"
    assert events[-1]["stop"] is True
    assert (events[-1]["stop_type"], events[-1]["stopping_word"]) == ("word", "</s>")
    # The end of the cut has the server's fields as they came (timings, with each event under
    # timings_per_token), and none that never came (model: only in the server's own end).
    assert events[-1]["timings"]["predicted_n"] == events[-1]["tokens_predicted"] == 7
    assert "model" not in events[-1]
    ends.wait_cancelled(cancelled + 1)
    assert "stop" not in fake.requests[-1][1]
    by_index: dict[int, str] = {}
    for event in _sse_data(many.content):
        by_index[event["index"]] = by_index.get(event["index"], "") + event["content"]
    assert by_index == {0: "a.", 1: "c."}
    assert whole.json()["content"] == "x "
    assert whole.json()["stopping_word"] == "STOP"


def test_llamacpps_paths_without_v1_are_filtered_as_what_they_serve(
    proxy: LiveServer, ends: Ends, fake: FakeFamilies
) -> None:
    # The openai client given the server's root (no /v1) asks for /chat/completions: llama.cpp
    # serves OpenAI's format there, and the proxy forwards and cuts it as /v1/chat/completions.
    cancelled = ends.cancelled()
    with openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="m", messages=_user(f"Once upon</s> a time {FOREVER}"), stop=STOPS, stream=True
        )
        chunks = list(stream)
        whole = client.chat.completions.create(model="m", messages=_user("a b STOP c"), stop=STOPS)
    assert fake.requests[-2][0] == "/chat/completions"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Once upon"
    assert chunks[-1].choices[0].finish_reason == "stop"
    ends.wait_cancelled(cancelled + 1)
    assert whole.choices[0].message.content == "a b "
    # /completions is llama.cpp's native /completion under another name: cut as that.
    with httpx.Client(base_url=proxy.base_url) as http:
        native = http.post(
            "/completions", json={"prompt": "x.STOP.y", "stop": STOPS, "stream": True}
        )
    events = _sse_data(native.content)
    assert "".join(event["content"] for event in events) == "x."
    assert (events[-1]["stop"], events[-1]["stopping_word"]) == (True, "STOP")


def test_tgi_generate_stream_and_generate(root_proxy: LiveServer, fake: FakeFamilies) -> None:
    body = {"inputs": "Deep learning is<|im_end|>x", "parameters": {"stop": STOPS, "details": True}}
    with httpx.Client(base_url=root_proxy.base_url) as client:
        streamed = client.post("/generate_stream", json=body)
        sent = fake.requests[-1][1]
        whole = client.post("/generate", json=body)
    events = _sse_data(streamed.content)
    assert events[-1]["generated_text"] == "Deep learning is"
    assert events[-1]["details"]["finish_reason"] == "stop_sequence"
    assert "".join(event["token"]["text"] for event in events) == "Deep learning is"
    assert sent["parameters"] == {"details": True}  # TGI's cap of 4 stops does not apply
    assert whole.json() == {
        "generated_text": "Deep learning is",
        "details": {"finish_reason": "stop_sequence", "generated_tokens": 9, "seed": None},
    }


# -- routing -------------------------------------------------------------------------------------


def test_routing_other_paths(proxy: LiveServer, root_proxy: LiveServer) -> None:
    with httpx.Client(base_url=proxy.base_url) as client:
        refused = client.post("/api/tags", json={})
        bad = client.post("/api/..%2fchat", json={})
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "unknown_url"
    assert bad.status_code == 400
    with httpx.Client(base_url=root_proxy.base_url) as client:
        forwarded = client.post("/api/tags", json={})
        smuggled = client.post("/api/%2e%2e/x", json={})
    assert forwarded.status_code == 404  # the fake upstream's own answer
    assert "no route /api/tags" in forwarded.json()["error"]["message"]
    assert smuggled.status_code == 400
    assert smuggled.json()["error"]["code"] == "invalid_path"


def test_forward_stop_sends_the_stops_upstream_too(
    upstream: LiveServer, fake: FakeFamilies
) -> None:
    for server in _serve(StopMiddleware(ProxyApp(upstream.url), forward_stop=True)):
        with ollama.Client(host=server.base_url) as client:
            reply = client.generate(
                model="m", prompt="ab STOP", options={"stop": ["STOP"]}, stream=False
            )
        assert reply.response == "ab "
        assert fake.requests[-1][1]["options"] == {"stop": ["STOP"]}


# -- OpenAI Responses ----------------------------------------------------------------------------


@pytest.fixture
def gpt(proxy: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key="k", max_retries=0) as client:
        yield client


TOOLS: Any = [{"type": "function", "name": "get", "parameters": {"type": "object"}}]


def test_responses_raw_events_end_with_the_stop(
    gpt: openai.OpenAI, ends: Ends, fake: FakeFamilies
) -> None:
    cancelled = ends.cancelled()
    stream = gpt.responses.create(
        model="o4-mini",
        input=f"Hello there STOP and more {FOREVER}",
        stream=True,
        extra_body={"stop": STOPS},
    )
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the reasoning item, before the message
        "response.reasoning_summary_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == SUMMARY_PART["text"]  # stops and all: not the message's text
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(e.delta for e in deltas) == "Hello there "
    assert all(e.obfuscation for e in deltas)  # type: ignore[attr-defined]
    done, part, item, completed = events[-4:]
    assert isinstance(done, ResponseTextDoneEvent)
    assert done.text == "Hello there "
    assert isinstance(part, ResponseContentPartDoneEvent)
    assert isinstance(part.part, ResponseOutputText)
    assert part.part.text == "Hello there "
    assert isinstance(item, ResponseOutputItemDoneEvent)
    assert isinstance(item.item, ResponseOutputMessage)
    assert item.item.status == "completed"
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Hello there "
    assert completed.response.stop_reason == "STOP"  # type: ignore[attr-defined]
    assert [i.type for i in completed.response.output] == ["reasoning", "message"]
    ends.wait_cancelled(cancelled + 1)
    path, request = fake.requests[-1]
    assert path == "/v1/responses"
    assert "stop" not in request  # taken out: the API would refuse it


def test_responses_streaming_helper_gives_the_cut_response(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(
        model="o4-mini",
        input="Think of it.</s> never seen",
        tools=TOOLS,
        extra_body={"stop": STOPS},
    ) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == "Think of it."
    assert final.output_text == "Think of it."
    assert final.stop_reason == "</s>"  # type: ignore[attr-defined]
    assert final.status == "completed"
    # The function call came after the cut: it never happened.
    assert [item.type for item in final.output] == ["reasoning", "message"]


def test_responses_function_calls_pass_when_no_stop_fires(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(
        model="o4-mini", input="Calling a tool <|im", tools=TOOLS, extra_body={"stop": STOPS}
    ) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Calling a tool <|im"  # held, then released at its end
    call = final.output[-1]
    assert call.type == "function_call"
    assert call.arguments == FUNCTION_CALL["arguments"]  # holds STOP and </s>: untouched
    assert not hasattr(final, "stop_reason")


def test_responses_whole(gpt: openai.OpenAI, fake: FakeFamilies) -> None:
    response = gpt.responses.create(
        model="o4-mini", input="One. END two.", extra_body={"stop": STOPS}
    )
    assert response.output_text == "One. "
    assert response.stop_reason == "END"  # type: ignore[attr-defined]
    assert response.status == "completed"
    assert response.usage is not None  # the upstream's: it generated all of it
    assert "stop" not in fake.requests[-1][1]


def test_responses_bad_stops_are_a_400_naming_the_field(gpt: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        gpt.responses.create(model="o4-mini", input="x", extra_body={"stop": [1, 2]})
    assert error.value.param == "stop"


def test_responses_forward_stop_gets_the_upstreams_400(upstream: LiveServer) -> None:
    for server in _serve(StopMiddleware(ProxyApp(upstream.url), forward_stop=True)):
        with (
            openai.OpenAI(base_url=server.url, api_key="k", max_retries=0) as client,
            pytest.raises(openai.BadRequestError) as error,
        ):
            client.responses.create(model="o4-mini", input="x", extra_body={"stop": ["a"]})
        assert error.value.status_code == 400
        assert error.value.code == "unknown_parameter"
        assert error.value.param == "stop"
        assert "Unknown parameter: 'stop'." in str(error.value)


def test_responses_client_that_leaves_stops_the_upstream(gpt: openai.OpenAI, ends: Ends) -> None:
    cancelled = ends.cancelled()
    stream = gpt.responses.create(
        model="o4-mini", input=f"going on {FOREVER}", stream=True, extra_body={"stop": STOPS}
    )
    for event in stream:
        if event.type == "response.output_text.delta":
            break
    stream.close()
    ends.wait_cancelled(cancelled + 1)


def test_responses_events_written_are_the_sdks_types(proxy: LiveServer) -> None:
    """Strictly validated, each by its own model: every field the SDK requires is there."""
    from .test_family_responses import EVENT

    body = {"model": "o4-mini", "input": "a STOP b", "stream": True, "stop": STOPS}
    with httpx.Client(base_url=proxy.url) as client:
        streamed = client.post("/responses", json=body)
    events = [EVENT.validate_python(payload) for payload in _sse_data(streamed.content)]
    assert events[-1].response.output_text == "a "


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Agents SDK runs on asyncio only
async def test_openai_agents_runner_through_the_proxy(
    anyio_backend: str, proxy: LiveServer, fake: FakeFamilies
) -> None:
    from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner

    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    async with client:
        agent = Agent(
            name="echo",
            instructions="Echo the user.",
            model=OpenAIResponsesModel(model="o4-mini", openai_client=client),
            model_settings=ModelSettings(extra_body={"stop": STOPS}),
        )
        result = await Runner.run(
            agent,
            f"Final answer: 42<|im_end|>then more {FOREVER}",
            run_config=RunConfig(tracing_disabled=True),
        )
    assert result.final_output == "Final answer: 42"
    path, request = fake.requests[-1]
    assert path == "/v1/responses"
    assert "stop" not in request
    assert request["instructions"] == "Echo the user."


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_openai_agents_streamed_run_through_the_proxy(
    anyio_backend: str, proxy: LiveServer, ends: Ends
) -> None:
    """Runner.run_streamed reads the events themselves (it raises on an error event or a
    response that never completes): the cut stream is a complete one to it."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner

    cancelled = ends.cancelled()
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    async with client:
        agent = Agent(
            name="echo",
            model=OpenAIResponsesModel(model="o4-mini", openai_client=client),
            model_settings=ModelSettings(extra_body={"stop": STOPS}),
        )
        result = Runner.run_streamed(
            agent,
            f"Thought: done.\nObservation END {FOREVER}",
            run_config=RunConfig(tracing_disabled=True),
        )
        kinds = [event.type async for event in result.stream_events()]
    assert result.final_output == "Thought: done.\nObservation "
    assert "raw_response_event" in kinds
    ends.wait_cancelled(cancelled + 1)


# -- Gemini (the google-genai SDK) -----------------------------------------------------------------

SIX_STOPS = [*STOPS, "<|eot_id|>"]  # more than Gemini's cap of 5


@pytest.fixture
def gemini(proxy: LiveServer) -> Iterator[genai.Client]:
    client = genai.Client(
        api_key="test", http_options=genai_types.HttpOptions(base_url=proxy.base_url)
    )
    with client:
        yield client


def _config(**options: Any) -> genai_types.GenerateContentConfig:
    return genai_types.GenerateContentConfig(stop_sequences=SIX_STOPS, **options)


def test_gemini_stream_is_cut_and_closes_the_upstream(
    gemini: genai.Client, ends: Ends, fake: FakeFamilies
) -> None:
    cancelled = ends.cancelled()
    chunks = list(
        gemini.models.generate_content_stream(
            model="gemini-2.5-flash",
            contents=f"Why is the sky blue?<|im_end|>junk {FOREVER}",
            config=_config(temperature=0),
        )
    )
    assert "".join(chunk.text or "" for chunk in chunks) == "Why is the sky blue?"
    last = chunks[-1].candidates[0]  # type: ignore[index]
    assert last.finish_reason == genai_types.FinishReason.STOP
    assert all(chunk.candidates[0].finish_reason is None for chunk in chunks[:-1])  # type: ignore[index]
    assert chunks[-1].model_version == "gemini-2.5-flash"
    assert chunks[-1].response_id == "fakeResponseId0"
    ends.wait_cancelled(cancelled + 1)
    path, request = fake.requests[-1]
    assert path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert request["generationConfig"] == {"temperature": 0}  # 6 stops: taken out


def test_gemini_thoughts_pass_and_the_answer_is_cut(gemini: genai.Client) -> None:
    thinking = genai_types.ThinkingConfig(include_thoughts=True)
    chunks = list(
        gemini.models.generate_content_stream(
            model="gemini-2.5-flash",
            contents="The answer is 42.END Not this.",
            config=_config(thinking_config=thinking),
        )
    )
    parts = [part for chunk in chunks for part in chunk.candidates[0].content.parts]  # type: ignore[index, union-attr]
    thoughts = [part.text for part in parts if part.thought]
    assert thoughts == ["**Reading the prompt**\nThe user wants an echo."]
    assert "".join(part.text or "" for part in parts if not part.thought) == "The answer is 42."
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP  # type: ignore[index]


def test_gemini_whole_response_and_several_candidates(gemini: genai.Client) -> None:
    whole = gemini.models.generate_content(
        model="gemini-2.5-flash", contents="One. STOP two.", config=_config()
    )
    assert whole.text == "One. "
    assert whole.candidates[0].finish_reason == genai_types.FinishReason.STOP  # type: ignore[index]
    assert whole.usage_metadata is not None
    chunks = list(
        gemini.models.generate_content_stream(
            model="gemini-2.5-flash", contents="a b </s> c", config=_config(candidate_count=2)
        )
    )
    by_index: dict[int, str] = {}
    for chunk in chunks:
        for cand in chunk.candidates or []:
            text = "".join(part.text or "" for part in cand.content.parts or [])  # type: ignore[union-attr]
            by_index[cand.index or 0] = by_index.get(cand.index or 0, "") + text
    assert by_index == {0: "a b ", 1: "a b "}


def test_gemini_errors_are_the_sdks_own(
    gemini: genai.Client, upstream: LiveServer, proxy: LiveServer
) -> None:
    # The fake upstream answers 6 stops as the real API does...
    direct = genai.Client(
        api_key="test", http_options=genai_types.HttpOptions(base_url=upstream.base_url)
    )
    with direct, pytest.raises(genai_errors.ClientError) as refused:
        direct.models.generate_content(model="gemini-2.5-flash", contents="x", config=_config())
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert "must not exceed 5" in (refused.value.message or "")
    # ...and this layer's own refusals are in the same shape.
    with pytest.raises(genai_errors.ClientError) as over:
        gemini.models.generate_content(
            model="gemini-2.5-flash",
            contents="x",
            config=genai_types.GenerateContentConfig(stop_sequences=["s"] * 1025),
        )
    assert (over.value.code, over.value.status) == (400, "INVALID_ARGUMENT")
    assert "max_stops=1024" in (over.value.message or "")
    # A stream asked without alt=sse is one JSON array: refused when it has stops.
    url = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    body = {"contents": [{"parts": [{"text": "a STOP b"}]}]}
    with httpx.Client(base_url=proxy.base_url) as client:
        array = client.post(url, json={**body, "generationConfig": {"stopSequences": ["STOP"]}})
        plain = client.post(url, json=body)
    assert array.status_code == 400
    assert array.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "?alt=sse" in array.json()["error"]["message"]
    assert [item["candidates"][0]["content"]["parts"][0]["text"] for item in plain.json()][:2] == [
        "a S",
        "TOP",
    ]  # without stops: the array as the upstream sent it


def test_gemini_forward_stop_gets_the_upstreams_400(upstream: LiveServer) -> None:
    for server in _serve(StopMiddleware(ProxyApp(upstream.url), forward_stop=True)):
        options = genai_types.HttpOptions(base_url=server.base_url)
        with genai.Client(api_key="test", http_options=options) as client:
            with pytest.raises(genai_errors.ClientError) as error:
                client.models.generate_content(model="m", contents="x", config=_config())
            assert error.value.status == "INVALID_ARGUMENT"
            few = client.models.generate_content(
                model="m", contents="ab STOP", config={"stop_sequences": ["STOP"]}
            )
            assert few.text == "ab "
