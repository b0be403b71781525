"""Benchmark: the server against hostile requests and faulty upstreams.

    python benchmarks/hostile.py --write    # full run, a few minutes; writes benchmarks/results/
    python benchmarks/hostile.py            # the same, into a temporary folder (printed)
    python benchmarks/hostile.py --quick    # smoke run, smaller inputs, into a temporary folder

Reports, for hostile stop sets and bodies at the default ``RequestLimits``:
- build time and peak memory (tracemalloc) of the automaton, and the longest event-loop stall
  while such requests are served by ``StopMiddleware(EchoModel())`` (a ticker task sleeping
  1 ms measures how late it wakes up), side by side with the thread offload switched off;
- parse memory of bodies at the body limit, and what a guarded body costs;
- the SSE decoder on one long line fed in small reads (linear: the time per MB stays flat);
- faults injected by raw TCP upstreams on 127.0.0.1 into ``StopMiddleware(ProxyApp(...))``:
  what the client got, and whether any held text or text after the stop leaked.

Timings on a shared machine are noisy: compare the figures of one run side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

import streamstop.server._middleware as middleware_module
from streamstop import StopAutomaton
from streamstop._sse import SSEDecoder
from streamstop.server import EchoModel, ProxyApp, StopMiddleware
from streamstop.server._limits import RequestLimits
from streamstop.server._request import InvalidRequest, parse_body

LIMITS = RequestLimits()
ALPHABET = [chr(c) for c in range(0x4E00, 0x4E00 + 5000)]  # a large alphabet: CJK ideographs


def stop_sets(quick: bool) -> dict[str, list[str]]:
    rng = random.Random(9)
    scale = 8 if quick else 1
    total = LIMITS.max_stop_chars // scale
    length = LIMITS.max_stop_length
    count = total // length
    return {
        f"{count} random stops of {length} chars (large alphabet)": [
            "".join(rng.choice(ALPHABET) for _ in range(length)) for _ in range(count)
        ],
        f"{count} stops 'a'*{length - 1} + one char": [
            "a" * (length - 1) + ALPHABET[i] for i in range(count)
        ],
        f"{LIMITS.max_stops // scale} random stops of {total * scale // LIMITS.max_stops} chars": [
            "".join(rng.choice("abcdefgh") for _ in range(total * scale // LIMITS.max_stops))
            for _ in range(LIMITS.max_stops // scale)
        ],
        f"{LIMITS.max_stops // scale} typical stops": [
            f"<|stop_{i}|>" for i in range(LIMITS.max_stops // scale)
        ],
    }


def measure_build(stops: list[str]) -> dict[str, float]:
    start = time.perf_counter()
    StopAutomaton(stops)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    automaton = StopAutomaton(stops)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del automaton
    chars = sum(map(len, stops))
    return {
        "chars": chars,
        "build_ms": seconds * 1000,
        "us_per_char": seconds * 1e6 / chars,
        "peak_mb": peak / 1e6,
        "bytes_per_char": peak / chars,
    }


async def longest_stall(work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(longest loop stall in ms, wall time of ``work`` in ms), a ticker running meanwhile."""
    stall = 0.0
    done = anyio.Event()

    async def ticker() -> None:
        nonlocal stall
        while not done.is_set():
            before = time.perf_counter()
            await anyio.sleep(0.001)
            stall = max(stall, time.perf_counter() - before - 0.001)

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.01)
        await work()
        done.set()
    return stall * 1000, (time.perf_counter() - start) * 1000


def _offload(enabled: bool) -> None:
    huge = 1 << 62
    middleware_module._BUILD_IN_THREAD_CHARS = 1024 if enabled else huge
    middleware_module._PARSE_IN_THREAD_BYTES = 256 * 1024 if enabled else huge


async def short_answer(scope: Any, receive: Any, send: Any) -> None:
    """An app that reads its request and answers one short event: the middleware's cost alone."""
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _event("ok") + b"data: [DONE]\n\n"})


