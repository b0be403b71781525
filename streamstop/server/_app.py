"""The app factory of a multi-worker server: each worker process builds its own app.

``streamstop serve --workers N`` (and ``proxy``) resolve their settings once, in the parent,
put them in the environment as JSON and start N uvicorn workers with
``streamstop.server._app:create_app`` as a factory; each worker builds the same app from the
same settings, with its own connections, upstream client and metrics.
"""

from __future__ import annotations

import json
import os

from ._asgi import ASGIApp
from ._commands import CONFIG_ENV, build_app
from ._logging import install_logging

__all__ = ["create_app"]


def create_app() -> ASGIApp:
    """The app described by the settings in ``$_STREAMSTOP_WORKER_SETTINGS``."""
    raw = os.environ.get(CONFIG_ENV)
    if raw is None:
        raise RuntimeError(
            f"create_app() builds the app of a 'streamstop serve/proxy --workers N' worker "
            f"from ${CONFIG_ENV}, which is not set: run 'streamstop serve' or 'streamstop proxy'"
        )
    settings = json.loads(raw)
    app = build_app(settings)
    install_logging(access_log=settings["access_log"], interval=settings["log_interval"])
    return app
