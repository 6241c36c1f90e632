"""Deprecated alias of :mod:`mrope.media.detect`: ``mrope.vision.detect`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import detect as _new

alias_module(__name__, _new)
