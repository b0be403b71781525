"""Reading an OpenAI request body safely: the one request-error type and the field checks.

Rules of this module (everything about what a client may send lives here; no I/O):

- A body is parsed only after a cheap pre-scan (``bytes.count``, at C speed): ``json.loads``
  turns ``[{},{},...]`` into about 20 times its size in objects, so the parsed size is estimated
  from the counts of ``{``, ``[``, ``"`` and ``,`` (what a dict, a list, a string and a list
  slot with its number cost once parsed) and a body whose estimate is over
  ``_MAX_EXPANSION`` times its size (plus a small allowance) is refused before it is parsed.
  The nesting depth is bounded by ``RequestLimits.max_json_depth`` (and a body too deep for the
  parser itself is refused, never a ``RecursionError``).
- Every refusal is an :class:`InvalidRequest` carrying the status (400, 413) and the field it is
  about (``param``), answered in the OpenAI error shape; the message names the value or the limit.
- Only the fields this package reads are checked: ``stop``, ``n``, ``stream``,
  ``stream_options``, ``prompt`` and ``messages`` (their type, not their content); and
  ``stop_regex`` (SGLang's name: a pattern or a list of them) and ``stop_arm_after`` (a marker
  the stops wait for) by :func:`parse_stop_rules`, for every OpenAI path that takes them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import _json
from .._chunks import is_choice_count
from .._patterns import INSTALL_HINT, StopPatterns, pattern_width
from ._asgi import Send, send_error
from ._limits import RequestLimits, set_by

__all__ = [
    "STOP_RULE_FIELDS",
    "InvalidRequest",
    "describe",
    "include_usage",
    "parse_body",
    "parse_n",
    "parse_stop_rules",
    "parse_stops",
    "send_invalid",
    "wants_stream",
    "without_key",
]

# What each of these adds once parsed, in bytes, fitted on CPython 3.11 with tracemalloc (dicts
# of 1-2 keys, lists of ints, lists of strings, chat messages; within 10% but for lists of
# small ints, overestimated 2x): a dict 125, a list 64, a string 32 (two quotes, the text
# itself counted as the body's bytes), a slot with its number 36 (a comma).
_PARSED_COST = ((b"{", 125), (b"[", 64), (b'"', 16), (b",", 36))
_MAX_EXPANSION = 10  # a body at the limit costs at most about this many times its size
_FREE_BYTES = 1 << 20


class InvalidRequest(Exception):
    """A request the server refuses: ``status`` and an OpenAI-shaped error (``message``,
    ``param``, ``code``); ``allow`` is the ``Allow`` header of a 405."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        allow: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.allow = allow


async def send_invalid(send: Send, error: InvalidRequest) -> None:
    """Answer ``error`` in the OpenAI error shape."""
    headers = [(b"allow", error.allow.encode())] if error.allow else []
    await send_error(
        send, error.status, error.message, param=error.param, code=error.code, headers=headers
    )


