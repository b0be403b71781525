"""ProxyApp: an ASGI app forwarding ``/v1/...`` to an OpenAI-compatible upstream.

Why this module runs past 600 lines: it is one forwarded exchange, the path checks, the
upstream's errors in each API family's shape and the event-by-event relay with its faults,
all on one exchange's state (``_Exchange``); the filtering itself is the middleware's.

Put it behind :class:`~streamstop.server.StopMiddleware` (that is ``streamstop proxy``) and any
backend gets stops of any number, cut without leaks. Rules:

- ``upstream`` names the server's root (``http://localhost:11434``); a ``/v1`` suffix, the base
  URL an OpenAI client would be given (``http://localhost:8001/v1``), names the same root. A
  path on the proxy is that path under the root: ``/v1/chat/completions``, ``/v1/messages``,
  ``/api/chat``, ``/completion``, ``/generate_stream``... The OpenAI API (``/v1/...``, and
  llama.cpp's ``/chat/completions``: :data:`streamstop._families.OPENAI_ALIASES`) and the
  native paths of the other API families (:data:`streamstop._families.FAMILY_PATHS`, where
  Gemini's are patterns: ``/v1beta/models/{model}:streamGenerateContent``...) are forwarded;
  any other path gets a 404 unless ``forward_other=True``, and so do paths outside ``routes``
  (a path, or a family's pattern) when an allow-list is given. Every path forwarded passes the
  same checks:
- Only paths that stay under the upstream's root are forwarded: a dot segment (``..``, also as
  ``%2e%2e``), an encoded slash or backslash (``%2f``, ``%5c``), a backslash, a control
  character (CR, LF, NUL...) in the path or the query is a 400, OpenAI-shaped; the path is
  forwarded as received (still percent-encoded) and the URL checked to be under the base, so
  the upstream key never goes anywhere else.
- An event stream (``text/event-stream``, or any type but JSON when the request asked for
  ``stream: true``) is forwarded event by event, whole events only: an event cut off by the
  upstream is never sent. A stream that breaks, stalls past ``timeout``, or sends a line or an
  event over its limit ends with an SSE ``data: {"error": ...}`` event (``code``:
  ``upstream_broken``, ``upstream_timeout``, ``upstream_event_too_large``,
  ``upstream_truncated``) and a clean end.
- An NDJSON stream (``application/x-ndjson``: Ollama's) is forwarded line by line, whole
  lines only; a fault ends it with a line ``{"error": ...}``. On an SSE path of another family
  the fault event is that family's (Anthropic's: ``event: error``, ``"type": "error"``).
- A body the upstream compresses with gzip or deflate (although asked for identity) is inflated
  here piece by piece (:mod:`._inflate`: a client library would inflate each read whole, ~1000
  times its size for a bomb), its inflated total bounded by
  ``RequestLimits.max_response_bytes``: a stream over it ends with an error event (``code``:
  ``response_too_large``). A body in another encoding (``br``, ``zstd``) is relayed as
  received, with its ``Content-Encoding``: nothing in it can be cut. Sizes are counted as
  relayed.
- Any other response is read whole first (up to ``RequestLimits.max_response_bytes``): a body
  that breaks off, or a JSON body (up to ``max_body_bytes``) that does not parse, is a 502, a
  timeout a 504, both OpenAI-shaped.
  An upstream error (4xx, 5xx) reaches the client with the same status and an OpenAI-shaped
  body (passed on if it already is one, wrapped if not); an unreachable upstream is a 502.
  On Gemini's paths every error this proxy writes is in Google's shape instead
  (``{"error": {"code", "message", "status"}}``: what the google-genai SDK reads).
- The :class:`~streamstop.server._record.RequestRecord` of the scope, if any, gets the kind
  of upstream fault (``timeout``, ``unreachable``, ``broken``, ``truncated``, ``invalid``,
  ``too_large``, ``status``).
- The upstream response is closed (shielded, in ``finally``) when the client disconnects, when
  the app is cancelled (the middleware does that after a stop) and at the end.

The HTTP client (:mod:`._upstream`: aiohttp's on asyncio where installed, else httpx's) is
imported when the first request is forwarded: importing this module needs only the standard
library, so the core stays importable without the ``server`` extra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

import anyio
import anyio.to_thread

from .. import _json
from .._families import FAMILIES, FAMILY_PATHS, OPENAI_ALIASES, family_route
from .._family import Family, LineTooLarge, NDJSONDecoder
from .._family_openai import OPENAI_PATHS
from .._faults import Fault
from .._sse import EventSplitter, SSEDecoder, SSEFrameTooLarge, is_whole
from ._asgi import (
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    call_until_disconnect,
    header,
    read_body,
    send_error,
    send_json,
    serve_lifespan,
    too_large,
)
from ._inflate import INFLATABLE, Inflater, ResponseTooLarge
from ._limits import RequestLimits
from ._record import RequestRecord, record_of
from ._request import InvalidRequest, describe
from ._upstream import (
    Client,
    Upstream,
    UpstreamResponse,
    aiohttp_missing,
    checked,
    choose,
    make_upstream,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["ProxyApp", "checked_path", "upstream_error_payload", "upstream_root"]

# The family of every path that is not another family's (the OpenAI API under /v1, a path
# forwarded by forward_other=True): its error shapes are OpenAI's.
_OPENAI = FAMILIES[OPENAI_PATHS["/v1/chat/completions"]]

# Hop-by-hop headers (RFC 9110, 7.6.1) and those the proxy sets itself.
_REQUEST_DROP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"accept-encoding",
        # The proxy has read the whole body before it forwards: a 100-continue to wait for
        # would only stall the request (aiohttp waits for it).
        b"expect",
    }
)
_RESPONSE_DROP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"date",
        b"server",
    }
)


# Percent-encoded bytes a forwarded path may not hold: "/" and "\\" (they would change the
# path's segments once decoded), and control characters.
_BAD_ESCAPE = re.compile(rb"%(?:2f|5c|[01][0-9a-f]|7f)", re.IGNORECASE)
# Bytes a path or a query may not hold raw: controls, space, backslash, DEL and beyond ASCII.
_BAD_RAW = re.compile(rb"[\x00-\x20\\\x7f-\xff]")
_DOT_SEGMENT = re.compile(rb"(?:^|/)\.\.?(?:/|$)")
# A mislabeled stream's request body is parsed on the loop up to this size, in a thread beyond.
_PARSE_IN_THREAD_BYTES = 256 * 1024


def _bad_path(message: str) -> InvalidRequest:
    return InvalidRequest(400, message, code="invalid_path")


def checked_path(path: str, raw_path: bytes | None, query: bytes) -> bytes:
    """The path to forward (percent-encoded, as received), or :class:`InvalidRequest` (400)
    if it could leave the upstream's base or smuggle a control character."""
    raw = raw_path if raw_path else path.encode("utf-8", "surrogateescape")
    why = None
    if (
        _BAD_RAW.search(raw)
        or _BAD_RAW.search(query)
        or any(ord(c) < 0x20 or c in "\x7f\\" for c in path)
    ):
        why = "control characters, spaces and backslashes are not allowed"
    elif _BAD_ESCAPE.search(raw):
        why = "encoded slashes, backslashes and control characters are not allowed"
    elif _DOT_SEGMENT.search(unquote_to_bytes(raw)) or _DOT_SEGMENT.search(
        path.encode("utf-8", "surrogateescape")
    ):
        why = "'.' and '..' segments are not allowed"
    if why is not None:
        raise _bad_path(f"Invalid request path {describe(raw.decode('latin-1'))}: {why}.")
    return raw


