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
order, ``-p no:randomly`` keeps the file's), and Hypothesis is derandomized under CI. With
``-n 4`` (pytest-xdist, ``--dist loadgroup``) it runs in 4 processes; the tests of one
``xdist_group`` run in one worker, one at a time: the load tests (``"load"``: many
streams or half-open connections at once, each under its own timeouts) are grouped so that no
two of them share a moment and push each other past their timeouts.

The tests of the benchmark scripts need the ``benchmarks`` extra (the peers, the plotting);
without it, as after the README's test command (the ``test`` extra), they are skipped, saying
what to install. Under CI they are never skipped: CI installs ``dev``, and a missing package is
a failure there.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

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


# What the benchmark scripts import beyond the test extra, and the tests that run them.
BENCHMARK_PACKAGES = ("matplotlib", "ahocorasick", "ahocorasick_rs")
_TESTS = Path(__file__).resolve().parent
BENCHMARK_TESTS = (_TESTS / "benchmarks", _TESTS / "streamstop" / "test_resources_script.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [name for name in BENCHMARK_PACKAGES if importlib.util.find_spec(name) is None]
    if not missing or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(
        reason=f"needs {', '.join(missing)}, from the benchmarks extra: "
        "pip install -e '.[benchmarks]'"
    )
    for item in items:
        if any(item.path == where or where in item.path.parents for where in BENCHMARK_TESTS):
            item.add_marker(skip)
