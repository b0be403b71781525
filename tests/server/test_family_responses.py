"""The Responses API's adapter (:mod:`streamstop._family_responses`), sans-I/O: what the shared
table (``test_families.py``) does not reach. Which events are text and which are not, how the
cut rebuilds the response, the numbering of events the filter adds, the faults, whole
responses; and every event written checked against the openai SDK's own types."""

from __future__ import annotations

import copy
import json
import typing
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from streamstop import StopAutomaton
from streamstop._families import FAMILIES
from streamstop._family import FamilyStream
from streamstop._family_responses import Responses
from streamstop.server import Message

from ..json_codecs import json_codec  # noqa: F401 (a fixture)
from ..streamstop.test_families import (
    _sse,
    _sse_events,
    responses_bytes,
    responses_events,
    responses_read,
)

pytestmark = pytest.mark.usefixtures("json_codec")


def _event_models() -> dict[str, type[Any]]:
    """Each event type's model in the SDK's union of stream events."""
    (union, *_) = typing.get_args(ResponseStreamEvent)
    models = {}
    for model in typing.get_args(union):
        (kind,) = typing.get_args(model.model_fields["type"].annotation)
        models[kind] = model
    return models


MODELS = _event_models()


class _Events:
    """Validates an event by the SDK's model of its type: strict (required fields, literals)."""

    @staticmethod
    def validate_python(payload: dict[str, Any]) -> Any:
        return TypeAdapter(MODELS[payload["type"]]).validate_python(payload)


EVENT = _Events()
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "in_progress",
    "model": "o4-mini",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": None,
}


def _numbered(events: list[dict[str, Any]], start: int = 0) -> bytes:
    return _sse(
        [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events, start=start)]
    )


def _filter(data: bytes, stops: Any, bytewise: bool = False, **options: Any) -> bytes:
    stream = FamilyStream(FAMILIES["responses"], stops, **options)
    if bytewise:
        out = b"".join(stream.feed(data[i : i + 1]) for i in range(len(data)))
    else:
        out = stream.feed(data)
    return out + stream.flush()


def _payloads(data: bytes) -> list[dict[str, Any]]:
    return [payload for _, payload in _sse_events(data)]


def _message_events(
    output_index: int, item_id: str, parts: list[list[str]], done: bool = True
) -> list[dict[str, Any]]:
    """A message item of ``parts`` (each a list of deltas), with or without its end."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "message",
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": output_index, "item": item}
    ]
    finished = []
    for index, deltas in enumerate(parts):
        where = {"item_id": item_id, "output_index": output_index, "content_index": index}
        part: dict[str, Any] = {
            "type": "output_text",
            "annotations": [],
            "logprobs": [],
            "text": "",
        }
        events.append({"type": "response.content_part.added", **where, "part": part})
        events += [
            {"type": "response.output_text.delta", **where, "delta": d, "logprobs": []}
            for d in deltas
        ]
        text = "".join(deltas)
        finished.append({**part, "text": text})
        events += [
            {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": finished[-1]},
        ]
    if done:
        item = {**item, "status": "completed", "content": finished}
        events.append(
            {"type": "response.output_item.done", "output_index": output_index, "item": item}
        )
    return events


def _start() -> list[dict[str, Any]]:
    return [
        {"type": "response.created", "response": RESPONSE},
        {"type": "response.in_progress", "response": RESPONSE},
    ]


def _check_types(data: bytes) -> list[Any]:
    """Every event validated by the SDK's own models (strict: required fields, literals)."""
    return [EVENT.validate_python(payload) for payload in _payloads(data)]


# -- what is text ----------------------------------------------------------------------------


def test_only_output_text_of_messages_is_cut() -> None:
    function = {
        "id": "fc_1",
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "c",
        "name": "f",
    }
    refusal_where = {"item_id": "msg_0", "output_index": 1, "content_index": 0}
    events = [
        *_start(),
        {"type": "response.output_item.added", "output_index": 0, "item": function},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": '{"a": "STOP"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": '{"a": "STOP"}',
        },
        {
            # Text events of an item that is not a message (none such exists today): not ours.
            "type": "response.output_text.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "STOP",
            "logprobs": [],
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**function, "status": "completed", "arguments": '{"a": "STOP"}'},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {
                "id": "msg_0",
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            },
        },
        {
            "type": "response.content_part.added",
            **refusal_where,
            "part": {"type": "refusal", "refusal": ""},
        },
        {"type": "response.refusal.delta", **refusal_where, "delta": "no STOP"},
        {"type": "response.refusal.done", **refusal_where, "refusal": "no STOP"},
        {"type": "response.completed", "response": {**RESPONSE, "status": "completed"}},
    ]
    data = _numbered(events)
    assert _filter(data, "STOP") == data  # all of it byte for byte: none of it is text
    _check_types(data)


