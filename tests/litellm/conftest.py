"""The real LiteLLM proxy, started from a config file in front of the fake provider.

LiteLLM is not in the ``dev`` extra (its pins would rule the other extras' versions): these
tests run where it is installed (``pip install -e '.[dev,litellm]'``, as ``.ci/run`` does in a
venv of its own) and are skipped elsewhere. Offline: LiteLLM reads its bundled cost map
(``LITELLM_LOCAL_MODEL_COST_MAP``) instead of fetching one at import and at start.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import LiveServer, StreamEnds
from tests.server.fake_families import FakeFamilies

from .fake_provider import FakeProvider

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before litellm is first imported

SKIP_REASON = "litellm is not installed: pip install -e '.[dev,litellm]' (CI: .venv-litellm)"
# The proxy imports its whole web stack and every provider at start: about 40 s on 2 shared
# cores, so the bound is generous.
START_SECONDS = 240

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "litellm_gateway.yaml"

# The models the tests route to; the settings (the callback, the master key read from
# LITELLM_MASTER_KEY) are the example's own, copied from its file, so the lines the handbook
# tells users to copy are the ones under test.
MODELS = """\
model_list:
  - model_name: reasoner
    litellm_params:
      model: openai/fake-reasoner
      api_base: {provider}/v1
      api_key: sk-fake
  - model_name: reasoner-text
    litellm_params:
      model: text-completion-openai/fake-reasoner
      api_base: {provider}/v1
      api_key: sk-fake
  # /v1/messages translated to the provider's chat completions
  - model_name: reasoner-chat
    litellm_params:
      model: hosted_vllm/fake-reasoner
      api_base: {provider}/v1
      api_key: sk-fake
  # /v1/messages passed through to an Anthropic API
  - model_name: claude
    litellm_params:
      model: anthropic/claude-fake
      api_base: {anthropic}
      api_key: sk-fake
"""


def example_settings() -> str:
    """The example config from its ``litellm_settings:`` on (its model list left out)."""
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    return text[text.index("\nlitellm_settings:") :]


@dataclass
class Gateway:
    url: str  # the OpenAI base URL, .../v1
    base_url: str
    master_key: str
    provider: FakeProvider
    anthropic: FakeFamilies
    anthropic_ends: StreamEnds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_up(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"litellm exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/health/liveliness", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"litellm did not start within {START_SECONDS} s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """``litellm --config <tmp>/config.yaml`` on a free loopback port, with the stop hook."""
    pytest.importorskip("litellm", reason=SKIP_REASON)
    provider = FakeProvider()
    anthropic_ends = StreamEnds()
    anthropic = FakeFamilies(on_stream_end=anthropic_ends)
    provider_server = LiveServer(provider).start()
    anthropic_server = LiveServer(anthropic).start()
    directory = tmp_path_factory.mktemp("litellm")
    master_key = "sk-" + secrets.token_hex(32)
    config = directory / "config.yaml"
    models = MODELS.format(provider=provider_server.base_url, anthropic=anthropic_server.base_url)
    config.write_text(models + example_settings())
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = directory / "litellm.log"
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": master_key,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    command = [
        str(Path(sys.executable).with_name("litellm")),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    process = None
    try:
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=directory
            )
        _wait_until_up(process, base_url, log)
        yield Gateway(f"{base_url}/v1", base_url, master_key, provider, anthropic, anthropic_ends)
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        provider_server.stop()
        anthropic_server.stop()
