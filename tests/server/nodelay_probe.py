"""Reading ``TCP_NODELAY`` on a connection's socket from inside the process that holds it.

The option is a socket's own: a client cannot see whether its server set it on the accepted
socket. So the process that holds the socket looks for it among its file descriptors, by the
connection's two addresses (:func:`nodelay_between`), and :func:`create_app` makes an ASGI app
that answers each request with the option of the connection it came on: served by the
commands' own config, in their worker processes too, it shows what every worker accepts.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from streamstop.server import ASGIApp, Receive, Scope, Send

__all__ = ["create_app", "nodelay_between"]

_FD_FOLDERS = ("/proc/self/fd", "/dev/fd")  # Linux, then the BSDs and macOS


def _descriptors() -> list[int]:
    for folder in _FD_FOLDERS:
        try:
            return [int(name) for name in os.listdir(folder)]
        except OSError:
            continue
    raise RuntimeError(f"cannot list this process's file descriptors in {_FD_FOLDERS}")


def nodelay_between(local: tuple[str, int], peer: tuple[str, int]) -> int:
    """``TCP_NODELAY`` (0 or 1) of this process's TCP socket from ``local`` to ``peer``."""
    for fd in _descriptors():
        try:
            sock = socket.socket(fileno=os.dup(fd))  # family and type read from the socket
        except OSError:  # not a socket, or closed since the listing
            continue
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                found = sock.getsockname()[:2] == local and sock.getpeername()[:2] == peer
            except OSError:  # not connected: a listening socket
                continue
            if found:
                return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    raise LookupError(f"no socket from {local} to {peer} in process {os.getpid()}")


async def _nodelay_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    server, client = scope["server"], scope["client"]
    answer: dict[str, Any] = {
        "nodelay": nodelay_between((server[0], server[1]), (client[0], client[1])),
        "pid": os.getpid(),
    }
    body = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app() -> ASGIApp:
    """The app a worker builds (uvicorn's factory): ``{"nodelay": 0 or 1, "pid": ...}``."""
    return _nodelay_app
