"""BodyDeadline: a request body must arrive whole within a time limit.

A client that sends a head and then trickles its body (or sends nothing) holds a connection and
a task for as long as it likes; the head has its own timeout in the protocol
(:mod:`streamstop.server._protocol`), the body gets one here, as pure ASGI. Rules:

- The clock starts when the app is called; the limit covers the whole body, not each read, so a
  byte every few seconds does not keep it alive.
- Past the limit, the app's pending ``receive()`` returns ``http.disconnect`` (and so does every
  later one): the app ends as when a client leaves. If it has not started a response, a ``408``
  in the OpenAI error shape is sent, with ``Connection: close``.
- Once the body is complete, ``receive()`` is the server's own again (waiting for a disconnect
  during a long stream is not bounded).
"""

from __future__ import annotations

from collections.abc import Awaitable

import anyio

from ._asgi import ASGIApp, Message, Receive, Scope, Send, send_error

__all__ = ["BodyDeadline"]


class BodyDeadline:
    """ASGI middleware: ``app`` sees a disconnect if the body is not in after ``timeout`` s."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = anyio.current_time() + self.timeout
        body_done = False
        timed_out = False
        started = False

        async def bounded_receive() -> Message:
            nonlocal body_done, timed_out
            if timed_out:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()
            with anyio.move_on_after(max(deadline - anyio.current_time(), 0)):
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    body_done = True
                return message
            timed_out = True
            return {"type": "http.disconnect"}

        # Not a coroutine function: it hands back the server's own awaitable, so that each
        # message costs the app no coroutine of ours (a stream sends thousands).
        def tracked_send(message: Message) -> Awaitable[None]:
            nonlocal started
            started = True
            return send(message)

        await self.app(scope, bounded_receive, tracked_send)
        if timed_out and not started:
            await send_error(
                send,
                408,
                f"The request body did not arrive within {self.timeout:g} s.",
                code="request_timeout",
                headers=[(b"connection", b"close")],
            )