def test_a_stop_in_a_later_part_keeps_the_earlier_ones_and_drops_later_items() -> None:
    later = _message_events(2, "msg_2", [["never seen"]])
    events = [
        *_start(),
        *_message_events(0, "msg_0", [["first ", "item"]]),
        *_message_events(1, "msg_1", [["part one"], ["part ", "two S", "TOP cut"]], done=False),
        *later,
    ]
    out = _filter(_numbered(events), "STOP")
    payloads = _payloads(out)
    assert b"never seen" not in out
    assert b"cut" not in out
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    item = payloads[-2]["item"]
    assert [part["text"] for part in item["content"]] == ["part one", "part two "]
    assert item["status"] == "completed"
    response = payloads[-1]["response"]
    assert [i["id"] for i in response["output"]] == ["msg_0", "msg_1"]
    assert response["output"][0]["content"][0]["text"] == "first item"
    assert response["stop_reason"] == "STOP"
    assert response["status"] == "completed"
    events_read = _check_types(out)
    assert events_read[-1].response.output_text == "first itempart onepart two "


def test_held_text_goes_out_before_the_part_ends_and_numbers_stay_consecutive() -> None:
    out = _filter(responses_bytes(["ab", " ST"]), "STOP")
    payloads = _payloads(out)
    deltas = [p["delta"] for p in payloads if p["type"] == "response.output_text.delta"]
    assert deltas == ["ab", " ", "ST"]  # "ST" held, then released at output_text.done
    kinds = [p["type"] for p in payloads]
    assert kinds[kinds.index("response.output_text.done") - 1] == "response.output_text.delta"
    assert responses_read(out).text == "ab ST"  # the reader checks the numbering
    assert len(payloads) == len(responses_events(["ab", " ST"])) + 1


def test_numbering_starts_where_the_upstream_does() -> None:
    events = [*_start(), *_message_events(0, "m", [["a <", "b"]])]
    out = _filter(_numbered(events, start=7), "<!")
    numbers = [p["sequence_number"] for p in _payloads(out)]
    assert numbers == list(range(7, 7 + len(events) + 1))


