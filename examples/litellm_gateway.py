"""Stops inside the LiteLLM gateway: six stop strings, cut by the proxy for any provider.

The proxy loads ``streamstop.litellm.stop_hook`` (``litellm_gateway.yaml`` beside this file):
it takes ``stop`` out of each request, so the provider never sees it (OpenAI caps it at 4,
reasoning models refuse it), and cuts the answer itself, closing the provider's stream at the
cut. The gateway here is in front of ``streamstop serve``'s echo model, started with::

    LITELLM_LOCAL_MODEL_COST_MAP=True litellm --config examples/litellm_gateway.yaml --port 4000

and the same LITELLM_MASTER_KEY (``sk-`` and any secret) exported in both terminals. LITELLM_URL
(``http://127.0.0.1:4000/v1``) and MODEL (``echo``) point the example elsewhere.

Install, from a clone:   pip install -e '.[server,litellm]' openai
Install, once published: pip install 'streamstop[server,litellm]' openai
Start:                   streamstop serve --port 8000, and the gateway (above), in two terminals
Run:                     python examples/litellm_gateway.py
"""

from __future__ import annotations

import os

import openai

LITELLM_URL = os.environ.get("LITELLM_URL", "http://127.0.0.1:4000/v1")
MODEL = os.environ.get("MODEL", "echo")

# Six stops: past OpenAI's cap of four.
STOPS = ["\n\nUser:", "<|im_end|>", "</s>", "###", "Observation:", "<|eot_id|>"]

# The echo model repeats this; a real model would run on past its turn in the same way.
PROMPT = "The answer is 42.\n\nUser: and this line should never be shown"


def main() -> None:
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": PROMPT}
    ]
    with openai.OpenAI(base_url=LITELLM_URL, api_key=os.environ["LITELLM_MASTER_KEY"]) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, stop=STOPS, stream=True
        )
        for chunk in stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            print(choice.delta.content or "", end="", flush=True)
            if choice.finish_reason:
                stop = (choice.model_extra or {}).get("stop_reason")
                print(f"\n[finish_reason: {choice.finish_reason}, stop_reason: {stop!r}]")
        whole = client.chat.completions.create(model=MODEL, messages=messages, stop=STOPS)
        print(repr(whole.choices[0].message.content))


if __name__ == "__main__":
    main()
