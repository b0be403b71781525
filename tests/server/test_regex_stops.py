"""stop_regex and stop_arm_after on the wire: the middleware (and so the proxy) on the OpenAI chat
and completion paths, streamed and whole; the fields' checks and limits; the timeout."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamstop.server._limits import RequestLimits
from streamstop.server._request import InvalidRequest, parse_stop_rules

from .conftest import Client, http_scope
from .test_middleware import App, request, run, sse, text_of
from .test_middleware_limits import error_of

pytestmark = pytest.mark.anyio


def chunks_of(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:]) for line in body.decode().split("\n\n") if line.startswith("data: {")
    ]


async def test_a_stream_is_cut_at_a_regex_split_across_events() -> None:
    app = App([sse("The answer: 7.\nQuest", "ion 1", "2: and then")])
    client = Client(request(None, stop_regex=r"\nQuestion \d{1,3}:"))
    await run(app, client)
    assert client.status == 200
    assert text_of(client.body) == "The answer: 7."
    last = chunks_of(client.body)[-1]["choices"][0]
    # stop_reason names the stop that fired: for a regex stop, its pattern.
    assert (last["finish_reason"], last["stop_reason"]) == ("stop", r"\nQuestion \d{1,3}:")
    assert app.cancelled  # the model was stopped at the match


async def test_the_earlier_of_a_literal_stop_and_a_pattern_cuts() -> None:
    app = App([sse("a 12: b </s>")])
    client = Client(request("</s>", stop_regex=[r"\d\d:", r"zz"]))
    await run(app, client)
    assert text_of(client.body) == "a "


async def test_a_thinking_block_does_not_trip_the_stop() -> None:
    # vLLM issue 52393: lm-eval's "Question:" stop inside the thinking ended GSM8K answers.
    app = App([sse("<think>Question: what is 6*7?</th", "ink>42\n\nQuestion: next")])
    client = Client(request(["Question:"], stop_arm_after="</think>"))
    await run(app, client)
    assert text_of(client.body) == "<think>Question: what is 6*7?</think>42\n\n"


async def test_the_fields_are_taken_out_of_the_request() -> None:
    app = App([sse("hi")])
    client = Client(request("</s>", stop_regex="x{2}", stop_arm_after="</think>", seed=1))
    await run(app, client)
    assert json.loads(app.request_body) == {"model": "m", "stream": True, "seed": 1}


async def test_with_forward_stop_only_the_marker_is_taken_out() -> None:
    app = App([sse("hi")])
    client = Client(request("</s>", stop_regex="x{2}", stop_arm_after="</think>"))
    await run(app, client, forward_stop=True)
    forwarded = json.loads(app.request_body)
    assert (forwarded["stop"], forwarded["stop_regex"]) == ("</s>", "x{2}")
    assert "stop_arm_after" not in forwarded


async def test_a_whole_chat_response_is_cut_at_a_pattern() -> None:
    response = {
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Call 555-1234 now"}},
            {"index": 1, "message": {"role": "assistant", "content": "no number"}},
        ],
    }
    app = App([json.dumps(response).encode()], content_type=b"application/json")
    client = Client(request(None, stream=False, stop_regex=r"\d{3}-\d{4}"))
    await run(app, client)
    choices = json.loads(client.body)["choices"]
    assert [choice["message"]["content"] for choice in choices] == ["Call ", "no number"]
    assert (choices[0]["finish_reason"], choices[0]["stop_reason"]) == ("stop", r"\d{3}-\d{4}")
    assert "stop_reason" not in choices[1]


async def test_a_whole_completion_is_cut_after_the_marker() -> None:
    response = {"object": "text_completion", "choices": [{"index": 0, "text": "a.</t>b.c"}]}
    app = App([json.dumps(response).encode()], content_type=b"application/json")
    client = Client(request(".", stream=False, stop_arm_after="</t>"))
    scope = http_scope(path="/v1/completions")
    await run(app, client, scope)
    assert json.loads(client.body)["choices"][0]["text"] == "a.</t>b"


# -- the fields' checks: a 400 naming the field

LIMITS = RequestLimits(
    max_stop_regex=2, max_stop_regex_length=12, max_stop_regex_match_chars=20, max_stop_length=8
)

BAD_FIELDS: dict[str, tuple[dict[str, Any], str, str, str | None]] = {
    "unbounded": ({"stop_regex": "a.*b"}, "stop_regex", "any length", "invalid_stop_regex"),
    "not a pattern": ({"stop_regex": "(a"}, "stop_regex", "not a valid pattern",
                      "invalid_stop_regex"),
    "an anchor": ({"stop_regex": "^Q:"}, "stop_regex", "anchor", "invalid_stop_regex"),
    "matches nothing but empty": ({"stop_regex": "a?"}, "stop_regex", "empty string",
                                  "invalid_stop_regex"),
    "a number": ({"stop_regex": 3}, "stop_regex", "got 3", None),
    "a list of numbers": ({"stop_regex": [1]}, "stop_regex", "got [1]", None),
    "too many": ({"stop_regex": ["a", "b", "c"]}, "stop_regex", "max_stop_regex=2",
                 "max_stop_regex_exceeded"),
    "too long": ({"stop_regex": "abcdefghijklm"}, "stop_regex", "max_stop_regex_length=12",
                 "max_stop_regex_length_exceeded"),
    "too wide": ({"stop_regex": "a{21}"}, "stop_regex", "max_stop_regex_match_chars=20",
                 "max_stop_regex_match_chars_exceeded"),
    "marker not a string": ({"stop_arm_after": ["x"]}, "stop_arm_after", "got ['x']", None),
    "marker too long": ({"stop_arm_after": "</thinking>"}, "stop_arm_after",
                        "max_stop_length=8", "max_stop_length_exceeded"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_FIELDS)
async def test_a_bad_field_is_a_400_naming_it(case: str) -> None:
    fields, param, message, code = BAD_FIELDS[case]
    app = App([sse("never")])
    client = Client(request("</s>", **fields))
    await run(app, client, limits=LIMITS)
    assert client.status == 400
    error = error_of(client)
    assert (error["param"], error["code"]) == (param, code)
    assert message in error["message"]
    assert app.request_body == b""  # the app never ran


@pytest.mark.parametrize("value", [None, "", [], [""]])
def test_no_patterns(value: Any) -> None:
    assert parse_stop_rules({"stop_regex": value, "stop_arm_after": ""}, LIMITS) == (None, None)


def test_without_the_extra_the_server_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamstop._patterns as patterns

    def missing() -> Any:
        raise ImportError(patterns.INSTALL_HINT)

    monkeypatch.setattr(patterns, "_regex_module", missing)
    with pytest.raises(InvalidRequest) as error:
        parse_stop_rules({"stop_regex": "ab"}, LIMITS)
    assert (error.value.status, error.value.param) == (501, "stop_regex")
    assert "streamstop[regex]" in error.value.message


# -- a catastrophic pattern ends the response in error, never stalls it


async def test_a_pattern_that_times_out_ends_the_stream_with_an_error_event() -> None:
    pieces = [sse("ok ", done=False), *[sse("a" * 30, done=False)] * 20, b"data: [DONE]\n\n"]
    app = App(pieces)
    client = Client(request(None, stop_regex=r"(?:a|aa){1,100}b"))
    await run(app, client, limits=RequestLimits(max_stop_regex_ms=1))
    events = chunks_of(client.body)
    assert events[-1]["error"]["code"] == "stop_regex_timeout"
    assert [event["choices"][0]["delta"]["content"] for event in events[:-1]] == ["ok "]
    assert app.sent < len(pieces)  # the error went up through its send: it stopped there


async def test_a_pattern_that_times_out_on_a_whole_response_is_a_400() -> None:
    response = {"choices": [{"index": 0, "message": {"content": "a" * 2000}}]}
    app = App([json.dumps(response).encode()], content_type=b"application/json")
    client = Client(request(None, stream=False, stop_regex=r"(?:a|aa){1,100}b"))
    await run(app, client, limits=RequestLimits(max_stop_regex_ms=1))
    assert client.status == 400
    error = error_of(client)
    assert (error["param"], error["code"]) == ("stop_regex", "stop_regex_timeout")