def _snippet(body: bytes, limit: int = 500) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def upstream_error_payload(status: int, body: bytes, family: Family = _OPENAI) -> dict[str, Any]:
    """The body for an upstream error response: itself if it already is an error of the OpenAI
    shape (or Google's: both have ``error.message``), else wrapped in the family's shape."""
    try:
        parsed = _json.loads(body)
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return parsed
    kind = "invalid_request_error" if status < 500 else "server_error"
    message = f"The upstream server returned HTTP {status}"
    param = None
    if isinstance(parsed, dict):
        # vLLM's {"object": "error", "message": ...}, FastAPI's {"detail": ...}, {"error": "..."}
        detail = parsed.get("message") or parsed.get("detail") or parsed.get("error")
        if detail:
            message += f": {detail if isinstance(detail, str) else json.dumps(detail)}"
        if isinstance(parsed.get("type"), str):
            kind = parsed["type"]
        if isinstance(parsed.get("param"), str):
            param = parsed["param"]
    elif body.strip():
        message += f": {_snippet(body)}"
    return family.error_body(status, message, type=kind, param=param, code=status)


def upstream_root(upstream: str) -> str:
    """The server's root named by ``upstream``: ``/v1/...`` on the proxy is ``/v1/...`` under it,
    so ``http://host:8001/v1`` and ``http://host:8001`` name the same root."""
    upstream = upstream.rstrip("/")
    return upstream[:-3] if upstream.endswith("/v1") else upstream


