"""Cut an OpenAI stream at any number of stops, client side, with the official openai client.

OpenAI caps ``stop`` at 4 strings and some servers leak the start of a stop while streaming.
Here the stops stay with the client: ChunkStream filters the client's own chunk objects as they
arrive, holds back only what could still become a stop, and closes the stream once the choice
is cut, so that the server stops generating.

It talks to the built-in echo model; or point OPENAI_BASE_URL (and MODEL) at any
OpenAI-compatible server.

Install, from a clone:   pip install -e '.[server]' openai
Install, once published: pip install 'streamstop[server]' openai
Start:                   streamstop serve (in another terminal)
Run:                     python examples/openai_stream_filter.py
"""

from __future__ import annotations

import asyncio
import os

import openai

from streamstop.chat import ChunkStream

BASE_URL = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
MODEL = os.environ.get("MODEL", "echo")

# Six stops: past OpenAI's cap of four, and none of them is sent to the server.
STOPS = ["\n\nUser:", "<|im_end|>", "</s>", "###", "Observation:", "<|eot_id|>"]

# The echo model repeats this; a real model would run on past its turn in the same way.
PROMPT = "The answer is 42.\n\nUser: and this line should never be shown"


async def main() -> None:
    api_key = os.environ.get("OPENAI_API_KEY", "unused")
    async with openai.AsyncOpenAI(base_url=BASE_URL, api_key=api_key) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        # n=1: the request has one choice, so the stream can be closed as soon as it is cut.
        async with ChunkStream(stream, STOPS, n=1) as chunks:
            async for chunk in chunks:
                for choice in chunk.choices:
                    print(choice.delta.content or "", end="", flush=True)
                    if choice.finish_reason:
                        print(f"\n[finish_reason: {choice.finish_reason}]")
    print(f"stopped at: {chunks.stop_strings.get(0)!r}")


if __name__ == "__main__":
    asyncio.run(main())
