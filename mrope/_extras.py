"""The import check of mrope's optional parts: a missing package is an ImportError naming the extra.

``pip install mrope`` installs the numpy core; each other part comes with an extra (pyproject.toml's
``[project.optional-dependencies]``): ``torch``, ``triton``, ``media``, ``urls``, ``pipeline``, ``cli``,
``service``, ``all``. A part calls :func:`require` before it imports its packages, so what a user sees
without them says what to install instead of which module of which package failed to load.
"""

from __future__ import annotations

import importlib


class MissingExtra(ImportError):
    """A package an optional part needs is not installed; the message names the extra that installs it."""


def require(part: str, extra: str, *modules: str) -> None:
    """Import ``modules`` (top-level import names, e.g. ``"PIL"``) or raise :class:`MissingExtra` (an
    ``ImportError``) naming the extra that installs them.

    Args:
        part: what needs them, as a user names it (``"mrope.media"``, ``"the mrope command"``).
        extra: the extra of pyproject.toml that installs them (``"media"``).
    """
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise MissingExtra(
            f"{part} needs {', '.join(missing)}, which mrope's {extra!r} extra installs: "
            f'pip install "mrope[{extra}]"',
            name=missing[0],
        )


__all__ = ["MissingExtra", "require"]
