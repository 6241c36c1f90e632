"""Pruned vision tokens: the unpruned layout's columns that ``keep=`` masks keep, selected into a Positions.

A prompt whose :class:`~mrope.Image` / :class:`~mrope.Video` segments carry ``keep=`` masks is laid out
unpruned first (by the rules' own engine, untouched), then the columns of the dropped vision tokens are
taken out. So every kept vision token keeps its unpruned coordinates and every text token (wrappers,
per-frame timestamps, the text after) its unpruned position, whatever the engine; ``input_ids`` lose the
dropped placeholders, spans shrink (a span left empty goes), and ``delta`` keeps decoding where the
unpruned prompt's decoding starts. Unmasked prompts never come here (see docs/pruning.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from mrope._errors import LayoutError
from mrope._positions import Positions, Span
from mrope._segments import Image, Segment, Video

VISION_KINDS = frozenset(("image", "video", "thumbnail"))
"""The span kinds a ``keep=`` mask covers (a segment's language-model vision tokens, newline columns of
the ``row_newline`` rule included); wrappers, timestamps and audio are never pruned."""

_MASKED = (Image, Video)


def segment_masks(segments: Sequence[Segment]) -> dict[int, np.ndarray]:
    """Each ``keep=`` mask by the index of its segment (empty when nothing is pruned). The engines plan
    masked segments as they plan unmasked ones: a mask changes no coordinate, only which columns stay."""
    return {i: s.keep for i, s in enumerate(segments) if type(s) in _MASKED and s.keep is not None}


def kept_columns(full: Positions, masks: dict[int, np.ndarray], segments: Sequence[Segment]) -> np.ndarray:
    """bool ``[T]`` over the unpruned prompt: False at the vision tokens the masks drop.

    A mask covers its segment's vision spans in prompt order; a mask of the wrong length is a
    :class:`~mrope.LayoutError` naming the segment, the expected and the given length."""
    cols = np.ones(full.num_tokens, dtype=bool)
    spans: dict[int, list[Span]] = {i: [] for i in masks}
    for span in full.spans:
        if span.kind in VISION_KINDS and span.index in spans:
            spans[span.index].append(span)
    for i, mask in masks.items():
        own = spans[i]
        need = sum(s.stop - s.start for s in own)
        if need != len(mask):
            raise LayoutError(
                f"{type(segments[i]).__name__} (segment {i}) keep has {len(mask)} entries; the segment has "
                f"{need} language-model vision tokens under the {full.rules.name!r} rules (expected {need}, "
                f"got {len(mask)})"
            )
        at = 0
        for s in own:
            n = s.stop - s.start
            cols[s.start : s.stop] = mask[at : at + n]
            at += n
    return cols


def select_columns(full: Positions, cols: np.ndarray) -> Positions:
    """``full`` with only the columns ``cols`` keeps: ids, input_ids and spans follow, the grids (the
    vision tower still sees every patch), audio counts and decode-time positions do not change, and
    ``delta`` grows by the dropped count, so decode token ``T_kept + k`` gets the unpruned prompt's
    ``T + k + delta`` (rules that generate images keep theirs: they decode at ``generation_ids``)."""
    dropped = int(cols.size - np.count_nonzero(cols))
    before = np.concatenate([[0], np.cumsum(cols)]).tolist()  # kept columns before each index
    spans = tuple(
        s._replace(start=before[s.start], stop=before[s.stop])
        for s in full.spans
        if before[s.stop] > before[s.start] or s.stop == s.start
    )
    # rules that generate images decode at their generation_ids (delta 0 by convention), others at i + delta
    delta = full.delta if full.rules.generates_images else full.delta + dropped
    return replace(
        full,
        ids=np.ascontiguousarray(full.ids[:, cols]),
        delta=float(delta) if full.ids.dtype.kind == "f" else int(delta),
        spans=spans,
        input_ids=full.input_ids[cols],
    )


def pruned_positions(full: Positions, masks: dict[int, np.ndarray], segments: Sequence[Segment]) -> Positions:
    """The pruned prompt's :class:`~mrope.Positions` from the unpruned one and the masks by segment."""
    return select_columns(full, kept_columns(full, masks, segments))


__all__ = ["VISION_KINDS", "kept_columns", "pruned_positions", "select_columns", "segment_masks"]
