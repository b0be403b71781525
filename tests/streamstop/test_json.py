"""streamstop._json: every codec installed reads and writes as the standard library does.

Each case runs once per codec (the ``json_codec`` fixture); the reference is always ``json``
itself: ``json.loads`` for reading, ``json.dumps(value, ensure_ascii=False, separators=(",",
":")).encode()`` for writing (ASCII-escaped when a lone surrogate cannot be UTF-8). The
documented differences (a float's notation; NaN not read by loads) have their own tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstop import _json

from ..json_codecs import json_codec  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("json_codec")


def reference_dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: types alike (a float subclass is a float), NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


LOADS_CASES: dict[str, bytes] = {
    "a chat chunk": b'{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null}]}',
    "odd spacing and key order": b' { "b" : [ 1 , 2 ] ,\n\t"a" : {} } ',
    "duplicate keys: the last value, the first place": b'{"a":1,"b":2,"a":3}',
    "escapes": b'"\\u00e9\\n\\t\\"\\\\\\/\\ud83d\\ude00"',
    "raw UTF-8": '"été 😀"'.encode(),
    "a lone surrogate, escaped": b'"a\\ud83d"',
    "a lone surrogate, raw": b'"\xed\xa0\xbd"',
    "NaN and infinities": b"[NaN, Infinity, -Infinity]",
    "a float that overflows": b"[1e400, -1e400]",
    "a float that underflows": b"1e-400",
    "an int beyond 64 bits": b"123456789012345678901234567890",
    "a negative int beyond 64 bits": b"-9223372036854775809",
    "the largest unsigned 64-bit int": b"18446744073709551615",
    "19 digits in a string, a small int": b'{"id":"x1234567890123456789","n":1}',
    "negative zero": b"[-0, -0.0, 0.0]",
    "exponents": b"[1E5, 1e-7, 2.5e+300, 5e-324]",
    "a byte order mark": b"\xef\xbb\xbf{}",
    "UTF-16": '{"a": "b"}'.encode("utf-16"),
    "scalars": b"[true, false, null, 0, 1.5]",
}


@pytest.mark.parametrize("case", LOADS_CASES)
def test_loads_reads_as_the_standard_library(case: str) -> None:
    data = LOADS_CASES[case]
    assert same(_json.loads(data), json.loads(data))
    assert same(_json.loads(bytearray(data)), json.loads(data))


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"a":}', b"[1,]", b"nan", b'"\xff"', b"{} {}", b'"\\x"', b"01"],
)
def test_loads_rejects_what_the_standard_library_rejects(data: bytes) -> None:
    try:
        json.loads(data)
    except ValueError as error:
        expected = type(error)
    with pytest.raises(expected):
        _json.loads(data)


def test_loads_of_text() -> None:
    assert _json.loads('{"a": [1, "é"]}') == {"a": [1, "é"]}


# What a value read and written again becomes: the standard library's bytes, with either codec.
ROUND_TRIPS: dict[str, tuple[bytes, bytes]] = {
    "compact, key order kept": (b'{ "b" : 1 , "a" : [ 2 ] }', b'{"b":1,"a":[2]}'),
    "non-ASCII as UTF-8": (b'"\\u00e9\\ud83d\\ude00"', '"é😀"'.encode()),
    "controls escaped, DEL and U+2028 not": (
        b'"\\u0000\\u001f\\u007f\\u2028\\b\\f\\n\\r\\t"',
        b'"\\u0000\\u001f\x7f\xe2\x80\xa8\\b\\f\\n\\r\\t"',
    ),
    "a lone surrogate: the whole value ASCII-escaped": (
        b'["\\ud83d", "\\u00e9"]',
        b'["\\ud83d","\\u00e9"]',
    ),
    "NaN and infinities as the standard library writes them": (
        b"[NaN, Infinity, -Infinity, 1e400]",
        b"[NaN,Infinity,-Infinity,Infinity]",
    ),
    "big ints exact": (
        b"[123456789012345678901234567890, -9223372036854775809, 18446744073709551615]",
        b"[123456789012345678901234567890,-9223372036854775809,18446744073709551615]",
    ),
    "floats": (
        b"[0.1, -0.0, 1.5e300, 5e-324, 1e16, 123456789.0]",
        b"[0.1,-0.0,1.5e+300,5e-324,1e+16,123456789.0]",
    ),
}


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_a_value_read_and_written_again(case: str) -> None:
    data, expected = ROUND_TRIPS[case]
    assert reference_dumps(json.loads(data)) == expected
    assert _json.dumps(_json.loads(data)) == expected


def test_every_code_point_is_written_as_the_standard_library_writes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert _json.dumps({"t": text}) == reference_dumps({"t": text})


def test_values_orjson_cannot_write_are_written_by_the_standard_library() -> None:
    value = {1: None, "n": 2**64, "x": float("nan")}
    assert _json.dumps(value) == b'{"1":null,"n":18446744073709551616,"x":NaN}'


def test_the_one_difference_a_floats_exponent() -> None:
    # orjson writes some floats in another notation: the same number, only in re-encoded events.
    expected = b"[1e-07,-2.5e-05]" if _json.backend() == "json" else b"[1e-7,-0.000025]"
    assert _json.dumps([1e-7, -2.5e-5]) == expected
    assert json.loads(expected) == [1e-7, -2.5e-5]


def test_a_nan_made_elsewhere_is_null_with_orjson() -> None:
    # Deliberate: NaN and infinities read by loads are written as json writes them (above); one
    # made by other code is written by orjson as null. These paths write only what they read.
    written = _json.dumps([float("nan"), float("inf")])
    assert written == (b"[NaN,Infinity]" if _json.backend() == "json" else b"[null,null]")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_values)
def test_any_value_reads_back_as_the_standard_library_reads_it(value: Any) -> None:
    written = _json.dumps(value)
    assert same(_json.loads(written), json.loads(written))
    assert same(json.loads(written), value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_float_text_reads_exactly(value: float) -> None:
    for text in (repr(value), f"{value:.17e}", f"{value:.3e}"):
        assert same(_json.loads(text.encode()), json.loads(text))


def test_the_codec_switch() -> None:
    assert "json" in _json.available()
    assert _json.backend() in _json.available()
    with pytest.raises(ValueError, match="'nope'"):
        _json.use("nope")
    previous = _json.use("json")
    try:
        assert _json.backend() == "json"
    finally:
        _json.use(previous)


def test_orjson_is_the_default_where_installed() -> None:
    # In a fresh interpreter: here the fixture has switched codecs.
    pytest.importorskip("orjson")
    code = "from streamstop import _json; print(_json.backend())"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "orjson"
