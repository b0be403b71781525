"""What the API tests of every package share."""

from __future__ import annotations

import inspect
from types import ModuleType


def public_definitions(module: ModuleType) -> set[str]:
    """The public classes and functions that ``module`` defines itself (not those it imports)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    }


def public_members(cls: type) -> set[str]:
    """The public attributes, methods and properties of ``cls``, inherited ones included."""
    return {name for name in dir(cls) if not name.startswith("_")}
