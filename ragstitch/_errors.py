"""How offending values are shown in error messages: their repr, cut short, and their type."""

from __future__ import annotations

__all__ = ["describe"]

_MAX = 60


def describe(value: object) -> str:
    """`'abc' (str)`: a short repr of `value` and its type name, for error messages."""
    text = repr(value)
    if len(text) > _MAX:
        text = text[: _MAX - 3] + "..."
    return f"{text} ({type(value).__name__})"
