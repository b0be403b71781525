"""The operations layer in process (``httpx.ASGITransport``, asyncio and trio): client keys,
probes, metrics and the access log, the body deadline, the echo model's caps, and repeated
errors logged once per interval."""

from __future__ import annotations

import hmac
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from streamstop.server import ClientKeys, EchoModel, Observed
from streamstop.server._asgi import Receive, Scope, Send, read_body, send_json
from streamstop.server._deadline import BodyDeadline
from streamstop.server._logging import RepeatFilter
from streamstop.server._observe import UpstreamProbe
from streamstop.server._record import RequestRecord, record_of

pytestmark = pytest.mark.anyio


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


class Inner:
    """An app that answers 200 with what it saw, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.headers: list[tuple[bytes, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        self.headers = list(scope["headers"])
        await send_json(send, 200, {"ok": True})


# -- client keys -------------------------------------------------------------------------------

MISSING_KEY = {
    "error": {
        "message": "You didn't provide an API key. You need to provide your API key in an "
        "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
WRONG_KEY = {
    "error": {
        "message": "Incorrect API key provided.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}

KEY_CASES: dict[str, tuple[dict[str, str], int, Any]] = {
    "no header": ({}, 401, MISSING_KEY),
    "wrong key": ({"authorization": "Bearer sk-wrong"}, 401, WRONG_KEY),
    "a prefix of a key": ({"authorization": "Bearer sk-one"}, 401, WRONG_KEY),
    "a key with more": ({"authorization": "Bearer sk-one-secret-x"}, 401, WRONG_KEY),
    "basic scheme": ({"authorization": "Basic sk-one-secret"}, 401, WRONG_KEY),
    "empty bearer": ({"authorization": "Bearer "}, 401, WRONG_KEY),
    "first key": ({"authorization": "Bearer sk-one-secret"}, 200, {"ok": True}),
    "second key": ({"authorization": "Bearer sk-two-secret"}, 200, {"ok": True}),
    "scheme in lower case": ({"authorization": "bearer sk-two-secret"}, 200, {"ok": True}),
}


@pytest.mark.parametrize("case", KEY_CASES)
async def test_client_keys(case: str) -> None:
    headers, status, body = KEY_CASES[case]
    inner = Inner()
    app = ClientKeys(inner, ["sk-one-secret", "sk-two-secret"])
    async with client(app) as http:
        response = await http.post("/v1/chat/completions", headers=headers, json={})
    assert (response.status_code, response.json()) == (status, body)
    if status == 401:
        assert inner.calls == 0  # nothing reached the app, so nothing the upstream
        assert response.headers["www-authenticate"] == "Bearer"
    else:
        # The client's key is this server's: it is not passed on.
        assert inner.calls == 1
        assert not [key for key, _ in inner.headers if key == b"authorization"]


async def test_probes_need_no_key() -> None:
    inner = Inner()
    async with client(ClientKeys(inner, ["k"])) as http:
        assert (await http.get("/health")).status_code == 200
        assert (await http.get("/ready")).status_code == 200
        assert (await http.get("/metrics")).status_code == 401


async def test_every_key_is_compared_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    original = hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare)
    keys = ClientKeys(Inner(), ["k1", "k2", "k3"])
    assert keys.allows(b"k1")
    assert not keys.allows(b"nope")
    assert compared == [b"k1", b"k2", b"k3"] * 2


@pytest.mark.parametrize("bad", ["", "has space", "tab\there", "new\nline"])
def test_unusable_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="non-empty, without spaces"):
        ClientKeys(Inner(), [bad])
    with pytest.raises(ValueError, match="at least one key"):
        ClientKeys(Inner(), [])


# -- probes, metrics, access log ---------------------------------------------------------------


class FillingApp:
    """Stands in for the middleware and the proxy: fills the record, streams two events."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        record = record_of(scope)
        assert record is not None
        body = await read_body(receive, 1 << 20)
        request = json.loads(body or b"{}")
        record.model = request.get("model")
        record.stops = len(request.get("stop", []))
        if request.get("cut"):
            record.stop_fired = request["stop"][0]
            record.choices_cut = 2
        record.upstream_error = request.get("fault")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.25  # every look at the clock is a quarter of a second later
        return self.now


