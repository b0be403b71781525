"""A feature whose extra is not installed says what to install, published and from a clone."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# The packages an extra brings, blocked at import; then the feature, and what it must say.
CASES = {
    "streamstop.langchain": (
        ("langchain_core",),
        "import streamstop.langchain",
        "streamstop.langchain needs langchain-core, from the langchain extra: "
        "pip install 'streamstop[langchain]' (from a clone: pip install -e '.[langchain]')",
    ),
    "ragstitch.langchain": (
        ("langchain_core",),
        "import ragstitch.langchain",
        "ragstitch.langchain needs langchain-core, from the langchain extra: "
        "pip install 'streamstop[langchain]' (from a clone: pip install -e '.[langchain]')",
    ),
    "ragstitch.llamaindex": (
        ("llama_index",),
        "import ragstitch.llamaindex",
        "ragstitch.llamaindex needs llama-index-core, from the llamaindex extra: "
        "pip install 'streamstop[llamaindex]' (from a clone: pip install -e '.[llamaindex]')",
    ),
    "an OpenAI encoding": (
        ("bpe_openai", "tiktoken"),
        "import ragstitch; ragstitch.load_tokenizer('o200k_base')",
        "an encoding needs the tokenizers extra: pip install 'streamstop[tokenizers]' "
        "(from a clone: pip install -e '.[tokenizers]')",
    ),
    "a tokenizer.json": (
        ("tokenizers",),
        "import ragstitch; ragstitch.load_tokenizer('tokenizer.json')",
        "which needs the 'tokenizers' package, from the tokenizers extra: pip install "
        "'streamstop[tokenizers]' (from a clone: pip install -e '.[tokenizers]')",
    ),
    "streamstop serve": (
        ("uvicorn",),
        "from streamstop._cli import main; sys.exit(main(['serve', '--port', '0']))",
        "streamstop serve: needs uvicorn, from the server extra: pip install "
        "'streamstop[server]' (from a clone: pip install -e '.[server]')",
    ),
}

BLOCKER = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}")

sys.meta_path.insert(0, Block())
"""


@pytest.mark.parametrize("case", CASES)
def test_a_missing_extra_names_the_install_command(case: str) -> None:
    blocked, code, message = CASES[case]
    script = f"BLOCKED = {set(blocked)!r}\n" + textwrap.dedent(BLOCKER) + code
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert message in result.stderr
