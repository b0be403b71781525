"""Live servers for the server tests: uvicorn on free loopback ports, in background threads.

Each server listens on a socket bound before uvicorn starts (port 0: the kernel picks a free
one), so clients can connect at once. Servers are shared by the whole session and shut down at
its end. Anything uvicorn logs at ERROR (an exception in an app) fails the test that caused it.
At the end, the helpers the test modules share: clients of these servers and the API checks.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import httpx
import openai
import pytest
import uvicorn
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from streamstop.server import (
    ASGIApp,
    EchoModel,
    Message,
    ProxyApp,
    Receive,
    Scope,
    Send,
    StopMiddleware,
)
from streamstop.server._record import RECORD_KEY, RequestRecord

# A long message: streamed by a slow model it takes seconds, so a test can leave halfway.
LONG_TEXT = " ".join(f"word{i}" for i in range(3000))


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class LiveServer:
    """An ASGI app served by uvicorn in a thread; ``url`` is its OpenAI base URL (``.../v1``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.url = f"{self.base_url}/v1"
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=2,
        )
        self.server = _Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> LiveServer:
        self.thread.start()
        if not self.server.ready.wait(10):
            raise RuntimeError("uvicorn did not start within 10 s")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()
        if self.thread.is_alive():
            raise RuntimeError("uvicorn did not stop within 15 s")


class GuardedServer:
    """What ``streamstop serve`` or ``proxy`` runs, built by the command from ``flags`` (its
    app, its guarded protocol, ``bounds`` of :class:`ServerConfig`), in a thread."""

    def __init__(self, *flags: str, http: str | None = None, **bounds: Any) -> None:
        from streamstop._cli import build_parser
        from streamstop.server._commands import build_app, settings_of
        from streamstop.server._protocol import ServerConfig, protocol

        args = build_parser().parse_args(list(flags or ("serve", "--delay", "0")))
        self.settings = {"upstream": None, **settings_of(args.parser, args, {})}
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.address = self.sock.getsockname()[:2]
        self.base_url = "http://{}:{}".format(*self.address)
        config = ServerConfig(
            build_app(self.settings),
            http=http or protocol(),
            log_level="warning",
            access_log=False,
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=2,
            **bounds,
        )
        self.server = _Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        if not self.server.ready.wait(10):
            raise RuntimeError("uvicorn did not start within 10 s")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=10)


class StreamEnds:
    """Records how the echo model's streams ended; tests wait for an outcome without sleeping."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._outcomes: list[str] = []

    def __call__(self, outcome: str) -> None:
        with self._condition:
            self._outcomes.append(outcome)
            self._condition.notify_all()

    def count(self, outcome: str) -> int:
        with self._condition:
            return self._outcomes.count(outcome)

    async def wait_for(self, outcome: str, count: int, seconds: float = 10.0) -> None:
        """Wait until ``outcome`` has been recorded ``count`` times in all."""

        def wait() -> bool:
            with self._condition:
                return self._condition.wait_for(
                    lambda: self._outcomes.count(outcome) >= count, seconds
                )

        if not await anyio.to_thread.run_sync(wait):
            raise AssertionError(
                f"expected {count} streams {outcome}, got {self.count(outcome)} in {seconds} s"
            )


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_error_log = _ErrorLog()


@pytest.fixture(params=["aiohttp", "httpx"])
def each_upstream_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The case once with each HTTP client the proxy reads its upstream with, on asyncio
    (under trio only httpx runs, so the trio case runs twice on it): every fault and hostile
    input must end the same whichever client read it."""
    from streamstop.server import _proxy, _upstream

    kind: str = request.param

    def forced(client: Any) -> Any:
        if client != "auto":  # asked for by name: as asked
            return _upstream.choose(client)
        return "httpx" if _upstream.choose("auto") == "httpx" else kind

    monkeypatch.setattr(_proxy, "choose", forced)
    return kind


@pytest.fixture(autouse=True)
def _no_server_errors() -> Iterator[None]:
    _error_log.records.clear()
    yield
    errors = [_error_log.format(record) for record in _error_log.records]
    assert not errors, f"the servers logged errors: {errors}"


@pytest.fixture(scope="session", autouse=True)
def _capture_server_errors() -> Iterator[None]:
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(_error_log)
    yield
    logger.removeHandler(_error_log)


def _serve(app: ASGIApp) -> Iterator[LiveServer]:
    server = LiveServer(app).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def echo_ends() -> StreamEnds:
    return StreamEnds()


@pytest.fixture(scope="session")
def echo_server(echo_ends: StreamEnds) -> Iterator[LiveServer]:
    """What ``streamstop serve`` runs: the echo model behind the stop middleware."""
    yield from _serve(StopMiddleware(EchoModel(on_stream_end=echo_ends)))


@pytest.fixture(scope="session")
def slow_ends() -> StreamEnds:
    return StreamEnds()


