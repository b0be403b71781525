"""The uvicorn (and h11) internals streamstop.server._protocol relies on, one named test per
assumption of its module rules: a uvicorn release that breaks one fails here, by name, rather
than in production. tests/server/test_connections.py checks the behaviour end to end."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import h11
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState
from uvicorn.supervisors import Multiprocess

from streamstop.server import _protocol
from streamstop.server._protocol import (
    HTTPTOOLS_PROTOCOL,
    PROTOCOL,
    GuardedH11Protocol,
    ServerConfig,
)

HAS_HTTPTOOLS = importlib.util.find_spec("httptools") is not None
needs_httptools = pytest.mark.skipif(not HAS_HTTPTOOLS, reason="httptools is not installed")


def _httptools_protocol() -> type[Any]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


def _on_asyncio(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on asyncio, uvicorn's loop (the suite's anyio tests run on trio too)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


# The methods each guarded protocol overrides or calls, as uvicorn defines them on its class
# (not inherited from asyncio.Protocol), with the parameters the guards pass through.
H11_METHODS = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "handle_events": ["self"],
    "on_response_complete": ["self"],
    "send_400_response": ["self", "msg"],
}
HTTPTOOLS_METHODS = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
    "on_response_complete": ["self"],
    "send_400_response": ["self", "msg"],
}


@pytest.mark.parametrize("name", H11_METHODS)
def test_h11_protocol_defines_each_method_the_guard_overrides(name: str) -> None:
    assert name in vars(H11Protocol), f"uvicorn's H11Protocol no longer defines {name}"
    assert _parameters(vars(H11Protocol)[name]) == H11_METHODS[name]


@needs_httptools
@pytest.mark.parametrize("name", HTTPTOOLS_METHODS)
def test_httptools_protocol_defines_each_method_the_guard_overrides(name: str) -> None:
    cls = _httptools_protocol()
    assert name in vars(cls), f"uvicorn's HttpToolsProtocol no longer defines {name}"
    assert _parameters(vars(cls)[name]) == HTTPTOOLS_METHODS[name]


class _Transport(asyncio.Transport):
    """Enough of a TCP transport for a protocol's connection_made: no socket, nothing sent."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _made(cls: type[Any], **bounds: Any) -> tuple[Any, _Transport, ServerState]:
    """A protocol of ``cls`` with its connection made, as uvicorn's server makes one."""
    config = ServerConfig(_ok, log_level="warning", lifespan="off", ws="none", **bounds)
    config.load()
    state = ServerState()
    protocol = cls(config, state, {}, _loop=asyncio.get_running_loop())
    transport = _Transport()
    protocol.connection_made(transport)
    return protocol, transport, state


@pytest.mark.parametrize(
    "name", ["loop", "transport", "connections", "tasks", "config", "app", "logger"]
)
@_on_asyncio
async def test_h11_protocol_has_each_attribute_the_guard_reads(name: str) -> None:
    protocol, _, state = _made(H11Protocol)
    assert hasattr(protocol, name), f"uvicorn's H11Protocol has no {name} attribute"
    assert protocol.connections is state.connections
    assert protocol.tasks is state.tasks
    assert protocol.app is protocol.config.loaded_app


@needs_httptools
@pytest.mark.parametrize(
    "name", ["loop", "transport", "connections", "tasks", "config", "app", "logger", "pipeline"]
)
@_on_asyncio
async def test_httptools_protocol_has_each_attribute_the_guard_reads(name: str) -> None:
    protocol, _, state = _made(_httptools_protocol())
    assert hasattr(protocol, name), f"uvicorn's HttpToolsProtocol has no {name} attribute"
    assert protocol.connections is state.connections
    assert protocol.tasks is state.tasks
    assert len(protocol.pipeline) == 0  # a deque of the requests waiting their turn


