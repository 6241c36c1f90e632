"""Deprecated alias of :mod:`mrope.testing.tiny` (tiny random-weight models are test support)."""

from mrope._deprecated import alias_module
from mrope.testing import tiny as _new

alias_module(__name__, _new)
