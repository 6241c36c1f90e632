"""Deprecated alias of :mod:`mrope.media.tiling`: ``mrope.vision.tiling`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import tiling as _new

alias_module(__name__, _new)
