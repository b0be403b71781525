"""What to install for a feature that needs an optional extra, said the same way everywhere.

The distribution is not on a package index yet, so a hint names both ways: the published name
(``pip install 'streamstop[server]'``) and the one that works today, from a clone of the
repository (``pip install -e '.[server]'``). Only the standard library: the CLI, the server and
the integrations import this before they know what is installed.
"""

from __future__ import annotations

__all__ = ["install_hint", "missing_extra"]


def install_hint(*extras: str) -> str:
    """The install commands for ``extras``, published and from a clone.

    >>> print(install_hint("server", "metrics"))
    pip install 'streamstop[server,metrics]' (from a clone: pip install -e '.[server,metrics]')
    """
    names = ",".join(extras)
    return f"pip install 'streamstop[{names}]' (from a clone: pip install -e '.[{names}]')"


def missing_extra(feature: str, packages: str, extra: str) -> str:
    """The message for ``feature`` when ``packages`` (of ``extra``) cannot be imported:
    ``ragstitch.llamaindex needs llama-index-core, from the llamaindex extra: pip install ...``.
    """
    return f"{feature} needs {packages}, from the {extra} extra: {install_hint(extra)}"
