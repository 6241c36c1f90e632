"""Deprecated alias of :mod:`mrope.layout.omni` (the omni engine), kept so old imports keep working."""

from mrope._deprecated import alias_module
from mrope.layout import omni as _new

alias_module(__name__, _new)
