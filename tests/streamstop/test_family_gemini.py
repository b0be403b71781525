"""Gemini's adapter, sans-I/O: what the shared table (``test_families.py``) cannot show.

Thought parts, several parts and several candidates in one event (split into pieces and
joined again), events without ``index``, whole responses, and the request side (both spellings
of the stops, ``candidateCount``, ``alt=sse``, Google's error shape). Streams run whole and fed
one byte at a time, with the same result.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstop import StopAutomaton
from streamstop._families import FAMILIES, FAMILY_PATHS, family_for_path, family_route
from streamstop._family import FamilyStream
from streamstop._family_gemini import Gemini

from ..json_codecs import json_codec  # noqa: F401 (a fixture)
from .test_families import _sse_payloads

pytestmark = pytest.mark.usefixtures("json_codec")

GEMINI = FAMILIES["gemini"]


def candidate(index: int | None, *parts: dict[str, Any], **rest: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, **rest}
    if index is not None:
        out["index"] = index
    return out


def chunk(*candidates: dict[str, Any]) -> dict[str, Any]:
    return {
        "candidates": list(candidates),
        "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r",
    }


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def thought(value: str) -> dict[str, Any]:
    return {"text": value, "thought": True}


def sse(payloads: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\r\n\r\n" for p in payloads)


def run(data: bytes, stops: Any, n: int = 1) -> tuple[list[dict[str, Any]], FamilyStream]:
    """The events out of a filter fed ``data`` whole; the same fed byte by byte is checked."""
    outs = []
    for bytewise in (False, True):
        stream = FamilyStream(GEMINI, stops, n=n)
        if bytewise:
            out = b"".join(stream.feed(data[i : i + 1]) for i in range(len(data)))
        else:
            out = stream.feed(data)
        outs.append((out + stream.flush(), stream))
    (whole, stream), (bytewise_out, bytewise_stream) = outs
    assert bytewise_out == whole
    assert bytewise_stream.stop_strings == stream.stop_strings
    return _sse_payloads(whole), stream


def texts(payloads: list[dict[str, Any]]) -> dict[int, str]:
    """Each candidate's text (thoughts left out), by position in its event (its index)."""
    out: dict[int, str] = {}
    for payload in payloads:
        for position, cand in enumerate(payload.get("candidates", [])):
            index = cand.get("index", position)
            for part in cand["content"]["parts"]:
                if "text" in part and not part.get("thought"):
                    out[index] = out.get(index, "") + part["text"]
    return out


