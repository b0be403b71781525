"""A fuzzed server: generated requests to ``streamstop serve`` and ``streamstop proxy``, as their
commands build them (the guarded protocol, the observability layer, the body deadline, the
middleware), and a fake upstream that misbehaves at generated points.

What holds for every example:

- the answer is never a 500 and never a plain-text error: every 4xx and 5xx has a JSON body with
  an ``error`` (an object with a ``message``, or the string of Ollama's and TGI's shapes);
- every payload of a stream is whole JSON, and the text of each choice is a prefix of the
  reference cut (:func:`streamstop.truncate` of the model's text at the request's stops), all
  of it when the stream ended well: never a partial stop on the wire;
- every upstream connection is closed once the answer is over or the client has left;
- the server answers the next request.

CI runs a bounded number of examples per test (``STREAMSTOP_FUZZ_EXAMPLES``, 30 by default).
A longer run: ``STREAMSTOP_FUZZ_EXAMPLES=1000 python -m pytest tests/server/test_fuzz.py``.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstop import truncate

from .conftest import GuardedServer

EXAMPLES = int(os.environ.get("STREAMSTOP_FUZZ_EXAMPLES", "30"))
STOPS = ["</s>", "STOP", "\n\nUser:", "<|im_end|>", "ab", "é!"]
# Small bounds, so that generated requests and upstreams reach them.
LIMITS = ["--max-body-bytes", "4096", "--max-sse-line-bytes", "2048", "--max-stops", "8"]


# -- the servers ---------------------------------------------------------------------------------


@dataclass
class Plan:
    """What the fake upstream answers next: ``pieces`` of text as chat chunks, with ``fault``
    at piece ``at``; ``forever``: after the pieces, filler until the reader leaves (or 10 s)."""

    pieces: list[str] = field(default_factory=lambda: ["Hel", "lo"])
    fault: str = "none"
    at: int = 0
    status: int = 200
    forever: bool = False
    split: int = 0  # >0: each event is sent in HTTP chunks of this many bytes

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return b"data: " + json.dumps({**payload, "choices": [choice]}).encode() + b"\n\n"


class Upstream(socketserver.ThreadingTCPServer):
    """An OpenAI-compatible upstream over raw TCP, answering each request with :attr:`plan`;
    :attr:`open` counts the connections it is still writing to."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        self.plan = Plan()
        self.open = 0
        self.lock = threading.Condition()
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def wait_closed(self, seconds: float = 10.0) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: self.open == 0, seconds)


