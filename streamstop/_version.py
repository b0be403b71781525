"""The version of the ``streamstop`` distribution, which ships both packages.

The one source of it: the build reads it here (``[tool.hatch.version]`` in pyproject.toml),
and ``streamstop.__version__``, ``ragstitch.__version__`` and both commands' ``--version``
import it. Written by hand at a release, with its CHANGELOG.md entry.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
