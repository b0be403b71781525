"""ASGI plumbing shared by the middleware, the echo model and the proxy: types, bodies, errors.

Only the standard library and anyio: importing this never needs the ``server`` extra.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, TypeAlias

import anyio

from .. import _json
from ._limits import set_by

__all__ = [
    "DISCONNECT_WATCHED",
    "ASGIApp",
    "BodyTooLarge",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "call_until_disconnect",
    "error_payload",
    "header",
    "read_body",
    "read_body_or_413",
    "send_error",
    "send_json",
    "serve_lifespan",
    "too_large",
]

# The same shapes as Starlette's and the ASGI spec's, so apps and middleware interoperate.
Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

# Set (to True) in the scope an app gets from a layer that already cancels it when the client
# disconnects, and whose ``receive`` after the body only reports that: the app need not watch
# for it again (see call_until_disconnect). A watcher is a task, a task group and a cancel
# per request, and their objects for as long as the response streams.
DISCONNECT_WATCHED = "streamstop.disconnect_watched"


class BodyTooLarge(Exception):
    """Raised by :func:`read_body` when a request body exceeds its limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes")
        self.limit = limit


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or ``None`` if the client disconnected first."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        if message["type"] != "http.request":
            continue
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The value of header ``name`` (lowercase), or ``None``."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def error_payload(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
) -> dict[str, Any]:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


async def send_json(
    send: Send,
    status: int,
    payload: object,
    *,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    body = _json.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | int | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    payload = error_payload(message, type=type, param=param, code=code)
    await send_json(send, status, payload, headers=headers)


def too_large(limit: int, setting: str = "max_body_bytes") -> str:
    """The message of a 413: the limit, its setting, and where the operator sets it.

    >>> too_large(64)
    "Request body too large: the limit is max_body_bytes=64 bytes, set by the server's --max-body-bytes or STREAMSTOP_MAX_BODY_BYTES."
    """  # noqa: E501
    return f"Request body too large: the limit is {setting}={limit} bytes, {set_by(setting)}."


async def read_body_or_413(
    receive: Receive, send: Send, limit: int, setting: str = "max_body_bytes"
) -> bytes | None:
    """The whole request body, or ``None`` when there is no request to serve: the client
    disconnected first, or the body was larger than ``limit`` and a 413 has been sent, naming
    the limit's ``setting`` (a field of :class:`~streamstop.server.RequestLimits`)."""
    try:
        return await read_body(receive, limit)
    except BodyTooLarge as error:
        await send_error(
            send,
            413,
            too_large(error.limit, setting),
            code=f"{setting}_exceeded",
        )
        return None


async def call_until_disconnect(
    receive: Receive, function: Callable[[], Awaitable[None]], scope: Scope | None = None
) -> bool:
    """Await ``function()``, cancelling it if ``receive()`` reports ``http.disconnect`` first.

    Call it once the request body has been read: from then on only the watcher receives.
    Returns whether the client disconnected. Errors of ``function`` propagate as they are.
    If ``scope`` says a layer above watches already (:data:`DISCONNECT_WATCHED`), that layer
    cancels ``function()`` on a disconnect, and this only awaits it (returning ``False``).
    """
    if scope is not None and scope.get(DISCONNECT_WATCHED):
        await function()
        return False
    disconnected = False
    error: Exception | None = None

    async def watch(call: anyio.CancelScope) -> None:
        nonlocal disconnected
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected = True
        call.cancel()

    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as call:
            group.start_soon(watch, call)
            try:
                await function()
            except Exception as exc:  # re-raised below, outside the task group: not wrapped
                error = exc
        group.cancel_scope.cancel()
    if error is not None:
        raise error
    return disconnected


async def serve_lifespan(
    receive: Receive, send: Send, on_shutdown: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Answer the ASGI lifespan protocol: startup completes at once; at shutdown
    ``on_shutdown()``, if given, is awaited before shutdown completes."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if on_shutdown is not None:
                await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