def test_logprobs_and_annotations_past_the_cut_are_dropped() -> None:
    where = {"item_id": "m", "output_index": 0, "content_index": 0}

    def logprob(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": -0.5, "top_logprobs": []}

    events = [
        *_start(),
        *_message_events(0, "m", [[]], done=False)[:2],
        {
            "type": "response.output_text.delta",
            **where,
            "delta": "see [1]",
            "logprobs": [logprob("see"), logprob(" [1]")],
        },
        {
            "type": "response.output_text.annotation.added",
            **where,
            "annotation_index": 0,
            "annotation": {
                "type": "file_citation",
                "file_id": "f",
                "filename": "a.pdf",
                "index": 7,
            },
        },
        {
            "type": "response.output_text.delta",
            **where,
            "delta": " ok STOP [2]",
            "logprobs": [logprob(" ok"), logprob(" STOP"), logprob(" [2]")],
        },
        {
            "type": "response.output_text.annotation.added",
            **where,
            "annotation_index": 1,
            "annotation": {
                "type": "file_citation",
                "file_id": "g",
                "filename": "b.pdf",
                "index": 18,
            },
        },
    ]
    out = _filter(_numbered(events), "STOP")
    payloads = _payloads(out)
    last_delta, text_done, part_done = payloads[-5:-2]
    assert last_delta["delta"] == " ok "
    assert [lp["token"] for lp in last_delta["logprobs"]] == [" ok"]
    assert text_done["text"] == "see [1] ok "
    assert [lp["token"] for lp in text_done["logprobs"]] == ["see", " [1]", " ok"]
    assert [a["filename"] for a in part_done["part"]["annotations"]] == ["a.pdf"]
    assert b"b.pdf" not in out
    _check_types(out)


def test_include_stop_keeps_the_stop_in_every_copy_of_the_text() -> None:
    out = _filter(responses_bytes(["Hi ST", "OP there"]), "STOP", include_stop=True)
    read = responses_read(out)  # checks the done events against the deltas
    assert (read.text, read.stop) == ("Hi STOP", "STOP")


def test_every_event_of_a_cut_is_of_the_sdks_types() -> None:
    for bytewise in (False, True):
        out = _filter(responses_bytes(["x STOP y"]), "STOP", bytewise=bytewise)
        # The table's writer leaves out fields the SDK requires of a response: add them.
        filled = b"".join(
            _sse([(p["type"], _fill(p))]) for p in _payloads(out) if p["type"] != "error"
        )
        events = _check_types(filled)
        assert events[-1].response.output_text == "x "
        assert events[-1].response.stop_reason == "STOP"  # an extra field, kept by the SDK


def _fill(payload: dict[str, Any]) -> dict[str, Any]:
    if "response" not in payload:
        return payload
    return {**payload, "response": {**RESPONSE, **payload["response"]}}


# -- faults ---------------------------------------------------------------------------------


def test_the_error_events_written_are_of_the_sdks_type_and_raise_in_the_sdk() -> None:
    payload = Responses().error_payload("The upstream broke off.", "upstream_broken")
    event = EVENT.validate_python(payload)
    assert (event.type, event.code, event.message) == (
        "error",
        "upstream_broken",
        "The upstream broke off.",
    )
    # The nested object the live API sends: openai-python raises APIError on it.
    assert payload["error"]["message"] == "The upstream broke off."


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_a_failed_response_passes_and_drops_the_held_text(bytewise: bool) -> None:
    events = [
        *_start(),
        *_message_events(0, "m", [[]], done=False)[:2],
        {
            "type": "response.output_text.delta",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi ST",
            "logprobs": [],
        },
        {
            "type": "response.failed",
            "response": {
                **RESPONSE,
                "status": "failed",
                "error": {"code": "server_error", "message": "The model failed."},
            },
        },
    ]
    stream = FamilyStream(FAMILIES["responses"], "STOP")
    data = _numbered(events)
    out = (
        b"".join(stream.feed(data[i : i + 1]) for i in range(len(data)))
        if bytewise
        else (stream.feed(data))
    )
    out += stream.flush()
    payloads = _payloads(out)
    assert payloads[-1]["type"] == "response.failed"
    assert payloads[-2]["delta"] == "Hi "  # "ST" may be the start of the stop: never sent
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert stream.error == "upstream"
    assert not stream.cut


def test_a_body_that_ends_before_the_response_does_ends_with_an_error_event() -> None:
    stream = FamilyStream(FAMILIES["responses"], "STOP")
    data = responses_bytes(["Hi ST"], end=False)
    out = stream.feed(data) + stream.flush()
    payloads = _payloads(out)
    last = EVENT.validate_python(payloads[-1])
    assert last.type == "error"
    assert last.code == "upstream_truncated"
    assert "response.completed" in last.message
    assert last.sequence_number == payloads[-2]["sequence_number"] + 1
    assert b'"Hi ST"' not in out
    assert stream.error == "truncated"


def test_an_error_frame_the_proxy_wrote_is_numbered_in_turn() -> None:
    family = Responses()
    frame = family.encode(family.error_payload("broke off", "upstream_broken"))
    data = responses_bytes(["Hi"], end=False) + frame
    payloads = _payloads(_filter(data, "STOP"))
    assert payloads[-1]["code"] == "upstream_broken"
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))


def test_an_error_in_openais_chat_shape_ends_the_stream_too() -> None:
    data = responses_bytes(["Hi <"], end=False) + b'data: {"error": {"message": "x"}}\n\n'
    stream = FamilyStream(FAMILIES["responses"], "<!")
    payloads = _payloads(stream.feed(data) + stream.flush())
    assert stream.error == "upstream"
    assert payloads[-2]["delta"] == "Hi "
    # Numbered in turn like every event sent: a client may rely on the numbers.
    assert payloads[-1] == {"error": {"message": "x"}, "sequence_number": len(payloads) - 1}


# -- whole responses -------------------------------------------------------------------------


def _whole_response() -> dict[str, Any]:
    return {
        **RESPONSE,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {
                "id": "rs",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "STOP not here"}],
            },
            {
                "id": "m",
                "type": "message",
                "status": "incomplete",
                "role": "assistant",
                "content": [
                    {"type": "refusal", "refusal": "STOP not here either"},
                    {
                        "type": "output_text",
                        "text": "a STOP b",
                        "logprobs": [],
                        "annotations": [
                            {
                                "type": "url_citation",
                                "start_index": 4,
                                "end_index": 8,
                                "title": "t",
                                "url": "u",
                            }
                        ],
                    },
                    {"type": "output_text", "text": "later", "annotations": []},
                ],
            },
            {"id": "fc", "type": "function_call", "arguments": "{}", "call_id": "c", "name": "f"},
        ],
        "output_text": "a STOP blater",
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 10,
        },
    }


