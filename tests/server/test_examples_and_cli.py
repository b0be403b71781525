"""The README section and the examples, run for real; ``streamstop serve`` and ``proxy`` as
processes; and the core staying importable (``filter``, ``demo``) without the server extra."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import openai
import pytest

from streamstop._cli import main

from .conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def readme_blocks() -> tuple[str, list[tuple[str, str]]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("<!-- server:begin -->") : readme.index("<!-- server:end -->")]
    return section, re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


def test_readme_doctests() -> None:
    section, _ = readme_blocks()
    test = doctest.DocTestParser().get_doctest(section, {}, "README.md[server]", "README.md", 0)
    assert len(test.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0


def test_readme_client_example_prints_what_the_readme_says(echo_server: LiveServer) -> None:
    _, blocks = readme_blocks()
    (position,) = [i for i, (_, code) in enumerate(blocks) if "OpenAI(base_url=" in code]
    language, code = blocks[position]
    shown_kind, shown = blocks[position + 1]
    assert (language, shown_kind) == ("python", "text")
    code = code.replace("http://127.0.0.1:8000/v1", echo_server.url)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == shown


def test_readme_error_example_is_what_the_server_says(echo_server: LiveServer) -> None:
    _, blocks = readme_blocks()
    (shown,) = [json.loads(code) for language, code in blocks if language == "json"]
    response = httpx.post(
        f"{echo_server.url}/completions", json={"model": "echo", "prompt": "x", "stop": 3}
    )
    assert response.status_code == 400
    assert response.json() == shown


def test_openai_stream_filter_example(echo_server: LiveServer) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "openai_stream_filter.py")],
        env={**os.environ, "OPENAI_BASE_URL": echo_server.url, "OPENAI_API_KEY": "unused"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == (
        "The answer is 42.\n[finish_reason: stop]\nstopped at: '\\n\\nUser:'\n"
    )


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def starlette_server() -> Iterator[LiveServer]:
    server = LiveServer(load_example("starlette_middleware").app).start()
    try:
        yield server
    finally:
        server.stop()


def test_starlette_middleware_example(starlette_server: LiveServer) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    stops = ["\n\nUser:", "\n\nAssistant:", "</s>", "<|im_end|>", "###"]
    with openai.OpenAI(base_url=starlette_server.url, api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="toy", messages=messages, stop=stops, stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in stream)
        whole = client.chat.completions.create(model="toy", messages=messages, stop=stops)
    assert streamed == "You said: 'hi'. Glad to help!"
    assert whole.choices[0].message.content == streamed


# -- the commands ------------------------------------------------------------------------------


def start(*args: str) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``streamstop <args> --port 0``; return the process, the URL and the hint it printed.

    Both banner lines are read here: ``communicate()`` reads the pipe itself, past any line
    already buffered by ``readline()``.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "streamstop", *args, "--port", "0", "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    url = next((word for word in first.split() if word.startswith("http://")), "")
    if not url:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"no URL in {first!r}: {out!r} {err!r}")
    return process, url, process.stdout.readline()


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=20)
    return process.returncode, out, err


def test_serve_prints_its_url_and_a_hint_and_stops_on_ctrl_c() -> None:
    process, url, hint = start("serve", "--delay", "0")
    try:
        assert url.endswith("/v1")
        request = {
            "model": "echo",
            "stop": ["four"],
            "messages": [{"role": "user", "content": "one two three four five"}],
        }
        response = httpx.post(f"{url}/chat/completions", json=request, timeout=10)
        assert response.json()["choices"][0]["message"]["content"] == "one two three "
    finally:
        code, out, err = interrupt(process)
    assert code == 0, err
    assert hint.startswith(f"try: curl -N {url}/chat/completions ")
    # The access log (one JSON line per request) goes to stdout, before the last word.
    *access, last = out.splitlines()
    assert last == "streamstop: server stopped"
    (line,) = [json.loads(line) for line in access]
    assert (line["route"], line["status"], line["method"]) == ("/v1/chat/completions", 200, "POST")


def test_proxy_command(upstream_server: LiveServer) -> None:
    process, url, hint = start("proxy", "--upstream", upstream_server.url)
    assert hint.startswith(f"try: OPENAI_BASE_URL={url} ")
    try:
        request = {"model": "echo", "prompt": "a b c STOP d", "stop": ["STOP", "1", "2", "3", "4"]}
        response = httpx.post(f"{url}/completions", json=request, timeout=10)
        assert response.json()["choices"][0]["text"] == "a b c "
    finally:
        code, _, err = interrupt(process)
    assert code == 0, err


def test_serve_on_a_busy_port(echo_server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    port = echo_server.url.split(":")[2].split("/")[0]
    assert main(["serve", "--port", port]) == 1
    assert "cannot listen on 127.0.0.1:" in capsys.readouterr().err


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--port", "70000"])
    assert "out of range" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["proxy"])
    assert "--upstream" in capsys.readouterr().err
    assert main(["proxy", "--upstream", "localhost:1", "--port", "0"]) == 2
    assert "http:// or https://" in capsys.readouterr().err


def test_without_the_server_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now fails
    assert main(["serve", "--port", "0"]) == 2
    assert "pip install 'streamstop[server]'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "httpx", None)
    assert main(["proxy", "--upstream", "http://localhost:1/v1"]) == 2
    assert "uvicorn and httpx" in capsys.readouterr().err


def test_the_core_imports_and_runs_without_the_server_extra() -> None:
    script = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in {"uvicorn", "httpx", "openai", "starlette"}:
                    raise ImportError(f"{name} is not installed")

        sys.meta_path.insert(0, Block())
        import streamstop, streamstop.chat, streamstop.server
        from streamstop._cli import main
        assert main(["demo", "--delay", "0"]) == 0
        loaded = [m for m in sys.modules if m.partition(".")[0] in {"uvicorn", "httpx"}]
        assert not loaded, loaded
        sys.exit(main(["serve"]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "stopped at" in result.stdout  # the demo ran
    assert "pip install 'streamstop[server]'" in result.stderr
