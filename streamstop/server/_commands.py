"""The ``streamstop serve`` and ``streamstop proxy`` commands.

Why this module runs past 600 lines: it is both commands end to end, the flags (every field
of ``RequestLimits``, each with its environment variable and its check), the settings dict they
resolve to, and the handlers that build the app and run uvicorn from it; split, that dict would
be a contract between two modules.

Importing this module needs only the standard library: ``streamstop filter`` and ``demo`` work
without the ``server`` extra. uvicorn (and httpx, for the proxy) are imported by the handlers,
which say how to install them when they are missing.

Rules for the settings:

- Every flag is also an environment variable named after it: ``--max-stops`` is
  ``STREAMSTOP_MAX_STOPS``; a repeatable flag takes a comma-separated list and its name is in
  the plural (``--client-key``: ``STREAMSTOP_CLIENT_KEYS``); a switch takes ``1``/``true``/
  ``yes``/``on`` or ``0``/``false``/``no``/``off``. A flag on the command line beats the
  environment. ``--help`` shows each variable's name.
- Every field of :class:`~streamstop.server._limits.RequestLimits` is a flag of both commands.
- The resolved settings are one plain dict (JSON): with ``--workers N`` each worker process
  rebuilds the same app from it (:mod:`streamstop.server._app`), through :func:`build_app`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

from .._cli import SERVER_COMMANDS
from .._extras import install_hint
from ._limits import RequestLimits
from ._upstream import CLIENTS

if TYPE_CHECKING:
    from ._asgi import ASGIApp

__all__ = [
    "CONFIG_ENV",
    "add_server_commands",
    "build_app",
    "client_keys",
    "connection_limit",
    "env_name",
    "flags_of",
    "settings_of",
]

_INSTALL_HINT = install_hint("server")
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
# The settings of a multi-worker server, for its workers (not a flag: set by the parent).
CONFIG_ENV = "_STREAMSTOP_WORKER_SETTINGS"
# Variables documented before the generic rule, kept under their names.
_ENV_NAMES = {"api_key": "STREAMSTOP_UPSTREAM_API_KEY"}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

# Connection bounds. Why these numbers:
# Open connections and requests in progress, each answered 503 beyond: 4,096 streams is more
# than one process's event loop serves well (add workers and replicas past it), and fits twice
# (the proxy holds a client and an upstream socket per stream) in a common hard limit of 8,192+
# open files; lowered to what the open-file limit holds when it is smaller.
_CONNECTION_LIMIT = 4096
# A real client sends its request head in one packet; Apache's mod_reqtimeout allows 20 s for
# it (nginx and node 60 s): long enough for a bad mobile link, short enough to shed half-open
# connections before they pile up.
_HEAD_TIMEOUT = 20.0
# A whole body (32 MiB at most, by default) in 60 s: nginx's client_body_timeout, over the whole
# body rather than per read, so trickling bytes does not keep a connection.
_BODY_TIMEOUT = 60.0
# uvicorn's default. Behind a load balancer, set it above the balancer's idle timeout (AWS ALB:
# 60 s), or the balancer may send a request on a connection this server is closing.
_KEEP_ALIVE_TIMEOUT = 5.0
# h11's default, as node's: a head (request line and headers) of up to 16 KiB.
_MAX_HEAD_BYTES = 16 * 1024
# One log line per kind of repeated error per 10 s, with the count of the rest.
_LOG_INTERVAL = 10.0
# Descriptors kept for the process itself: logs, the listening socket, imports, the upstream's
# DNS and TLS files.
_SPARE_FDS = 64


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


def _positive_seconds(value: str) -> float:
    seconds = _seconds(value)
    if seconds == 0:
        raise argparse.ArgumentTypeError(f"seconds must be > 0, got {value!r}")
    return seconds


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value!r}")
    return number


class _Append(argparse.Action):
    """A repeatable flag (as ``action="append"``): its values in a list, ``None`` if not given.

    Our own class, so that the settings can tell a list from a single value without reading
    argparse's private classes; its variable takes a comma-separated list.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])


