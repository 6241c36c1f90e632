"""Deprecated alias of :mod:`mrope.media.audio`: ``mrope.vision.audio`` is that module itself."""

from mrope._deprecated import alias_module
from mrope.media import audio as _new

alias_module(__name__, _new)
