"""``python -m mrope``: the command line (see :mod:`mrope._cli`)."""

from mrope._cli import main

raise SystemExit(main())