class _Switch(argparse.Action):
    """A flag without a value that turns a setting on (as ``action="store_true"``)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)


class _Flags(list[argparse.Action]):
    """The flags of one command, in the order they are added: each is a setting, with a
    variable. Kept on the parser as its default ``flags`` (:func:`flags_of`), so nothing reads
    argparse's private list of actions."""

    def add(self, container: Any, *names: str, **options: Any) -> None:
        """``container.add_argument(*names, **options)`` (a parser or a group), recorded."""
        self.append(container.add_argument(*names, **options))


def flags_of(parser: argparse.ArgumentParser) -> tuple[argparse.Action, ...]:
    """The flags of ``serve`` or ``proxy`` (``--help`` and ``--version`` are no settings)."""
    flags = parser.get_default("flags")
    if not isinstance(flags, tuple):
        raise TypeError(f"{parser.prog!r} is not a server command: it has no settings")
    return flags


def _add_common(parser: argparse.ArgumentParser, flags: _Flags) -> None:
    flags.add(parser, "--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    flags.add(
        parser,
        "--port",
        type=_port,
        default=8000,
        help="port to listen on (8000; 0 picks a free one)",
    )
    flags.add(parser, "--include-stop", action=_Switch, help="keep the matched stop in the output")
    flags.add(
        parser, "--log-level", choices=_LOG_LEVELS, default="info", help="uvicorn log level (info)"
    )
    access = parser.add_argument_group("clients")
    flags.add(
        access,
        "--client-key",
        action=_Append,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' from clients (repeat for several keys; "
        "default: no key needed). /health and /ready stay open",
    )
    flags.add(
        access,
        "--client-key-file",
        metavar="FILE",
        help="read client keys from FILE, one per line (# comments and blank lines skipped)",
    )
    limits = parser.add_argument_group("request limits (a 4xx beyond each)")
    for item in fields(RequestLimits):
        default = item.default
        assert default is not MISSING
        flags.add(
            limits,
            "--" + item.name.replace("_", "-"),
            type=_positive,
            default=default,
            metavar="N",
            help=f"{item.metadata['help']} ({default})",
        )
    server = parser.add_argument_group("server")
    flags.add(
        server,
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="worker processes sharing the port (1); streams share nothing, so N workers serve "
        "N times the streams",
    )
    flags.add(
        server,
        "--limit-concurrency",
        type=_positive,
        default=None,
        metavar="N",
        help=f"open connections and requests in progress per worker, 503 beyond "
        f"({_CONNECTION_LIMIT}, or what the open-file limit holds)",
    )
    flags.add(
        server,
        "--head-timeout",
        type=_positive_seconds,
        default=_HEAD_TIMEOUT,
        metavar="S",
        help=f"seconds for a request line and headers to arrive, 408 after ({_HEAD_TIMEOUT:g})",
    )
    flags.add(
        server,
        "--body-timeout",
        type=_positive_seconds,
        default=_BODY_TIMEOUT,
        metavar="S",
        help=f"seconds for a whole request body to arrive, 408 after ({_BODY_TIMEOUT:g})",
    )
    flags.add(
        server,
        "--keep-alive-timeout",
        type=_positive_seconds,
        default=_KEEP_ALIVE_TIMEOUT,
        metavar="S",
        help=f"seconds an idle connection stays open ({_KEEP_ALIVE_TIMEOUT:g}; behind a load "
        "balancer, more than its idle timeout)",
    )
    flags.add(
        server,
        "--max-head-bytes",
        type=_positive,
        default=_MAX_HEAD_BYTES,
        metavar="N",
        help=f"bytes in a request line and headers, 431/400 beyond ({_MAX_HEAD_BYTES}; "
        "uvicorn's h11_max_incomplete_event_size)",
    )
    flags.add(
        server,
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one JSON line per request on stdout (logger streamstop.access) (on)",
    )
    flags.add(
        server,
        "--log-interval",
        type=_positive_seconds,
        default=_LOG_INTERVAL,
        metavar="S",
        help=f"log a repeated error once per S seconds, with a count ({_LOG_INTERVAL:g})",
    )


