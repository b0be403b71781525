"""Everything streamstop does with uvicorn beyond its documented ``Config``/``Server`` API: the
guarded protocols (h11's and httptools'), their config, and the runner of one or N workers.
No other module imports uvicorn's internals; ``tests/server/test_uvicorn_contract.py`` holds a
named test for each assumption below, so a uvicorn release that breaks one fails that test.
Tested range: ``uvicorn>=0.52,<0.55`` (pyproject.toml's ``server`` extra).

What the guards add. uvicorn bounds a request head's size (``h11_max_incomplete_event_size``,
with h11 only) and the idle time between requests (``timeout_keep_alive``), but not the time a
head may take: a client that sends half a request line and waits holds its connection, and its
file descriptor, forever. Rules added here, each with what it relies on in uvicorn:

- **Head timeout.** From a connection's start, and from the end of each response, the client
  has ``ServerConfig.head_timeout`` seconds to complete a request head. If it has not, a
  ``408`` (OpenAI error shape, ``Connection: close``) is written when some of a head arrived,
  and the connection is closed either way. Once a head is complete the timer is off: the body
  has its own deadline (:class:`~streamstop.server._deadline.BodyDeadline`), the response none.
  Relies on: ``connection_made(transport)``/``connection_lost(exc)`` (arm, disarm);
  ``on_response_complete()`` called once per response (re-arm); with h11, ``handle_events()``
  replacing ``self.cycle`` with a new cycle for each request head it parses (disarm), and h11's
  ``Connection.trailing_data`` (``(bytes, closed)``: the bytes of a head not yet complete);
  with httptools, ``on_headers_complete()`` per head and ``self.pipeline`` (the requests whose
  heads are in, waiting their turn: no timer for those). ``self.loop`` and ``self.transport``.
- **Connection limit.** ``ServerConfig.connection_limit`` caps open connections and requests in
  progress, as uvicorn's ``limit_concurrency`` does, but the ``503`` beyond it is in the OpenAI
  error shape, with ``Retry-After`` and ``Connection: close``. Relies on: ``self.connections``
  and ``self.tasks`` (the server's sets), ``self.app`` read by uvicorn when a head completes
  (inside ``handle_events()`` / ``on_headers_complete()``), so setting it just before chooses
  the app that request runs; ``self.config.loaded_app``; ``self.logger``.
- **Unparsable requests.** A request uvicorn cannot parse, and a head over its size, get a
  ``400`` in the OpenAI error shape (code ``invalid_http_request``, ``Connection: close``), not
  uvicorn's plain text. Relies on: uvicorn calling ``send_400_response(msg)`` for each.
- **Head size with httptools.** uvicorn's httptools protocol buffers a head (its URL, its
  headers, and inside httptools a header not yet complete) for as long as the client sends
  one. Here, as h11 does with ``h11_max_incomplete_event_size`` (16 KiB by default), a head
  still incomplete after a read, of more bytes than that, gets a ``400`` and the connection
  closed. A head is counted from the connection's start, and from the end of each request
  message, read by read; a head that ends within a read is not refused whatever its size
  (h11's rule too), and what follows a request's end in the same read (a pipelined head) is
  counted from the next read on: either way one read at most, so what is buffered stays
  bounded. (Such a pipelined head, if it then stalls, gets the close without the ``408``.)
  Relies on: ``data_received(data)`` parsing synchronously, calling ``on_headers_complete()``
  and ``on_message_complete()`` from inside it; ``config.h11_max_incomplete_event_size``.
- **No Nagle's delay.** Every connection sends without Nagle's delay (``TCP_NODELAY``),
  whatever made the listening socket. asyncio sets the option on an accepted socket only if
  the listener's protocol is ``IPPROTO_TCP``, as uvicorn's own listeners' is, but a socket
  from ``socket.create_server()`` (the commands') says 0: a response that starts on a
  kept-alive connection then waited for the client's delayed acknowledgement, 40 ms and more,
  before its first event. Relies on: ``connection_made(transport)`` being the first call with
  the transport.
- **Choosing the protocol.** uvicorn imports the protocol by name (``ServerConfig(http=
  protocol())``), in every worker process: ``Config(http=...)`` takes an import string since
  0.36, the lower bound. :func:`protocol` names :class:`GuardedHttpToolsProtocol` where
  httptools is installed (the ``fast`` extra), else :class:`GuardedH11Protocol`. With
  httptools the proxy spends 0.82-0.86x its CPU per streamed event on h11
  (benchmarks/README.md). Relies on: both protocols' ``__init__(config, server_state,
  app_state, _loop=None)``, passed through.
- **Workers.** :func:`serve` runs ``Server(config).run(sockets=[sock])``, or with
  ``config.workers > 1`` uvicorn's ``Multiprocess(config, sockets=[sock])`` supervisor, which
  starts each worker from the config (before 0.52 it also took a ``target``: hence the lower
  bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .. import _json
from ._asgi import Receive, Scope, Send, error_payload, send_error

__all__ = [
    "HTTPTOOLS_PROTOCOL",
    "PROTOCOL",
    "GuardedH11Protocol",
    "HeadGuard",
    "ServerConfig",
    "no_delay",
    "protocol",
    "serve",
]

PROTOCOL = "streamstop.server._protocol:GuardedH11Protocol"
HTTPTOOLS_PROTOCOL = "streamstop.server._protocol:GuardedHttpToolsProtocol"

# Whether httptools (the ``fast`` extra) is installed: uvicorn's httptools protocol imports it.
HAS_HTTPTOOLS = importlib.util.find_spec("httptools") is not None

# h11's default for h11_max_incomplete_event_size, which uvicorn leaves to h11.
_DEFAULT_HEAD_BYTES = 16 * 1024


def protocol() -> str:
    """The guarded protocol to serve with: httptools' where it is installed, else h11's."""
    # Asked at each call: a process may block the import (sys.modules["httptools"] = None).
    return HTTPTOOLS_PROTOCOL if importlib.util.find_spec("httptools") is not None else PROTOCOL


class ServerConfig(uvicorn.Config):
    """uvicorn's config, plus the bounds :class:`GuardedH11Protocol` reads.

    ``head_timeout``: seconds for a request head (``None``: no limit). ``connection_limit``:
    open connections and requests in progress (``None``: no limit). Pass ``http=PROTOCOL``.
    """

    def __init__(
        self,
        app: Any,
        *,
        head_timeout: float | None = None,
        connection_limit: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self.head_timeout = head_timeout
        self.connection_limit = connection_limit


def _error_response(status_line: bytes, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 response ending the connection, with an OpenAI-shaped error body:
    written straight to the transport where uvicorn has no request cycle to send it through."""
    body = _json.dumps(error_payload(message, code=code))
    return (
        b"HTTP/1.1 " + status_line + b"\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


_TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout", "The request head did not arrive in time.", "request_timeout"
)


