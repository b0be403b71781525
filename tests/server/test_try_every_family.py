"""docs/try-every-family.md runs: each of its commands against what ``streamstop serve`` runs.

The page's first command starts the server; the test serves the same app (the echo behind the
middleware) on a free port and runs every other ```bash block with the page's address replaced
by that server's. Each asks for ``one two three four five`` with the stop ``four``: a command
must succeed, and its answer must end as its API ends one. Where the middleware filters the
family (found by asking it, not by a list that could go stale) the answer must be cut before
``four``; where it does not filter the path yet, the whole echo must come back.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from streamstop.server import Receive, Scope, Send, StopMiddleware
from streamstop.server._asgi import read_body, send_json
from streamstop.server._commands import add_server_commands

from .conftest import Client, LiveServer, http_scope

PAGE = Path(__file__).parents[2] / "docs" / "try-every-family.md"
ADDRESS = "http://127.0.0.1:8000"
CUT, WHOLE = "one two three ", "one two three four five"

# How each API ends an answer: a mark that its last event (or its whole response) carries.
ENDS = {
    "/v1/chat/completions": "data: [DONE]",
    "/v1/responses": "event: response.completed",
    "/v1/messages": "event: message_stop",
    "/api/chat": '"done":true',
    "/completion": '"stop":true',
    "/generate_stream": '"generated_text":"',
    "/v1beta/models/echo:streamGenerateContent": '"finishReason":"STOP"',
}
# The request each SDK snippet makes, by the module it imports.
SDK_REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("/v1/responses", {"model": "echo", "input": WHOLE, "stop": ["four"]}),
    "anthropic": (
        "/v1/messages",
        {
            "model": "echo",
            "max_tokens": 100,
            "stop_sequences": ["four"],
            "stream": True,
            "messages": [{"role": "user", "content": WHOLE}],
        },
    ),
    "ollama": (
        "/api/generate",
        {"model": "echo", "prompt": WHOLE, "options": {"stop": ["four"]}, "stream": False},
    ),
    "google": (
        "/v1beta/models/echo:streamGenerateContent?alt=sse",
        {
            "contents": [{"parts": [{"text": WHOLE}]}],
            "generationConfig": {"stopSequences": ["four"]},
        },
    ),
}


def bash_blocks() -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", PAGE.read_text(), flags=re.M | re.S)


def filtered(path: str, body: dict[str, Any]) -> bool:
    """Whether StopMiddleware takes the stops out of ``body`` on ``path``: the app behind it
    records what reaches it."""
    seen: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        received = await read_body(receive, 1 << 20)
        seen.append(json.loads(received or b"null"))
        await send_json(send, 200, {})

    async def ask() -> None:
        client = Client(json.dumps(body).encode())
        route, _, query = path.partition("?")
        scope = http_scope(route, query_string=query.encode())
        await StopMiddleware(app)(scope, client.receive, client.send)

    anyio.run(ask)
    return seen != [body]


def curl_request(command: str) -> tuple[str, dict[str, Any]]:
    """The path and the JSON body of a curl command."""
    words = shlex.split(command.replace("\\\n", " "))
    url = next(word for word in words if word.startswith(ADDRESS))
    return url.removeprefix(ADDRESS), json.loads(words[words.index("-d") + 1])


def run(command: str, server: LiveServer) -> str:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command.replace(ADDRESS, server.base_url)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_page_starts_the_server_its_commands_talk_to() -> None:
    first, *others = bash_blocks()
    assert first.strip() == "streamstop serve"
    assert len(others) >= 10
    assert all(ADDRESS in block for block in others)
    # The page's address is where `streamstop serve` listens by default.
    parser = argparse.ArgumentParser()
    add_server_commands(parser.add_subparsers())
    arguments = parser.parse_args(["serve"])
    assert f"http://{arguments.host}:{arguments.port}" == ADDRESS


@pytest.mark.parametrize("index", range(1, len(bash_blocks())))
def test_each_command_of_the_page(index: int, echo_server: LiveServer) -> None:
    command = bash_blocks()[index]
    output = run(command, echo_server)
    if command.startswith("curl"):
        path, body = curl_request(command)
        end = ENDS[path.partition("?")[0]]
        assert end in output
        # The text arrives in pieces: the piece 'five' is there only if nothing cut it.
        assert ("five" in output) is not filtered(path, body), output
        return
    module = re.search(r"^(?:from|import) (\w+)", command, flags=re.M)
    assert module is not None
    path, body = SDK_REQUESTS[module.group(1)]
    assert output == (CUT if filtered(path, body) else WHOLE) + "\n"


README = PAGE.parents[1] / "README.md"


def readme_commands() -> list[str]:
    """The README's one command per family: the curl lines of its API families section."""
    section = README.read_text().split("## API families", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)
    return [line for line in block.splitlines() if line.startswith("curl")]


def test_the_readme_has_one_command_per_family() -> None:
    paths = {curl_request(command)[0].partition("?")[0] for command in readme_commands()}
    assert paths == set(ENDS)
    assert len(readme_commands()) == len(paths)


@pytest.mark.parametrize("index", range(len(readme_commands())))
def test_each_command_of_the_readme(index: int, echo_server: LiveServer) -> None:
    command = readme_commands()[index]
    output = run(command, echo_server)
    path, body = curl_request(command)
    assert ENDS[path.partition("?")[0]] in output
    assert filtered(path, body)  # every family the README shows is filtered
    assert "five" not in output, output  # cut after "one two three " (in pieces)
