"""A request holding an escaped lone surrogate (``"\\ud83d"``: valid JSON, not valid UTF-8 once
decoded) sent to every endpoint of ``streamstop serve`` and ``streamstop proxy``, streamed and
whole: the answer is a 200 whose body parses, or a 4xx in the API's error shape, never a 500.

The surrogate sits where each layer reads and writes: the echoed text (the model writes it back,
the middleware re-encodes what it cuts), a stop, and a field no layer reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from streamstop._families import FAMILY_PATHS, family_for_path

from .conftest import LiveServer

LONE = "\\ud83d"  # as the client writes it: six ASCII characters of JSON

# One body per endpoint, with LONE spliced in where ``{}`` stands: text, stop, or elsewhere.
_OPENAI = {
    "/v1/chat/completions": '{{"model":"echo","messages":[{{"role":"user","content":"a{text}b '
    'STOP c"}}],"stop":["STOP","{stop}"],"user":"{other}"{stream}}}',
    "/v1/completions": '{{"model":"echo","prompt":"a{text}b STOP c","stop":["STOP","{stop}"],'
    '"user":"{other}"{stream}}}',
}
_NATIVE = {
    "/v1/responses": '{{"model":"echo","input":"a{text}b STOP c","stop":["STOP","{stop}"],'
    '"user":"{other}"{stream}}}',
    "/v1/messages": '{{"model":"echo","max_tokens":64,"messages":[{{"role":"user","content":'
    '"a{text}b STOP c"}}],"stop_sequences":["STOP","{stop}"],"metadata":{{"user_id":"{other}"}}'
    "{stream}}}",
    "/api/chat": '{{"model":"echo","messages":[{{"role":"user","content":"a{text}b STOP c"}}],'
    '"options":{{"stop":["STOP","{stop}"]}},"format":"{other}"{stream}}}',
    "/api/generate": '{{"model":"echo","prompt":"a{text}b STOP c","options":{{"stop":["STOP",'
    '"{stop}"]}},"system":"{other}"{stream}}}',
    "/completion": '{{"prompt":"a{text}b STOP c","stop":["STOP","{stop}"],"grammar":"{other}"'
    "{stream}}}",
    "/generate": '{{"inputs":"a{text}b STOP c","parameters":{{"stop":["STOP","{stop}"],'
    '"seed":1}},"x":"{other}"{stream}}}',
    "/v1beta/models/echo:generateContent": '{{"contents":[{{"role":"user","parts":[{{"text":'
    '"a{text}b STOP c"}}]}}],"generationConfig":{{"stopSequences":["STOP","{stop}"]}},'
    '"cachedContent":"{other}"{stream}}}',
}
_BODIES = {**_OPENAI, **_NATIVE}
# Ollama streams unless told not to; TGI streams on its own path.
_STREAM_FIELD: dict[str, Callable[[bool], str]] = {
    "/v1beta/models/echo:generateContent": lambda stream: "",  # the path says it
    "/api/chat": lambda stream: "" if stream else ',"stream":false',
    "/api/generate": lambda stream: "" if stream else ',"stream":false',
}
_PLACES = ["text", "stop", "other"]


def test_every_family_path_is_in_the_table() -> None:
    # /completions and /generate_stream are the same family as a path of the table, and so
    # are Gemini's other patterns (v1, tuned models, streamGenerateContent).
    missing = {path for path in set(FAMILY_PATHS) - set(_BODIES) if "{model}" not in path}
    assert missing <= {"/completions", "/generate_stream"}
    assert {FAMILY_PATHS[path] for path in FAMILY_PATHS} <= {
        family_for_path(path) for path in _BODIES
    }


def _stream_field(stream: bool) -> str:
    return ',"stream":true' if stream else ""


def _body(path: str, place: str, stream: bool) -> bytes:
    field = _STREAM_FIELD.get(path, _stream_field)(stream)
    values = {name: LONE if name == place else "" for name in _PLACES}
    return _BODIES[path].format(stream=field, **values).encode()


def _path(path: str, stream: bool) -> str:
    if path.endswith(":generateContent") and stream:
        return path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    return "/generate_stream" if path == "/generate" and stream else path


def _check_error_shape(response: httpx.Response) -> None:
    assert response.headers["content-type"].startswith("application/json"), response.text
    payload = response.json()
    assert isinstance(payload, dict)
    assert "error" in payload, payload


def _check_stream(response: httpx.Response) -> None:
    text = response.text
    for line in text.splitlines():
        data = line.removeprefix("data:").strip() if line.startswith("data:") else line
        if not data or line.startswith(("event:", ":")) or data == "[DONE]":
            continue
        json.loads(data)  # every payload, SSE or NDJSON, is whole JSON


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("place", _PLACES)
@pytest.mark.parametrize("path", sorted(_BODIES))
@pytest.mark.parametrize("server", ["echo_server", "proxy_server"])
def test_a_lone_surrogate_is_never_a_500(
    server: str, path: str, place: str, stream: bool, request: pytest.FixtureRequest
) -> None:
    live: LiveServer = request.getfixturevalue(server)
    response = httpx.post(
        live.base_url + _path(path, stream),
        content=_body(path, place, stream),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        _check_error_shape(response)
    elif response.headers["content-type"].startswith("application/json"):
        payload: Any = response.json()
        assert isinstance(payload, dict | list)
    else:
        _check_stream(response)
