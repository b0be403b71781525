"""The ``json_codec`` fixture: a test module that uses it runs every test once per JSON codec
installed (``streamstop._json``: the standard library, and orjson with the ``fast`` extra).

Module-scoped, so Hypothesis tests may use it too. Import it into a test module and mark the
module: ``pytestmark = pytest.mark.usefixtures("json_codec")``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamstop import _json


@pytest.fixture(scope="module", params=_json.available())
def json_codec(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = _json.use(request.param)
    try:
        yield str(request.param)
    finally:
        _json.use(previous)