def test_thought_parts_pass_untouched_and_text_is_cut() -> None:
    events = [
        chunk(candidate(0, thought("Thinking: STOP is the word"))),
        chunk(candidate(0, text("ok ST"))),
        chunk(candidate(0, text("OP then"))),
        chunk(candidate(0, text("never"), finishReason="STOP")),
    ]
    payloads, stream = run(sse(events), "STOP")
    assert payloads[0] == events[0]
    assert texts(payloads) == {0: "ok "}
    last = payloads[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert payloads[-1]["usageMetadata"] == events[2]["usageMetadata"]  # the cut event's own
    assert (stream.done, stream.cut, stream.stop_strings) == (True, True, {0: "STOP"})


def test_a_thought_and_text_in_one_event_are_split_and_joined() -> None:
    events = [chunk(candidate(0, thought("STOP?"), text("yes STOP no"), {"functionCall": {}}))]
    payloads, stream = run(sse(events), "STOP")
    (only,) = payloads
    assert only["candidates"] == [
        candidate(0, thought("STOP?"), text("yes "), finishReason="STOP")
    ]  # the function call came after the stop: left out
    assert only["modelVersion"] == "gemini-2.5-flash"
    assert stream.done


def test_held_text_goes_out_with_an_end_that_has_no_parts() -> None:
    events = [chunk(candidate(0, text("ab ST"))), chunk({"finishReason": "MAX_TOKENS", "index": 0})]
    payloads, stream = run(sse(events), "STOP")
    assert texts(payloads) == {0: "ab ST"}
    assert payloads[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"  # the model's own end
    assert not stream.cut


def test_several_candidates_are_slots_cut_one_by_one() -> None:
    events = [
        chunk(candidate(0, text("a STO")), candidate(1, text("b "))),
        chunk(candidate(0, text("P x")), candidate(1, text("c ST"))),
        chunk(candidate(0, text("zzz")), candidate(1, text("d"))),
        chunk(candidate(1, text(" STOP e"))),
        chunk(candidate(1, text("late"), finishReason="STOP")),
    ]
    payloads, stream = run(sse(events), "STOP", n=2)
    assert texts(payloads) == {0: "a ", 1: "b c STd "}
    # One event per upstream event, candidates in order: chunk.text (the first) reads right.
    assert [[c["index"] for c in p["candidates"]] for p in payloads] == [[0, 1], [0, 1], [1], [1]]
    assert payloads[1]["candidates"][0]["finishReason"] == "STOP"
    assert "finishReason" not in payloads[1]["candidates"][1]
    assert payloads[-1]["candidates"][0]["finishReason"] == "STOP"
    assert stream.stop_strings == {0: "STOP", 1: "STOP"}
    assert stream.done


def test_an_event_of_several_candidates_no_stop_touches_passes_byte_for_byte() -> None:
    data = sse([chunk(candidate(0, text("a")), candidate(1, text("b"), thought("c")))])
    stream = FamilyStream(GEMINI, "STOP", n=2)
    assert stream.feed(data) + stream.flush() == data


def test_candidates_without_an_index_are_told_apart_by_position() -> None:
    events = [
        chunk(candidate(None, text("x.y")), candidate(None, text("z"))),
        chunk(candidate(None, text("q")), candidate(None, text("w."))),
    ]
    payloads, stream = run(sse(events), ".", n=2)
    assert payloads[0]["candidates"] == [
        candidate(None, text("x"), finishReason="STOP"),
        candidate(None, text("z")),
    ]  # no index written where the upstream wrote none
    assert stream.stop_strings == {0: ".", 1: "."}
    assert stream.done


def test_a_candidate_that_ends_itself_counts_as_over() -> None:
    events = [
        chunk(candidate(0, text("a.b")), candidate(1, text("c"), finishReason="STOP")),
        chunk(candidate(1, text("late"))),
    ]
    _, stream = run(sse(events), ".", n=2)
    assert stream.done


def test_an_upstream_error_event_ends_the_stream() -> None:
    error = {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
    payloads, stream = run(sse([chunk(candidate(0, text("Hi ST"))), error]), "STOP")
    assert payloads == [chunk(candidate(0, text("Hi "))), error]  # "ST" held, then dropped
    assert stream.error == "upstream"


# -- whole responses ---------------------------------------------------------------------------


def cut_whole(response: Any, stops: Sequence[str], include: bool = False) -> tuple[Any, list[str]]:
    return GEMINI.cut_whole(response, StopAutomaton.from_stops(stops), include)


def test_whole_response_each_candidate_cut_at_its_first_stop() -> None:
    response: dict[str, Any] = {
        "candidates": [
            candidate(0, thought("STOP"), text("one STOP two"), finishReason="MAX_TOKENS"),
            candidate(1, text("no stop here"), finishReason="STOP"),
            candidate(2, text("ab ST"), {"functionCall": {"name": "f"}}, text("OP cd")),
        ],
        "usageMetadata": {"promptTokenCount": 3},
        "modelVersion": "gemini-2.5-flash",
    }
    cut, fired = cut_whole(response, ["STOP"])
    assert fired == ["STOP", "STOP"]
    assert cut["candidates"][0] == candidate(0, thought("STOP"), text("one "), finishReason="STOP")
    assert cut["candidates"][1] == response["candidates"][1]
    # A stop spanning two text parts: the parts are one text, as when streamed.
    assert cut["candidates"][2] == candidate(
        2, text("ab "), {"functionCall": {"name": "f"}}, text(""), finishReason="STOP"
    )
    assert cut["modelVersion"] == "gemini-2.5-flash"
    kept, _ = cut_whole(response, ["STOP"], include=True)
    assert kept["candidates"][0]["content"]["parts"][1] == text("one STOP")
    assert kept["candidates"][2]["content"]["parts"][2] == text("OP")


def test_whole_response_without_a_stop_or_candidates_is_itself() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}}
    assert cut_whole(blocked, ["x"]) == (blocked, [])
    plain = {"candidates": [candidate(0, text("fine"), finishReason="STOP")]}
    assert cut_whole(plain, ["x"]) == (plain, [])
    assert cut_whole([plain], ["f"]) == ([plain], [])


# -- requests ------------------------------------------------------------------------------------


def test_the_stops_are_read_and_removed_in_both_spellings() -> None:
    camel = {"generationConfig": {"stopSequences": ["a", "b"], "temperature": 0}}
    assert GEMINI.stops_value(camel) == ["a", "b"]
    assert GEMINI.remove_stops(camel)
    assert camel == {"generationConfig": {"temperature": 0}}
    snake: dict[str, Any] = {"generation_config": {"stop_sequences": ["c"]}}
    assert GEMINI.stops_value(snake) == ["c"]
    both = {
        "generationConfig": {"stopSequences": ["a"]},
        "generation_config": {"stop_sequences": ["c"]},
    }
    assert GEMINI.stops_value(both) == ["a", "c"]
    assert GEMINI.stops_value({"generationConfig": {"stopSequences": "x"}}) == "x"
    wrong = {"generationConfig": {"stopSequences": ["a"], "stop_sequences": 5}}
    assert GEMINI.stops_value(wrong) == 5  # refused as it is: the 400 names it
    assert GEMINI.stops_value({"contents": []}) is None
    assert not GEMINI.remove_stops({"generationConfig": None})


def test_candidate_count_stream_and_model_come_from_the_request_and_the_path() -> None:
    assert GEMINI.slots({"generationConfig": {"candidateCount": 3}}) == 3
    assert GEMINI.slots({"generation_config": {"candidate_count": 2}}) == 2
    assert GEMINI.slots({"generationConfig": {"candidateCount": True}}) == 1
    assert GEMINI.slots({}) == 1
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert GEMINI.streams({}, path)
    assert not GEMINI.streams({"stream": True}, path.replace("stream", "").replace("G", "g"))
    assert GEMINI.model({}, path) == "gemini-2.5-flash"
    assert GEMINI.model({}, "/v1beta/tunedModels/mine-1:generateContent") == "mine-1"


@pytest.mark.parametrize(
    ("path", "query", "refused"),
    [
        ("/v1beta/models/m:streamGenerateContent", b"alt=sse", False),
        ("/v1beta/models/m:streamGenerateContent", b"key=k&alt=sse", False),
        ("/v1beta/models/m:streamGenerateContent", b"", True),
        ("/v1beta/models/m:streamGenerateContent", b"alt=json", True),
        ("/v1beta/models/m:generateContent", b"", False),
    ],
)
def test_a_stream_without_alt_sse_is_refused(path: str, query: bytes, refused: bool) -> None:
    why = GEMINI.refusal({}, path, query)
    assert (why is not None) == refused
    if why is not None:
        assert "?alt=sse" in why


def test_errors_are_in_googles_shape() -> None:
    body = GEMINI.error_body(
        400, "Too many stops.", param="generationConfig.stopSequences", code="max_stops_exceeded"
    )
    assert body == {
        "error": {
            "code": 400,
            "message": "Too many stops.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [
                        {
                            "field": "generationConfig.stopSequences",
                            "description": "Too many stops.",
                        }
                    ],
                },
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "MAX_STOPS_EXCEEDED",
                    "domain": "streamstop",
                },
            ],
        }
    }
    assert GEMINI.error_body(502, "x", code=502) == {
        "error": {"code": 502, "message": "x", "status": "UNAVAILABLE"}
    }
    stalled = GEMINI.error_payload("stalled", "upstream_timeout")["error"]
    assert (stalled["code"], stalled["status"]) == (504, "DEADLINE_EXCEEDED")
    assert GEMINI.error_payload("broke", "upstream_broken")["error"]["code"] == 502


