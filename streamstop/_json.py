"""The one JSON codec of streamstop: orjson where installed (the ``fast`` extra), else the
standard library, with the same results either way.

Rules of this module (the only place the stream filters, the middleware, the proxy and the echo
model choose how JSON is read and written; what any of them sends goes through :func:`dumps`, so a
lone surrogate is never a ``UnicodeEncodeError``, a 500, on any path):

- :func:`loads` returns what ``json.loads`` returns. orjson parses the usual event (about 3x
  faster); whatever it does not take as the standard library would goes to ``json.loads``: a
  document it rejects (``NaN``, ``Infinity``, numbers that overflow a float, lone surrogates
  ``"\\ud83d"``, a byte order mark, other encodings than UTF-8), and any run of 19 digits or
  more (orjson reads integers beyond 64 bits as floats; ``json`` keeps them exact). A document
  neither takes raises ``ValueError`` (or ``RecursionError``, too deep), as ``json.loads`` does;
  orjson reads up to 1,024 levels of nesting, ``json`` as many as the stack allows (about 1,000
  here): a document in between is read by orjson only. NaN and infinities come back as a
  subclass of float (equal values; see :func:`dumps`).
- :func:`dumps` writes compact JSON (``,`` and ``:``), text as UTF-8, as
  ``json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()`` does; a lone
  surrogate cannot be UTF-8, so a value holding one is written ASCII-escaped instead (the
  receiver gets the same string). Integers beyond 64 bits go to ``json``, exact. ``NaN`` and
  infinities read by :func:`loads` are written back ``NaN`` / ``Infinity`` as ``json`` writes
  them: :func:`loads` marks them so that :func:`dumps` sends them to ``json``. (One made by other
  code, unmarked, orjson writes ``null``: these paths write only what they read, and strings and
  ints of their own.)
- A deliberate difference, in formatting only: orjson writes some floats in another notation
  (``1e-7`` and ``0.000025`` where ``json`` writes ``1e-07`` and ``2.5e-05``): the same numbers.
  Only re-encoded events show it (an event the filter leaves alone passes byte for byte).
- :func:`loads_lossy` is :func:`loads` without the check for long runs of digits (a
  translate and a search of the whole document: about a third of orjson's own cost on the
  usual event): an integer beyond 64 bits may come back as a float. For a caller that reads
  only strings, structure and ``None``-ness and forwards the document's own bytes; before
  writing what it read, it asks :func:`exact`, and if not, reads the document again with
  :func:`loads`.
- :func:`use` switches the codec (``"orjson"`` or ``"json"``) and returns the previous one's
  name: for tests, which run every case on both, and to compare them. Callers look the
  functions up on this module (``_json.loads(...)``), so a switch reaches them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["available", "backend", "dumps", "exact", "loads", "loads_lossy", "use"]

# orjson reads an integer beyond 64 bits as a float: a document with a run of 19 digits goes to
# json. Found as a run of "0" once every digit is mapped to "0" (two C calls; a regex is ~7x
# slower), whether in a number or in a string.
_DIGITS_TO_ZERO = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_RUN = b"0" * 19


class _NonFinite(float):
    """A NaN or an infinity read by the standard library: orjson refuses to write a float
    subclass, so :func:`dumps` writes it with ``json`` (``NaN``, ``Infinity``)."""

    __slots__ = ()


def _float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(value)


def _constant(name: str) -> float:
    return _NonFinite(name)  # "NaN", "Infinity", "-Infinity": float() reads all three


def _std_loads(data: bytes | bytearray | str) -> Any:
    return json.loads(data)


def _always(data: bytes | bytearray) -> bool:
    return True


def _no_long_run(data: bytes | bytearray) -> bool:
    # find, not "in": a bytes "in" first tries its operand as an int, and formats and clears
    # a TypeError (about as costly as the translate).
    return data.translate(_DIGITS_TO_ZERO).find(_LONG_RUN) < 0


def _std_dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        # A lone surrogate (half of a pair split across two chunks): escaped, it is still the
        # same JSON string; as UTF-8 it cannot be written at all.
        return json.dumps(value, separators=(",", ":")).encode()


_Loads = Callable[[bytes | bytearray | str], Any]
# loads, dumps, loads_lossy, exact
_Codec = tuple[_Loads, Callable[[Any], bytes], _Loads, Callable[[bytes | bytearray], bool]]


def _codecs() -> dict[str, _Codec]:
    codecs: dict[str, _Codec] = {"json": (_std_loads, _std_dumps, _std_loads, _always)}
    try:
        import orjson
    except ImportError:
        return codecs
    fast_loads, fast_dumps, error = orjson.loads, orjson.dumps, orjson.JSONDecodeError

    def or_loads(data: bytes | bytearray | str) -> Any:
        # Text (rare here) is json's.
        # type(), not isinstance(data, bytes | bytearray): that union is built on every call.
        # The digits test inline (see _no_long_run): one call less.
        if (type(data) is bytes or type(data) is bytearray) and data.translate(
            _DIGITS_TO_ZERO
        ).find(_LONG_RUN) < 0:
            try:
                return fast_loads(data)
            except error:
                pass
        # What orjson rejects or would read otherwise; non-finite floats marked for dumps.
        return json.loads(data, parse_float=_float, parse_constant=_constant)

    def or_loads_lossy(data: bytes | bytearray | str) -> Any:
        if type(data) is bytes or type(data) is bytearray:
            try:
                return fast_loads(data)
            except error:
                pass
        return json.loads(data, parse_float=_float, parse_constant=_constant)

    def or_dumps(value: Any) -> bytes:
        try:
            return fast_dumps(value)
        except TypeError:  # orjson.JSONEncodeError: a lone surrogate, a big int, a NaN read
            return _std_dumps(value)

    codecs["orjson"] = (or_loads, or_dumps, or_loads_lossy, _no_long_run)
    return codecs


_CODECS = _codecs()

loads: _Loads
dumps: Callable[[Any], bytes]
loads_lossy: _Loads
exact: Callable[[bytes | bytearray], bool]
"""Whether :func:`loads_lossy` reads the document as :func:`loads` does."""
_current = ""


def available() -> tuple[str, ...]:
    """The codecs installed: ``("json",)``, or ``("json", "orjson")`` with the ``fast`` extra."""
    return tuple(_CODECS)


def backend() -> str:
    """The codec in use: ``"orjson"`` if installed, else ``"json"`` (unless :func:`use` says)."""
    return _current


def use(name: str) -> str:
    """Switch to codec ``name`` (see :func:`available`); returns the previous one's name."""
    global loads, dumps, loads_lossy, exact, _current
    if name not in _CODECS:
        raise ValueError(f"unknown or uninstalled JSON codec {name!r}: available are {available()}")
    previous = _current
    loads, dumps, loads_lossy, exact = _CODECS[name]
    _current = name
    return previous


use("orjson" if "orjson" in _CODECS else "json")