@pytest.fixture(scope="session")
def slow_server(slow_ends: StreamEnds) -> Iterator[LiveServer]:
    """The echo model behind the middleware, pausing 10 ms after each piece."""
    yield from _serve(StopMiddleware(EchoModel(delay=0.01, on_stream_end=slow_ends)))


@pytest.fixture(scope="session")
def upstream_ends() -> StreamEnds:
    return StreamEnds()


@pytest.fixture(scope="session")
def upstream_server(upstream_ends: StreamEnds) -> Iterator[LiveServer]:
    """The bare echo model, no middleware: it ignores stops, like a backend without them."""
    yield from _serve(EchoModel(on_stream_end=upstream_ends))


@pytest.fixture(scope="session")
def proxy_server(upstream_server: LiveServer) -> Iterator[LiveServer]:
    """What ``streamstop proxy --upstream <bare echo>`` runs."""
    yield from _serve(StopMiddleware(ProxyApp(upstream_server.url)))


@pytest.fixture(scope="session")
def slow_upstream_ends() -> StreamEnds:
    return StreamEnds()


@pytest.fixture(scope="session")
def slow_upstream_server(slow_upstream_ends: StreamEnds) -> Iterator[LiveServer]:
    """The bare echo model pausing 10 ms after each piece."""
    yield from _serve(EchoModel(delay=0.01, on_stream_end=slow_upstream_ends))


@pytest.fixture(scope="session")
def slow_proxy_server(slow_upstream_server: LiveServer) -> Iterator[LiveServer]:
    """The proxy in front of the slow bare echo model."""
    yield from _serve(StopMiddleware(ProxyApp(slow_upstream_server.url)))


# -- helpers of the test modules ---------------------------------------------------------------


def client_for(server: LiveServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def leave_after_events(url: str, request: dict[str, Any], events: int) -> None:
    """Stream ``request`` from ``url``/chat/completions and close the connection after reading
    ``events`` ``data:`` lines, as a client that goes away halfway."""
    async with (
        httpx.AsyncClient(base_url=url) as client,
        client.stream("POST", "/chat/completions", json=request) as response,
    ):
        received = 0
        async for line in response.aiter_lines():
            received += line.startswith("data: ")
            if received == events:
                break


# -- raw upstreams: fixed bytes over TCP, for the proxy's fault tests --------------------------


def http_response(status: str, content_type: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class RawUpstream:
    """A TCP server that reads one HTTP request and answers with fixed bytes (or never)."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.url = ""

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            buffered = BufferedByteReceiveStream(stream)
            head = await buffered.receive_until(b"\r\n\r\n", 65536)
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await buffered.receive_exactly(length) if length else b""
            self.requests.append(head + b"\r\n\r\n" + body)
            answer = self.answer(body)
            if answer is None:
                await anyio.sleep_forever()
            else:
                await stream.send(answer)


@asynccontextmanager
async def raw_upstream(
    answer: Callable[[bytes], bytes | None], kind: type[RawUpstream] = RawUpstream
) -> AsyncIterator[RawUpstream]:
    """A :class:`RawUpstream` (or a subclass, ``kind``) listening on a free loopback port."""
    upstream = kind(answer)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    upstream.url = f"http://127.0.0.1:{port}/v1"
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, upstream._handle)
        yield upstream
        group.cancel_scope.cancel()


# -- in-process ASGI helpers shared by the middleware, proxy and family tests -----------------


class Client:
    def __init__(self, body: bytes | list[bytes], *, fail_send_after: int | None = None) -> None:
        self.parts = [body] if isinstance(body, bytes) else list(body)
        self.fail_send_after = fail_send_after
        self.messages: list[Message] = []
        self.gone = anyio.Event()

    async def receive(self) -> Message:
        if self.parts:
            part = self.parts.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(self.parts)}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.fail_send_after is not None and len(self.messages) >= self.fail_send_after:
            raise OSError("connection reset by peer")
        self.messages.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.gone.set()  # the response is complete: as uvicorn, report a disconnect

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.messages[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])

    @property
    def complete(self) -> bool:
        last = self.messages[-1]
        return last["type"] == "http.response.body" and not last.get("more_body", False)


def http_scope(path: str = "/v1/chat/completions", method: str = "POST", **extra: Any) -> Scope:
    headers = [(b"host", b"test"), (b"content-type", b"application/json")]
    return {"type": "http", "method": method, "path": path, "headers": headers, **extra}


class Recording:
    """The outer observability layer, reduced to what the tests need: a record in the scope."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.record = RequestRecord(request_id="test")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, RECORD_KEY: self.record}
        await self.app(scope, receive, send)


@asynccontextmanager
async def proxied(url: str, **options: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Recording]]:
    proxy = ProxyApp(url, **options)
    app = Recording(StopMiddleware(proxy))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy/v1") as client:
            yield client, app
    finally:
        await proxy.aclose()