class _CorruptBody(Exception):
    """A gzip or deflate body that does not inflate."""


class ProxyApp:
    """An ASGI app forwarding OpenAI API requests to ``upstream``, streaming.

    ``upstream`` is a base URL like ``http://localhost:8001/v1``. ``api_key``, if given, is
    sent as ``Authorization: Bearer ...`` instead of the client's. ``timeout`` bounds each read
    from the upstream, in seconds (a long prefill is silent; ``None``: no limit).
    ``upstream_client`` is the HTTP client the upstream is read with: ``"auto"`` (aiohttp on
    asyncio if installed, the ``fast`` extra; else httpx), ``"aiohttp"`` or ``"httpx"``. Pass
    your own ``httpx.AsyncClient`` as ``client`` to control pooling and TLS (it is then the one
    used); otherwise one is created at the first request and closed by :meth:`aclose` or the
    ASGI lifespan shutdown.
    ``routes``, if given, are the only proxy paths forwarded (``"/v1/chat/completions"``...);
    ``forward_other=True`` forwards paths outside the known APIs too (same path checks);
    ``limits`` bounds the request body (``max_body_bytes``), whole upstream responses
    (``max_response_bytes``) and the lines and events of upstream streams; the older
    ``max_body_size``, if given, overrides ``limits.max_body_bytes``.
    """

    def __init__(
        self,
        upstream: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        client: httpx.AsyncClient | None = None,
        limits: RequestLimits | None = None,
        routes: Iterable[str] | None = None,
        max_body_size: int | None = None,
        forward_other: bool = False,
        upstream_client: Client = "auto",
    ) -> None:
        if not isinstance(upstream, str) or not upstream.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream must be an http:// or https:// base URL like "
                f"'http://localhost:8001/v1', got {upstream!r}"
            )
        self.upstream = upstream.rstrip("/")
        self.root = upstream_root(upstream)
        self.forward_other = bool(forward_other)
        self.api_key = api_key
        self.timeout = timeout
        limits = limits if limits is not None else RequestLimits()
        if max_body_size is not None:
            limits = dataclasses.replace(limits, max_body_bytes=max_body_size)
        self.limits = limits
        self.routes = None if routes is None else frozenset(routes)
        checked(upstream_client)
        if client is not None:
            upstream_client = "httpx"
        elif upstream_client == "aiohttp" and (missing := aiohttp_missing()) is not None:
            raise ValueError(missing)  # before anything listens, not at the first request
        self.upstream_client: Client = upstream_client
        self._client = client
        # The clients made so far, by kind (aiohttp's on asyncio, httpx's under trio): like
        # the client each holds, they belong to the event loop that made them.
        self._upstreams: dict[str, Upstream] = {}
        # The upstream root's (scheme, host, port) and path prefix, as each client parses it.
        self._bases: dict[Upstream, tuple[tuple[str, str, int | None], str]] = {}

    @property
    def max_body_size(self) -> int:
        return self.limits.max_body_bytes

    def _get_upstream(self) -> Upstream:
        kind = choose(self.upstream_client)
        upstream = self._upstreams.get(kind)
        if upstream is None:
            upstream = self._upstreams[kind] = make_upstream(kind, self.timeout, self._client)
        return upstream

    async def aclose(self) -> None:
        """Close the clients this app created (not a ``client`` given). Idempotent."""
        upstreams, self._upstreams = self._upstreams, {}
        with anyio.CancelScope(shield=True):
            for upstream in upstreams.values():
                await upstream.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, on_shutdown=self.aclose)
            return
        if scope["type"] != "http":
            return
        path: str = scope.get("path", "")
        query: bytes = scope.get("query_string", b"")
        route = family_route(path)  # a native path, or the pattern it matches (Gemini's)
        family = FAMILIES[FAMILY_PATHS[route]] if route is not None else _OPENAI
        try:
            raw = checked_path(path, scope.get("raw_path"), query)
        except InvalidRequest as error:
            await _send_invalid(send, error, family)
            return
        known = (
            path == "/v1" or path.startswith("/v1/") or route is not None or path in OPENAI_ALIASES
        )
        if not (known or self.forward_other) or (
            self.routes is not None and path not in self.routes and route not in self.routes
        ):
            await send_error(
                send,
                404,
                f"Unknown request URL: {path}: this proxy serves the OpenAI API under /v1 and "
                f"{', '.join([*OPENAI_ALIASES, *FAMILY_PATHS])}"
                + ("." if self.routes is None else f", routes {sorted(self.routes)}."),
                code="unknown_url",
            )
            return
        try:
            body = await read_body(receive, self.limits.max_body_bytes)
        except BodyTooLarge as error:
            message = too_large(error.limit)
            await _send_invalid(send, InvalidRequest(413, message), family)
            return
        if body is None:
            return
        url = self.root + raw.decode("ascii")
        if query:
            url += "?" + query.decode("ascii")
        headers = [
            (key, value)
            for key, value in scope.get("headers", [])
            if key.lower() not in _REQUEST_DROP
            and not (self.api_key is not None and key.lower() == b"authorization")
        ]
        headers.append((b"accept-encoding", b"identity"))
        if self.api_key is not None:
            headers.append((b"authorization", f"Bearer {self.api_key}".encode()))
        try:
            upstream = self._get_upstream()
        except RuntimeError as error:  # upstream_client="aiohttp" under trio
            payload = family.error_body(
                500, str(error), type="server_error", code="upstream_client_unavailable"
            )
            await send_json(send, 500, payload)
            return
        if not self._under_base(url, upstream):
            await _send_invalid(send, _bad_path(f"Invalid request path: {path!r}."), family)
            return
        exchange = _Exchange(
            self, scope["method"], url, headers, body, send, record_of(scope), family, path
        )
        await call_until_disconnect(receive, lambda: exchange.forward(upstream), scope)

    def _under_base(self, target: str, upstream: Upstream) -> bool:
        """Whether ``target`` parses, as a URL under the upstream's root, parsed as the client
        that sends it parses it (what it would connect to is what is checked)."""
        url = upstream.locate(target)
        if url is None:  # what the path checks missed
            return False
        base = self._bases.get(upstream)
        if base is None:
            # Parsed once per client, not per request.
            parsed = upstream.locate(self.root)
            assert parsed is not None, self.root  # checked in __init__
            base = self._bases[upstream] = (parsed[0], parsed[1].rstrip("/") + "/")
        origin, prefix = base
        return url[0] == origin and (url[1] + "/").startswith(prefix)


