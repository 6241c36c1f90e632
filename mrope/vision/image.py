"""Deprecated alias of :mod:`mrope.media.image`: ``mrope.vision.image`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import image as _new

alias_module(__name__, _new)
