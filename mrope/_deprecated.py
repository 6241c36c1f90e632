"""Warning aliases for public paths that moved: one helper, so every old path warns the same way.

A module that moved leaves a stub at its old path::

    from mrope import layout_omni as _new          # the new home (a static import: stub -> new)
    from mrope._deprecated import alias_module
    alias_module(__name__, _new)

Importing the old path then warns once (:class:`DeprecationWarning`, naming the new path) and yields the
new module object itself, so ``mrope.old is mrope.new`` and monkeypatching either patches both.

A name that moved out of a module that stays gets :func:`moved_names`, which returns a module
``__getattr__`` (PEP 562); the module that owns the new home installs it, so the old module imports
nothing above it.

A call form that changed (an argument that moved or became redundant) keeps working through the new
function, which calls :func:`warn_signature` when it sees the old form.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that the public path ``old`` is now ``new`` (``DeprecationWarning``)."""
    warnings.warn(
        f"{old} has moved to {new}; the old path is a deprecated alias and will be removed in a later release",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def warn_signature(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that a public call form ``old`` is now ``new`` (``DeprecationWarning``): the old form still
    works, through an alias that converts it."""
    warnings.warn(
        f"{old} is deprecated; call {new} (the old form still works and will be removed in a later release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def alias_module(old_name: str, new_module: types.ModuleType) -> None:
    """Make the module being imported as ``old_name`` an alias of ``new_module``, with a warning."""
    warn_moved(old_name, new_module.__name__, stacklevel=4)
    sys.modules[old_name] = new_module


def moved_names(module_name: str, moved: Mapping[str, tuple[Any, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that left ``module_name``: ``moved[name] = (value, new_path)``.

    Reading ``module_name.name`` warns and returns ``value``; any other missing name is the usual
    ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name in moved:
            value, new_path = moved[name]
            warn_moved(f"{module_name}.{name}", new_path)
            return value
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["alias_module", "moved_names", "warn_moved", "warn_signature"]
