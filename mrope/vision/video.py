"""Deprecated alias of :mod:`mrope.media.video`: ``mrope.vision.video`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import video as _new

alias_module(__name__, _new)