def describe(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: for error messages quoting a client's value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _depth(value: object, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_body(body: bytes, limits: RequestLimits, *, openai: bool = True) -> dict[str, Any]:
    """The request body as a JSON object, or :class:`InvalidRequest` (400) saying why not.

    ``openai=False`` (another API's body) checks its size, depth and shape only: the OpenAI
    fields' types are not that API's (llama.cpp's ``prompt`` mixes tokens and strings)."""
    estimate = len(body) + sum(body.count(char) * cost for char, cost in _PARSED_COST)
    if estimate > _MAX_EXPANSION * len(body) + _FREE_BYTES:
        raise InvalidRequest(
            400,
            f"The JSON body of your request holds too many values for its size: about "
            f"{estimate} bytes once parsed, over {_MAX_EXPANSION} times its {len(body)} bytes.",
            code="json_too_complex",
        )
    containers = body.count(b"{") + body.count(b"[")
    try:
        request = _json.loads(body)
    except RecursionError:
        request = None
        too_deep = True
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(
            400,
            "We could not parse the JSON body of your request. The body must be a JSON "
            "object, sent with 'Content-Type: application/json'.",
        ) from None
    else:
        too_deep = containers > limits.max_json_depth and _depth(request, limits.max_json_depth)
    if too_deep:
        raise InvalidRequest(
            400,
            f"The JSON body of your request is nested deeper than max_json_depth="
            f"{limits.max_json_depth}, {set_by('max_json_depth')}.",
            code="json_too_deep",
        )
    if not isinstance(request, dict):
        raise InvalidRequest(
            400, f"The JSON body of your request must be an object, got {describe(request)}."
        )
    if openai:
        _check_fields(request)
    return request


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def parse_stops(
    request: dict[str, Any], limits: RequestLimits, *, param: str = "stop"
) -> tuple[str, ...]:
    """The request's non-empty stop strings (its ``stop``), within ``limits``; else
    :class:`InvalidRequest` naming ``param`` (the API's name for the field)."""
    stop = request.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stops: tuple[str, ...] = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        stops = tuple(item for item in stop if item)
    else:
        raise InvalidRequest(
            400,
            f"Invalid type for '{param}': expected a string or an array of strings, got "
            f"{describe(stop)}.",
            param=param,
        )
    if len(stops) > limits.max_stops:
        raise _over("max_stops", limits.max_stops, f"{len(stops)} stop strings", param)
    total = 0
    for item in stops:
        if len(item) > limits.max_stop_length:
            raise _over(
                "max_stop_length",
                limits.max_stop_length,
                f"a stop string of {len(item)} characters ({describe(item, 40)})",
                param,
            )
        total += len(item)
    if total > limits.max_stop_chars:
        raise _over("max_stop_chars", limits.max_stop_chars, f"{total} characters of stops", param)
    if any(_has_lone_surrogate(item) for item in stops):
        raise InvalidRequest(
            400,
            f"Invalid '{param}': a stop string holds a lone surrogate (not text).",
            param=param,
        )
    return stops


# The request fields of regex and gated stops, taken out of the request like ``stop``.
STOP_RULE_FIELDS = ("stop_regex", "stop_arm_after")


def parse_stop_rules(
    request: dict[str, Any], limits: RequestLimits
) -> tuple[StopPatterns | None, str | None]:
    """The request's ``stop_regex`` built (``None`` if absent or empty) and its
    ``stop_arm_after`` (``None`` if absent or empty), within ``limits``; else
    :class:`InvalidRequest` naming the field: 400 for a value that is wrong (of the wrong type,
    over a limit, not a pattern, or a pattern whose matches have no longest length), 501 when
    this server lacks the ``regex`` extra."""
    marker = request.get("stop_arm_after")
    if marker is not None:
        if not isinstance(marker, str):
            raise _wrong_type("stop_arm_after", "a string", marker)
        if len(marker) > limits.max_stop_length:
            raise _over(
                "max_stop_length",
                limits.max_stop_length,
                f"a marker of {len(marker)} characters",
                "stop_arm_after",
            )
        if _has_lone_surrogate(marker):
            raise InvalidRequest(
                400, "Invalid 'stop_arm_after': it holds a lone surrogate.", param="stop_arm_after"
            )
    value = request.get("stop_regex")
    if value is None:
        return None, marker or None
    param = "stop_regex"
    if isinstance(value, str):
        patterns: tuple[str, ...] = (value,) if value else ()
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        patterns = tuple(dict.fromkeys(item for item in value if item))
    else:
        raise _wrong_type(param, "a string or an array of strings", value)
    if not patterns:
        return None, marker or None
    if len(patterns) > limits.max_stop_regex:
        raise _over("max_stop_regex", limits.max_stop_regex, f"{len(patterns)} patterns", param)
    widest = limits.max_stop_regex_match_chars
    for item in patterns:
        if len(item) > limits.max_stop_regex_length:
            raise _over(
                "max_stop_regex_length",
                limits.max_stop_regex_length,
                f"a pattern of {len(item)} characters ({describe(item, 40)})",
                param,
            )
        try:
            width = pattern_width(item)
        except ValueError as error:
            raise InvalidRequest(
                400, f"Invalid '{param}': {error}.", param=param, code="invalid_stop_regex"
            ) from None
        if width > widest:
            raise _over(
                "max_stop_regex_match_chars",
                widest,
                f"a pattern that matches up to {width} characters ({describe(item, 40)})",
                param,
            )
    try:
        return StopPatterns(patterns, timeout=limits.max_stop_regex_ms / 1000), marker or None
    except ImportError:
        raise InvalidRequest(
            501, f"This server cannot apply '{param}': {INSTALL_HINT}.", param=param
        ) from None


def _over(limit: str, value: int, what: str, param: str = "stop") -> InvalidRequest:
    return InvalidRequest(
        400,
        f"Too many stops: {what}, over the limit {limit}={value}, {set_by(limit)}.",
        param=param,
        code=f"{limit}_exceeded",
    )


def parse_n(request: dict[str, Any], maximum: int | None = None) -> int:
    """The request's ``n`` (1 if absent or null): a positive int, at most ``maximum``."""
    n = request.get("n")
    if n is None:
        return 1
    if not is_choice_count(n) or (maximum and n > maximum):
        bound = f"from 1 to {maximum}" if maximum else "of at least 1"
        raise InvalidRequest(
            400, f"Invalid 'n': expected an integer {bound}, got {describe(n)}.", param="n"
        )
    return n


def wants_stream(request: dict[str, Any]) -> bool:
    return request.get("stream") is True


def include_usage(request: dict[str, Any]) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _wrong_type(name: str, expected: str, value: object) -> InvalidRequest:
    return InvalidRequest(
        400, f"Invalid type for '{name}': expected {expected}, got {describe(value)}.", param=name
    )


def _is_tokens(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )


def _check_fields(request: dict[str, Any]) -> None:
    parse_n(request)
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean", stream)
    options = request.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _wrong_type("stream_options", "an object", options)
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise _wrong_type("stream_options.include_usage", "a boolean", usage)
    if "prompt" in request:
        prompt = request["prompt"]
        if not (
            prompt is None
            or isinstance(prompt, str)
            or _is_tokens(prompt)
            or (
                isinstance(prompt, list)
                and all(isinstance(item, str) or _is_tokens(item) for item in prompt)
            )
        ):
            raise _wrong_type(
                "prompt",
                "a string, an array of strings, or an array of tokens (or of arrays of tokens)",
                prompt,
            )
    if "messages" in request and not isinstance(request["messages"], list):
        raise _wrong_type("messages", "an array", request["messages"])


# A JSON string (escapes included), or a bracket: what the top-level scan of a body looks at.
# The string's loop is unrolled ([^"\\]* runs at C speed): "(?:[^"\\]|\\.)*" takes one
# alternation per character, 20 times slower, in one GIL-holding call.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_COLON = re.compile(rb"\s*:")
_SPACE = re.compile(rb"\s*")


def without_key(body: bytes, key: str) -> bytes | None:
    """``body`` (a JSON object that parsed) without its top-level ``key`` and that key's value,
    cut out of the bytes, so a large body need not be re-encoded; ``None`` when that cannot be
    done safely (the key is escaped, or present twice): re-encode then.

    >>> without_key(b'{"a": [1, {"stop": 2}], "stop": ["x"], "b": 3}', "stop")
    b'{"a": [1, {"stop": 2}], "b": 3}'
    >>> without_key(b'{"a": 1, "stop": null}', "stop")
    b'{"a": 1}'
    """
    name = json.dumps(key).encode()
    depth = 0
    found: list[int] = []
    for token in _TOKEN.finditer(body):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and text == name and _COLON.match(body, token.end()):
            found.append(token.start())
    if len(found) != 1:
        return None
    start = found[0]
    colon = _COLON.match(body, start + len(name))
    assert colon is not None
    value_start = _SPACE.match(body, colon.end())
    assert value_start is not None
    try:
        rest = body[value_start.end() :].decode()
        _, end = json.JSONDecoder().raw_decode(rest)
    except ValueError:  # UnicodeDecodeError too: json.loads also takes UTF-16 and UTF-32
        return None
    end = value_start.end() + len(rest[:end].encode())
    after = _SPACE.match(body, end)
    assert after is not None
    if body[after.end() : after.end() + 1] == b",":
        return body[:start] + body[after.end() + 1 :].lstrip()
    before = body[:start].rstrip()
    if before.endswith(b","):
        return before[:-1] + body[end:]
    return body[:start] + body[after.end() :]
