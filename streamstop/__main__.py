"""`python -m streamstop`: the same as the `streamstop` command."""

from ._cli import main

raise SystemExit(main())
