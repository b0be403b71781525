"""Benchmark: what StopMiddleware costs per streamed event, for OpenAI and each other API family.

    python benchmarks/family_event_cost.py                       # this checkout, every family
    python benchmarks/family_event_cost.py --baseline DIR        # and OpenAI's against DIR

In-process, no network: an ASGI app streams ``--events`` events of each API's shape (one short
token each, the four usual chat stops, none of which occurs, so every event passes), and the
middleware's wall time per event is taken, best of ``--rounds``. With ``--baseline DIR`` (a
folder holding another version's ``streamstop`` package, e.g. ``git archive main streamstop |
tar -x -C DIR``) the OpenAI path of both is run in turns, round by round, and their ratio
printed: on a shared machine only such side-by-side ratios mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

STOPS = ["\n\nUser:", "###", "</s>", "<|im_end|>"]


def _frames(family: str, count: int) -> tuple[str, dict[str, Any], bytes, list[bytes]]:
    """Path, request, content type and the upstream's frames for ``family``."""
    if family == "openai":
        body = {"model": "m", "stream": True, "stop": STOPS, "messages": []}
        chunk: dict[str, Any] = {"object": "chat.completion.chunk", "choices": [{"index": 0}]}
        frames = []
        for i in range(count):
            chunk["choices"][0]["delta"] = {"content": f" tok{i}"}
            frames.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        return "/v1/chat/completions", body, b"text/event-stream", frames
    if family == "anthropic":
        body = {"model": "c", "stream": True, "stop_sequences": STOPS, "messages": []}
        frames = [
            b"event: content_block_delta\ndata: "
            + json.dumps(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": f" tok{i}"},
                }
            ).encode()
            + b"\n\n"
            for i in range(count)
        ]
        return "/v1/messages", body, b"text/event-stream", frames
    if family == "ollama":
        body = {"model": "m", "messages": [], "options": {"stop": STOPS}}
        frames = [
            json.dumps(
                {
                    "model": "m",
                    "created_at": "2024-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": f" tok{i}"},
                    "done": False,
                }
            ).encode()
            + b"\n"
            for i in range(count)
        ]
        return "/api/chat", body, b"application/x-ndjson", frames
    if family == "llama.cpp":
        body = {"prompt": "p", "stream": True, "stop": STOPS}
        frames = [
            b"data: "
            + json.dumps({"index": 0, "content": f" tok{i}", "stop": False, "id_slot": 0}).encode()
            + b"\n\n"
            for i in range(count)
        ]
        return "/completion", body, b"text/event-stream", frames
    if family == "responses":
        body = {"model": "o4-mini", "stream": True, "stop": STOPS, "input": "p"}
        # Numbered as the API numbers them (after created, in_progress, the item and its
        # part), each with the obfuscation padding the API adds: every one passes as it came.
        frames = [
            b"event: response.output_text.delta\ndata: "
            + json.dumps(
                {
                    "type": "response.output_text.delta",
                    "sequence_number": i + 4,
                    "item_id": "msg_0123456789abcdef0123456789abcdef",
                    "output_index": 1,
                    "content_index": 0,
                    "delta": f" tok{i}",
                    "logprobs": [],
                    "obfuscation": "Xq3vT0aZ",
                }
            ).encode()
            + b"\n\n"
            for i in range(count)
        ]
        return "/v1/responses", body, b"text/event-stream", frames
    if family == "gemini":
        body = {
            "contents": [{"role": "user", "parts": [{"text": "p"}]}],
            "generationConfig": {"stopSequences": STOPS},
        }
        frames = [
            b"data: "
            + json.dumps(
                {
                    "candidates": [
                        {"content": {"parts": [{"text": f" tok{i}"}], "role": "model"}, "index": 0}
                    ],
                    "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4},
                    "modelVersion": "gemini-2.5-flash",
                    "responseId": "r",
                },
                separators=(",", ": "),
            ).encode()
            + b"\r\n\r\n"
            for i in range(count)
        ]
        return "/v1beta/models/m:streamGenerateContent", body, b"text/event-stream", frames
    body = {"inputs": "p", "parameters": {"stop": STOPS}}
    frames = [
        b"data:"
        + json.dumps(
            {
                "index": i,
                "token": {"id": i, "text": f" tok{i}", "logprob": -0.1, "special": False},
                "generated_text": None,
                "details": None,
            }
        ).encode()
        + b"\n\n"
        for i in range(count)
    ]
    return "/generate_stream", body, b"text/event-stream", frames


def _load(root: str | None) -> Callable[..., Any]:
    """``StopMiddleware`` of the package under ``root`` (``None``: this checkout's)."""
    for name in [m for m in sys.modules if m == "streamstop" or m.startswith("streamstop.")]:
        del sys.modules[name]
    if root is not None:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module("streamstop.server._middleware")
    finally:
        if root is not None:
            sys.path.remove(root)
    middleware: Callable[..., Any] = module.StopMiddleware
    return middleware


async def _once(middleware: Callable[..., Any], family: str, count: int) -> float:
    path, request, content_type, frames = _frames(family, count)
    body = json.dumps(request).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-type", content_type)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for frame in frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    path, _, query = path.partition("?")
    query = query or ("alt=sse" if path.endswith(":streamGenerateContent") else "")
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": query.encode(),
        "headers": [],
    }
    start = time.perf_counter()
    await middleware(app)(scope, receive, send)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--baseline", help="folder holding another version's streamstop package")
    args = parser.parse_args()
    current = _load(None)
    baseline = _load(args.baseline) if args.baseline else None
    families = ["openai", "anthropic", "ollama", "llama.cpp", "tgi", "responses", "gemini"]
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for family in families:
            cost = asyncio.run(_once(current, family, args.events))
            best[family] = min(best.get(family, cost), cost)
        if baseline is not None:
            cost = asyncio.run(_once(baseline, "openai", args.events))
            best["openai (baseline)"] = min(best.get("openai (baseline)", cost), cost)
    print(f"StopMiddleware, {args.events} events, best of {args.rounds} rounds (us per event)")
    for name, cost in best.items():
        print(f"  {name:<20} {cost * 1e6:7.2f}   x{cost / best['openai']:.2f} of openai")
    if baseline is not None:
        ratio = best["openai"] / best["openai (baseline)"]
        print(f"openai, this checkout / baseline: {ratio:.3f}")


if __name__ == "__main__":
    main()
