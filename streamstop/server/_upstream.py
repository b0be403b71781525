"""The proxy's HTTP client to its upstream, behind one small interface: aiohttp's or httpx's.

Why two: reading an event stream is most of a relay's CPU, and aiohttp parses HTTP in C
(llhttp) and hands over all that a read brought in one piece, where httpx parses each HTTP
chunk in Python (h11) and yields it alone. aiohttp runs on asyncio only, so httpx stays: under
trio, when aiohttp is not installed (it is in the ``fast`` extra), and when the application
passes its own ``httpx.AsyncClient``. :func:`choose` picks one (``"auto"``: aiohttp on asyncio
if importable, else httpx).

The interface (:class:`Upstream`, :class:`UpstreamResponse`), the same whichever client:

- ``await upstream.send(method, url, headers, body)`` gives the response once its head is
  read. ``url`` is sent as it is (percent-encoded, never re-quoted); redirects are not
  followed; the request carries ``headers`` (bytes pairs) and the client's own ``Host`` and
  ``Content-Length``, nothing that would change the body (no content type added).
- ``upstream.locate(url)`` is where ``send`` would send ``url``, as this client parses it:
  ``((scheme, host, port), path)`` (the path percent-encoded, without the query), or ``None``
  if it does not parse. The proxy checks it against the upstream's root: the rule is the
  sender's own, so no difference between two parsers can take a request elsewhere.
- ``response.pieces()`` is the body as it arrives: transfer coding removed, content coding
  kept (``Content-Encoding`` is the caller's to undo). With aiohttp a piece is everything read
  so far, several events of a fast stream; with httpx one HTTP chunk.
- Every failure of ``send`` or of reading the body is an instance of ``upstream.errors``;
  ``upstream.is_timeout(error)`` tells a read or connect past the timeout from a connection
  refused, reset, cut off or framed wrong, and ``upstream.name(error)`` names it for the
  client's error message in one vocabulary whichever library read it: httpx's exception names,
  which those messages have always carried (``ReadTimeout``, ``ConnectTimeout``,
  ``ConnectError``, ``ReadError``, ``RemoteProtocolError``: a response cut off or framed
  wrong). The message a client parses does not change with the extras installed.
- ``await response.aclose()`` ends the exchange, and may run twice: a body read to its end
  leaves its connection to the pool, one not read to its end closes it (the upstream sees the
  client leave, and a model stops generating).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import aiohttp
    import httpx

__all__ = [
    "CLIENTS",
    "Upstream",
    "UpstreamResponse",
    "aiohttp_missing",
    "checked",
    "choose",
    "make_upstream",
]

Client = Literal["auto", "aiohttp", "httpx"]
CLIENTS: tuple[Client, ...] = ("auto", "aiohttp", "httpx")

# Bounds on a response head's lines, as h11's bound on a whole head (100 KiB) is for httpx:
# aiohttp's defaults (8 KiB a line) refuse headers that real upstreams send (long cookies).
_MAX_HEAD_LINE = 64 * 1024
_POOL = 64  # idle connections kept per upstream


class UpstreamResponse(Protocol):
    status: int
    headers: Sequence[tuple[bytes, bytes]]

    def pieces(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


Location = tuple[tuple[str, str, int | None], str]


class Upstream(Protocol):
    errors: tuple[type[BaseException], ...]

    def locate(self, url: str) -> Location | None: ...

    async def send(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse: ...

    def is_timeout(self, error: BaseException) -> bool: ...

    def name(self, error: BaseException) -> str: ...

    async def aclose(self) -> None: ...


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio, or no loop
        return False
    return True


def checked(client: object) -> Client:
    """``client`` if it names a client (:data:`CLIENTS`), else a ValueError naming it."""
    if client not in CLIENTS:
        raise ValueError(f"upstream_client must be one of {', '.join(CLIENTS)}, got {client!r}")
    return client


def aiohttp_missing() -> str | None:
    """Why ``upstream_client='aiohttp'`` cannot run here, if aiohttp is not installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return "upstream_client='aiohttp' needs aiohttp: pip install 'streamstop[fast]'"
    return None


def choose(client: Client) -> Literal["aiohttp", "httpx"]:
    """The client to use in the running event loop: ``"auto"`` is aiohttp on asyncio when it is
    installed, else httpx. Asking for aiohttp without it, or under trio, is an error that says
    which."""
    if checked(client) == "httpx":
        return "httpx"
    missing = aiohttp_missing()
    if missing is not None:
        if client == "aiohttp":
            raise RuntimeError(missing)
        return "httpx"
    if not _on_asyncio():
        if client == "aiohttp":
            raise RuntimeError("upstream_client='aiohttp' runs on asyncio only (use 'httpx')")
        return "httpx"
    return "aiohttp"