def test_paths_are_patterns_of_one_segment() -> None:
    for path in (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        "/v1/models/gemini-2.0-flash-001:generateContent",
        "/v1beta/tunedModels/my-model-7:generateContent",
    ):
        assert family_for_path(path) == "gemini"
        route = family_route(path)
        assert route is not None
        assert "{model}" in route
        assert route in FAMILY_PATHS
    for path in (
        "/v1beta/models/a/b:generateContent",
        "/v1beta/models/:generateContent",
        "/v1beta/models/m:countTokens",
        "/v1beta/models/m",
        "/v1beta/models/m:generateContentX",
    ):
        assert family_for_path(path) is None, path
    assert family_for_path("/api/chat") == "ollama-chat"
    assert family_route("/v1beta/models/m:generateContent", {"/api/chat": "x"}) is None
    assert isinstance(GEMINI, Gemini)


def test_the_handbook_page_runs() -> None:
    """docs/families/gemini.md's examples, as one doctest (the handbook's own test, once it
    is merged, runs every page the same way)."""
    import doctest
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "families" / "gemini.md"
    test = doctest.DocTestParser().get_doctest(page.read_text("utf-8"), {}, page.name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert len(test.examples) > 20
    assert runner.failures == 0


# -- against a reference ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    texts_=st.lists(st.text(alphabet="ab<>/s", max_size=20), min_size=1, max_size=3),
    data=st.data(),
)
def test_any_candidates_parts_and_splits_give_the_reference_cut(
    texts_: list[str], data: st.DataObject
) -> None:
    """Candidates whose texts come in pieces of any size, several parts to an event at times,
    with thoughts between them: each candidate reads its text cut at its first stop."""
    stops = ["</s>", "<>"]
    queues = []
    for text_ in texts_:
        bounds = data.draw(st.lists(st.integers(0, len(text_)), max_size=5))
        cuts = sorted({0, len(text_), *bounds})
        queues.append([text_[a:b] for a, b in itertools.pairwise(cuts) if b > a])
    events = []
    ended: set[int] = set()
    while any(queues):
        candidates = []
        first = next(index for index, queue in enumerate(queues) if queue)
        for index, queue in enumerate(queues):
            # At least one piece an event (of the first candidate left): the stream is bounded.
            least = 1 if index == first else 0
            take = data.draw(st.integers(least, min(2, len(queue))))
            parts: list[dict[str, Any]] = [text(queue.pop(0)) for _ in range(take)]
            if data.draw(st.booleans()):
                parts.insert(data.draw(st.integers(0, len(parts))), thought("</s><>"))
            if not queue and index not in ended and (parts or take) and data.draw(st.booleans()):
                # Its last parts and its end in one event, as the API's last chunk often is.
                ended.add(index)
                candidates.append(candidate(index, *parts, finishReason="MAX_TOKENS"))
            elif parts:
                candidates.append(candidate(index, *parts))
        if candidates:
            events.append(chunk(*candidates))
    left = [i for i in range(len(texts_)) if i not in ended]
    events.append(chunk(*(candidate(i, text(""), finishReason="STOP") for i in left)))
    payloads, stream = run(sse(events), stops, n=len(texts_))
    expected = {}
    for index, text_ in enumerate(texts_):
        found = [at for at in (text_.find(stop) for stop in stops) if at >= 0]
        expected[index] = text_[: min(found)] if found else text_
    got = texts(payloads)
    assert {i: got.get(i, "") for i in expected} == expected
    assert stream.done
    ends = [c["index"] for p in payloads for c in p["candidates"] if c.get("finishReason")]
    assert sorted(ends) == list(range(len(texts_)))  # each candidate ends once
