"""Shared fixtures: every async test runs on asyncio and on trio."""

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
