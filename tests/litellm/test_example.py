"""The example and its config, run for real: the config's settings are the gateway's own (see
conftest.py), and the example's output is what docs/litellm.md shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SKIP_REASON, Gateway, example_settings

pytest.importorskip("litellm", reason=SKIP_REASON)

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_config_loads_the_ready_hook() -> None:
    assert "litellm_settings:\n  callbacks: streamstop.litellm.stop_hook\n" in example_settings()


def test_the_example_prints_the_cut_answer(gateway: Gateway) -> None:
    env = {
        **os.environ,
        "LITELLM_URL": gateway.url,
        "LITELLM_MASTER_KEY": gateway.master_key,
        "MODEL": "reasoner",
    }
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "litellm_gateway.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout == (
        "The answer is 42.\n"
        "[finish_reason: stop, stop_reason: '\\n\\nUser:']\n"
        "'The answer is 42.'\n"
    )


def test_the_handbook_page_compiles_and_its_imports_run() -> None:
    # The main venv has no LiteLLM, so its docs test leaves this page's imports to this suite.
    from ..test_docs import check_python_blocks

    check_python_blocks("docs/litellm.md")
