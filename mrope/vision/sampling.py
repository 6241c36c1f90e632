"""Deprecated alias of :mod:`mrope.media.sampling`: ``mrope.vision.sampling`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import sampling as _new

alias_module(__name__, _new)
