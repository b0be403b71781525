"""Reliability of ``streamstop proxy`` before ``streamstop serve``: load, floods, hostile input.

    python benchmarks/reliability.py            # full run, a few minutes; prints the report only
    python benchmarks/reliability.py --write    # the same, into benchmarks/results/reliability.*
    python benchmarks/reliability.py --out DIR  # writes reliability.md and .json into DIR
    python benchmarks/reliability.py --quick    # smoke run, about 20 s, writes nothing tracked

Both servers run as real processes on 127.0.0.1 (``streamstop serve`` as the upstream, with a
10 ms pause between pieces; ``streamstop proxy --client-key ...`` in front of it), each with
its defaults except the timeouts said below. What is measured, side by side in one run:

1. **Concurrent streams** (1, 32 and 1,000): chat streams with five stops each, one of which
   cuts each stream at a different place; every text received is checked against
   ``streamstop.truncate``. The same streams go to the upstream directly (its own stop
   middleware cuts them) and through the proxy: the difference is what the proxy adds.
2. **A flood of half-open connections**: 1,100 sockets each send half a request head to the
   proxy and wait, while normal streams are served; then the head timeout sheds them.
3. **Hostile inputs**: bad keys, huge ``n``, huge bodies, bad paths, slow heads and bodies;
   the statuses seen.
4. **Peak memory** of both server processes (``VmHWM``, Linux).

The machine is shared: latencies are noisy, so compare the direct and proxied columns of one
run, not runs with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from streamstop import truncate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
KEY = "sk-bench-client"
HEAD_TIMEOUT = 5.0  # the flood is shed this long after it stops sending
BODY_TIMEOUT = 3.0
HALF_A_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"


def raise_open_files() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# The proxy as it was before the operations layer: StopMiddleware(ProxyApp), plain uvicorn.
BARE_PROXY = """
import socket, sys, uvicorn
from streamstop.server import ProxyApp, StopMiddleware
sock = socket.create_server(("127.0.0.1", 0), backlog=2048)
print(f"bare proxy at http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
config = uvicorn.Config(
    StopMiddleware(ProxyApp(sys.argv[1])), log_level="error", access_log=False, lifespan="on",
    ws="none",
)
uvicorn.Server(config).run(sockets=[sock])
"""


class Server:
    """A ``streamstop`` server process; its stdout (the access log) is drained and counted."""

    def __init__(self, *args: str, argv: list[str] | None = None) -> None:
        command = [sys.executable, "-m", "streamstop", *args, "--port", "0", "--log-level", "error"]
        self.process = subprocess.Popen(
            argv or command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        urls = [word for word in first.split() if word.startswith("http://")]
        if not urls:
            self.process.kill()
            raise RuntimeError(f"no URL in {first!r}: {self.process.communicate()}")
        self.url = urls[0]
        self.base = self.url.removesuffix("/v1")
        self.host, port = self.base.removeprefix("http://").split(":")
        self.port = int(port)
        self.log_lines = 0
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stdout(self) -> None:
        assert self.process.stdout is not None
        for _ in self.process.stdout:
            self.log_lines += 1

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def peak_rss_mb(self) -> float | None:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def stop(self) -> None:
        self.process.send_signal(2)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- 1. concurrent streams ---------------------------------------------------------------------


@dataclass
class Round:
    path: str  # "direct", "bare proxy" or "proxy"
    streams: int
    errors: int = 0
    wrong: int = 0
    ttfb: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    seconds: float = 0.0


def stream_request(i: int) -> tuple[dict[str, Any], str]:
    marker = f"<END{i}>"
    words = " ".join(f"w{j}" for j in range(i % 23 + 20))
    text = f"stream {i}: {words}{marker} and what must never arrive"
    stops = [marker, f"<never{i}>", "</s>", "<|im_end|>", "###"]
    request = {
        "model": "echo",
        "stream": True,
        "stop": stops,
        "messages": [{"role": "user", "content": text}],
    }
    return request, truncate(text, stops)


async def one_stream(client: httpx.AsyncClient, url: str, i: int, result: Round) -> None:
    request, expected = stream_request(i)
    start = time.perf_counter()
    first: float | None = None
    text = ""
    try:
        async with client.stream("POST", f"{url}/chat/completions", json=request) as response:
            if response.status_code != 200:
                result.errors += 1
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.errors += 1
                    return
                for choice in chunk["choices"]:
                    piece = choice["delta"].get("content") or ""
                    if piece and first is None:
                        first = time.perf_counter()
                    text += piece
    except httpx.HTTPError:
        result.errors += 1
        return
    end = time.perf_counter()
    if text != expected:
        result.wrong += 1
        return
    result.ttfb.append((first or end) - start)
    result.total.append(end - start)


async def run_round(url: str, path: str, streams: int) -> Round:
    result = Round(path, streams)
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    headers = {"authorization": f"Bearer {KEY}"}
    start = time.perf_counter()
    async with (
        httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client,
        anyio.create_task_group() as group,
    ):
        for i in range(streams):
            group.start_soon(one_stream, client, url, i, result)
    result.seconds = time.perf_counter() - start
    return result


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- 2. the flood ------------------------------------------------------------------------------


async def flood(proxy: Server, sockets: int, normal: int) -> dict[str, Any]:
    held: list[socket.socket] = []
    refused = 0
    for _ in range(sockets):
        try:
            sock = socket.create_connection((proxy.host, proxy.port), timeout=30)
            sock.sendall(HALF_A_HEAD)
            held.append(sock)
        except OSError:
            refused += 1
    start = time.perf_counter()
    during = await run_round(proxy.url, "proxy", normal)
    served_in = time.perf_counter() - start
    # The flood is shed by the head timeout: each socket gets a 408 and is closed.
    statuses: dict[str, int] = {}

    def read(sock: socket.socket) -> None:
        data = b""
        try:
            while piece := sock.recv(65536):
                data += piece
        except OSError:
            pass
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
        statuses[status] = statuses.get(status, 0) + 1
        sock.close()

    shed_start = time.perf_counter()
    for sock in held:
        read(sock)
    return {
        "sockets": sockets,
        "refused_at_connect": refused,
        "normal_streams": normal,
        "normal_errors": during.errors + during.wrong,
        "normal_seconds": round(served_in, 2),
        "flood_answers": statuses,
        "flood_shed_after_s": round(time.perf_counter() - shed_start, 2),
    }


# -- 3. hostile inputs -------------------------------------------------------------------------


def chat(**more: Any) -> dict[str, Any]:
    return {"model": "echo", "messages": [{"role": "user", "content": "hi STOP x"}], **more}


def raw_exchange(server: Server, data: bytes, wait: float = 30.0) -> tuple[str, str | None]:
    """Send raw bytes; the status of the answer (or 'closed') and its error code."""
    with socket.create_connection((server.host, server.port), timeout=wait) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while piece := sock.recv(65536):
                answer += piece
        except OSError:
            pass
    if not answer.startswith(b"HTTP/"):
        return "closed", None
    try:
        code = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    return answer.split(b" ", 2)[1].decode(), code


def hostile(proxy: Server) -> list[dict[str, Any]]:
    good = {"authorization": f"Bearer {KEY}"}
    url = proxy.url
    cases: list[tuple[str, Any]] = [
        ("no client key", lambda c: c.post(f"{url}/chat/completions", json=chat())),
        (
            "wrong client key",
            lambda c: c.post(
                f"{url}/chat/completions", json=chat(), headers={"authorization": "Bearer x"}
            ),
        ),
        (
            "n = 100,000",
            lambda c: c.post(f"{url}/chat/completions", json=chat(n=100_000), headers=good),
        ),
        (
            "n = 128 x 128 prompts",
            lambda c: c.post(
                f"{url}/completions",
                json={"model": "echo", "prompt": ["p"] * 128, "n": 128},
                headers=good,
            ),
        ),
        (
            "max_tokens = 10^12",
            lambda c: c.post(f"{url}/chat/completions", json=chat(max_tokens=10**12), headers=good),
        ),
        (
            "40 MB body",
            lambda c: c.post(
                f"{url}/chat/completions",
                content=b'{"model": "echo", "x": "' + b"x" * 40_000_000 + b'"}',
                headers=good,
            ),
        ),
        (
            "invalid JSON",
            lambda c: c.post(f"{url}/chat/completions", content=b"{nope", headers=good),
        ),
        (
            "100,000 stops",
            lambda c: c.post(
                f"{url}/chat/completions",
                json=chat(stop=[f"s{i}" for i in range(100_000)]),
                headers=good,
            ),
        ),
        (
            "JSON nested 100,000 deep",
            lambda c: c.post(
                f"{url}/chat/completions",
                content=b'{"model": "echo", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                headers=good,
            ),
        ),
        ("unknown path /admin", lambda c: c.get(f"{proxy.base}/admin", headers=good)),
        (
            "request id with a quote",
            lambda c: c.get(f"{url}/models", headers={**good, "x-request-id": 'a"b'}),
        ),
    ]
    rows: list[dict[str, Any]] = []
    with httpx.Client(timeout=60) as client:
        for name, call in cases:
            start = time.perf_counter()
            try:
                response = call(client)
                status = str(response.status_code)
                try:
                    code = response.json().get("error", {}).get("code")
                except (ValueError, AttributeError):
                    code = None
            except httpx.HTTPError as error:
                status, code = type(error).__name__, None
            rows.append(
                {
                    "input": name,
                    "status": status,
                    "code": code,
                    "seconds": round(time.perf_counter() - start, 3),
                }
            )
    auth = b"Authorization: Bearer " + KEY.encode() + b"\r\nConnection: close\r\n"
    raw_cases = [
        # Raw: httpx would clean these paths before sending them.
        ("path /v1/%2e%2e/admin", b"GET /v1/%2e%2e/admin HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"),
        ("path /v1/..%2fadmin", b"GET /v1/..%2fadmin HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"),
        ("path /v1/models%00", b"GET /v1/models%00 HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"),
        ("300 KB of headers", b"GET /health HTTP/1.1\r\nHost: x\r\nx-big: " + b"x" * 300_000),
        ("CR/LF in the path", b"GET /v1/a\rb HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("half a head, then silence", HALF_A_HEAD),
        (
            "a body that never comes",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b"\r\nContent-Length: 1000\r\n\r\n{",
        ),
    ]
    for name, data in raw_cases:
        start = time.perf_counter()
        status, code = raw_exchange(proxy, data)
        rows.append(
            {
                "input": name,
                "status": status,
                "code": code,
                "seconds": round(time.perf_counter() - start, 3),
            }
        )
    return rows


# -- the report --------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=HERE,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=HERE,
            check=True,
        ).stdout.strip()
        commit += " (uncommitted changes)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "commit": commit,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": f"{cpu}, {os.cpu_count()} logical CPUs (shared with other work)",
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def markdown(report: dict[str, Any]) -> str:
    about = report["machine"]
    lines = [
        "# Reliability: `streamstop proxy` in front of `streamstop serve`",
        "",
        f"Made by `python benchmarks/reliability.py{' --quick' if report['quick'] else ''}` "
        f"at commit {about['commit']}; Python {about['python']}, {about['platform']}, "
        f"{about['cpu']}. Both servers are processes on 127.0.0.1, one worker each, with their "
        f"defaults but `--head-timeout {HEAD_TIMEOUT:g} --body-timeout {BODY_TIMEOUT:g}` on "
        "the proxy (so the flood is shed within the run) and `--delay 0.01` on the upstream "
        "(10 ms between pieces). The client, the proxy and the upstream share the machine's "
        "cores: compare the columns of one run, not runs with each other.",
        "",
        "## Concurrent streams",
        "",
        "Chat streams of 24 to 46 pieces, five stops each, each cut at its own place; "
        "*wrong* counts texts that differ from `streamstop.truncate` (a leak or a loss). "
        "Direct: to the upstream, whose own stop middleware cuts; proxy: through "
        "`streamstop proxy` (client key checked, stops cut there); bare proxy: "
        "`StopMiddleware(ProxyApp(...))` on plain uvicorn, the proxy without its operations "
        "layer. Times in ms.",
        "",
        f"Each round ran {report['repeats']} times, the three paths in a rotating order; "
        "errors and wrong texts are summed over the repeats, times are the median of the "
        "repeats. At 1,000 streams the client and the three servers compete for two cores "
        "that other work shares: the run is CPU-bound and its latencies are noisy; what "
        "holds is the count of errors.",
        "",
        "| streams | path | errors | wrong | TTFB p50 | TTFB p99 | total p50 | total p99 | "
        "wall s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["streams"]:
        lines.append(
            f"| {row['streams']:,} | {row['path']} | {row['errors']} | {row['wrong']} | "
            f"{ms(row['ttfb_p50'])} | {ms(row['ttfb_p99'])} | {ms(row['total_p50'])} | "
            f"{ms(row['total_p99'])} | {row['seconds']:.1f} |"
        )
    lines += [
        "",
        "Added by the proxy (proxy minus direct), and by the operations layer alone (proxy "
        "minus bare proxy: probes, metrics, access log, client key, deadlines), same run, ms:",
        "",
        "| streams | added by | TTFB p50 | TTFB p99 | total p50 | total p99 |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for added in report["added"]:
        for what, label in (("proxy", "the proxy"), ("layer", "the operations layer")):
            row = added[what]
            lines.append(
                f"| {added['streams']:,} | {label} | {ms(row['ttfb_p50'])} | "
                f"{ms(row['ttfb_p99'])} | {ms(row['total_p50'])} | {ms(row['total_p99'])} |"
            )
    flood_row = report["flood"]
    lines += [
        "",
        "## A flood of half-open connections",
        "",
        f"{flood_row['sockets']:,} sockets each sent half a request head to the proxy and "
        f"waited ({flood_row['refused_at_connect']} could not connect). Meanwhile "
        f"{flood_row['normal_streams']} normal streams went through the proxy: "
        f"**{flood_row['normal_errors']} errors**, all served in "
        f"{flood_row['normal_seconds']} s. Then the head timeout shed the flood: answers "
        f"{flood_row['flood_answers']} within {flood_row['flood_shed_after_s']} s of the "
        "last normal stream.",
        "",
        "## Hostile inputs (through the proxy)",
        "",
        "| input | status | error code | seconds |",
        "|---|---|---|---:|",
    ]
    for row in report["hostile"]:
        lines.append(
            f"| {row['input']} | {row['status']} | {row['code'] or ''} | {row['seconds']} |"
        )
    memory = report["peak_rss_mb"]
    lines += [
        "",
        "## Peak memory",
        "",
        f"Peak resident memory (VmHWM) over the whole run: proxy {memory['proxy']} MB "
        f"(it also took the flood), bare proxy {memory['bare proxy']} MB, upstream "
        f"{memory['upstream']} MB.",
        "",
        f"The servers logged {report['log_lines']} access lines; their standard error had "
        f"{report['stderr_lines']} lines (repeated errors are logged once per 10 s with a "
        "count).",
        "",
    ]
    return "\n".join(lines)


async def measure(quick: bool) -> dict[str, Any]:
    counts = [1, 8, 50] if quick else [1, 32, 1000]
    repeats = 1 if quick else 3
    flood_sockets, flood_normal = (100, 10) if quick else (1100, 50)
    upstream = Server("serve", "--delay", "0.01")
    proxy = Server(
        "proxy",
        "--upstream",
        upstream.url,
        "--client-key",
        KEY,
        "--head-timeout",
        str(HEAD_TIMEOUT),
        "--body-timeout",
        str(BODY_TIMEOUT),
    )
    bare = Server(argv=[sys.executable, "-c", BARE_PROXY, upstream.url])
    paths = (("direct", upstream.url), ("bare proxy", bare.url), ("proxy", proxy.url))
    try:
        # Warm up every path (imports, the proxy's upstream client) before measuring.
        for path, url in paths:
            await run_round(url, path, 2)
        rounds: list[Round] = []
        for streams in counts:
            for repeat in range(repeats):
                # A rotating order: no path always runs first, or last, on a busy machine.
                for path, url in paths[repeat % 3 :] + paths[: repeat % 3]:
                    result = await run_round(url, path, streams)
                    print(
                        f"{streams:>5} streams {path:>10}: {result.errors} errors, "
                        f"{result.wrong} wrong, {result.seconds:.1f} s",
                        flush=True,
                    )
                    rounds.append(result)
        flood_result = await flood(proxy, flood_sockets, flood_normal)
        print(f"flood: {flood_result}", flush=True)
        hostile_rows = hostile(proxy)
        for hostile_row in hostile_rows:
            print(f"hostile: {hostile_row}", flush=True)
        memory = {
            "proxy": proxy.peak_rss_mb(),
            "upstream": upstream.peak_rss_mb(),
            "bare proxy": bare.peak_rss_mb(),
        }
    finally:
        proxy.stop()
        bare.stop()
        upstream.stop()
    streams_rows = []
    for streams in counts:
        for path, _ in paths:
            mine = [r for r in rounds if r.streams == streams and r.path == path]
            row: dict[str, Any] = {
                "streams": streams,
                "path": path,
                "errors": sum(r.errors for r in mine),
                "wrong": sum(r.wrong for r in mine),
                "seconds": statistics.median(r.seconds for r in mine),
            }
            # The median over the repeats of each round's percentile.
            for name in ("ttfb", "total"):
                for label, q in (("p50", 0.5), ("p99", 0.99)):
                    row[f"{name}_{label}"] = statistics.median(
                        percentile(getattr(r, name), q) for r in mine
                    )
            streams_rows.append(row)
    added = []
    keys = ("ttfb_p50", "ttfb_p99", "total_p50", "total_p99")
    for direct, bare_row, proxied in zip(
        streams_rows[::3], streams_rows[1::3], streams_rows[2::3], strict=True
    ):
        added.append(
            {
                "streams": direct["streams"],
                "proxy": {key: proxied[key] - direct[key] for key in keys},
                "layer": {key: proxied[key] - bare_row[key] for key in keys},
            }
        )
    return {
        "quick": quick,
        "repeats": repeats,
        "machine": machine(),
        "streams": streams_rows,
        "added": added,
        "flood": flood_result,
        "hostile": hostile_rows,
        "peak_rss_mb": {k: None if v is None else round(v, 1) for k, v in memory.items()},
        "log_lines": proxy.log_lines + upstream.log_lines,
        "stderr_lines": len(proxy.stderr) + len(upstream.stderr),
        "stderr_sample": (proxy.stderr + upstream.stderr)[:20],
        "rounds_raw": [asdict(result) | {"ttfb": [], "total": []} for result in rounds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, small numbers")
    parser.add_argument("--write", action="store_true", help=f"write the results into {RESULTS}")
    parser.add_argument("--out", type=Path, help="write reliability.md and .json into this folder")
    args = parser.parse_args()
    raise_open_files()
    report = anyio.run(measure, args.quick)
    text = markdown(report)
    print()
    print(text)
    out: Path | None = args.out or (RESULTS if args.write else None)
    if out is None and args.quick:
        out = Path(tempfile.mkdtemp(prefix="streamstop-reliability-"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "reliability.md").write_text(text, encoding="utf-8")
        (out / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"written: {out / 'reliability.md'}, {out / 'reliability.json'}")


if __name__ == "__main__":
    main()
