"""The request module's byte splice: cutting ``stop`` out of a body must give the same JSON as
re-encoding it without ``stop`` (checked against json itself, on any object and layout)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop.server._request import without_key

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
keys = st.sampled_from(["stop", "model", "a", 'st"op', "stop "])


@given(st.dictionaries(keys, values, max_size=5), st.sampled_from([None, 0, 2]), st.booleans())
def test_the_splice_equals_a_reencoding(
    request: dict[str, Any], indent: int | None, ascii_only: bool
) -> None:
    body = json.dumps(request, indent=indent, ensure_ascii=ascii_only).encode()
    cut = without_key(body, "stop")
    expected = {key: value for key, value in request.items() if key != "stop"}
    if "stop" not in request:
        assert cut is None
    else:
        assert cut is not None
        assert json.loads(cut) == expected


CASES = {
    "nested stop kept": (
        b'{"tools": [{"stop": 1}], "stop": "x"}',
        b'{"tools": [{"stop": 1}]}',
    ),
    "first key": (b'{ "stop" : ["a", "b"] , "n": 1}', b'{ "n": 1}'),
    "only key": (b'{"stop": "x"}', b"{}"),
    "in a string": (b'{"m": "\\"stop\\": 1", "stop": "x"}', b'{"m": "\\"stop\\": 1"}'),
}


@pytest.mark.parametrize("case", CASES)
def test_named_cases(case: str) -> None:
    body, expected = CASES[case]
    assert without_key(body, "stop") == expected


@pytest.mark.parametrize(
    "body",
    [b'{"\\u0073top": "x"}', b'{"stop": "x", "stop": "y"}', '{"stop": "x"}'.encode("utf-16")],
)
def test_unsafe_cases_fall_back_to_a_reencoding(body: bytes) -> None:
    assert without_key(body, "stop") is None