class _UpstreamHandler(socketserver.StreamRequestHandler):
    server: Upstream

    def handle(self) -> None:
        with self.server.lock:
            self.server.open += 1
        try:
            self._answer()
        except OSError:
            pass  # the proxy went away: what a cut or a client leaving does
        finally:
            with self.server.lock:
                self.server.open -= 1
                self.server.lock.notify_all()

    def _answer(self) -> None:
        length = 0
        while (line := self.rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        self.rfile.read(length)
        plan = self.server.plan
        if plan.status != 200:
            body = b"oops" if plan.fault == "text" else json.dumps({"error": "bad"}).encode()
            kind = b"text/plain" if plan.fault == "text" else b"application/json"
            self.wfile.write(
                b"HTTP/1.1 %d Nope\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (plan.status, kind, len(body), body)
            )
            return
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        events = [_chunk(None)] + [_chunk(piece) for piece in plan.pieces]
        faults = {
            "garbage": b"data: {not json\n\n",
            "error": b'data: {"error":{"message":"boom","type":"server_error"}}\n\n',
            "huge": b"data: " + b"x" * 4096 + b"\n\n",
            "truncate": b'data: {"choices":[{"index":0,"delta":{"content":"x',
        }
        for position, event in enumerate(events):
            if plan.fault != "none" and position == plan.at:
                if plan.fault == "abort":
                    return  # closed without the last HTTP chunk
                self._send(faults[plan.fault], plan.split)
                if plan.fault == "truncate":
                    self.wfile.write(b"0\r\n\r\n")
                    return
            self._send(event, plan.split)
        deadline = time.monotonic() + 10
        while plan.forever and time.monotonic() < deadline:
            self._send(_chunk(" more"), 0)
            time.sleep(0.01)
        self._send(_chunk(None, "stop") + b"data: [DONE]\n\n", plan.split)
        self.wfile.write(b"0\r\n\r\n")

    def _send(self, data: bytes, split: int) -> None:
        step = split or len(data)
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.flush()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def serve() -> Iterator[GuardedServer]:
    server = GuardedServer("serve", "--delay", "0", "--body-timeout", "2", *LIMITS, head_timeout=5)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(upstream: Upstream) -> Iterator[GuardedServer]:
    server = GuardedServer(
        "proxy",
        "--upstream",
        upstream.url,
        "--timeout",
        "5",
        "--body-timeout",
        "2",
        *LIMITS,
        head_timeout=5,
    )
    yield server
    server.stop()


# -- the client ----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _exchange(
    address: tuple[str, int], request: bytes, cuts: list[int], leave_after: int | None
) -> Answer | None:
    """Send ``request`` in pieces (cut at ``cuts``) and read the answer to its end; ``None``
    when the client leaves after ``leave_after`` bytes of the answer (or of the request)."""
    with socket.create_connection(address, timeout=20) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = 0
        for cut in [*sorted(set(cuts)), len(request)]:
            if leave_after is not None and leave_after < 0 and start >= -leave_after:
                return None  # left halfway through the request
            try:
                sock.sendall(request[start:cut])
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered early (a 413, a 400) and closed: read its answer
            start = cut
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
                if leave_after is not None and 0 <= leave_after <= len(received):
                    return None
        except ConnectionResetError:
            pass  # a reset after the answer, when the server closed on unread request bytes
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = _dechunk(body)
    return Answer(status, headers, body)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def _http(method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", "connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    if not any(name.lower() in ("content-length", "transfer-encoding") for name, _ in headers):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# -- what must hold --------------------------------------------------------------------------------


def _texts(body: bytes) -> tuple[dict[int, str], bool]:
    """Each choice's text in an SSE body of chat or completion chunks, and whether it ended
    well ([DONE], no error event). Every payload must be whole JSON."""
    texts: dict[int, str] = {}
    done = error = False
    for line in body.decode("utf-8").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        payload = json.loads(data)
        if "error" in payload:
            error = True
            continue
        for choice in payload.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") if "delta" in choice else choice.get("text")
            if isinstance(text, str):
                texts[choice["index"]] = texts.get(choice["index"], "") + text
    return texts, done and not error


def _check(
    answer: Answer, model_text: str | None, stops: list[str] | None, relayed: int = 200
) -> None:
    # A 500 is never the server's own; the upstream's (``relayed``) is passed on, shaped.
    assert answer.status != 500 or relayed == 500, answer
    kind = answer.headers.get("content-type", "")
    if answer.status >= 400:
        assert kind.startswith("application/json"), answer
        payload = json.loads(answer.body)
        assert isinstance(payload, dict), answer
        error = payload.get("error")
        # The OpenAI and Anthropic shape, or the string of Ollama's and TGI's.
        assert isinstance(error.get("message") if isinstance(error, dict) else error, str), answer
        return
    if answer.status != 200 or model_text is None or stops is None:
        return
    expected = truncate(model_text, stops)
    if kind.startswith("text/event-stream"):
        texts, ended_well = _texts(answer.body)
        for text in texts.values():
            assert expected.startswith(text), (text, expected)
            if ended_well:
                assert text == expected
    elif kind.startswith("application/json"):
        for choice in json.loads(answer.body)["choices"]:
            text = (choice.get("message") or {}).get("content", choice.get("text"))
            assert text == expected


# -- the generated requests ------------------------------------------------------------------------

_json_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text()
_json_value = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_text = st.lists(st.sampled_from(["a", "b", "é", "!", " ", "\n", "S", "T", "O", "P", *STOPS]))


@st.composite
def _chat(draw: st.DrawFn) -> tuple[dict[str, Any], str | None, list[str] | None]:
    """A chat request, some fields replaced by any JSON; the text the echo repeats and the stops,
    where the request is one the echo answers."""
    message = "".join(draw(_text))
    stops = draw(st.lists(st.sampled_from(STOPS), min_size=1, max_size=4, unique=True))
    request: dict[str, Any] = {
        "model": "echo",
        "messages": [{"role": "user", "content": message}],
        "stop": stops,
        "stream": draw(st.booleans()),
    }
    if draw(st.booleans()):
        return request, message, stops
    for name in draw(st.lists(st.sampled_from(["model", "messages", "stop", "stream", "n"]))):
        request[name] = draw(_json_value)
    return request, None, None


_PATHS = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/v1/messages",
    "/api/chat",
    "/completion",
    "/generate_stream",
    "/health",
    "/metrics",
    "/v1/../etc/passwd",
    "/v1/%2e%2e/x",
    "/v1/chat%2Fcompletions",
    "//v1/chat/completions",
    "/v1/chat/completions?x=%00",
    "*",
]
_HEADERS = st.lists(
    st.sampled_from(
        [
            ("content-type", "application/json"),
            ("content-type", "text/plain"),
            ("content-type", "application/json; charset=utf-16"),
            ("content-encoding", "gzip"),
            ("accept-encoding", "gzip"),
            ("expect", "100-continue"),
            ("authorization", "Bearer x"),
            ("x-long", "v" * 3000),
            ("transfer-encoding", "chunked"),
        ]
    ),
    max_size=3,
    unique=True,
)


