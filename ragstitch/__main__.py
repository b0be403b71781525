"""`python -m ragstitch`: the same as the `ragstitch` command."""

import sys

from ._cli import main

sys.exit(main())
