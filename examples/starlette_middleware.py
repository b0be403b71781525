"""StopMiddleware in a Starlette app: stops of any number for any OpenAI-style endpoint.

The app is a toy model server that knows nothing of stops and, like real models, runs on past
the end of its turn. One line adds the middleware, ``app.add_middleware(StopMiddleware)`` (the
same in FastAPI); clients then send ``stop`` as usual, with as many strings as they like,
streaming or not.

Install, from a clone:   pip install -e '.[server]' starlette
Install, once published: pip install 'streamstop[server]' starlette
Start:                   nothing: this is the server (on 127.0.0.1:8001, or $PORT)
Run:                     python examples/starlette_middleware.py
Then, from another terminal:

    curl -N http://127.0.0.1:8001/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model": "toy", "stream": true, "stop": ["User:"],
           "messages": [{"role": "user", "content": "hello"}]}'
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from streamstop.server import StopMiddleware


def reply_to(messages: list[dict[str, Any]]) -> str:
    said = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    return f"You said: {said!r}. Glad to help!\n\nUser: thanks\n\nAssistant: you are welcome"


async def stream_chunks(text: str) -> AsyncIterator[str]:
    base = {
        "id": "chatcmpl-toy",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "toy",
    }
    words = text.split(" ")
    for i, word in enumerate(words):
        piece = word if i == len(words) - 1 else word + " "
        choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
        yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
        await anyio.sleep(0.01)  # a model takes its time: the middleware stops it after a stop
    end = {"index": 0, "delta": {}, "finish_reason": "stop"}
    yield f"data: {json.dumps({**base, 'choices': [end]})}\n\n"
    yield "data: [DONE]\n\n"


async def chat_completions(request: Request) -> Response:
    body = await request.json()
    text = reply_to(body.get("messages", []))
    if body.get("stream"):
        return StreamingResponse(stream_chunks(text), media_type="text/event-stream")
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return JSONResponse({"object": "chat.completion", "model": "toy", "choices": [choice]})


app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"])])
app.add_middleware(StopMiddleware)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8001")))
