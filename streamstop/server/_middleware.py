"""StopMiddleware: stop strings for any ASGI app serving the OpenAI completion endpoints.

Rules of this module (the life cycle of one request lives here; the filtering in
:mod:`streamstop.chat`):

- Only ``POST`` to the configured paths is touched; everything else goes to the app as it is.
- The request body is read whole and parsed; ``stop`` must be ``null``, a string or a list of
  strings, of any length (else 400, OpenAI-shaped). By default ``stop`` is taken out of the
  body the app sees, so a backend with a 4-stop cap, or none, still works; the body is then
  re-encoded and ``content-length`` fixed. The app receives the body once, then waits.
- The response decides the filter: ``text/event-stream`` goes through an
  :class:`~streamstop.chat.SSEFilter` as it arrives; a 2xx ``application/json`` body is held,
  cut with :func:`~streamstop.chat.truncate_response` and sent with a new ``content-length``;
  anything else (errors, compressed bodies) passes through.
- Once every choice of a stream is over (``n`` is read from the request), ``data: [DONE]`` is
  sent, the response ends, and the app is cancelled: its ``await send(...)`` raises the
  cancellation, so an app that is a proxy closes its upstream and a model stops generating.
- A client that disconnects (``http.disconnect``, or ``send`` failing) cancels the app too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.lowlevel

from .._automaton import StopAutomaton
from ..chat import SSEFilter, truncate_response
from ._asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header,
    read_body_or_413,
    send_error,
)

__all__ = ["DEFAULT_PATHS", "StopMiddleware"]

DEFAULT_PATHS = ("/v1/chat/completions", "/v1/completions")

_PASS, _SSE, _JSON = "pass", "sse", "json"


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _caused_by(error: BaseException, cause: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if current is cause:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _parse_stops(request: dict[str, Any]) -> tuple[str, ...]:
    stop = request.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return tuple(item for item in stop if item)
    raise _BadRequest(
        f"Invalid type for 'stop': expected a string or an array of strings, got {_short(stop)}.",
        param="stop",
    )


def _expected_choices(request: dict[str, Any]) -> int | None:
    """How many choices the response will have, or ``None`` if unsure."""
    n = request.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return None
    prompt = request.get("prompt")
    # A legacy completion with a batch of prompts has n choices per prompt.
    if isinstance(prompt, list) and prompt and not all(isinstance(p, int) for p in prompt):
        return n * len(prompt)
    return n


def _with_content_length(
    headers: Iterable[tuple[bytes, bytes]], length: int | None
) -> list[tuple[bytes, bytes]]:
    kept = [
        (key, value)
        for key, value in headers
        if key.lower() not in (b"content-length", b"transfer-encoding")
    ]
    if length is not None:
        kept.append((b"content-length", str(length).encode()))
    return kept


class StopMiddleware:
    """ASGI middleware applying the request's ``stop`` to OpenAI-compatible responses.

    ::

        app = StopMiddleware(app)                  # any ASGI app
        app.add_middleware(StopMiddleware)         # Starlette or FastAPI

    ``forward_stop=False`` (the default) removes ``stop`` from the request the app sees, so the
    stops apply even where the backend caps their number (OpenAI: 4) or ignores them; for
    streams the cost is nothing, the backend is stopped when the stop is found. For
    non-streaming requests the backend then generates to its own end before the cut: pass
    ``forward_stop=True`` if it can handle your stops itself (they are still applied here).

    ``include_stop=True`` keeps the matched stop in the output. ``paths`` are the endpoints
    filtered (exact match on the ASGI ``path``); ``max_body_size`` bounds the request body read.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        forward_stop: bool = False,
        include_stop: bool = False,
        paths: Iterable[str] = DEFAULT_PATHS,
        max_body_size: int = 32 * 1024 * 1024,
    ) -> None:
        self.app = app
        self.forward_stop = bool(forward_stop)
        self.include_stop = bool(include_stop)
        self.paths = frozenset(paths)
        self.max_body_size = max_body_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope.get("path") not in self.paths
        ):
            await self.app(scope, receive, send)
            return
        body = await read_body_or_413(receive, send, self.max_body_size)
        if body is None:
            return  # the client left before sending its request, or it was too large
        try:
            request, stops = self._parse(body)
        except _BadRequest as error:
            await send_error(send, 400, error.message, param=error.param)
            return
        if "stop" in request and not self.forward_stop:
            del request["stop"]
            body = json.dumps(request, ensure_ascii=False).encode()
            scope = {**scope, "headers": _with_content_length(scope["headers"], len(body))}
        if not stops:
            await self.app(scope, _replay(body, receive), send)
            return
        exchange = _Exchange(
            self.app,
            StopAutomaton.from_stops(stops),
            n=_expected_choices(request),
            include_stop=self.include_stop,
            send=send,
        )
        await exchange.run(scope, body, receive)

    @staticmethod
    def _parse(body: bytes) -> tuple[dict[str, Any], tuple[str, ...]]:
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest(
                "We could not parse the JSON body of your request. The body must be a JSON "
                "object, sent with 'Content-Type: application/json'."
            ) from None
        if not isinstance(request, dict):
            raise _BadRequest(
                f"The JSON body of your request must be an object, got {_short(request)}."
            )
        return request, _parse_stops(request)


