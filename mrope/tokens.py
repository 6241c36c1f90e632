"""Deprecated alias of :mod:`mrope.token_ids` (the token-id interface), kept so old imports keep working."""

from mrope import token_ids as _new
from mrope._deprecated import alias_module

alias_module(__name__, _new)