def make_upstream(
    kind: Literal["aiohttp", "httpx"], timeout: float | None, client: httpx.AsyncClient | None
) -> Upstream:
    """A new upstream client of ``kind``; ``client``, if given, is the httpx client to use."""
    connect = 30.0 if timeout is None else min(timeout, 30.0)
    if kind == "aiohttp":
        return AiohttpUpstream(timeout, connect)
    return HttpxUpstream(timeout, connect, client)


# -- httpx ---------------------------------------------------------------------------------------


class HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Sequence[tuple[bytes, bytes]] = response.headers.raw

    def pieces(self) -> AsyncIterator[bytes]:
        # httpx's raw iterator itself: no generator of ours between its reads and the relay.
        return self._response.aiter_raw()

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    def __init__(
        self, timeout: float | None, connect: float, client: httpx.AsyncClient | None
    ) -> None:
        import httpx

        self.errors: tuple[type[BaseException], ...] = (httpx.HTTPError,)
        self._owned = client is None
        if client is None:
            # Without Nagle's delay, as the connections the proxy accepts (._protocol): asyncio
            # and trio set it on a connection they open, httpcore does not; set here, it holds
            # whatever opens the socket.
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=_POOL),
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            )
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=connect), transport=transport
            )
        self._client = client
        self._timeout = httpx.TimeoutException
        self._url = httpx.URL

    def locate(self, url: str) -> Location | None:
        try:
            parsed = self._url(url)
        except ValueError:  # httpx.InvalidURL
            return None
        if not parsed.host or not parsed.is_absolute_url:
            return None
        path = parsed.raw_path.split(b"?")[0].decode("ascii")
        return (parsed.scheme, parsed.host, parsed.port), path

    async def send(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        request = self._client.build_request(method, url, headers=headers, content=body)
        return HttpxResponse(await self._client.send(request, stream=True))

    def is_timeout(self, error: BaseException) -> bool:
        return isinstance(error, self._timeout)

    def name(self, error: BaseException) -> str:
        return type(error).__name__

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()


# -- aiohttp -------------------------------------------------------------------------------------


class AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Sequence[tuple[bytes, bytes]] = response.raw_headers

    def pieces(self) -> AsyncIterator[bytes]:
        # All that is buffered, in one piece: a fast stream's events go on in one write.
        return self._response.content.iter_any()

    async def aclose(self) -> None:
        response = self._response
        if response.content.at_eof():
            response.release()
        else:
            response.close()


class AiohttpUpstream:
    def __init__(self, timeout: float | None, connect: float) -> None:
        import aiohttp
        import yarl

        self.errors: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError)
        self._url = yarl.URL
        self._session = aiohttp.ClientSession(
            # No bound on connections (httpx's max_connections=None), idle ones kept.
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=timeout),
            # The body is relayed as received; gzip and deflate are inflated by the proxy, in
            # bounded pieces (._inflate).
            auto_decompress=False,
            # Not trust_env: aiohttp would then read ~/.netrc and the proxy variables in a thread
            # on every request (two thread hops before the request goes out, and a netrc
            # password added to requests without one). httpx, given a transport of its own,
            # reads neither either: the upstream is reached direct.
            trust_env=False,
            max_line_size=_MAX_HEAD_LINE,
            max_field_size=_MAX_HEAD_LINE,
            # The client's body goes as it came: no content type of aiohttp's own.
            skip_auto_headers=("Content-Type",),
        )

    def locate(self, url: str) -> Location | None:
        try:
            parsed = self._url(url, encoded=True)
        except ValueError:
            return None
        if parsed.host is None or not parsed.is_absolute():
            return None
        return (parsed.scheme, parsed.host, parsed.port), parsed.raw_path

    async def send(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        response = await self._session.request(
            method,
            self._url(url, encoded=True),  # as received: checked, never re-quoted
            headers=[(key.decode("latin-1"), value.decode("latin-1")) for key, value in headers],
            data=body,
            allow_redirects=False,
        )
        return AiohttpResponse(response)

    def is_timeout(self, error: BaseException) -> bool:
        return isinstance(error, asyncio.TimeoutError)

    def name(self, error: BaseException) -> str:
        import aiohttp

        if isinstance(error, aiohttp.ConnectionTimeoutError):
            return "ConnectTimeout"
        if isinstance(error, asyncio.TimeoutError):
            return "ReadTimeout"
        if isinstance(error, aiohttp.ClientConnectorError):  # refused, no such host
            return "ConnectError"
        if isinstance(error, aiohttp.ClientOSError):  # reset
            return "ReadError"
        # Cut off (ClientPayloadError, ServerDisconnectedError), a head that does not parse
        # (ClientResponseError): what h11 calls a protocol error.
        return "RemoteProtocolError"

    async def aclose(self) -> None:
        await self._session.close()
