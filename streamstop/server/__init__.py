"""streamstop in chat servers: stop strings for any OpenAI-compatible backend.

- :class:`StopMiddleware`: ASGI middleware applying the request's ``stop`` (any number of
  strings) to streamed and whole responses of ``/v1/chat/completions`` and ``/v1/completions``.
- :class:`EchoModel`: an OpenAI-compatible app with one model, ``echo``, that streams its input
  back (``streamstop serve``).
- :class:`ProxyApp`: forwards the OpenAI API to an upstream server with httpx
  (``streamstop proxy``).
- For running them: :class:`Observed` (``/health``, ``/ready``, ``/metrics``, an access log
  line per request), :class:`ClientKeys` (bearer keys) and :class:`BodyDeadline`.
- :class:`RequestLimits`: every bound on what one request may ask, for both.

Importing this package needs only the standard library and anyio; uvicorn and httpx (the
``server`` extra: ``pip install 'streamstop[server]'``) are imported when a server runs.
"""

from ._asgi import ASGIApp, Message, Receive, Scope, Send
from ._auth import ClientKeys
from ._deadline import BodyDeadline
from ._echo import EchoModel, echo_pieces
from ._limits import RequestLimits
from ._middleware import DEFAULT_PATHS, StopMiddleware
from ._observe import Observed
from ._proxy import ProxyApp

__all__ = [
    "DEFAULT_PATHS",
    "ASGIApp",
    "BodyDeadline",
    "ClientKeys",
    "EchoModel",
    "Message",
    "Observed",
    "ProxyApp",
    "Receive",
    "RequestLimits",
    "Scope",
    "Send",
    "StopMiddleware",
    "echo_pieces",
]
