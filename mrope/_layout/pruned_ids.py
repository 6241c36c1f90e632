"""Pruned token ids (vision placeholders dropped by ``keep`` masks) expanded to the unpruned layout and back.

An engine that already holds pruned ids (EVS, VidCom2, FastV drop placeholders) passes one mask or
``None`` per grid (``image_keep``, ``video_keep``, in grid order). Each row's valid tokens are expanded to
the unpruned prompt (every grid's full run of placeholders), the rules' own scan computes its positions,
and the kept columns are selected back: every kept token gets the position it has unpruned.

Where the tokens go: a grid (for rules that split videos into frames, ``temporal="timestamps"``, each
frame) that keeps some tokens has them as one run of placeholders, where its unpruned run was; a grid or
frame that keeps none is placed in an empty wrapper pair (the rules' ``vision_start_id`` then
``vision_end_id``, or ``video_start_id`` then ``video_end_id``, with nothing between), which the pruned
ids must keep. Rules of the counter engine read from placeholders take masks (not the canvas, omni or
sequence engines, nor GLM-Image's codes between wrappers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mrope._errors import TokenError
from mrope._layout.token_inputs import as_numpy, grid_rows_array
from mrope._rules import LayoutRules


class _Blocks:
    """One modality's blocks in order across the batch: tokens per block and each block's mask."""

    def __init__(
        self, name: str, grids: np.ndarray, masks: Sequence[Any] | None, lay: LayoutRules, video: bool
    ):
        if masks is None:
            masks = [None] * len(grids)
        if isinstance(masks, (str, bytes)) or len(masks) != len(grids):
            raise TokenError(
                f"{name} must hold one mask or None per grid: {len(grids)} grids; got {len(masks)}"
            )
        self.name = name
        self.masks: list[np.ndarray] = []
        m, newline = lay.merge_size, int(lay.row_newline)
        split = video and lay.temporal == "timestamps"
        for g, ((t, h, w), mask) in enumerate(zip(grids.tolist(), masks, strict=True)):
            frames = t // lay.temporal_merge_size if video else t
            per_frame = (h // m) * (w // m + newline)
            n = frames * per_frame
            if mask is None:
                mask = np.ones(n, dtype=bool)
            else:
                mask = as_numpy(mask, f"{name}[{g}]")
                if mask.dtype != np.bool_ or mask.shape != (n,):
                    raise TokenError(
                        f"{name}[{g}] must be a bool mask of the grid's {n} language-model tokens (grid "
                        f"{[t, h, w]}); got dtype {mask.dtype}, shape {tuple(mask.shape)}"
                    )
            if split:
                self.masks += [mask[f * per_frame : (f + 1) * per_frame] for f in range(frames)]
            else:
                self.masks.append(mask)
        self.kept = [int(np.count_nonzero(mk)) for mk in self.masks]
        self.next = 0

    def head_empty(self) -> bool:
        return self.next < len(self.masks) and self.kept[self.next] == 0

    def take(self) -> np.ndarray:
        if self.next >= len(self.masks):
            raise TokenError(
                f"the ids hold more {self.name[:5]} placeholders than the grids and {self.name} keep"
            )
        self.next += 1
        return self.masks[self.next - 1]


def _row_types(ids: np.ndarray, lay: LayoutRules) -> np.ndarray:
    """0/1/2 token types of one row from its placeholders (videos inside video wrappers when images and
    videos share one pad id, as the processors' ``mm_token_type_ids``)."""
    types = np.zeros(ids.shape[0], dtype=np.int8)
    types[ids == lay.image_pad_id] = 1
    video = ids == lay.video_pad_id
    if lay.image_pad_id == lay.video_pad_id:
        video &= np.cumsum(ids == lay.video_start_id) > np.cumsum(ids == lay.video_end_id)
    types[video] = 2
    return types


def _expand_row(
    ids: np.ndarray,
    types: np.ndarray,
    queues: dict[int, _Blocks],
    pairs: set[tuple[int, int]],
    lay: LayoutRules,
) -> tuple[list[int], list[int], list[bool]]:
    """One row's unpruned ids, types and which of them the pruned row holds."""
    out_ids: list[int] = []
    out_types: list[int] = []
    kept: list[bool] = []
    pads = {1: lay.image_pad_id, 2: lay.video_pad_id}
    n, i = len(ids), 0
    ids_l, types_l = ids.tolist(), types.tolist()
    while i < n:
        kind = types_l[i]
        if kind == 0:
            if i and (ids_l[i - 1], ids_l[i]) in pairs:  # an empty wrapper pair: a block that keeps nothing
                heads = [k for k, q in queues.items() if q.head_empty()]
                if len(heads) > 1:
                    raise TokenError(
                        f"an empty wrapper pair at valid token {i}: both the next image and the next video "
                        "keep no token, so which one it holds is ambiguous (keep one token of either)"
                    )
                if heads:
                    mask = queues[heads[0]].take()
                    out_ids += [pads[heads[0]]] * mask.size
                    out_types += [heads[0]] * mask.size
                    kept += [False] * mask.size
            out_ids.append(ids_l[i])
            out_types.append(0)
            kept.append(True)
            i += 1
            continue
        j = i
        while j < n and types_l[j] == kind:
            j += 1
        queue, left = queues[kind], j - i
        while left:
            if queue.head_empty():
                raise TokenError(
                    f"{queue.name}: a grid that keeps no token must sit in an empty wrapper pair; the "
                    f"placeholder run at valid token {i} comes first"
                )
            mask = queue.take()
            k = queue.kept[queue.next - 1]
            if k > left:
                raise TokenError(
                    f"{queue.name}: the placeholder run at valid token {i} has {left} tokens left, the next "
                    f"mask keeps {k}"
                )
            left -= k
            out_ids += [pads[kind]] * mask.size
            out_types += [kind] * mask.size
            kept += mask.tolist()
        i = j
    return out_ids, out_types, kept


Scan = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""The unpruned scan: ``(ids [B, L], attention_mask [B, L], mm_token_type_ids [B, L]) -> (positions, deltas)``."""


def pruned_rope_index(
    scan: Scan,
    input_ids: Any,
    attention_mask: Any,
    mm_token_type_ids: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    image_keep: Sequence[Any] | None,
    video_keep: Sequence[Any] | None,
    lay: LayoutRules,
    pad_position: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``[A, B, L]`` and deltas ``[B]`` of pruned ids: the unpruned prompt's at every kept token
    (pads hold ``pad_position``); a row's delta continues decoding where the unpruned row's does."""
    if (
        lay.positions_base != "counter"
        or lay.has_audio
        or lay.image_span != "placeholders"
        or lay.grid_border
    ):
        raise TokenError(
            f"image_keep / video_keep: the {lay.name!r} rules (engine {lay.positions_base!r}) do not take masks "
            "on token ids; build the pruned prompt with Image(..., keep=) / Video(..., keep=)"
        )
    ids = as_numpy(input_ids, "input_ids", ndim=2)
    b, length = ids.shape
    mask = (
        np.ones_like(ids, dtype=bool)
        if attention_mask is None
        else as_numpy(attention_mask, "attention_mask").astype(bool)
    )
    types = as_numpy(mm_token_type_ids, "mm_token_type_ids")
    if mask.shape != ids.shape or (types is not None and types.shape != ids.shape):
        raise TokenError(f"attention_mask and mm_token_type_ids must have the shape of input_ids {ids.shape}")
    queues = {
        1: _Blocks("image_keep", grid_rows_array(image_grid_thw, "image_grid_thw"), image_keep, lay, False),
        2: _Blocks("video_keep", grid_rows_array(video_grid_thw, "video_grid_thw"), video_keep, lay, True),
    }
    pairs = {(lay.vision_start_id, lay.vision_end_id), (lay.video_start_id, lay.video_end_id)}
    rows = []
    for r in range(b):
        valid = np.flatnonzero(mask[r])
        row_ids = ids[r, valid]
        row_types = _row_types(row_ids, lay) if types is None else types[r, valid]
        rows.append((valid, *_expand_row(row_ids, row_types, queues, pairs, lay)))
    for q in queues.values():
        if q.next != len(q.masks):
            raise TokenError(
                f"{q.name}: the ids place {q.next} of the {len(q.masks)} blocks the grids and masks make"
            )
    width = max((len(r[1]) for r in rows), default=0)
    full_ids = np.zeros((b, width), dtype=np.int64)
    full_types = np.zeros((b, width), dtype=np.int64)
    full_mask = np.zeros((b, width), dtype=np.int64)
    for r, (_, row_ids, row_types, _) in enumerate(rows):
        full_ids[r, : len(row_ids)], full_types[r, : len(row_ids)], full_mask[r, : len(row_ids)] = (
            row_ids,
            row_types,
            1,
        )
    positions, deltas = scan(full_ids, full_mask, full_types)
    out = np.full((positions.shape[0], b, length), pad_position, dtype=positions.dtype)
    out_deltas = deltas.copy()
    for r, (valid, row_ids, _, kept) in enumerate(rows):
        keep = np.asarray(kept, dtype=bool)
        out[:, r, valid] = positions[:, r, : len(row_ids)][:, keep]
        out_deltas[r] += keep.size - len(valid)
    return out, out_deltas


__all__ = ["Scan", "pruned_rope_index"]