def test_a_whole_response_is_cut_like_a_stream() -> None:
    response = _whole_response()
    before = copy.deepcopy(response)
    family = FAMILIES["responses"]
    cut, fired = family.cut_whole(response, StopAutomaton.from_stops(["STOP"]), False)
    assert response == before  # not changed in place
    assert fired == ["STOP"]
    reasoning, message = cut["output"]
    assert reasoning == response["output"][0]
    refusal, text = message["content"]
    assert refusal == response["output"][1]["content"][0]
    assert text["text"] == "a "
    assert text["annotations"] == []  # the citation was of the text past the cut
    assert message["status"] == "completed"
    assert (cut["status"], cut["incomplete_details"], cut["stop_reason"]) == (
        "completed",
        None,
        "STOP",
    )
    assert cut["output_text"] == "a "
    assert cut["usage"] == response["usage"]  # what the upstream generated
    model = Response.model_validate(cut)
    assert model.output_text == "a "
    assert model.stop_reason == "STOP"  # type: ignore[attr-defined]


def test_a_whole_response_without_a_stop_is_left_alone() -> None:
    response = _whole_response()
    family = FAMILIES["responses"]
    automaton = StopAutomaton.from_stops(["not a stop"])
    assert family.cut_whole(response, automaton, False) == (response, [])
    assert family.cut_whole([response], automaton, False) == ([response], [])
    assert family.cut_whole({"output": "x"}, automaton, False) == ({"output": "x"}, [])
    included, _ = family.cut_whole(response, StopAutomaton.from_stops(["STOP"]), True)
    assert included["output"][1]["content"][1]["text"] == "a STOP"


def test_module_all_and_doctests() -> None:
    import doctest

    import streamstop._family_responses as module

    from ..public_api import public_definitions

    assert set(module.__all__) == public_definitions(module)
    assert doctest.testmod(module).failed == 0


def test_the_fake_upstreams_events_are_of_the_sdks_types() -> None:
    """The events the live tests' fake upstream writes (fake_families) pass the SDK's models:
    what the filter is tested against is what the API sends."""
    import anyio

    from .fake_families import FakeFamilies

    sent: list[bytes] = []

    async def run() -> None:
        body = json.dumps(
            {
                "model": "o4-mini",
                "input": "Hi",
                "stream": True,
                "tools": [{"type": "function", "name": "get"}],
            }
        ).encode()
        given = False

        async def receive() -> Message:
            nonlocal given
            if given:
                await anyio.sleep_forever()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                sent.append(message.get("body", b""))

        scope = {"type": "http", "method": "POST", "path": "/v1/responses", "headers": []}
        await FakeFamilies()(scope, receive, send)

    anyio.run(run)
    events = _check_types(b"".join(sent))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events if e.type.endswith("output_item.added")] == [
        "response.output_item.added"
    ] * 3
    assert events[-1].response.output_text == "Hi"


def test_the_handbook_page_runs() -> None:
    """docs/families/responses.md: its examples (the SDK, the streaming helper, the Agents
    SDK, all offline) are doctests."""
    import doctest
    from pathlib import Path

    page = Path(__file__).parents[2] / "docs" / "families" / "responses.md"
    result = doctest.testfile(str(page), module_relative=False)
    assert result.attempted > 20
    assert result.failed == 0


def test_a_part_added_with_text_is_cut_too() -> None:
    # The API adds parts empty; one added with its text is still text, and cut.
    where = {"item_id": "m", "output_index": 0, "content_index": 0}
    events = [
        *_start(),
        *_message_events(0, "m", [[]], done=False)[:1],
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": "ab STOP"},
        },
        {"type": "response.output_text.delta", **where, "delta": "never", "logprobs": []},
    ]
    payloads = _payloads(_filter(_numbered(events), "STOP"))
    kinds = [p["type"] for p in payloads]
    assert kinds[-5:] == [
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert payloads[-5]["part"]["text"] == "ab "
    assert payloads[-4]["text"] == "ab "
    assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == "ab "
