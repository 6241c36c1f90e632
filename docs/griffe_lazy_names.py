"""Griffe extension for the API page: the names that ``mrope`` loads lazily are documented at ``mrope.NAME``.

``mrope/__init__.py`` maps a few public names (``apply_mrope``, ``from_pretrained``, ...) to the module that
defines them in its ``_LAZY`` table and imports them on first use, so that ``import mrope`` loads no torch.
Static analysis sees no such member of ``mrope``; this extension adds each one as an alias of its
definition, read from that same table, so the API page names only top-level paths.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class LazyNames(griffe.Extension):
    """Add ``mrope.NAME`` aliases for the entries of ``mrope._LAZY``."""

    def on_module_members(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if mod.path != "mrope" or "_LAZY" not in mod.members:
            return
        table = ast.literal_eval(str(mod.members["_LAZY"].value))
        for name, module in table.items():
            if name not in mod.members:
                mod.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=mod))
