"""Fault kinds: one enum, set by the filters, kept by the record, counted by the metrics.

Every way a filter can end a stream in error is driven here, on each framing (OpenAI's SSE,
a family's SSE, a family's NDJSON): what it sets is a ``Fault``, the record keeps a kind the
metrics count under a label of its own (never ``"other"``), and the values read as the loose
strings did, so logs, record JSON and metric series are what they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from streamstop._families import FAMILIES
from streamstop._family import FamilyStream
from streamstop._faults import RECORDED, Fault, recorded
from streamstop._sse_filter import SSEFilter
from streamstop.server._observe import UPSTREAM_ERROR_LABELS, upstream_error_label
from streamstop.server._record import RequestRecord

Filter = SSEFilter | FamilyStream

_LIMIT = 64


def _openai() -> Filter:
    return SSEFilter(["STOP"], max_line_bytes=_LIMIT, max_event_bytes=_LIMIT)


def _anthropic() -> Filter:
    family = FAMILIES["anthropic"]
    return FamilyStream(family, ["STOP"], max_line_bytes=_LIMIT, max_event_bytes=_LIMIT)


def _ollama() -> Filter:
    family = FAMILIES["ollama-chat"]
    return FamilyStream(family, ["STOP"], max_line_bytes=_LIMIT, max_event_bytes=_LIMIT)


def _drive(make: Callable[[], Filter], body: bytes, *, fail: bool = False) -> Fault | None:
    sse = make()
    sse.feed(body)
    if fail:
        sse.fail({"error": {"message": "told to", "type": "server_error"}})
    sse.flush()
    return sse.error


_OPENAI_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
_OLLAMA_LINE = b'{"message":{"role":"assistant","content":"hi"},"done":false}\n'

# (name, filter, body, fail(), the fault it must end with)
CASES: list[tuple[str, Callable[[], Filter], bytes, bool, Fault]] = [
    ("openai: cut mid-event", _openai, b'data: {"choices":', False, Fault.TRUNCATED),
    ("openai: a line over its limit", _openai, b"data: " + b"x" * 200, False, Fault.TOO_LARGE),
    ("openai: failed", _openai, _OPENAI_EVENT, True, Fault.UPSTREAM),
    ("anthropic: cut mid-event", _anthropic, b"event: message_start\ndata: {", False,
     Fault.TRUNCATED),
    ("anthropic: an event over its limit", _anthropic, b"data: " + b"x" * 200, False,
     Fault.TOO_LARGE),
    ("anthropic: an error event", _anthropic,
     b'event: error\ndata: {"type":"error","error":{}}\n\n',
     False, Fault.UPSTREAM),
    ("anthropic: failed", _anthropic, b"", True, Fault.UPSTREAM),
    ("ollama: cut mid-line", _ollama, b'{"message":', False, Fault.TRUNCATED),
    ("ollama: a line over its limit", _ollama, b"x" * 200, False, Fault.TOO_LARGE),
    ("ollama: an error line", _ollama, _OLLAMA_LINE + b'{"error":"boom"}\n', False,
     Fault.UPSTREAM),
]  # fmt: skip


@pytest.mark.parametrize(("make", "body", "fail", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_every_filter_fault_is_a_fault_with_a_metric_label(
    make: Callable[[], Filter], body: bytes, fail: bool, expected: Fault
) -> None:
    error = _drive(make, body, fail=fail)
    assert error is expected
    assert isinstance(error, Fault)
    kept = recorded(error)
    assert kept is not Fault.UPSTREAM
    assert upstream_error_label(kept) == kept.value
    assert kept.value in UPSTREAM_ERROR_LABELS


def test_the_cases_reach_every_kind_a_filter_sets() -> None:
    # The filters set these three and no other (the rest are the proxy's): all are driven.
    assert {case[-1] for case in CASES} == {Fault.UPSTREAM, Fault.TOO_LARGE, Fault.TRUNCATED}


def test_a_clean_stream_has_no_fault() -> None:
    assert _drive(_openai, _OPENAI_EVENT + b"data: [DONE]\n\n") is None
    assert _drive(_ollama, _OLLAMA_LINE) is None


def test_every_recorded_kind_has_its_own_label() -> None:
    assert set(RECORDED) == set(Fault)
    assert set(RECORDED.values()) == set(Fault) - {Fault.UPSTREAM}
    assert recorded(Fault.UPSTREAM) is Fault.BROKEN
    # The label set is what it was before the enum: a dashboard's series keep their names.
    assert {
        "timeout", "unreachable", "broken", "truncated", "invalid", "too_large", "status",
    } == UPSTREAM_ERROR_LABELS  # fmt: skip
    for fault in RECORDED.values():
        assert upstream_error_label(fault) == fault.value
    assert upstream_error_label("something else") == "other"
    assert upstream_error_label(Fault.UPSTREAM) == "other"  # never recorded as such


@pytest.mark.parametrize("fault", list(Fault), ids=[f.value for f in Fault])
def test_a_fault_reads_as_its_value(fault: Fault) -> None:
    # What the access log, the record's JSON and the metric labels read, on every Python.
    assert str(fault) == fault.value
    assert f"{fault}" == fault.value
    assert fault == fault.value
    assert Fault(fault.value) is fault
    assert json.dumps({"upstream_error": fault}) == json.dumps({"upstream_error": fault.value})
    assert RequestRecord("r", upstream_error=fault).upstream_error == fault.value
