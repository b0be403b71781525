"""The public surface of streamstop.server: exports, private modules' ``__all__``, signatures."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

import streamstop.chat
import streamstop.server
from streamstop.chat import ChunkStream, SyncChunkStream
from streamstop.server import EchoModel, ProxyApp, StopMiddleware

from ..public_api import public_definitions

PRIVATE_MODULES = [
    "_asgi",
    "_commands",
    "_echo",
    "_echo_families",
    "_echo_responses_gemini",
    "_limits",
    "_middleware",
    "_proxy",
    "_record",
    "_request",
]
# The operations layer: probes and metrics, client keys, deadlines, logging, the worker factory.
PRIVATE_MODULES += ["_app", "_auth", "_deadline", "_logging", "_observe", "_protocol"]


# The server's entry points and what an app around them needs (issue 24: pinned, so that
# nothing becomes public by accident).
SERVER_NAMES = {"StopMiddleware", "ProxyApp", "EchoModel", "echo_pieces", "RequestLimits"}
SERVER_NAMES |= {"DEFAULT_PATHS", "BodyDeadline", "ClientKeys", "Observed"}
SERVER_NAMES |= {"ASGIApp", "Message", "Receive", "Scope", "Send"}
CHAT_NAMES = {"ChunkFilter", "ChunkStream", "SSEFilter", "SyncChunkStream", "truncate_response"}


def test_package_exports() -> None:
    assert set(streamstop.server.__all__) == SERVER_NAMES
    assert set(streamstop.chat.__all__) == CHAT_NAMES
    for name in streamstop.chat.__all__:
        assert hasattr(streamstop.chat, name), name
    for name in streamstop.server.__all__:
        assert hasattr(streamstop.server, name), name


@pytest.mark.parametrize("module_name", PRIVATE_MODULES)
def test_module_all_lists_what_it_defines(module_name: str) -> None:
    module = importlib.import_module(f"streamstop.server.{module_name}")
    assert public_definitions(module) <= set(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module_name", PRIVATE_MODULES)
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(f"streamstop.server.{module_name}")
    assert doctest.testmod(module).failed == 0


def test_options_are_keyword_only() -> None:
    for cls, first in [
        (StopMiddleware, "app"),
        (ProxyApp, "upstream"),
        (ChunkStream, "source"),
        (SyncChunkStream, "source"),
    ]:
        parameters = list(inspect.signature(cls).parameters.values())
        assert parameters[0].name == first
        options = [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert len(options) >= 2, cls
    middleware = inspect.signature(StopMiddleware).parameters
    assert middleware["forward_stop"].default is False
    assert middleware["include_stop"].default is False
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        for p in inspect.signature(EchoModel).parameters.values()
    )


def test_echo_model_rejects_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="-1"):
        EchoModel(delay=-1)
