"""Cut a LangChain chat model's output at any number of stops, streamed or not.

``with_stops`` wraps any runnable (a chat model, a chain): its stream is cut as soon as a stop
is complete and the model's own stream is closed, so it stops generating. The stops stay here:
the provider's cap on their number (OpenAI: 4) does not apply.

It talks to the built-in echo model; or point OPENAI_BASE_URL (and MODEL) at any
OpenAI-compatible server.

Install, from a clone:   pip install -e '.[server,langchain]' langchain-openai
Install, once published: pip install 'streamstop[server,langchain]' langchain-openai
Start:                   streamstop serve (in another terminal)
Run:                     python examples/langchain_stop_chat.py
"""

from __future__ import annotations

import asyncio
import os

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from streamstop.langchain import with_stops

BASE_URL = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
MODEL = os.environ.get("MODEL", "echo")

# Six stops: past OpenAI's cap of four.
STOPS = ["\n\nUser:", "<|im_end|>", "</s>", "###", "Observation:", "<|eot_id|>"]

# The echo model repeats this; a real model would run on past its turn in the same way.
PROMPT = "The answer is 42.\n\nUser: and this line should never be shown"


async def main() -> None:
    api_key = SecretStr(os.environ.get("OPENAI_API_KEY", "unused"))
    model = with_stops(ChatOpenAI(base_url=BASE_URL, api_key=api_key, model=MODEL), STOPS)
    async for chunk in model.astream(PROMPT):
        print(chunk.content, end="", flush=True)
    print()
    reply = await model.ainvoke(PROMPT)
    print(repr(reply.content), reply.response_metadata.get("stop_sequence"))


if __name__ == "__main__":
    asyncio.run(main())
