"""``python -m mrope``: the command line (see :mod:`mrope.cli`)."""

from mrope.cli import main

raise SystemExit(main())
