"""Deprecated alias of :mod:`mrope.layout.canvas` (the canvas engine), kept so old imports keep working."""

from mrope._deprecated import alias_module
from mrope.layout import canvas as _new

alias_module(__name__, _new)