def env_name(action: argparse.Action) -> str:
    """The environment variable of a flag: ``--max-stops``: ``STREAMSTOP_MAX_STOPS``."""
    if action.dest in _ENV_NAMES:
        return _ENV_NAMES[action.dest]
    name = "STREAMSTOP_" + action.dest.upper()
    return name + "S" if isinstance(action, _Append) else name


class _Unset:
    """A flag's default until parsing is over: absent from the command line, it may still
    come from the environment."""

    def __init__(self, default: Any) -> None:
        self.default = default

    def __str__(self) -> str:  # what a "%(default)s" in a help text shows
        return str(self.default)


def _with_environment(flags: _Flags) -> None:
    """Name each flag's variable in its help, and mark what the command line leaves unset."""
    for action in flags:
        action.help = f"{action.help} [env {env_name(action)}]"
        if not isinstance(action, _Append):  # None, when not given: no copy
            action.default = _Unset(action.default)


def _convert(action: argparse.Action, raw: str) -> Any:
    convert = action.type if callable(action.type) else str
    if isinstance(action, _Append):
        return [convert(item.strip()) for item in raw.split(",") if item.strip()]
    if isinstance(action, (_Switch, argparse.BooleanOptionalAction)):
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        raise ValueError("expected 1/true/yes/on or 0/false/no/off")
    value = convert(raw)
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"expected one of {', '.join(map(str, action.choices))}")
    return value