class HeadGuard(asyncio.Protocol):
    """The rules both guarded protocols keep: the head timer (armed when a connection is made,
    disarmed when it is lost) and the choice of app at the connection limit. Listed before
    uvicorn's protocol in the bases; a protocol calls :meth:`_guard` from its ``__init__`` and
    says whether some of a head has arrived (:meth:`_partial_head`)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    tasks: set[Any]
    config: uvicorn.Config
    app: Any
    logger: logging.Logger

    def _guard(self, config: uvicorn.Config) -> None:
        self._head_timeout: float | None = getattr(config, "head_timeout", None)
        self._connection_limit: int | None = getattr(config, "connection_limit", None)
        self._head_timer: asyncio.TimerHandle | None = None
        self._busy_app = _busy(self._connection_limit)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        no_delay(transport)
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _choose_app(self) -> bool:
        """Set the app the next request runs: the busy one past the limit. Returns whether
        it is."""
        limit = self._connection_limit
        over = limit is not None and (len(self.connections) > limit or len(self.tasks) >= limit)
        self.app = self._busy_app if over else self.config.loaded_app
        return over

    def _head_arrived(self, over: bool) -> None:
        """A request's head is in and its request runs (the busy app's, if ``over``)."""
        self._disarm()
        if over:
            self.logger.warning("Exceeded concurrency limit.")

    def _arm(self) -> None:
        self._disarm()
        if self._head_timeout is not None:
            self._head_timer = self.loop.call_later(self._head_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _partial_head(self) -> bool:
        raise NotImplementedError

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it cannot parse (and ours to a head over its size),
        in the OpenAI error shape rather than uvicorn's plain text."""
        self._disarm()
        self.transport.write(_error_response(b"400 Bad Request", msg, "invalid_http_request"))
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._partial_head():
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


class GuardedH11Protocol(HeadGuard, H11Protocol):
    """See the module's rules. Configured through :class:`ServerConfig`."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._guard(config)

    def handle_events(self) -> None:
        over = self._choose_app()
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:
            self._head_arrived(over)

    def on_response_complete(self) -> None:
        # Armed first: a pipelined request handled by the call below disarms it again.
        if not self.transport.is_closing():
            self._arm()
        super().on_response_complete()

    def _partial_head(self) -> bool:
        partial, _ = self.conn.trailing_data
        return bool(partial)


if HAS_HTTPTOOLS:
    __all__ += ["GuardedHttpToolsProtocol"]

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HeadGuard, HttpToolsProtocol):
        """See the module's rules. Configured through :class:`ServerConfig`."""

        def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            self._guard(config)
            limit = getattr(config, "h11_max_incomplete_event_size", None)
            self._head_limit: int = _DEFAULT_HEAD_BYTES if limit is None else limit
            self._in_head = True  # the next bytes belong to a request head
            self._head_bytes = 0  # of the head being read

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            # Still in a head (on_headers_complete resets the count), and over its bound: refused.
            if (
                self._in_head
                and self._head_bytes > self._head_limit
                and not self.transport.is_closing()
            ):
                self.send_400_response(
                    f"The request head is larger than {self._head_limit} bytes (max_head_bytes)."
                )

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            over = self._choose_app()
            super().on_headers_complete()
            self._head_arrived(over)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head = True

        def on_response_complete(self) -> None:
            # A pipelined request's head is complete already: it starts below, with no timer.
            if not self.transport.is_closing() and not self.pipeline:
                self._arm()
            super().on_response_complete()

        def _partial_head(self) -> bool:
            return self._head_bytes > 0


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a TCP transport's socket: each write is sent at once (a
    Unix socket has no such option and is left alone)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        # OSError: the client has gone already, which uvicorn sees at its first read.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _busy(limit: int | None) -> Any:
    async def busy(scope: Scope, receive: Receive, send: Send) -> None:
        await send_error(
            send,
            503,
            f"The server is at its limit of {limit} concurrent connections and requests: "
            f"try again shortly.",
            type="server_error",
            code="server_busy",
            headers=[(b"retry-after", b"1"), (b"connection", b"close")],
        )

    return busy


def serve(config: ServerConfig, sock: socket.socket) -> None:
    """Serve ``config`` on ``sock`` until shut down: in this process, or with
    ``config.workers > 1`` in that many worker processes under uvicorn's supervisor."""
    if config.workers <= 1:
        uvicorn.Server(config).run(sockets=[sock])
        return
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config, sockets=[sock]).run()
