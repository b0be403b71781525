"""Observed: probes, Prometheus metrics and one access-log line per request, around any app.

The outermost layer of ``streamstop serve`` and ``proxy``. Rules:

- ``GET /health`` (liveness): always ``200 {"status":"ok"}`` while the process serves.
  ``GET /ready`` (readiness): ``200 {"status":"ok"}``, or a 503 in the OpenAI error shape saying
  why not (for the proxy: the upstream did not answer a probe). ``GET /metrics``: the
  Prometheus text format, from a registry of this app's own (two apps in one process never
  share counters); without the ``metrics`` extra it is a 501 saying what to install. These
  three never reach the app, so they need no client key.
- Every other request gets a fresh :class:`~streamstop.server._record.RequestRecord` in its
  scope, with a request id: the client's ``X-Request-ID`` if it is a short token of safe
  characters, else a new one; it is sent back as ``X-Request-ID``. The inner layers fill in
  the model, the stops and what fired; when the response is over, one JSON line goes to the
  ``streamstop.access`` logger (probes at DEBUG, the rest at INFO) and the metrics count it.
- Labels are bounded: a route is one of the known paths or ``"other"``; an upstream error is one
  of the record's kinds or ``"other"``. A client choosing paths cannot create series.
- A response that never started because the client left is counted with status 499 (nginx's
  "client closed request"). An app that fails before its response starts gets the client an
  OpenAI-shaped 500 (code ``internal_error``, the request id in the message), and the
  traceback goes to the ``streamstop.server`` logger; once it has started, the connection
  is ended.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._extras import install_hint
from .._families import FAMILY_PATHS, OPENAI_ALIASES, family_route
from .._faults import RECORDED, Fault
from ._asgi import ASGIApp, Message, Receive, Scope, Send, header, send_error, send_json
from ._logging import ACCESS_LOGGER
from ._proxy import upstream_root
from ._record import RECORD_KEY, RequestRecord

_ERRORS = logging.getLogger("streamstop.server")

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ROUTES",
    "UPSTREAM_ERROR_LABELS",
    "AlwaysReady",
    "Observed",
    "Readiness",
    "UpstreamProbe",
    "access_line",
    "route_label",
    "upstream_error_label",
]

_PROBES = ("/health", "/ready", "/metrics")
ROUTES = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/v1/models/{model}",
    *OPENAI_ALIASES,
    *FAMILY_PATHS,
    *_PROBES,
)
# The label values of streamstop_upstream_errors: the kinds a record keeps (strings: a str
# enum hashes by its name, so a Fault is looked up here by its value).
UPSTREAM_ERROR_LABELS = frozenset(fault.value for fault in RECORDED.values())
# A request id is echoed into logs and headers: a short token of safe characters, or a new one.
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_METRICS_HINT = install_hint("metrics")
# Seconds. Time to first byte spans a cache hit to a long prefill; a duration, a short error to
# a 10-minute generation (the proxy's default read timeout).
_TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 600.0)


def route_label(path: str) -> str:
    """The metrics label of ``path``: a known route, or ``"other"``.

    >>> route_label("/v1/chat/completions"), route_label("/v1/models/echo"), route_label("/x")
    ('/v1/chat/completions', '/v1/models/{model}', 'other')
    >>> route_label("/v1beta/models/gemini-2.5-flash:streamGenerateContent")
    '/v1beta/models/{model}:streamGenerateContent'
    """
    if path in ROUTES:
        return path
    route = family_route(path)  # Gemini's paths name the model: labelled by their pattern
    if route is not None:
        return route
    if path.startswith("/v1/models/") and "/" not in path[len("/v1/models/") :]:
        return "/v1/models/{model}"
    return "other"


class Readiness(Protocol):
    """What ``GET /ready`` asks: ``None`` when ready, else the reason why not."""

    async def check(self) -> str | None: ...

    def observe(self, record: RequestRecord, status: int) -> None:
        """Called after every request: traffic can say the backend is gone before a probe."""


class AlwaysReady:
    """The readiness of an app with nothing behind it (``serve``'s echo model)."""

    async def check(self) -> str | None:
        return None

    def observe(self, record: RequestRecord, status: int) -> None:
        pass


class UpstreamProbe:
    """Ready when the upstream answered ``GET <root>/v1/models`` within ``ttl`` seconds.

    ``upstream`` is what the proxy was given: the server's root, or its ``/v1`` base; any
    answer below 500 counts, so a root that serves no OpenAI API (TGI's native routes, say)
    still shows as live by its 404.

    A probe waits at most ``timeout`` seconds; its result, good or bad, is kept for ``ttl``
    seconds, so a load balancer polling every replica often costs the upstream one request per
    ``ttl``; concurrent checks share one probe. Any HTTP answer below 500 counts (a 401 still
    shows a live server). A request that finds the upstream unreachable or timing out makes the
    next check probe again at once.
    """

    def __init__(
        self,
        upstream: str,
        *,
        api_key: str | None = None,
        timeout: float = 2.0,
        ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = upstream_root(upstream) + "/v1/models"
        self.api_key = api_key
        self.timeout = timeout
        self.ttl = ttl
        self._clock = clock
        self._transport = transport
        self._checked_at: float | None = None
        self._reason: str | None = None
        self._lock = anyio.Lock()

    def _fresh(self) -> bool:
        return self._checked_at is not None and self._clock() - self._checked_at < self.ttl

    async def check(self) -> str | None:
        if self._fresh():
            return self._reason
        async with self._lock:
            if not self._fresh():  # another check may have probed while this one waited
                self._reason = await self._probe()
                self._checked_at = self._clock()
        return self._reason

    async def _probe(self) -> str | None:
        import httpx

        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout, transport=self._transport) as client:
                response = await client.get(self.url, headers=headers)
        except httpx.HTTPError as error:
            return f"The upstream did not answer GET {self.url}: {type(error).__name__}: {error}"
        if response.status_code >= 500:
            return f"The upstream answered GET {self.url} with HTTP {response.status_code}."
        return None

    def observe(self, record: RequestRecord, status: int) -> None:
        if record.upstream_error in (Fault.UNREACHABLE, Fault.TIMEOUT):
            self._checked_at = None


class _Metrics:
    """The Prometheus collectors of one app, in a registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter(
            "streamstop_requests",
            "Requests answered, by route and status.",
            ["route", "status"],
            registry=registry,
        )
        self.streams_cut = Counter(
            "streamstop_streams_cut",
            "Responses in which a stop cut at least one choice.",
            ["route"],
            registry=registry,
        )
        self.stops_fired = Counter(
            "streamstop_stops_fired",
            "Choices cut by a stop.",
            ["route"],
            registry=registry,
        )
        self.upstream_errors = Counter(
            "streamstop_upstream_errors",
            "Requests that met an upstream fault, by kind.",
            ["kind"],
            registry=registry,
        )
        self.active_requests = Gauge(
            "streamstop_active_requests", "Requests in progress.", registry=registry
        )
        self.active_streams = Gauge(
            "streamstop_active_streams",
            "Event-stream responses in progress.",
            registry=registry,
        )
        self.time_to_first_byte = Histogram(
            "streamstop_time_to_first_byte_seconds",
            "From the request's arrival to the first byte of its response body.",
            ["route"],
            buckets=_TTFB_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "streamstop_request_duration_seconds",
            "From the request's arrival to the end of its response.",
            ["route"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )

        # Each metric's child per label values, kept: labels() validates its arguments and takes
        # a lock on every call. As bounded as prometheus-client's own children (routes are
        # known ones or "other", statuses three digits, kinds a fixed set).
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label values."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def render(self) -> tuple[bytes, bytes]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST.encode()


def _load_metrics() -> _Metrics | None:
    try:
        return _Metrics()
    except ImportError:
        return None


class Observed:
    """Probes, metrics and the access log around ``app``; see the module's rules.

    ``readiness`` answers ``/ready`` (:class:`AlwaysReady` by default). ``metrics=False`` turns
    the collectors off (``/metrics`` is then a 404). ``clock`` is a monotonic clock in seconds.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        readiness: Readiness | None = None,
        metrics: bool = True,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.readiness: Readiness = readiness if readiness is not None else AlwaysReady()
        self.metrics_enabled = metrics
        self.metrics = _load_metrics() if metrics else None
        self.logger = logger if logger is not None else logging.getLogger(ACCESS_LOGGER)
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        handler: ASGIApp = self.app
        probe = path in _PROBES and (path != "/metrics" or self.metrics_enabled)
        if probe and scope.get("method") in ("GET", "HEAD"):
            handler = self._probe
        await self._observe(scope, receive, send, handler)

    async def _probe(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == "/health":
            await send_json(send, 200, {"status": "ok"})
        elif path == "/ready":
            reason = await self.readiness.check()
            if reason is None:
                await send_json(send, 200, {"status": "ok"})
            else:
                await send_error(send, 503, reason, type="server_error", code="not_ready")
        elif self.metrics is None:
            await send_error(
                send,
                501,
                f"GET /metrics needs the prometheus-client package: {_METRICS_HINT}.",
                type="server_error",
                code="metrics_unavailable",
            )
        else:
            body, content_type = self.metrics.render()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", content_type),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _observe(self, scope: Scope, receive: Receive, send: Send, handler: ASGIApp) -> None:
        record = RequestRecord(request_id=_request_id(scope), route=route_label(scope["path"]))
        scope = {**scope, RECORD_KEY: record}
        start = self._clock()
        status: int | None = None
        first_byte: float | None = None
        streaming = False
        disconnected = False  # before the response was over
        complete = False
        metrics = self.metrics

        async def observed_receive() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                disconnected = True
            return message

        # Not a coroutine function: it hands back the server's own awaitable, so that each
        # message of a stream costs no coroutine of ours.
        def observed_send(message: Message) -> Awaitable[None]:
            nonlocal status, first_byte, streaming, complete
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", record.request_id.encode()))
                message = {**message, "headers": headers}
                content_type = header(headers, b"content-type") or b""
                if content_type.lower().startswith(b"text/event-stream"):
                    streaming = True
                    if metrics is not None:
                        metrics.active_streams.inc()
            else:
                if first_byte is None and message.get("body"):
                    first_byte = self._clock()
                complete = not message.get("more_body", False)
            return send(message)

        if metrics is not None:
            metrics.active_requests.inc()
        try:
            await handler(scope, observed_receive, observed_send)
        except Exception:
            if status is not None or disconnected:
                raise  # the response began, or nobody listens: the server ends the connection
            # A fault inside the server: the client gets the OpenAI shape, never uvicorn's
            # plain-text 500; the traceback goes to the log, with the request id to find it.
            _ERRORS.exception("request %s failed before its response began", record.request_id)
            await send_error(
                observed_send,
                500,
                f"The server failed on this request (request id {record.request_id}).",
                type="server_error",
                code="internal_error",
            )
        finally:
            end = self._clock()
            if metrics is not None:
                metrics.active_requests.dec()
                if streaming:
                    metrics.active_streams.dec()
            if status is None:
                status = 499 if disconnected else 500
            self._finish(scope, record, status, disconnected, start, first_byte, end)

    def _finish(
        self,
        scope: Scope,
        record: RequestRecord,
        status: int,
        disconnected: bool,
        start: float,
        first_byte: float | None,
        end: float,
    ) -> None:
        self.readiness.observe(record, status)
        route = record.route
        metrics = self.metrics
        if metrics is not None:
            child = metrics.child
            child(metrics.requests, route, str(status)).inc()
            if record.choices_cut:
                child(metrics.streams_cut, route).inc()
                child(metrics.stops_fired, route).inc(record.choices_cut)
            if record.upstream_error is not None:
                child(metrics.upstream_errors, upstream_error_label(record.upstream_error)).inc()
            if first_byte is not None:
                child(metrics.time_to_first_byte, route).observe(first_byte - start)
            child(metrics.duration, route).observe(end - start)
        level = logging.DEBUG if route in _PROBES else logging.INFO
        if self.logger.isEnabledFor(level):
            self.logger.log(
                level, access_line(scope, record, status, disconnected, start, first_byte, end)
            )


# A model name or a stop in the access log: a line stays short (a stop may be up to
# max_stop_length, 1,024 characters, by default) and still shows what fired.
_LOGGED_CHARS = 200


def _cut(text: str | None) -> str | None:
    return None if text is None else text[:_LOGGED_CHARS]


def access_line(
    scope: Scope,
    record: RequestRecord,
    status: int,
    disconnected: bool,
    start: float,
    first_byte: float | None,
    end: float,
) -> str:
    """One request as a line of JSON: what the access log writes."""
    entry: dict[str, Any] = {
        "request_id": record.request_id,
        "method": scope.get("method"),
        "route": record.route,
        "status": status,
        "model": _cut(record.model),
        "stops": record.stops,
        # The stop itself, a JSON string (escaped by json.dumps, as the model is), not a repr.
        "stop_fired": _cut(record.stop_fired),
        "choices_cut": record.choices_cut,
        "upstream_error": record.upstream_error,
        "client_closed": disconnected,
        "ttfb_ms": None if first_byte is None else round((first_byte - start) * 1000, 1),
        "duration_ms": round((end - start) * 1000, 1),
    }
    return json.dumps(entry, ensure_ascii=True, separators=(",", ":"))


def upstream_error_label(kind: Fault | str) -> str:
    """The label ``streamstop_upstream_errors`` counts ``kind`` under: its value if it is one
    a record keeps, else ``"other"`` (the label set stays bounded)."""
    value = str(kind)
    return value if value in UPSTREAM_ERROR_LABELS else "other"


def _request_id(scope: Scope) -> str:
    given = header(scope.get("headers", []), b"x-request-id")
    if given is not None:
        text = given.decode("latin-1")
        if _SAFE_ID.fullmatch(text):
            return text
    return uuid.uuid4().hex