async def _send_invalid(send: Send, error: InvalidRequest, family: Family) -> None:
    """Answer ``error`` in the shape of the family's clients."""
    payload = family.error_body(error.status, error.message, param=error.param, code=error.code)
    headers = [(b"allow", error.allow.encode())] if error.allow else []
    await send_json(send, error.status, payload, headers=headers)


def _is_whole_event(pending: bytes) -> bool:
    """Whether the bytes left at the end of a stream are an event missing only its blank line."""
    decoder = SSEDecoder()
    decoder.feed(pending)
    event = decoder.flush()
    return event is None or is_whole(event)


def _asks_for_stream(body: bytes, family: Family = _OPENAI, path: str = "") -> bool:
    try:
        request = _json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    if not isinstance(request, dict):
        return False
    return family.streams(request, path)


class _Exchange:
    """One forwarded request: the upstream's answer relayed, faults turned into errors."""

    def __init__(
        self,
        proxy: ProxyApp,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Send,
        record: RequestRecord | None,
        family: Family = _OPENAI,
        path: str = "",
    ) -> None:
        self._family = family
        self._path = path
        self._proxy = proxy
        self._method = method
        self._url = url
        self._headers = headers
        self._body = body
        self._send = send
        self._record = record
        self._kind: Fault | None = None  # the upstream's fault, if any
        self._upstream: Upstream | None = None
        self._encoding = b"identity"  # the response's Content-Encoding, once it is in
        # What a stream's reading may raise, the client's errors with this module's own.
        self._faults: tuple[type[BaseException], ...] = ()

    async def _error(self, status: int, message: str, code: str) -> None:
        """This proxy's own error response (502, 504), in the family's shape."""
        payload = self._family.error_body(status, message, type="server_error", code=code)
        await send_json(self._send, status, payload)

    def _fault(self, kind: Fault) -> None:
        self._kind = kind
        if self._record is not None:
            self._record.upstream_error = kind

    async def forward(self, client: Upstream) -> None:
        self._upstream = client
        self._faults = (SSEFrameTooLarge, ResponseTooLarge, _CorruptBody, *client.errors)
        upstream = self._proxy.upstream
        try:
            response = await client.send(self._method, self._url, self._headers, self._body)
        except ValueError:  # a header or URL the client refuses: what the checks above missed
            await _send_invalid(
                self._send, _bad_path(f"Invalid request path: {self._path!r}."), self._family
            )
            return
        except client.errors as error:
            if client.is_timeout(error):
                self._fault(Fault.TIMEOUT)
                await self._error(
                    504,
                    f"The upstream {upstream} did not answer in time: {client.name(error)}.",
                    "upstream_timeout",
                )
                return
            self._fault(Fault.UNREACHABLE)
            await self._error(
                502,
                f"Could not reach the upstream {upstream}: {client.name(error)}: {error}",
                "upstream_unreachable",
            )
            return
        try:
            await self._relay(response)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _relay(self, response: UpstreamResponse) -> None:
        status = response.status
        raw_headers = response.headers
        content_type = (header(raw_headers, b"content-type") or b"").lower()
        self._encoding = (header(raw_headers, b"content-encoding") or b"identity").lower()
        if status >= 400:
            self._fault(Fault.STATUS)
            body = await self._read(response)
            body = body if body is not None else b""
            payload = upstream_error_payload(status, body, self._family)
            await send_json(self._send, status, payload)
            return
        inflated = self._encoding in INFLATABLE
        headers = [
            (key, value)
            for key, value in raw_headers
            if key.lower() not in _RESPONSE_DROP
            and key.lower() != b"content-length"
            # The body is relayed inflated (_decoded): its encoding changes.
            and not (inflated and key.lower() == b"content-encoding")
        ]
        ndjson = self._family.framing == "ndjson"
        if content_type.startswith(b"application/x-ndjson") or (
            ndjson
            and not content_type.startswith((b"application/json", b"text/event-stream"))
            and await self._asks_for_stream()
        ):
            await self._relay_lines(response, status, headers)
        elif content_type.startswith(b"text/event-stream") or (
            not content_type.startswith(b"application/json") and await self._asks_for_stream()
        ):
            await self._relay_events(response, status, headers)
        else:
            await self._relay_whole(response, status, headers, content_type)

    async def _asks_for_stream(self) -> bool:
        if len(self._body) > _PARSE_IN_THREAD_BYTES:
            return await anyio.to_thread.run_sync(
                _asks_for_stream, self._body, self._family, self._path
            )
        return _asks_for_stream(self._body, self._family, self._path)

    def _decoded(self, response: UpstreamResponse) -> AsyncIterator[bytes]:
        """The body: gzip and deflate inflated here (bounded), any other encoding as received.

        Otherwise the client's own iterator: no generator of ours between the upstream's reads
        and the relay (a few µs per event)."""
        if self._encoding not in INFLATABLE:
            return response.pieces()
        return self._inflated(response, self._encoding)

    async def _inflated(
        self, response: UpstreamResponse, encoding: bytes
    ) -> AsyncGenerator[bytes, None]:
        inflater = Inflater(self._proxy.limits.max_response_bytes)
        try:
            async for raw in response.pieces():
                for piece in inflater.pieces(raw, final=False):
                    yield piece
            for piece in inflater.pieces(b"", final=True):
                yield piece
        except zlib.error as error:
            raise _CorruptBody(f"corrupt {encoding.decode()} body: {error}") from error

    async def _read(self, response: UpstreamResponse) -> bytes | None:
        """The whole body, or ``None`` (the fault recorded) if it broke off or was too large."""
        assert self._upstream is not None
        limit = self._proxy.limits.max_response_bytes
        parts: list[bytes] = []
        size = 0
        try:
            async with _closing(self._decoded(response)) as pieces:
                async for piece in pieces:
                    size += len(piece)
                    if size > limit:
                        self._fault(Fault.TOO_LARGE)
                        return None
                    parts.append(piece)
        except ResponseTooLarge:
            self._fault(Fault.TOO_LARGE)
            return None
        except self._faults as error:
            self._fault(Fault.TIMEOUT if self._upstream.is_timeout(error) else Fault.TRUNCATED)
            return None
        return b"".join(parts)

    async def _relay_whole(
        self,
        response: UpstreamResponse,
        status: int,
        headers: list[tuple[bytes, bytes]],
        content_type: bytes,
    ) -> None:
        upstream = self._proxy.upstream
        body = await self._read(response)
        if (
            body is not None
            and content_type.startswith(b"application/json")
            # Relayed as received in another encoding (br): nothing here can parse it.
            and (self._encoding == b"identity" or self._encoding in INFLATABLE)
        ):
            # Checked up to the size a request may have: the parse holds the GIL, beyond that
            # only the body's completeness is checked (by the client, against its framing).
            if len(body) > self._proxy.limits.max_body_bytes:
                valid = True
            elif len(body) > _PARSE_IN_THREAD_BYTES:
                valid = await anyio.to_thread.run_sync(_parses, body)
            else:
                valid = _parses(body)
            if not valid:
                self._fault(Fault.INVALID)
                body = None
        if body is None:
            timeout = self._kind is Fault.TIMEOUT
            await self._error(
                504 if timeout else 502,
                f"The upstream {upstream} "
                + (
                    "did not finish its response in time."
                    if timeout
                    else "sent an incomplete, invalid or oversized response."
                ),
                "upstream_timeout" if timeout else "upstream_bad_response",
            )
            return
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def _relay_events(
        self, response: UpstreamResponse, status: int, headers: list[tuple[bytes, bytes]]
    ) -> None:
        limits = self._proxy.limits
        splitter = EventSplitter(
            max_line_bytes=limits.max_sse_line_bytes, max_event_bytes=limits.max_sse_event_bytes
        )
        send = self._send
        await send({"type": "http.response.start", "status": status, "headers": headers})
        tail = sent = b""
        try:
            async with _closing(self._decoded(response)) as pieces:
                async for piece in pieces:
                    out = splitter.feed(piece)
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                        sent = out  # the last events sent: a fault event is numbered after them
        except self._faults as error:
            kind, message, code = self._stream_fault(error)
            self._fault(kind)
            if isinstance(error, SSEFrameTooLarge) and error.raw:
                # The whole events of the read that went over the limit: they were the
                # upstream's, sent as any other.
                await send({"type": "http.response.body", "body": error.raw, "more_body": True})
                sent = error.raw
            tail = self._error_frame(message, code, sent)
        else:
            pending = splitter.pending
            if pending.strip(b"\r\n"):
                if _is_whole_event(pending):
                    tail = pending + b"\n\n"
                else:
                    self._fault(Fault.TRUNCATED)
                    tail = self._error_frame(
                        "The upstream stream ended in the middle of an event.",
                        "upstream_truncated",
                        sent,
                    )
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    def _error_frame(self, message: str, code: str, sent: bytes = b"") -> bytes:
        """The last frame of a stream the upstream failed: in its family's shape (numbered
        after the last events ``sent``, if the family numbers them)."""
        family = self._family
        payload = family.error_payload(message, code)
        number = family.number_after(sent)
        if number is not None and family.sequence_field is not None:
            payload[family.sequence_field] = number
        return family.encode(payload)

    def _error_line(self, message: str, code: str) -> bytes:
        """The last line of an NDJSON stream the upstream failed: in its family's shape if the
        family's streams are NDJSON, else (a line stream on an SSE family's path) OpenAI's."""
        family = self._family
        if family.framing == "ndjson":
            return family.encode(family.error_payload(message, code))
        return _json.dumps(_OPENAI.error_payload(message, code)) + b"\n"

    async def _relay_lines(
        self, response: UpstreamResponse, status: int, headers: list[tuple[bytes, bytes]]
    ) -> None:
        """An NDJSON stream, whole lines only; a fault ends it with an error line."""
        decoder = NDJSONDecoder(max_line_bytes=self._proxy.limits.max_sse_event_bytes)
        send = self._send
        await send({"type": "http.response.start", "status": status, "headers": headers})
        tail = b""
        try:
            async with _closing(self._decoded(response)) as pieces:
                async for piece in pieces:
                    lines = decoder.feed(piece)
                    if lines:
                        out = b"\n".join(lines) + b"\n"
                        await send({"type": "http.response.body", "body": out, "more_body": True})
        except self._faults as error:
            kind, message, code = self._stream_fault(error)
            self._fault(kind)
            # The whole lines read with the one over its limit still go out.
            lines = error.lines if isinstance(error, LineTooLarge) else []
            tail = b"".join(line + b"\n" for line in lines) + self._error_line(message, code)
        else:
            last = decoder.flush()
            if last is not None:
                if _parses(last):
                    tail = last + b"\n"
                else:
                    self._fault(Fault.TRUNCATED)
                    tail = self._error_line(
                        "The upstream stream ended in the middle of a line.", "upstream_truncated"
                    )
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    def _stream_fault(self, error: BaseException) -> tuple[Fault, str, str]:
        """How a stream the upstream failed ends, the same for events and lines: the fault's
        kind (for the record), the error's message and its code."""
        if isinstance(error, SSEFrameTooLarge):
            return Fault.TOO_LARGE, f"The upstream sent {error}.", "upstream_event_too_large"
        if isinstance(error, ResponseTooLarge):
            return Fault.TOO_LARGE, str(error), "response_too_large"
        assert self._upstream is not None
        # A body that does not inflate: httpx's name for it, as for the clients' own errors.
        name = "DecodingError" if isinstance(error, _CorruptBody) else self._upstream.name(error)
        if self._upstream.is_timeout(error):
            return Fault.TIMEOUT, f"The upstream stream stalled: {name}.", "upstream_timeout"
        return Fault.BROKEN, f"The upstream stream broke off: {name}.", "upstream_broken"


def _closing(pieces: AsyncIterator[bytes]) -> Any:
    """``aclosing(pieces)`` if it can be closed (a generator), else a context that does
    nothing: the client's own iterator ends with its response (:meth:`Upstream.aclose`)."""
    if hasattr(pieces, "aclose"):
        return aclosing(pieces)
    return contextlib.nullcontext(pieces)


def _parses(body: bytes) -> bool:
    try:
        _json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return True
