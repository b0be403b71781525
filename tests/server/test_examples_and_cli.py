"""The handbook's server pages and the examples, run for real; ``streamstop serve`` and ``proxy`` as
processes; and the core staying importable (``filter``, ``demo``) without the server extra."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import openai
import pytest

from streamstop._cli import build_parser, main
from streamstop.server._commands import (
    build_app,
    client_keys,
    connection_limit,
    env_name,
    flags_of,
    settings_of,
)
from streamstop.server._limits import RequestLimits, set_by

from ..handbook import blocks, handbook
from .conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def readme_blocks() -> tuple[str, list[tuple[str, str]]]:
    """The server pages of the handbook (moved from the README's server section)."""
    section = handbook("server.md", "families/openai.md", "middleware.md")
    return section, re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


def test_readme_doctests() -> None:
    section, _ = readme_blocks()
    test = doctest.DocTestParser().get_doctest(section, {}, "docs[server]", "docs", 0)
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


def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``streamstop <args> --port 0``; return the process, the URL and the hint it printed.

    Both banner lines are read here: ``communicate()`` reads the pipe itself, past any line
    already buffered by ``readline()``.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "streamstop", *args, "--port", "0", "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
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


def test_the_readme_proxy_example_prints_what_the_readme_says() -> None:
    """The README's second use: its command, then its client, against a real upstream."""
    found = blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    (position,) = [i for i, (_, code) in enumerate(found) if "OpenAI(base_url=" in code]
    (command_kind, command), (_, code), (shown_kind, shown) = found[position - 1 : position + 2]
    assert (command_kind, shown_kind) == ("bash", "text")
    argv = shlex.split(command)
    assert argv[:2] == ["streamstop", "proxy"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert set(flags) == {"--upstream", "--port"}
    upstream, upstream_url, _ = start("serve", "--delay", "0")
    try:
        proxy, proxy_url, _ = start("proxy", "--upstream", upstream_url)
        try:
            code = code.replace('base_url="http://127.0.0.1:8000/v1"', f'base_url="{proxy_url}"')
            assert proxy_url in code
            result = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
            )
        finally:
            interrupt(proxy)
    finally:
        interrupt(upstream)
    assert result.stdout == shown


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
    hint = "pip install 'streamstop[server]' (from a clone: pip install -e '.[server]')"
    assert hint in capsys.readouterr().err
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


# -- settings: every flag from the environment -------------------------------------------------


def settings(argv: list[str], environ: dict[str, str]) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    return settings_of(args.parser, args, environ)


ENV_CASES: dict[str, tuple[list[str], dict[str, str], str, Any]] = {
    "default": (["serve"], {}, "port", 8000),
    "from env": (["serve"], {"STREAMSTOP_PORT": "9001"}, "port", 9001),
    "the flag beats env": (["serve", "--port", "9002"], {"STREAMSTOP_PORT": "9001"}, "port", 9002),
    "a float": (["serve"], {"STREAMSTOP_HEAD_TIMEOUT": "2.5"}, "head_timeout", 2.5),
    "a choice": (["serve"], {"STREAMSTOP_LOG_LEVEL": "debug"}, "log_level", "debug"),
    "a switch on": (["serve"], {"STREAMSTOP_INCLUDE_STOP": "true"}, "include_stop", True),
    "a switch off": (["serve"], {"STREAMSTOP_INCLUDE_STOP": "0"}, "include_stop", False),
    "an on/off switch": (["serve"], {"STREAMSTOP_ACCESS_LOG": "off"}, "access_log", False),
    "its flag beats env": (
        ["serve", "--access-log"],
        {"STREAMSTOP_ACCESS_LOG": "off"},
        "access_log",
        True,
    ),
    "a list": (["serve"], {"STREAMSTOP_CLIENT_KEYS": "k1, k2,"}, "client_key", ["k1", "k2"]),
    "its flags beat env": (
        ["serve", "--client-key", "k3"],
        {"STREAMSTOP_CLIENT_KEYS": "k1,k2"},
        "client_key",
        ["k3"],
    ),
    "no list": (["serve"], {}, "client_key", None),
    "the upstream key's documented name": (
        ["proxy"],
        {"STREAMSTOP_UPSTREAM_API_KEY": "sk-up"},
        "api_key",
        "sk-up",
    ),
    "routes": (
        ["proxy"],
        {"STREAMSTOP_ROUTES": "/v1/chat/completions,/v1/models"},
        "route",
        ["/v1/chat/completions", "/v1/models"],
    ),
}


@pytest.mark.parametrize("case", ENV_CASES)
def test_settings_from_the_environment(case: str) -> None:
    argv, environ, name, expected = ENV_CASES[case]
    assert settings(argv, environ)[name] == expected


def test_every_request_limit_is_a_flag_and_a_variable() -> None:
    for item in fields(RequestLimits):
        flag = "--" + item.name.replace("_", "-")
        variable = "STREAMSTOP_" + item.name.upper()
        for command in ("serve", "proxy"):
            assert settings([command], {})[item.name] == item.default
            assert settings([command, flag, "7"], {variable: "9"})[item.name] == 7
            assert settings([command], {variable: "9"})[item.name] == 9


def test_a_limits_refusal_names_the_flag_and_the_variable_that_set_it() -> None:
    for command in ("serve", "proxy"):
        flags = flags_of(build_parser().parse_args([command]).parser)
        by_dest = {action.dest: action for action in flags}
        for item in fields(RequestLimits):
            action = by_dest[item.name]
            assert set_by(item.name) == (
                f"set by the server's {action.option_strings[0]} or {env_name(action)}"
            )


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_help_names_every_variable(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    args = build_parser().parse_args([command])
    plural = {"client_key", "route"}
    flags = flags_of(args.parser)
    assert {flag for action in flags for flag in action.option_strings} >= {"--port", "--host"}
    for action in flags:
        assert f"[env {env_name(action)}]" in shown, action.dest
        expected = f"STREAMSTOP_{action.dest.upper()}" + ("S" if action.dest in plural else "")
        if action.dest == "api_key":  # documented before the rule
            expected = "STREAMSTOP_UPSTREAM_API_KEY"
        assert env_name(action) == expected
    # Every flag shown by --help is a setting, but --help itself.
    shown_flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", shown)) - {"--help"}
    assert shown_flags == {flag for action in flags for flag in action.option_strings}


BAD_ENV = {
    "STREAMSTOP_PORT": ("70000", "STREAMSTOP_PORT='70000': port 70000 out of range 0-65535"),
    "STREAMSTOP_INCLUDE_STOP": ("maybe", "expected 1/true/yes/on or 0/false/no/off"),
    "STREAMSTOP_MAX_STOPS": ("0", "STREAMSTOP_MAX_STOPS='0': must be >= 1, got '0'"),
    "STREAMSTOP_LOG_LEVEL": ("loud", "expected one of critical, error"),
}


@pytest.mark.parametrize("variable", BAD_ENV)
def test_a_bad_variable_is_named(
    variable: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    value, message = BAD_ENV[variable]
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit):
        main(["serve", "--port", "0"] if variable != "STREAMSTOP_PORT" else ["serve"])
    assert message in capsys.readouterr().err


def test_client_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# the team's keys\nsk-a\n\n  sk-b  \n", encoding="utf-8")
    given = settings(["serve", "--client-key", "sk-c", "--client-key-file", str(keys)], {})
    assert client_keys(given) == ["sk-c", "sk-a", "sk-b"]
    empty = tmp_path / "empty"
    empty.write_text("# nobody yet\n", encoding="utf-8")
    # Meant to be closed, the server does not start open.
    assert main(["serve", "--port", "0", "--client-key-file", str(empty)]) == 2
    assert f"no keys in --client-key-file {str(empty)!r}" in capsys.readouterr().err
    missing = str(tmp_path / "missing")
    assert main(["serve", "--port", "0", "--client-key-file", missing]) == 2
    assert "cannot read --client-key-file" in capsys.readouterr().err


def test_the_connection_limit_fits_the_open_file_limit() -> None:
    serve, proxy = settings(["serve"], {}), settings(["proxy", "--upstream", "http://u/v1"], {})
    assert connection_limit(serve, None) == 4096
    assert connection_limit(serve, 1_000_000) == 4096
    assert connection_limit(serve, 1024) == 1024 - 64
    assert connection_limit(proxy, 1024) == (1024 - 64) // 2  # a client and an upstream socket
    assert connection_limit({**serve, "limit_concurrency": 10}, 1024) == 10


@pytest.mark.asyncio
async def test_proxy_readiness_follows_the_upstream(upstream_server: LiveServer) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    closed.close()  # nothing listens there now
    for upstream, status in [(upstream_server.url, 200), (dead, 503)]:
        app = build_app(settings(["proxy", "--upstream", upstream], {}))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            ready = await client.get("/ready")
            health = await client.get("/health")
        assert (ready.status_code, health.status_code) == (status, 200)
        if status == 503:
            error = ready.json()["error"]
            assert error["code"] == "not_ready"
            assert error["message"].startswith(f"The upstream did not answer GET {dead}/models")


def test_serve_with_client_keys_from_the_environment_and_a_head_timeout() -> None:
    env = {**os.environ, "STREAMSTOP_CLIENT_KEYS": "sk-one,sk-two"}
    process, url, _ = start("serve", "--delay", "0", "--head-timeout", "0.3", env=env)
    base = url.removesuffix("/v1")
    try:
        request = {"model": "echo", "stop": "four", "prompt": "one two three four"}
        refused = httpx.post(f"{url}/completions", json=request, timeout=10)
        allowed = httpx.post(
            f"{url}/completions",
            json=request,
            headers={"authorization": "Bearer sk-two"},
            timeout=10,
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (401, "invalid_api_key")
        assert allowed.json()["choices"][0]["text"] == "one two three "
        assert httpx.get(f"{base}/health", timeout=10).json() == {"status": "ok"}
        assert httpx.get(f"{base}/ready", timeout=10).json() == {"status": "ok"}
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert 'streamstop_requests_total{route="/v1/completions",status="401"} 1.0' in metrics
        assert 'streamstop_requests_total{route="/v1/completions",status="200"} 1.0' in metrics
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    finally:
        code, out, err = interrupt(process)
    assert code == 0, err
    statuses = [json.loads(line)["status"] for line in out.splitlines()[:-1]]
    assert statuses == [401, 200]  # probes are logged at DEBUG only


def test_serve_with_workers() -> None:
    process, url, _ = start("serve", "--delay", "0", "--workers", "2")
    try:
        request = {"model": "echo", "stop": ["c"], "prompt": "a b c d", "stream": True}
        with httpx.Client(timeout=30) as client:
            for _ in range(4):
                body = client.post(f"{url}/completions", json=request).text
                events = [json.loads(event) for event in body.split("data: ")[1:-1]]
                assert "".join(event["choices"][0]["text"] for event in events) == "a b "
                assert body.endswith("data: [DONE]\n\n")
            assert client.get(url.removesuffix("/v1") + "/health").status_code == 200
    finally:
        code, _, err = interrupt(process)
    assert code == 0, err


def test_dockerfile() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    instructions = [
        line.split(None, 1)
        for line in dockerfile.replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    keywords = [keyword.upper() for keyword, _ in instructions]
    assert keywords[0] == "FROM"
    assert set(keywords) <= {
        "FROM",
        "ARG",
        "ENV",
        "WORKDIR",
        "COPY",
        "RUN",
        "USER",
        "EXPOSE",
        "HEALTHCHECK",
        "ENTRYPOINT",
        "CMD",
        "LABEL",
    }
    args = dict(instructions)
    assert "slim" in instructions[0][1]
    (user,) = [rest for keyword, rest in instructions if keyword == "USER"]
    assert user.strip() not in ("root", "0")
    assert keywords.index("USER") < keywords.index("CMD")
    assert "/health" in args["HEALTHCHECK"]
    assert "STREAMSTOP_HOST=0.0.0.0" in dockerfile
    assert ".[server,metrics,fast]" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", ".git"} <= set(ignored)


def test_the_deployment_section_names_real_flags_and_variables() -> None:
    page = handbook("deployment.md")
    section = page[page.index("<!-- deployment:begin -->") : page.index("<!-- deployment:end -->")]
    parsers = [build_parser().parse_args([command]).parser for command in ("serve", "proxy")]
    actions = [action for parser in parsers for action in flags_of(parser)]
    flags = {option for action in actions for option in action.option_strings}
    variables = {env_name(action) for action in actions}
    named_flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", section))
    named_variables = set(re.findall(r"STREAMSTOP_[A-Z_]+", section))
    assert len(named_flags) >= 10
    assert named_flags - {"--help"} <= flags
    assert named_variables <= variables
    assert {"/health", "/ready", "/metrics"} <= set(re.findall(r"/[a-z]+", section))


def test_the_core_commands_do_not_import_the_server_package() -> None:
    code = (
        "import sys; from streamstop._cli import main; main(['demo', '--delay', '0']); "
        "print(sorted(m for m in sys.modules if m.startswith('streamstop.server')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert result.stdout.decode().splitlines()[-1] == "[]"


def test_the_server_commands_are_listed_as_they_are_registered() -> None:
    assert build_parser(server=False).format_help() == build_parser().format_help()
