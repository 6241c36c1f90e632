"""Deprecated alias of :mod:`mrope.media.resize`: ``mrope.vision.resize`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import resize as _new

alias_module(__name__, _new)
