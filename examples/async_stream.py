"""Wrap an async LLM token stream with StopStream.

A generator stands in for the model: it streams a chat answer in token-sized pieces and runs
on past the end of the assistant's turn, as models do. The filter shows the answer as it
arrives, cuts at "<|im_end|>" although the marker is split across three tokens, and closes the
generator so that the "model" stops generating.

Install, from a clone:   pip install -e .
Install, once published: pip install streamstop
Start:                   nothing (offline: a generator stands in for the model)
Run:                     python examples/async_stream.py
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from streamstop import StopAutomaton, StopStream

# Build the automaton once per stop set; every stream shares it.
CHAT_STOPS = StopAutomaton(["<|im_end|>", "<|im_start|>", "\n\nUser:"])

TOKENS = [
    "The", " capital", " of", " France", " is", " Paris", ".", " It", " sits", " on",
    " the", " Se", "ine", ".", "<|im", "_e", "nd|>", "\n<|im_start|>", "user", "\nAnd",
    " Spain", "?",
]  # fmt: skip


async def model_tokens(log: list[str]) -> AsyncIterator[str]:
    try:
        for token in TOKENS:
            await anyio.sleep(0.02)  # the model thinking
            log.append(token)
            yield token
    finally:
        log.append("<model stopped>")


async def main() -> None:
    generated: list[str] = []
    async with StopStream(model_tokens(generated), CHAT_STOPS) as stream:
        async for text in stream:
            print(text, end="", flush=True)
    print()
    print(f"stop: {stream.stop_string!r}")
    print(f"the model generated {len(generated) - 1} of {len(TOKENS)} tokens, then: "
          f"{generated[-1]}")  # fmt: skip


if __name__ == "__main__":
    anyio.run(main)