def _replay(body: bytes, then: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then defers to ``then``."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return replay


class _Exchange:
    """One filtered request: the app runs in a cancel scope; ``send`` is intercepted."""

    def __init__(
        self,
        app: ASGIApp,
        automaton: StopAutomaton,
        *,
        n: int | None,
        include_stop: bool,
        send: Send,
    ) -> None:
        self._app = app
        self._automaton = automaton
        self._n = n
        self._include_stop = include_stop
        self._send = send
        self._mode = _PASS
        self._sse: SSEFilter | None = None
        self._start: Message | None = None
        self._json_parts: list[bytes] = []
        self._started = False
        self._complete = False  # the response has been sent whole
        self._disconnected = anyio.Event()
        self._app_scope = anyio.CancelScope()
        self._send_error: Exception | None = None

    async def run(self, scope: Scope, body: bytes, receive: Receive) -> None:
        error: Exception | None = None
        app_receive = _replay(body, self._wait_for_disconnect)
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, receive)
            with self._app_scope:
                try:
                    await self._app(scope, app_receive, self._intercept)
                except Exception as exc:  # raised below, outside the task group: not wrapped
                    error = exc
            group.cancel_scope.cancel()
        if error is not None:
            if self._send_error is not None and _caused_by(error, self._send_error):
                return  # the client is gone: nobody to tell
            raise error
        if self._started and not self._complete and not self._disconnected.is_set():
            await self._finish_body(b"")

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._client_gone()

    def _client_gone(self) -> None:
        self._disconnected.set()
        if not self._complete:
            self._app_scope.cancel()

    async def _wait_for_disconnect(self) -> Message:
        """What the app receives after its body: only the watcher reads the real ``receive``."""
        await self._disconnected.wait()
        return {"type": "http.disconnect"}

    async def _downstream(self, message: Message) -> None:
        try:
            await self._send(message)
        except Exception as error:
            # The client is gone: stop the app rather than let it write into the void.
            self._send_error = error
            self._client_gone()
            await anyio.lowlevel.checkpoint()
            raise

    async def _intercept(self, message: Message) -> None:
        if self._complete or self._disconnected.is_set():
            return
        kind = message["type"]
        if kind == "http.response.start":
            await self._on_start(message)
        elif kind == "http.response.body" and self._mode == _SSE:
            await self._on_sse_body(message)
        elif kind == "http.response.body" and self._mode == _JSON:
            self._json_parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._send_json_response()
        else:
            if kind == "http.response.body" and not message.get("more_body", False):
                self._complete = True
            await self._downstream(message)

    async def _on_start(self, message: Message) -> None:
        self._started = True
        headers = list(message.get("headers", []))
        content_type = (header(headers, b"content-type") or b"").lower()
        encoding = (header(headers, b"content-encoding") or b"identity").lower()
        status = int(message["status"])
        if encoding != b"identity":
            self._mode = _PASS
        elif content_type.startswith(b"text/event-stream"):
            self._mode = _SSE
            self._sse = SSEFilter(self._automaton, n=self._n, include_stop=self._include_stop)
            message = {**message, "headers": _with_content_length(headers, None)}
        elif 200 <= status < 300 and content_type.startswith(b"application/json"):
            self._mode = _JSON
            self._start = message
            return  # sent with the body, once its length is known
        await self._downstream(message)

    async def _on_sse_body(self, message: Message) -> None:
        assert self._sse is not None
        data = self._sse.feed(message.get("body", b""))
        if not message.get("more_body", False):
            await self._finish_body(data)
        elif self._sse.done:
            await self._finish_body(data)
            if self._sse.chunks.done:
                # Every choice was cut or is over: stop the app, at this very await. (After
                # the upstream's own [DONE] the app ends by itself; what it sends is dropped.)
                self._app_scope.cancel()
                await anyio.lowlevel.checkpoint()
        elif data:
            await self._downstream({"type": "http.response.body", "body": data, "more_body": True})

    async def _finish_body(self, data: bytes) -> None:
        if self._sse is not None:
            data += self._sse.flush()
        elif self._mode == _JSON and self._start is not None:
            await self._send_json_response()
            return
        self._complete = True
        await self._downstream({"type": "http.response.body", "body": data, "more_body": False})

    async def _send_json_response(self) -> None:
        assert self._start is not None
        start, self._start = self._start, None
        body = b"".join(self._json_parts)
        self._json_parts = []
        try:
            response = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            response = None
        if isinstance(response, dict):
            cut = truncate_response(response, self._automaton, include_stop=self._include_stop)
            if cut != response:
                body = json.dumps(cut, ensure_ascii=False, separators=(",", ":")).encode()
        headers = _with_content_length(start.get("headers", []), len(body))
        self._complete = True
        await self._downstream({**start, "headers": headers})
        await self._downstream({"type": "http.response.body", "body": body, "more_body": False})
