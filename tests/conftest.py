"""Shared fixtures, and how each kind of test runs.

- The library's own async tests (streams, the middleware driven by hand, ragstitch's assembly):
  ``pytest.mark.anyio`` (anyio's pytest plugin), on asyncio AND trio through ``anyio_backend``
  below.
- The integration tests, asyncio only because uvicorn, httpx and the official openai client
  are (tests/server/test_serve.py, test_proxy.py, test_proxy_faults.py): ``pytest.mark.asyncio``
  (pytest-asyncio), on a loop per test. The live servers they talk to are session fixtures in
  tests/server/conftest.py, each uvicorn on its own loop in its own thread, so no test's loop
  holds them.
- Everything else is sync.

The suite runs in random order (pytest-randomly; ``-p randomly --randomly-seed=N`` replays an
order, ``-p no:randomly`` keeps the file's), and Hypothesis is derandomized under CI.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# CI replays the same examples every run (a red CI must be reproducible); locally hypothesis
# explores. Both skip deadlines: these machines are noisy and timing is not what we test.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
