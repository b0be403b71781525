"""The ``streamstop serve`` and ``streamstop proxy`` commands.

Importing this module needs only the standard library: ``streamstop filter`` and ``demo`` work
without the ``server`` extra. uvicorn (and httpx, for the proxy) are imported by the handlers,
which say how to install them when they are missing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._asgi import ASGIApp

__all__ = ["add_server_commands"]

_INSTALL_HINT = "pip install 'streamstop[server]'"
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} out of range 0-65535")
    return port


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds >= 0:
        raise argparse.ArgumentTypeError(f"seconds must be >= 0, got {value!r}")
    return seconds


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=8000, help="port to listen on (8000; 0 picks a free one)"
    )
    parser.add_argument(
        "--include-stop", action="store_true", help="keep the matched stop in the output"
    )
    parser.add_argument(
        "--log-level", choices=_LOG_LEVELS, default="info", help="uvicorn log level (info)"
    )


def add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``proxy`` on the ``streamstop`` command's sub-parsers."""
    serve = commands.add_parser(
        "serve",
        help="serve the built-in 'echo' model over the OpenAI API, stops applied",
        description="An OpenAI-compatible server whose one model, 'echo', streams back the "
        "last user message (chat) or the prompt (completions) in token-sized pieces, behind "
        "the stop middleware: send any number of stops and watch them cut. Needs the server "
        f"extra: {_INSTALL_HINT}.",
    )
    _add_common(serve)
    serve.add_argument(
        "--delay",
        type=_seconds,
        default=0.02,
        help="seconds between streamed pieces (0.02)",
    )
    serve.set_defaults(handler=_run_serve)

    proxy = commands.add_parser(
        "proxy",
        help="put the stop middleware in front of an OpenAI-compatible server",
        description="Forward the OpenAI API (/v1/...) to UPSTREAM, streaming, and apply the "
        "requests' stops here: any number of them, none leaking, the upstream closed as soon "
        f"as every choice is cut. Needs the server extra: {_INSTALL_HINT}.",
    )
    proxy.add_argument(
        "--upstream",
        required=True,
        metavar="URL",
        help="base URL of the upstream API, as given to an OpenAI client: http://host:port/v1",
    )
    _add_common(proxy)
    proxy.add_argument(
        "--forward-stop",
        action="store_true",
        help="also send the stops upstream (default: keep them here; OpenAI caps them at 4)",
    )
    proxy.add_argument(
        "--api-key",
        default=os.environ.get("STREAMSTOP_UPSTREAM_API_KEY"),
        help="send this key upstream instead of the client's (env STREAMSTOP_UPSTREAM_API_KEY)",
    )
    proxy.add_argument(
        "--timeout",
        type=_seconds,
        default=600.0,
        help="seconds to wait for each read from the upstream (600; 0: forever)",
    )
    proxy.set_defaults(handler=_run_proxy)


def _missing_extra(command: str, modules: tuple[str, ...]) -> str | None:
    import importlib

    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    return (
        f"streamstop {command}: needs {' and '.join(missing)}, from the server extra: "
        f"{_INSTALL_HINT}"
    )


def _listen(host: str, port: int) -> socket.socket:
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address, family=family, backlog=2048)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def _serve_forever(app: ASGIApp, sock: socket.socket, log_level: str) -> int:
    import uvicorn

    config = uvicorn.Config(
        app, log_level=log_level, lifespan="on", ws="none", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then re-raised the Ctrl-C: the normal way out
    finally:
        sock.close()
    print("streamstop: server stopped", flush=True)
    return 0


def _open(command: str, host: str, port: int) -> socket.socket | None:
    try:
        return _listen(host, port)
    except OSError as error:
        reason = error.strerror or str(error)
        print(f"streamstop {command}: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return None


def _run_serve(args: argparse.Namespace) -> int:
    problem = _missing_extra("serve", ("uvicorn",))
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from ._echo import EchoModel
    from ._middleware import StopMiddleware

    app = StopMiddleware(EchoModel(delay=args.delay), include_stop=args.include_stop)
    sock = _open("serve", args.host, args.port)
    if sock is None:
        return 1
    url = _url(sock)
    print(f"streamstop: model 'echo' serving the OpenAI API at {url} (Ctrl-C to stop)")
    print(
        f"try: curl -N {url}/chat/completions -H 'Content-Type: application/json' -d "
        '\'{"model": "echo", "stream": true, "stop": ["four"], "messages": [{"role": "user", '
        '"content": "one two three four five"}]}\'',
        flush=True,
    )
    return _serve_forever(app, sock, args.log_level)


def _run_proxy(args: argparse.Namespace) -> int:
    problem = _missing_extra("proxy", ("uvicorn", "httpx"))
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from ._middleware import StopMiddleware
    from ._proxy import ProxyApp

    upstream = ProxyApp(args.upstream, api_key=args.api_key, timeout=args.timeout or None)
    app = StopMiddleware(upstream, forward_stop=args.forward_stop, include_stop=args.include_stop)
    sock = _open("proxy", args.host, args.port)
    if sock is None:
        return 1
    url = _url(sock)
    print(f"streamstop: proxying {url} -> {upstream.upstream}, stops applied (Ctrl-C to stop)")
    print(
        f"try: OPENAI_BASE_URL={url} and any OpenAI client, with as many stops as you like",
        flush=True,
    )
    return _serve_forever(app, sock, args.log_level)