def sample(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The value of one sample in a Prometheus text exposition, or ``None``."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for item in family.samples:
            if item.name == name and (labels is None or item.labels == labels):
                return float(item.value)
    return None


async def test_a_request_is_counted_timed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    app = Observed(FillingApp(), clock=Clock())
    request = {"model": "m", "stop": ["</s>", "###", "x"], "cut": True}
    with caplog.at_level(logging.INFO, logger="streamstop.access"):
        async with client(app) as http:
            response = await http.post(
                "/v1/chat/completions", json=request, headers={"x-request-id": "req-42"}
            )
            assert response.headers["x-request-id"] == "req-42"
            await http.post("/v1/completions", json={"model": "m", "fault": "broken"})
            metrics = (await http.get("/metrics")).text
    (first, second) = [json.loads(r.getMessage()) for r in caplog.records]
    # The clock moves 0.25 s at each look: start, first byte, end.
    assert first == {
        "request_id": "req-42",
        "method": "POST",
        "route": "/v1/chat/completions",
        "status": 200,
        "model": "m",
        "stops": 3,
        "stop_fired": "</s>",
        "choices_cut": 2,
        "upstream_error": None,
        "client_closed": False,
        "ttfb_ms": 250.0,
        "duration_ms": 500.0,
    }
    assert second["upstream_error"] == "broken"
    assert len(second["request_id"]) == 32  # none given: a new one
    chat = {"route": "/v1/chat/completions", "status": "200"}
    assert sample(metrics, "streamstop_requests_total", chat) == 1
    assert sample(metrics, "streamstop_streams_cut_total", {"route": chat["route"]}) == 1
    assert sample(metrics, "streamstop_stops_fired_total", {"route": chat["route"]}) == 2
    assert sample(metrics, "streamstop_upstream_errors_total", {"kind": "broken"}) == 1
    assert sample(metrics, "streamstop_active_streams") == 0
    assert sample(metrics, "streamstop_active_requests") == 1  # the /metrics request itself
    ttfb = "streamstop_time_to_first_byte_seconds_sum"
    assert sample(metrics, ttfb, {"route": chat["route"]}) == 0.25
    duration = "streamstop_request_duration_seconds_sum"
    assert sample(metrics, duration, {"route": chat["route"]}) == 0.5


# The stop that fired, as the access log writes it: the stop itself as a JSON string (escaped
# by the encoder, never a Python repr), cut to 200 characters.
LOGGED_STOPS = {
    "plain": ("</s>", "</s>"),
    "quotes": ('it\'s "x"', 'it\'s "x"'),
    "newlines": ("\n\nUser:", "\n\nUser:"),
    "non-ascii": ("«fin»", "«fin»"),
    "long": ("x" * 1000, "x" * 200),
}


@pytest.mark.parametrize("case", LOGGED_STOPS)
async def test_the_access_log_writes_the_stop_as_a_json_string(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    stop, logged = LOGGED_STOPS[case]
    app = Observed(FillingApp(), clock=Clock())
    with caplog.at_level(logging.INFO, logger="streamstop.access"):
        async with client(app) as http:
            await http.post("/v1/completions", json={"model": "m", "stop": [stop], "cut": True})
    (line,) = [r.getMessage() for r in caplog.records]
    assert json.loads(line)["stop_fired"] == logged
    assert line.isascii()
    assert "\n" not in line  # one line, whatever the stop holds


async def test_repeated_requests_add_up_in_each_label_set() -> None:
    # The collectors' children are kept per label values: each request must still count.
    app = Observed(FillingApp(), clock=Clock())
    async with client(app) as http:
        for fault in (None, None, "broken", None, "broken", "timeout"):
            await http.post(
                "/v1/completions", json={"model": "m", "fault": fault, "cut": True, "stop": ["x"]}
            )
        await http.post("/v1/chat/completions", json={"model": "m"})
        metrics = (await http.get("/metrics")).text
    completions = {"route": "/v1/completions"}
    assert sample(metrics, "streamstop_requests_total", {**completions, "status": "200"}) == 6
    assert (
        sample(
            metrics, "streamstop_requests_total", {"route": "/v1/chat/completions", "status": "200"}
        )
        == 1
    )
    assert sample(metrics, "streamstop_streams_cut_total", completions) == 6
    assert sample(metrics, "streamstop_stops_fired_total", completions) == 12
    assert sample(metrics, "streamstop_upstream_errors_total", {"kind": "broken"}) == 2
    assert sample(metrics, "streamstop_upstream_errors_total", {"kind": "timeout"}) == 1
    assert sample(metrics, "streamstop_request_duration_seconds_count", completions) == 6
    assert sample(metrics, "streamstop_request_duration_seconds_sum", completions) == 6 * 0.5


REQUEST_IDS = {
    "safe": ("abc-DEF_1.2:3", True),
    "too long": ("a" * 129, False),
    "a space": ("a b", False),
    "a quote": ('a"b', False),
    "empty": ("", False),
}


@pytest.mark.parametrize("case", REQUEST_IDS)
async def test_request_ids_are_taken_only_when_safe(case: str) -> None:
    given, kept = REQUEST_IDS[case]
    async with client(Observed(Inner())) as http:
        response = await http.get("/v1/models", headers={"x-request-id": given})
    assert (response.headers["x-request-id"] == given) is kept
    if not kept:
        assert len(response.headers["x-request-id"]) == 32


class Failing:
    """An app with a bug: it raises before it starts a response."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raise KeyError("a bug")


async def test_a_failing_app_gives_an_openai_shaped_500(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="streamstop.server"):
        async with client(Observed(Failing())) as http:
            response = await http.post(
                "/v1/chat/completions", json={}, headers={"x-request-id": "req-1"}
            )
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": "The server failed on this request (request id req-1).",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    assert [r.getMessage() for r in caplog.records if r.name == "streamstop.server"] == [
        "request req-1 failed before its response began"
    ]


async def test_route_labels_are_bounded() -> None:
    app = Observed(Inner())
    async with client(app) as http:
        for i in range(50):
            await http.get(f"/v1/%2e%2e/admin{i}")
            await http.get(f"/anything/{i}")
        await http.get("/v1/models/echo")
        metrics = (await http.get("/metrics")).text
    routes = {
        line.split('route="')[1].split('"')[0]
        for line in metrics.splitlines()
        if line.startswith("streamstop_requests_total{")
    }
    assert routes == {"other", "/v1/models/{model}"}  # /metrics counts itself after
    assert sample(metrics, "streamstop_requests_total", {"route": "other", "status": "200"}) == 100


async def test_two_apps_count_apart() -> None:
    one, two = Observed(Inner()), Observed(Inner())
    async with client(one) as first, client(two) as second:
        await first.get("/v1/models")
        text_one = (await first.get("/metrics")).text
        text_two = (await second.get("/metrics")).text
    labels = {"route": "/v1/models", "status": "200"}
    assert sample(text_one, "streamstop_requests_total", labels) == 1
    assert sample(text_two, "streamstop_requests_total", labels) is None


class NotReady:
    def __init__(self) -> None:
        self.seen: list[tuple[str | None, int]] = []

    async def check(self) -> str | None:
        return "The upstream did not answer GET http://up/v1/models: ConnectError: refused"

    def observe(self, record: RequestRecord, status: int) -> None:
        self.seen.append((record.upstream_error, status))


async def test_probes() -> None:
    readiness = NotReady()
    inner = Inner()
    async with client(Observed(inner)) as http:
        health = await http.get("/health")
        ready = await http.get("/ready")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ok"})
    async with client(Observed(inner, readiness=readiness)) as http:
        not_ready = await http.get("/ready")
        assert (await http.get("/health")).status_code == 200
        assert (await http.post("/health")).status_code == 200  # not a probe: the app's
    assert (not_ready.status_code, not_ready.json()) == (
        503,
        {
            "error": {
                "message": "The upstream did not answer GET http://up/v1/models: "
                "ConnectError: refused",
                "type": "server_error",
                "param": None,
                "code": "not_ready",
            }
        },
    )
    assert inner.calls == 1  # only the POST reached the app
    assert readiness.seen == [(None, 503), (None, 200), (None, 200)]


async def test_metrics_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # importing it now fails
    app = Observed(Inner())
    async with client(app) as http:
        response = await http.get("/metrics")
        assert (await http.get("/v1/models")).status_code == 200  # all else works
    assert (response.status_code, response.json()) == (
        501,
        {
            "error": {
                "message": "GET /metrics needs the prometheus-client package: "
                "pip install 'streamstop[metrics]' (from a clone: pip install -e '.[metrics]').",
                "type": "server_error",
                "param": None,
                "code": "metrics_unavailable",
            }
        },
    )


async def test_metrics_off_leaves_the_path_to_the_app() -> None:
    inner = Inner()
    async with client(Observed(inner, metrics=False)) as http:
        assert (await http.get("/metrics")).json() == {"ok": True}
    assert inner.calls == 1


# -- readiness of the proxy: a probe of the upstream -------------------------------------------


class Upstream:
    def __init__(self) -> None:
        self.calls = 0
        self.answer: Callable[[httpx.Request], httpx.Response] = lambda _: httpx.Response(200)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        assert request.url == "http://up:1/v1/models"
        assert request.headers["authorization"] == "Bearer sk-up"
        return self.answer(request)


@pytest.mark.parametrize("upstream", ["http://up:1", "http://up:1/", "http://up:1/v1"])
async def test_upstream_probe_asks_the_roots_openai_models(upstream: str) -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(404)  # a live server without the OpenAI API is still live

    probe = UpstreamProbe(upstream, transport=httpx.MockTransport(answer))
    assert await probe.check() is None
    assert asked == ["http://up:1/v1/models"]


async def test_upstream_probe() -> None:
    upstream = Upstream()
    now = [0.0]
    probe = UpstreamProbe(
        "http://up:1/v1/",
        api_key="sk-up",
        ttl=5.0,
        clock=lambda: now[0],
        transport=httpx.MockTransport(upstream),
    )
    assert await probe.check() is None
    assert await probe.check() is None
    assert upstream.calls == 1  # cached for ttl seconds

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    upstream.answer = refuse
    now[0] = 5.0
    assert await probe.check() == (
        "The upstream did not answer GET http://up:1/v1/models: ConnectError: refused"
    )
    upstream.answer = lambda _: httpx.Response(503)
    now[0] = 10.0
    assert await probe.check() == "The upstream answered GET http://up:1/v1/models with HTTP 503."
    upstream.answer = lambda _: httpx.Response(401)  # an answer: the server is there
    now[0] = 15.0
    assert await probe.check() is None
    # A request that found the upstream unreachable: the next check probes again at once.
    upstream.answer = refuse
    probe.observe(RequestRecord("r", upstream_error="unreachable"), 502)
    assert await probe.check() is not None
    assert upstream.calls == 5


# -- the body deadline -------------------------------------------------------------------------


class Reader:
    def __init__(self) -> None:
        self.bodies: list[bytes | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive, 1 << 20)
        self.bodies.append(body)
        if body is not None:
            await send_json(send, 200, {"size": len(body)})


async def test_body_deadline_answers_408_and_the_app_sees_a_disconnect() -> None:
    reader = Reader()
    app = BodyDeadline(reader, 0.05)
    sent: list[Any] = []
    started = anyio.Event()

    async def receive() -> dict[str, Any]:
        if not started.is_set():
            started.set()
            return {"type": "http.request", "body": b"{", "more_body": True}
        await anyio.sleep_forever()  # the rest of the body never comes
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": "/", "headers": []}, receive, send)
    assert reader.bodies == [None]
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {
        "error": {
            "message": "The request body did not arrive within 0.05 s.",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_timeout",
        }
    }


async def test_body_in_time_passes() -> None:
    reader = Reader()
    async with client(BodyDeadline(reader, 30)) as http:
        response = await http.post("/", content=b"x" * 1000)
    assert response.json() == {"size": 1000}
    with pytest.raises(ValueError, match="got 0"):
        BodyDeadline(reader, 0)


# -- the echo model's caps ---------------------------------------------------------------------


def chat(n: int = 1, text: str = "hi", **more: Any) -> dict[str, Any]:
    return {"model": "echo", "messages": [{"role": "user", "content": text}], "n": n, **more}


def legacy(prompts: int, n: int = 1, **more: Any) -> dict[str, Any]:
    return {"model": "echo", "prompt": ["p"] * prompts, "n": n, **more}


ECHO_CAPS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "n over 128": (
        "/v1/chat/completions",
        chat(n=129),
        "n",
        "Invalid 'n': expected an integer from 1 to 128, got 129.",
    ),
    "too many prompts": (
        "/v1/completions",
        legacy(prompts=129),
        "prompt",
        "Invalid 'prompt': at most 128 prompts in one request, got 129.",
    ),
    "n x prompts": (
        "/v1/completions",
        legacy(prompts=100, n=100),
        "n",
        "Invalid 'n': 100 choices for each of 100 prompts make 10000 choices, more than the "
        "128 of one response.",
    ),
    "n x prompt length": (
        "/v1/chat/completions",
        chat(n=128, text="x" * 20_000),
        "n",
        "Invalid 'n': 128 x 20000 characters of prompt make an echo of 2560000 characters, "
        "more than the 2097152 of one response.",
    ),
    "max_tokens": (
        "/v1/chat/completions",
        chat(max_tokens=10**9),
        "max_tokens",
        "Invalid 'max_tokens': expected an integer from 1 to 1048576, got 1000000000.",
    ),
}


@pytest.mark.parametrize("case", ECHO_CAPS)
async def test_echo_caps(case: str) -> None:
    path, request, param, message = ECHO_CAPS[case]
    async with client(EchoModel()) as http:
        response = await http.post(path, json=request)
    assert (response.status_code, response.json()) == (
        400,
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": None,
            }
        },
    )


async def test_echo_at_its_caps() -> None:
    async with client(EchoModel()) as http:
        many = await http.post("/v1/completions", json=legacy(prompts=64, n=2, max_tokens=1))
        assert len(many.json()["choices"]) == 128
        big = await http.post("/v1/chat/completions", json=chat(n=1, text="y" * 2_000_000))
        assert big.json()["choices"][0]["message"]["content"] == "y" * 2_000_000


# -- repeated errors, logged once per interval -------------------------------------------------


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_repeated_errors_are_logged_once_per_interval_with_a_count() -> None:
    now = [0.0]
    logger = logging.getLogger("streamstop.test.repeat")
    logger.propagate = False
    handler = Records()
    logger.addHandler(handler)
    logger.addFilter(RepeatFilter(10.0, clock=lambda: now[0]))
    for second in range(25):
        now[0] = float(second)
        for client_port in range(100):  # other arguments: the same kind
            logger.warning("Invalid HTTP request from %s.", client_port)
        logger.error("Exceeded concurrency limit.")
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        logger.exception("socket.accept() out of system resource")
        logger.exception("socket.accept() out of system resource")
    assert handler.lines == [
        "Invalid HTTP request from 0.",
        "Exceeded concurrency limit.",
        "Invalid HTTP request from 0. (and 999 more like this in the last 10 s)",
        "Exceeded concurrency limit. (and 9 more like this in the last 10 s)",
        "Invalid HTTP request from 0. (and 999 more like this in the last 10 s)",
        "Exceeded concurrency limit. (and 9 more like this in the last 10 s)",
        "socket.accept() out of system resource",
    ]


def test_repeat_filter_remembers_a_bounded_number_of_kinds() -> None:
    repeat = RepeatFilter(10.0, clock=lambda: 0.0, max_kinds=3)
    records = [
        logging.LogRecord("x", logging.ERROR, __file__, 1, f"message {i}", None, None)
        for i in range(10)
    ]
    assert all(repeat.filter(record) for record in records)
    assert len(repeat._seen) == 3
    with pytest.raises(ValueError, match="got 0"):
        RepeatFilter(0)
