"""The token-id reader's one switch between strict and lenient reading of inputs a model reads anyway.

The library reads token ids strictly: an odd stream (a grid no run uses, a placeholder outside its block)
is a :class:`~mrope.TokenError`. A patched transformers model must accept what the unpatched model
accepts, so :func:`mrope.integrations.transformers.patch` reads inside :func:`lenient_reading`: where the
strict reader refuses an input whose reading by the model is known, the reader reads it as the model does
and :func:`tolerate` notes what the model silently did (the patch turns each note into one
:class:`~mrope.MRopeWarning`). Every lenient case of the reader goes through :func:`tolerate`, so
strictness has one source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from mrope._errors import TokenError

_NOTES: ContextVar[list[str] | None] = ContextVar("mrope_lenient_notes", default=None)
"""The notes of the innermost :func:`lenient_reading` of this thread or task; ``None``: strict reading."""


@contextlib.contextmanager
def lenient_reading() -> Iterator[list[str]]:
    """Read token ids leniently inside the block; yields the list the block's notes go to (each once),
    in the order the reader first met them."""
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def tolerate(refusal: str, reading: str) -> None:
    """An input the strict reader refuses but the model reads as ``reading`` says.

    Args:
        refusal: the strict reader's error message (what was expected and what came).
        reading: what the model silently does with the input (the note, without row or token numbers,
            so that one kind of input gives one note).

    Raises:
        TokenError: ``refusal``, outside :func:`lenient_reading`.
    """
    notes = _NOTES.get()
    if notes is None:
        raise TokenError(refusal)
    if reading not in notes:
        notes.append(reading)


__all__ = ["lenient_reading", "tolerate"]