async def serve(bodies: list[bytes], app: Any = None) -> list[int]:
    """Post each body to ``app`` (the echo model) behind the middleware, one after another."""
    app = StopMiddleware(app or EchoModel())
    transport = httpx.ASGITransport(app=app)
    statuses = []
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as c:
        for body in bodies:
            response = await c.post(
                "/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            statuses.append(response.status_code)
    return statuses


def chat_body(stops: list[str], salt: int, content: str = "hello there") -> bytes:
    request = {
        "model": "echo",
        "stream": True,
        # A fresh stop each time: the automaton is never in the cache.
        "stop": [*stops[:-1], f"{stops[-1][:-8]}{salt:08d}"],
        "messages": [{"role": "user", "content": content}],
    }
    return json.dumps(request).encode()


async def stop_set_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for name, stops in stop_sets(quick).items():
        row: dict[str, Any] = {"stop set": name, **measure_build(stops)}
        for offload in (True, False):
            _offload(offload)
            bodies = [chat_body(stops, salt + 10 * offload) for salt in range(2)]
            stall, wall = await longest_stall(lambda b=bodies: serve(b))  # type: ignore[misc]
            row["stall_ms" if offload else "stall_ms_on_loop"] = stall
            row["wall_ms" if offload else "wall_ms_on_loop"] = wall
        _offload(True)
        rows.append(row)
    return rows


def body_rows(quick: bool) -> list[dict[str, Any]]:
    size = LIMITS.max_body_bytes // (16 if quick else 1)
    text = "x" * (size - 200)
    cases = {
        "one long message at the body limit": json.dumps(
            {"model": "echo", "messages": [{"role": "user", "content": text}], "stop": "x"}
        ).encode(),
        "[{},{},...] at the body limit": b'{"messages": [' + b"{}," * (size // 3 - 10) + b"{}]}",
        "list of token ids at the body limit": b'{"prompt": ['
        + b"12345," * (size // 6 - 10)
        + b"1]}",
        "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    }
    rows = []
    for name, body in cases.items():
        start = time.perf_counter()
        try:
            parse_body(body, LIMITS)
            outcome = "parsed"
        except InvalidRequest as error:
            outcome = f"{error.status} {error.code or error.param}"
        seconds = time.perf_counter() - start
        tracemalloc.start()
        with contextlib.suppress(InvalidRequest):
            parse_body(body, LIMITS)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append(
            {
                "body": name,
                "bytes": len(body),
                "outcome": outcome,
                "ms": seconds * 1000,
                "peak_x_body": peak / len(body),
            }
        )
        del body
    return rows


async def body_stall(quick: bool) -> dict[str, float]:
    size = LIMITS.max_body_bytes // (16 if quick else 1)
    bodies = {
        "long message": chat_body(["</s>"], 0, content="x" * (size - 300)),
        "token ids": b'{"model": "m", "stream": true, "stop": "x", "prompt": ['
        + b"12345," * (size // 6 - 20)
        + b"1]}",
    }
    result = {}
    for name, body in bodies.items():
        for offload in (True, False):
            _offload(offload)
            stall, _ = await longest_stall(lambda b=body: serve([b], short_answer))  # type: ignore[misc]
            result[f"{name}: stall_ms" + ("" if offload else "_on_loop")] = stall
    _offload(True)
    return result


def sse_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for megabytes in (1, 2, 4) if quick else (2, 4, 8, 16):
        decoder = SSEDecoder()
        piece = b"x" * 16384
        start = time.perf_counter()
        for _ in range(megabytes * 64):
            decoder.feed(piece)
        decoder.feed(b"\n\n")
        seconds = time.perf_counter() - start
        rows.append(
            {"line_mb": megabytes, "ms": seconds * 1000, "ms_per_mb": seconds * 1000 / megabytes}
        )
    return rows


# -- faults -------------------------------------------------------------------------------------


def _event(content: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _chunked(*parts: bytes, content_type: bytes = b"text/event-stream") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
    if content_type:
        head += b"content-type: " + content_type + b"\r\n"
    return head + b"\r\n" + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)


def _whole(status: str, content_type: str, body: bytes, length: int | None = None) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body) if length is None else length}\r\nconnection: close\r\n\r\n"
    ).encode() + body


HELD = "SECRET<"  # "<" is held: it may begin the stop "</s>"
FAULTS: dict[str, tuple[bytes, bool, bool]] = {
    # name: (the upstream's bytes, hold the connection open after them, streamed request)
    "stream breaks mid-event": (_chunked(_event(HELD), b'data: {"choices":[{"ind'), False, True),
    "stream ends mid-event": (
        _whole("200 OK", "text/event-stream", _event(HELD) + b'data: {"cho'),
        False,
        True,
    ),
    "stream stalls": (_chunked(_event(HELD)), True, True),
    "line over the cap": (_chunked(_event(HELD), b"data: " + b"x" * (2 << 20)), True, True),
    "stream labeled text/plain": (
        _chunked(_event("ok </"), _event("s> SECRET"), content_type=b"text/plain"),
        False,
        True,
    ),
    "stream without content-type": (
        _chunked(_event("ok </"), _event("s> SECRET"), content_type=b""),
        False,
        True,
    ),
    "body truncated": (
        _whole("200 OK", "application/json", b'{"choices":[{"text":"SECRET'),
        False,
        False,
    ),
    "body cut short of its length": (
        _whole("200 OK", "application/json", b'{"choices":[]}', length=100),
        False,
        False,
    ),
    "body stalls": (_whole("200 OK", "application/json", b"{", length=100), True, False),
    "HTML 503": (_whole("503 Service Unavailable", "text/html", b"<h1>down</h1>"), False, False),
}


async def fault_rows() -> list[dict[str, Any]]:
    rows = []
    for name, (answer, hold, stream) in FAULTS.items():

        async def handle(
            client: anyio.abc.SocketStream, answer: bytes = answer, hold: bool = hold
        ) -> None:
            async with client:
                await client.receive()
                await client.send(answer)
                if hold:
                    await anyio.sleep_forever()

        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        proxy = ProxyApp(f"http://127.0.0.1:{port}/v1", timeout=0.5)
        transport = httpx.ASGITransport(app=StopMiddleware(proxy))
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, handle)
            async with httpx.AsyncClient(transport=transport, base_url="http://p/v1") as client:
                response = await client.post(
                    "/chat/completions",
                    json={"model": "m", "stream": stream, "stop": "</s>"},
                )
            group.cancel_scope.cancel()
        await proxy.aclose()
        body = response.content
        events = [block for block in body.split(b"\n\n") if block.startswith(b"data: {")]
        last = json.loads(events[-1][6:]) if events else None
        if not stream:
            last = response.json() if body else None
        error = (last or {}).get("error") if isinstance(last, dict) else None
        rows.append(
            {
                "fault": name,
                "status": response.status_code,
                "client saw": (error or {}).get("code") or ("cut at the stop" if events else "-"),
                "every event whole JSON": all(_parses(e[6:]) for e in events),
                "leaked": (b"SECRET<" if stream and b"SECRET<" in answer else b"SECRET") in body,
            }
        )
    return rows


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


# -- report -------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def measure(quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "quick": quick,
        "limits": {k: getattr(LIMITS, k) for k in LIMITS.__dataclass_fields__},
    }
    print("stop sets...", flush=True)
    results["stop_sets"] = await stop_set_rows(quick)
    print("bodies...", flush=True)
    results["bodies"] = body_rows(quick)
    results["body_stall"] = await body_stall(quick)
    print("sse...", flush=True)
    results["sse_long_line"] = sse_rows(quick)
    print("faults...", flush=True)
    results["faults"] = await fault_rows()
    return results


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "hostile.json").write_text(json.dumps(results, indent=2) + "\n")
    stall = results["body_stall"]
    report = f"""# Hostile requests and faulty upstreams

`python benchmarks/hostile.py --write` (Python {results["python"]}, {results["machine"]}, 2 shared
cores: timings are noisy, compare the columns of one run). Default `RequestLimits`:
{", ".join(f"{k}={v}" for k, v in results["limits"].items())}.

## Hostile stop sets at the limits

Build of a fresh automaton (`StopAutomaton(stops)`: time, tracemalloc peak), and the longest
event-loop stall while two such requests (each with a stop set not in the cache) are served by
`StopMiddleware(EchoModel())`: with the build in a worker thread (`stall_ms`) and, side by
side, with it on the loop (`stall_ms_on_loop`).

{table(results["stop_sets"])}

## Bodies at the body limit

`parse_body` (the middleware's parser with its pre-scan): time and tracemalloc peak over the
body's size. Serving each body at the limit to an app that answers one short event (so that
the figure is the middleware's), the longest loop stall, with the parse in a worker thread and
on the loop: {", ".join(f"{k} {v:.1f}" for k, v in stall.items())}.

{table(results["bodies"])}

## One long SSE line, fed in 16 KiB reads (no cap)

{table(results["sse_long_line"])}

## Faults injected by the upstream (raw TCP on 127.0.0.1), through `StopMiddleware(ProxyApp)`

The stream's first event holds `SECRET<` (the `<` is held: it may begin the stop `</s>`); the
mislabeled streams have `SECRET` after the stop. `leaked`: any of it reached the client.

{table(results["faults"])}
"""
    (out / "hostile.md").write_text(report)
    print(report)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, a smoke run")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/")
    parser.add_argument("--out", type=Path, help="write the report and JSON into this folder")
    args = parser.parse_args()
    # Only an explicit --write or --out touches tracked results.
    folder = args.out or (Path(__file__).parent / "results" if args.write else None)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="hostile-"))
    write(anyio.run(measure, args.quick), folder)
    print(f"wrote {folder / 'hostile.md'}")
