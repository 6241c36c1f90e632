"""``python -m mrope`` and the ``mrope`` command: the command line (:mod:`mrope._cli`), or one line that
names the extra to install when its packages are missing."""

from __future__ import annotations

import sys

from mrope._extras import MissingExtra


def main() -> int:
    """Run the command line on ``sys.argv``; its exit code (1 when the command's extra is missing)."""
    try:
        from mrope._cli import main as run
    except MissingExtra as exc:
        print(f"mrope: error: {exc}", file=sys.stderr)
        return 1
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
