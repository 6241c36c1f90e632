"""The rows of the validation table, one function each, in table order (:data:`ROWS`).

A row is ``row(subject, quick) -> RowResult``: :mod:`~mrope.testing._rows.rotation` (relativity, pairing,
length boundaries: the model's own rotation alone), :mod:`~mrope.testing._rows.logits` (prefill = decode,
padding, short context: the whole model), :mod:`~mrope.testing._rows.sweep` (the position sweep) and
:mod:`~mrope.testing._rows.multimodal` (crop, tiles, frames: coordinates and scores). The model they run
on is a :class:`~mrope.testing._rows.subject.Subject`.
"""

from __future__ import annotations

from collections.abc import Callable

from mrope.testing._report import RowResult
from mrope.testing._rows import logits, multimodal, rotation, sweep
from mrope.testing._rows.subject import Subject

Row = Callable[[Subject, bool], RowResult]

ROWS: dict[str, Row] = {
    "relativity": rotation.relativity,
    "prefill_decode": logits.prefill_decode,
    "padding": logits.padding,
    "pairing": rotation.pairing,
    "length_boundaries": rotation.length_boundaries,
    "position_sweep": sweep.position_sweep,
    "short_context": logits.short_context,
    "crop": multimodal.crop,
    "tiles": multimodal.tiles,
    "frames": multimodal.frames,
}
"""Row name -> its function, in the seed table's order (relativity, prefill-decode, batch padding,
pairing, length boundaries, position sweep, short context, the multimodal rows)."""

__all__ = ["ROWS", "Row"]