def test_h11_connection_trailing_data_holds_a_partial_head() -> None:
    conn = h11.Connection(h11.SERVER)
    assert conn.trailing_data == (b"", False)
    conn.receive_data(b"GET / HT")
    assert conn.next_event() is h11.NEED_DATA
    partial, closed = conn.trailing_data
    assert (bytes(partial), closed) == (b"GET / HT", False)


@_on_asyncio
async def test_h11_handle_events_starts_a_new_cycle_with_self_app_per_head() -> None:
    protocol, transport, _ = _made(H11Protocol)
    ran: list[str] = []

    async def chosen(scope: Any, receive: Any, send: Any) -> None:
        ran.append(scope["path"])
        await _ok(scope, receive, send)

    protocol.app = chosen  # what the guard sets just before handle_events
    before = protocol.cycle
    protocol.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert protocol.cycle is not before
    await asyncio.gather(*protocol.tasks)
    assert ran == ["/a"]
    assert transport.written.startswith(b"HTTP/1.1 200")


@needs_httptools
@_on_asyncio
async def test_httptools_calls_the_head_and_message_hooks_inside_data_received() -> None:
    calls: list[str] = []

    class Recording(_httptools_protocol()):  # type: ignore[misc]
        def on_headers_complete(self) -> None:
            calls.append("headers")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            calls.append("message")
            super().on_message_complete()

    protocol, transport, _ = _made(Recording)
    protocol.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert calls == ["headers", "message"]  # synchronously, before data_received returned
    await asyncio.gather(*protocol.tasks)
    assert transport.written.startswith(b"HTTP/1.1 200")


@_on_asyncio
async def test_h11_calls_on_response_complete_once_per_response() -> None:
    completed: list[bool] = []

    class Recording(H11Protocol):
        def on_response_complete(self) -> None:
            completed.append(True)
            super().on_response_complete()

    protocol, _, _ = _made(Recording)
    protocol.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.gather(*protocol.tasks)
    assert completed == [True]


@pytest.mark.parametrize("cls", ["h11", pytest.param("httptools", marks=needs_httptools)])
@_on_asyncio
async def test_an_unparsable_request_goes_through_send_400_response(cls: str) -> None:
    messages: list[str] = []
    base = H11Protocol if cls == "h11" else _httptools_protocol()

    class Recording(base):  # type: ignore[misc,valid-type]
        def send_400_response(self, msg: str) -> None:
            messages.append(msg)
            super().send_400_response(msg)

    protocol, transport, _ = _made(Recording)
    protocol.data_received(b"NOT HTTP AT ALL\r\n\r\n")
    assert len(messages) == 1
    assert transport.written.startswith(b"HTTP/1.1 400")


@pytest.mark.parametrize(
    "name", [PROTOCOL, pytest.param(HTTPTOOLS_PROTOCOL, marks=needs_httptools)]
)
def test_config_takes_the_protocol_as_an_import_string(name: str) -> None:
    config = ServerConfig(_ok, http=name, head_timeout=1.0, connection_limit=2, lifespan="off")
    config.load()
    expected = getattr(_protocol, name.rsplit(":", 1)[1])
    assert config.http_protocol_class is expected
    assert (config.head_timeout, config.connection_limit) == (1.0, 2)


def test_config_keeps_the_h11_head_bound_the_httptools_guard_reads() -> None:
    assert ServerConfig(_ok, h11_max_incomplete_event_size=100).h11_max_incomplete_event_size == 100
    assert ServerConfig(_ok).h11_max_incomplete_event_size is None  # h11's default applies


def test_server_runs_on_given_sockets() -> None:
    assert _parameters(uvicorn.Server.run) == ["self", "sockets"]


def test_multiprocess_takes_the_config_and_the_sockets_only() -> None:
    assert _parameters(Multiprocess.__init__) == ["self", "config", "sockets"]


def test_the_guarded_h11_protocol_is_uvicorns_with_the_guard_first() -> None:
    assert GuardedH11Protocol.__mro__[1:3] == (_protocol.HeadGuard, H11Protocol)
