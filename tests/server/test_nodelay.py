"""Every connection ``serve`` and ``proxy`` accept, and the proxy's own connections upstream,
send without Nagle's delay (``TCP_NODELAY``), for every worker count and both HTTP parsers.

Without it, a response that starts on a kept-alive connection waits for the client's delayed
acknowledgement, about 40 ms, before its first event (benchmarks/proxy_overhead.py, the
kept-alive case, measures it; nothing here is timed). The option is read on the server's side of
each connection, in the process that holds it (``nodelay_probe``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from streamstop.server import ProxyApp
from streamstop.server._protocol import HTTPTOOLS_PROTOCOL, PROTOCOL

from .conftest import http_response
from .nodelay_probe import nodelay_between

ROOT = Path(__file__).resolve().parents[2]


def _httptools() -> bool:
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


PARSERS = [
    pytest.param("h11", id="h11"),
    pytest.param(
        "httptools",
        id="httptools",
        marks=pytest.mark.skipif(not _httptools(), reason="httptools is not installed"),
    ),
]

# The commands' own listening socket and uvicorn config (streamstop/server/_commands.py), with
# the probe's app in place of theirs, served as _serve_forever serves them: in this process with
# one worker, by uvicorn's supervisor and its worker processes with more.
_SERVER = """
import sys
if sys.argv[2] == "h11":
    sys.modules["httptools"] = None  # as if not installed: the guarded h11 protocol
import uvicorn
from uvicorn.supervisors import Multiprocess

from streamstop._cli import build_parser
from streamstop.server._commands import _listen, _server_config, _url, settings_of

workers = sys.argv[1]
args = build_parser().parse_args(["serve", "--workers", workers, "--log-level", "warning"])
settings = settings_of(args.parser, args, {})
sock = _listen("127.0.0.1", 0)
config = _server_config("tests.server.nodelay_probe:create_app", settings, 64)
print(config.http, _url(sock), flush=True)
if int(workers) > 1:
    Multiprocess(config, sockets=[sock]).run()
else:
    uvicorn.Server(config).run(sockets=[sock])
"""


@dataclass(frozen=True)
class Served:
    workers: int
    parser: str
    http: str  # the protocol uvicorn was given
    url: str  # the server's root
    pid: int  # of the process started (uvicorn's supervisor, with workers)


SERVED = [
    pytest.param(
        (workers, parser.values[0]), id=f"{workers}-workers-{parser.id}", marks=parser.marks
    )
    for workers in (1, 2)
    for parser in PARSERS
]


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    workers, parser = request.param
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SERVER), str(workers), parser],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        assert len(line) == 2, process.communicate(timeout=20)
        yield Served(workers, parser, line[0], line[1].removesuffix("/v1"), process.pid)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@pytest.mark.parametrize("served", SERVED, indirect=True)
def test_every_accepted_connection_sends_without_delay(served: Served) -> None:
    assert served.http == (HTTPTOOLS_PROTOCOL if served.parser == "httptools" else PROTOCOL)
    answers: list[dict[str, Any]] = []
    # A kept-alive connection asked three times, then new connections: each a socket accepted.
    with httpx.Client(base_url=served.url, timeout=30) as kept:
        answers += [kept.get("/").json() for _ in range(3)]
    for _ in range(6):
        answers.append(httpx.get(served.url, timeout=30, headers={"connection": "close"}).json())
    assert [answer["nodelay"] for answer in answers] == [1] * 9
    # Read where the connections were: in the worker processes, when there are workers.
    pids = {answer["pid"] for answer in answers}
    assert pids == {served.pid} if served.workers == 1 else served.pid not in pids


_MODELS = b'{"object":"list","data":[]}'  # OpenAI's GET /v1/models, no model


@pytest.mark.anyio
async def test_the_proxys_upstream_connections_send_without_delay(anyio_backend: str) -> None:
    # The upstream reads the option on the proxy's side of the connection (in this process)
    # once the request is in: httpcore applies socket options after the connect returns.
    found: list[int] = []

    async def handle(stream: SocketStream) -> None:
        async with stream:
            await BufferedByteReceiveStream(stream).receive_until(b"\r\n\r\n", 65536)
            upstream = stream.extra(SocketAttribute.local_address)
            proxy_side = stream.extra(SocketAttribute.remote_address)
            assert isinstance(upstream, tuple)  # TCP addresses, not a Unix socket's path
            assert isinstance(proxy_side, tuple)
            found.append(nodelay_between(proxy_side[:2], upstream[:2]))
            await stream.send(http_response("200 OK", "application/json", _MODELS))

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    proxy = ProxyApp(f"http://127.0.0.1:{port}/v1")
    transport = httpx.ASGITransport(app=proxy)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                for _ in range(2):  # one connection each: the upstream closes after answering
                    response = await client.get("/v1/models")
                    assert response.status_code == 200, response.text
                    assert response.content == _MODELS
        finally:
            await proxy.aclose()
            group.cancel_scope.cancel()
    assert found == [1, 1]