@st.composite
def _request(draw: st.DrawFn) -> tuple[bytes, str | None, list[str] | None]:
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "OPTIONS"]))
    path = draw(st.sampled_from(_PATHS))
    headers = draw(_HEADERS)
    shape = draw(st.sampled_from(["chat", "chat", "any", "bytes", "deep"]))
    model_text, stops = None, None
    if shape == "chat":
        request, model_text, stops = draw(_chat())
        body = json.dumps(request).encode()
        if path != "/v1/chat/completions" or method != "POST":
            model_text, stops = None, None
    elif shape == "any":
        body = json.dumps(draw(_json_value)).encode()
    elif shape == "bytes":
        body = draw(st.binary(max_size=64))
    else:
        body = b"[" * 1500 + b"]" * 1500
    if ("transfer-encoding", "chunked") in headers:
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    if (
        any(name == "content-encoding" for name, _ in headers)
        or (
            "content-type",
            "application/json",
        )
        not in headers
    ):
        model_text, stops = None, None  # the body may not be read as the chat request
    return _http(method, path, headers, body), model_text, stops


_fuzz = settings(max_examples=EXAMPLES, deadline=None)


@pytest.mark.parametrize("server", ["serve", "proxy"])
def test_generated_requests(server: str, request: pytest.FixtureRequest) -> None:
    live: GuardedServer = request.getfixturevalue(server)
    upstream: Upstream = request.getfixturevalue("upstream")

    @_fuzz
    @given(
        _request(),
        st.lists(st.integers(1, 400), max_size=3),
        st.none() | st.integers(-300, 300),
    )
    def run(
        generated: tuple[bytes, str | None, list[str] | None],
        cuts: list[int],
        leave_after: int | None,
    ) -> None:
        raw, model_text, stops = generated
        if server == "proxy" and model_text is not None:
            upstream.plan = Plan(
                pieces=[model_text[i : i + 3] for i in range(0, len(model_text), 3)]
            )
        answer = _exchange(live.address, raw, [c for c in cuts if c < len(raw)], leave_after)
        if answer is not None:
            _check(answer, model_text, stops)
        assert upstream.wait_closed(), "an upstream connection was left open"
        _still_answers(live)

    run()


@st.composite
def _plan(draw: st.DrawFn) -> Plan:
    text = "".join(draw(_text.filter(bool)))
    size = draw(st.integers(1, 6))
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    fault = draw(st.sampled_from(["none", "none", "garbage", "error", "huge", "truncate", "abort"]))
    status = 200
    if draw(st.integers(0, 9)) == 0:
        status, fault = (
            draw(st.sampled_from([400, 429, 500, 503])),
            draw(st.sampled_from(["none", "text"])),
        )
    return Plan(
        pieces=pieces,
        fault=fault,
        at=draw(st.integers(0, len(pieces) + 1)),
        status=status,
        forever=draw(st.booleans()),
        split=draw(st.sampled_from([0, 0, 1, 7])),
    )


def test_a_misbehaving_upstream(proxy: GuardedServer, upstream: Upstream) -> None:
    @_fuzz
    @given(
        _plan(),
        st.lists(st.sampled_from(STOPS), min_size=1, max_size=6, unique=True),
        st.booleans(),
        st.none() | st.integers(0, 600),
    )
    def run(plan: Plan, stops: list[str], stream: bool, leave_after: int | None) -> None:
        if plan.forever and not any(stop in plan.text for stop in stops):
            plan.forever = False  # no cut would end it: the upstream would stream for 10 s
        upstream.plan = plan
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": stops}
        raw = _http(
            "POST",
            "/v1/chat/completions",
            [("content-type", "application/json")],
            json.dumps({**body, "stream": stream}).encode(),
        )
        answer = _exchange(proxy.address, raw, [], leave_after)
        if answer is not None:
            if plan.fault != "none" and plan.at <= len(plan.pieces):
                # The fault reached the proxy: the text may end early, never past the cut.
                _check_prefix(answer, plan.text, stops, plan.status)
            elif not plan.forever:
                _check(answer, plan.text, stops, plan.status)
            else:
                _check_prefix(answer, plan.text, stops, plan.status)
        assert upstream.wait_closed(), "the upstream connection was left open"
        _still_answers(proxy)

    run()


def _check_prefix(answer: Answer, model_text: str, stops: list[str], relayed: int) -> None:
    kind = answer.headers.get("content-type", "")
    if answer.status >= 400 or kind.startswith("application/json"):
        _check(answer, None, None, relayed)
        return
    expected = truncate(model_text, stops)
    texts, _ = _texts(answer.body)
    for text in texts.values():
        # The pieces, then (with plan.forever, only when a stop is in them) filler past the cut.
        assert expected.startswith(text), (text, expected)


def _still_answers(live: GuardedServer) -> None:
    answer = _exchange(live.address, _http("GET", "/health", [], b""), [], None)
    assert answer is not None
    assert answer.status == 200, answer