def settings_of(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The command's settings: its flags from the command line, else ``environ``, else their
    defaults. A bad value in ``environ`` exits as a bad flag does, naming the variable."""
    settings: dict[str, Any] = {}
    for action in flags_of(parser):
        value = getattr(args, action.dest)
        unset = value is None if isinstance(action, _Append) else False
        if isinstance(value, _Unset):
            unset, value = True, value.default
        name = env_name(action)
        if unset and name in environ:
            try:
                value = _convert(action, environ[name])
            except (argparse.ArgumentTypeError, ValueError) as error:
                parser.error(f"{name}={environ[name]!r}: {error}")
        settings[action.dest] = value
    return settings


# argparse names the type of add_subparsers()'s result only privately (_SubParsersAction); the
# annotation is the one use of it, nothing of it is read but its public add_parser method.
def add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``proxy`` on the ``streamstop`` command's sub-parsers."""
    serve = commands.add_parser(
        "serve",
        help=SERVER_COMMANDS["serve"],
        description="A server whose one model, 'echo', streams back the last user message "
        "(or the prompt) in token-sized pieces, behind the stop middleware, in every API "
        "family it filters: OpenAI chat and completions under /v1, OpenAI Responses "
        "(/v1/responses), Anthropic (/v1/messages), Ollama (/api/chat, /api/generate), "
        "llama.cpp (/completion), TGI (/generate, /generate_stream) and Gemini "
        "(/v1beta/models/echo:generateContent, :streamGenerateContent). Send any number of "
        "stops and watch them cut. Every flag can also be set by the environment variable "
        "named after it in brackets; a flag given beats its variable. Needs the server extra: "
        f"{_INSTALL_HINT}.",
    )
    serve_flags = _Flags()
    _add_common(serve, serve_flags)
    serve_flags.add(
        serve,
        "--delay",
        type=_seconds,
        default=0.02,
        help="seconds between streamed pieces (0.02)",
    )
    _with_environment(serve_flags)
    serve.set_defaults(handler=_run_serve, parser=serve, flags=tuple(serve_flags))

    proxy = commands.add_parser(
        "proxy",
        help=SERVER_COMMANDS["proxy"],
        description="Forward the OpenAI API (/v1/...; /chat/completions too, as llama.cpp "
        "serves it), Anthropic's /v1/messages, Ollama's /api/chat and /api/generate, "
        "llama.cpp's /completion and /completions, TGI's /generate and /generate_stream and "
        "Gemini's /v1beta/models/{model}:streamGenerateContent and :generateContent to "
        "UPSTREAM, streaming, and apply the requests' stops here: any "
        "number of them, none leaking, the upstream closed as soon as every choice is cut. "
        "Every flag can also be set by the environment variable named after it in brackets; "
        "a flag given beats its variable. Needs the server extra: "
        f"{_INSTALL_HINT}.",
    )
    proxy_flags = _Flags()
    proxy_flags.add(
        proxy,
        "--upstream",
        metavar="URL",
        help="the upstream server's root, http://host:port (a /v1 suffix, as given to an "
        "OpenAI client, names the same root) (required)",
    )
    _add_common(proxy, proxy_flags)
    proxy_flags.add(
        proxy,
        "--forward-stop",
        action=_Switch,
        help="also send the stops upstream (default: keep them here; OpenAI caps them at 4)",
    )
    proxy_flags.add(
        proxy,
        "--api-key",
        help="send this key upstream instead of the client's",
    )
    proxy_flags.add(
        proxy,
        "--timeout",
        type=_seconds,
        default=600.0,
        help="seconds to wait for each read from the upstream (600; 0: forever)",
    )
    proxy_flags.add(
        proxy,
        "--upstream-client",
        choices=CLIENTS,
        default="auto",
        help="the HTTP client the upstream is read with: aiohttp parses in C (the fast extra), "
        "httpx in Python (auto: aiohttp if installed)",
    )
    proxy_flags.add(
        proxy,
        "--route",
        action=_Append,
        metavar="PATH",
        help="forward only these paths, e.g. /v1/chat/completions or Gemini's pattern "
        "'/v1beta/models/{model}:streamGenerateContent' (repeat; default: all of /v1 and the "
        "other APIs' paths)",
    )
    proxy_flags.add(
        proxy,
        "--forward-other-paths",
        action=_Switch,
        help="also forward paths outside the known APIs, under the same path checks (default: 404)",
    )
    _with_environment(proxy_flags)
    proxy.set_defaults(handler=_run_proxy, parser=proxy, flags=tuple(proxy_flags))


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


def _raise_open_file_limit() -> int | None:
    """Raise the soft limit of open files to the hard one; return it (``None``: unknown).

    The soft limit is often 1,024, fewer than a busy proxy's connections (two descriptors per
    stream); the hard limit is what the operator allows.
    """
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def connection_limit(settings: Mapping[str, Any], open_files: int | None) -> int:
    """``--limit-concurrency``, or the default that the open-file limit can hold."""
    if settings["limit_concurrency"] is not None:
        return int(settings["limit_concurrency"])
    if open_files is None:
        return _CONNECTION_LIMIT
    per_connection = 2 if settings.get("upstream") else 1
    return max(1, min(_CONNECTION_LIMIT, (open_files - _SPARE_FDS) // per_connection))


def client_keys(settings: Mapping[str, Any]) -> list[str]:
    """The client keys of ``--client-key`` and ``--client-key-file`` (raises if the file has
    none: a server meant to be closed must not start open)."""
    from ._auth import read_key_file

    keys = list(settings.get("client_key") or [])
    path = settings.get("client_key_file")
    if path:
        try:
            from_file = read_key_file(path)
        except OSError as error:
            raise ValueError(f"cannot read --client-key-file {path!r}: {error.strerror}") from None
        if not from_file:
            raise ValueError(f"no keys in --client-key-file {path!r}")
        keys += from_file
    return keys


def build_app(settings: Mapping[str, Any]) -> ASGIApp:
    """The ASGI app ``serve`` or ``proxy`` runs with ``settings`` (see :func:`settings_of`):

    ``Observed`` (probes, metrics, access log) > ``ClientKeys`` (if keys are set) >
    ``BodyDeadline`` > ``StopMiddleware`` > the echo model or the proxy.
    """
    from ._auth import ClientKeys
    from ._deadline import BodyDeadline
    from ._echo import EchoModel
    from ._middleware import StopMiddleware
    from ._observe import AlwaysReady, Observed, Readiness, UpstreamProbe

    limits = RequestLimits(**{item.name: settings[item.name] for item in fields(RequestLimits)})
    readiness: Readiness
    middleware_options: dict[str, Any] = {}
    if settings.get("upstream") is None:
        inner: ASGIApp = EchoModel(delay=settings["delay"])
        readiness = AlwaysReady()
    else:
        from ._proxy import ProxyApp

        inner = ProxyApp(
            settings["upstream"],
            api_key=settings["api_key"],
            timeout=settings["timeout"] or None,
            limits=limits,
            routes=list(settings["route"]) if settings.get("route") else None,
            forward_other=bool(settings.get("forward_other_paths")),
            upstream_client=settings.get("upstream_client") or "auto",
        )
        middleware_options["forward_stop"] = settings["forward_stop"]
        readiness = UpstreamProbe(settings["upstream"], api_key=settings["api_key"])
    app: ASGIApp = StopMiddleware(
        inner, include_stop=settings["include_stop"], limits=limits, **middleware_options
    )
    app = BodyDeadline(app, settings["body_timeout"])
    keys = client_keys(settings)
    if keys:
        app = ClientKeys(app, keys)
    return Observed(app, readiness=readiness)


def _server_config(app: Any, settings: Mapping[str, Any], limit: int) -> Any:
    from ._protocol import ServerConfig, protocol

    return ServerConfig(
        app,
        factory=isinstance(app, str),
        workers=settings["workers"],
        http=protocol(),
        head_timeout=settings["head_timeout"],
        connection_limit=limit,
        timeout_keep_alive=settings["keep_alive_timeout"],
        h11_max_incomplete_event_size=settings["max_head_bytes"],
        log_level=settings["log_level"],
        access_log=False,  # ours, with the request's stops and timings, replaces uvicorn's
        lifespan="on",
        ws="none",
        timeout_graceful_shutdown=5,
    )


def _serve_forever(settings: dict[str, Any], sock: socket.socket) -> int:
    from ._logging import install_logging
    from ._protocol import serve

    limit = connection_limit(settings, _raise_open_file_limit())
    try:
        if settings["workers"] > 1:
            # Each worker builds the app from these settings (streamstop.server._app).
            os.environ[CONFIG_ENV] = json.dumps(settings)
            config = _server_config("streamstop.server._app:create_app", settings, limit)
        else:
            config = _server_config(build_app(settings), settings, limit)
            install_logging(access_log=settings["access_log"], interval=settings["log_interval"])
        serve(config, sock)
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


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = settings_of(args.parser, args, os.environ)
    settings["command"] = args.command
    # Checked here, before a worker would find the same fault: a bad setting stops the start.
    RequestLimits(**{item.name: settings[item.name] for item in fields(RequestLimits)})
    client_keys(settings)
    return settings


def _run_serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    settings["upstream"] = None
    problem = _missing_extra("serve", ("uvicorn",))
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    sock = _open("serve", settings["host"], settings["port"])
    if sock is None:
        return 1
    url = _url(sock)
    print(
        f"streamstop: model 'echo' serving the OpenAI API at {url} and Anthropic, Ollama, "
        "llama.cpp, TGI, Responses and Gemini at their own paths (Ctrl-C to stop)"
    )
    print(
        f"try: curl -N {url}/chat/completions -H 'Content-Type: application/json' -d "
        '\'{"model": "echo", "stream": true, "stop": ["four"], "messages": [{"role": "user", '
        '"content": "one two three four five"}]}\'',
        flush=True,
    )
    return _serve_forever(settings, sock)


def _run_proxy(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not settings["upstream"]:
        args.parser.error(
            "the following arguments are required: --upstream (or STREAMSTOP_UPSTREAM)"
        )
    problem = _missing_extra("proxy", ("uvicorn", "httpx"))
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from ._proxy import ProxyApp

    # Checks the URL, and that the client asked for is installed, before anything listens.
    ProxyApp(settings["upstream"], upstream_client=settings["upstream_client"])
    sock = _open("proxy", settings["host"], settings["port"])
    if sock is None:
        return 1
    url = _url(sock)
    upstream = settings["upstream"].rstrip("/")
    print(f"streamstop: proxying {url} -> {upstream}, stops applied (Ctrl-C to stop)")
    print(
        f"try: OPENAI_BASE_URL={url} and any OpenAI client, with as many stops as you like",
        flush=True,
    )
    return _serve_forever(settings, sock)
