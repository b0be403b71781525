"""ProxyApp: an ASGI app forwarding ``/v1/...`` to an OpenAI-compatible upstream with httpx.

Put it behind :class:`~streamstop.server.StopMiddleware` (that is ``streamstop proxy``) and any
backend gets stops of any number, cut without leaks. Rules:

- ``/v1/<rest>`` on the proxy is ``<upstream>/<rest>``, where ``upstream`` is the base URL an
  OpenAI client would be given (``http://localhost:8001/v1``). Other paths get a 404.
- The response streams through as it arrives. An upstream error (4xx, 5xx) reaches the client
  with the same status and an OpenAI-shaped body (passed on if it already is one, wrapped if
  not); an unreachable upstream is a 502, a timeout a 504. A stream that breaks halfway ends
  with an SSE ``data: {"error": ...}`` event.
- The upstream response is closed (shielded, in ``finally``) when the client disconnects, when
  the app is cancelled (the middleware does that after a stop) and at the end.

httpx is imported when the first request is forwarded: importing this module needs only the
standard library, so the core stays importable without the ``server`` extra.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio

from ._asgi import (
    Receive,
    Scope,
    Send,
    call_until_disconnect,
    error_payload,
    header,
    read_body_or_413,
    send_error,
    send_json,
    serve_lifespan,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["ProxyApp", "upstream_error_payload"]

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


def _snippet(body: bytes, limit: int = 500) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def upstream_error_payload(status: int, body: bytes) -> dict[str, Any]:
    """The OpenAI-shaped body for an upstream error response: itself if it already is one."""
    try:
        parsed = json.loads(body)
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
    return error_payload(message, type=kind, param=param, code=status)


class ProxyApp:
    """An ASGI app forwarding OpenAI API requests to ``upstream``, streaming with httpx.

    ``upstream`` is a base URL like ``http://localhost:8001/v1``. ``api_key``, if given, is
    sent as ``Authorization: Bearer ...`` instead of the client's. ``timeout`` bounds each read
    from the upstream, in seconds (a long prefill is silent; ``None``: no limit). Pass your own
    ``httpx.AsyncClient`` as ``client`` to control pooling and TLS; otherwise one is created
    at the first request and closed by :meth:`aclose` or the ASGI lifespan shutdown.
    """

    def __init__(
        self,
        upstream: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        client: httpx.AsyncClient | None = None,
        max_body_size: int = 32 * 1024 * 1024,
    ) -> None:
        if not isinstance(upstream, str) or not upstream.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream must be an http:// or https:// base URL like "
                f"'http://localhost:8001/v1', got {upstream!r}"
            )
        self.upstream = upstream.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_body_size = max_body_size
        self._client = client
        self._owns_client = client is None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            connect = 30.0 if self.timeout is None else min(self.timeout, 30.0)
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=connect),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
        return self._client

    async def aclose(self) -> None:
        """Close the httpx client, if this app created it. Idempotent."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, on_shutdown=self.aclose)
            return
        if scope["type"] != "http":
            return
        path: str = scope.get("path", "")
        if path != "/v1" and not path.startswith("/v1/"):
            await send_error(
                send,
                404,
                f"Unknown request URL: {path}: this proxy serves the OpenAI API under /v1.",
                code="unknown_url",
            )
            return
        body = await read_body_or_413(receive, send, self.max_body_size)
        if body is None:
            return
        url = self.upstream + path[len("/v1") :]
        query: bytes = scope.get("query_string", b"")
        if query:
            url += "?" + query.decode("latin-1")
        headers = [
            (key, value)
            for key, value in scope.get("headers", [])
            if key.lower() not in _REQUEST_DROP
            and not (self.api_key is not None and key.lower() == b"authorization")
        ]
        headers.append((b"accept-encoding", b"identity"))
        if self.api_key is not None:
            headers.append((b"authorization", f"Bearer {self.api_key}".encode()))
        client = self._get_client()
        request = client.build_request(scope["method"], url, headers=headers, content=body)
        await call_until_disconnect(receive, lambda: self._forward(client, request, send))

    async def _forward(self, client: httpx.AsyncClient, request: httpx.Request, send: Send) -> None:
        import httpx

        try:
            response = await client.send(request, stream=True)
        except httpx.TimeoutException as error:
            await send_error(
                send,
                504,
                f"The upstream {self.upstream} did not answer in time: {type(error).__name__}.",
                type="server_error",
                code="upstream_timeout",
            )
            return
        except httpx.HTTPError as error:
            await send_error(
                send,
                502,
                f"Could not reach the upstream {self.upstream}: {type(error).__name__}: {error}",
                type="server_error",
                code="upstream_unreachable",
            )
            return
        try:
            await self._relay(response, send)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _relay(self, response: httpx.Response, send: Send) -> None:
        import httpx

        status = response.status_code
        if status >= 400:
            try:
                body = await response.aread()
            except httpx.HTTPError:
                body = b""
            await send_json(send, status, upstream_error_payload(status, body))
            return
        raw_headers = response.headers.raw
        encoded = (header(raw_headers, b"content-encoding") or b"identity").lower() != b"identity"
        headers = [
            (key, value)
            for key, value in raw_headers
            if key.lower() not in _RESPONSE_DROP
            # aiter_bytes() decodes: the length and encoding of the body change.
            and not (encoded and key.lower() in (b"content-encoding", b"content-length"))
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        try:
            async for piece in response.aiter_bytes():
                if piece:
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
        except httpx.HTTPError as error:
            tail = b""
            content_type = header(raw_headers, b"content-type") or b""
            if content_type.startswith(b"text/event-stream"):
                payload = error_payload(
                    f"The upstream stream broke off: {type(error).__name__}: {error}",
                    type="server_error",
                    code="upstream_broken",
                )
                tail = b"\n\ndata: " + json.dumps(payload).encode() + b"\n\n"
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
