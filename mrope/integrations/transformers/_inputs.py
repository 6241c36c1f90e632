"""Turn a :class:`mrope.Batch` into the keyword arguments a transformers M-RoPE model takes.

:func:`model_inputs` gives them under the names each family's ``forward`` and ``get_rope_index`` use
(:func:`named_for`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mrope._errors import PatchError

if TYPE_CHECKING:
    from mrope._positions import Positions

FORWARD_ALIASES: dict[str, tuple[str, ...]] = {
    "second_per_grid_ts": ("second_per_grid_ts", "video_second_per_grid")
}
"""mrope's input names -> the names families' ``forward`` use for them (the omni thinkers rename some)."""

CROP_SIZES: dict[str, str] = {"image_grid_thw": "target_sizes", "video_grid_thw": "target_sizes_videos"}
"""mrope's per-crop grids ``(1, h, w)`` -> the ``(h, w)`` patch sizes MiniCPM-V 4.7 takes instead."""


def named_for(fn: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``inputs`` under the names ``fn`` takes (``forward`` or ``get_rope_index``): aliases renamed, grids
    given as crop sizes where it takes those; what it does not take is left out."""
    params = inspect.signature(fn).parameters
    out = {}
    for key, value in inputs.items():
        name = next((n for n in FORWARD_ALIASES.get(key, (key,)) if n in params), None)
        if name is not None:
            out[name] = value
        elif CROP_SIZES.get(key) in params:
            if bool((value[:, 0] != 1).any()):
                raise PatchError(f"{CROP_SIZES[key]} are per-crop (h, w) sizes; got {key} rows with t != 1")
            out[CROP_SIZES[key]] = value[:, 1:]
    return out


def grids_from_crops(call: dict[str, Any]) -> None:
    """MiniCPM-V 4.7's ``target_sizes`` / ``target_sizes_videos`` ``[n, 2]`` -> mrope's ``(1, h, w)``
    grids in ``call`` (in place)."""
    for grid_name, crop_name in CROP_SIZES.items():
        sizes = call.pop(crop_name, None)
        if sizes is not None:
            sizes = torch.as_tensor(sizes).reshape(-1, 2)
            call[grid_name] = torch.cat([torch.ones_like(sizes[:, :1]), sizes], dim=1)


def model_inputs(batch: Any, model: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The keyword arguments a transformers M-RoPE model takes for a :class:`mrope.Batch`.

    Returns:
        ``input_ids`` ``[B, L]``, ``attention_mask`` ``[B, L]``, ``position_ids`` int64 ``[3, B, L]``,
        ``mm_token_type_ids`` ``[B, L]`` (0 text, 1 image, 2 video, from the batch's spans),
        ``image_grid_thw`` / ``video_grid_thw`` ``[n, 3]`` (every row's grids in row order, when there
        are any), ``second_per_grid_ts`` ``[n_videos]`` (for rules whose video time is in seconds) and
        ``images_per_sample`` ``[B]`` (rules that generate images, GLM-Image: grids to generate included).
        Add ``pixel_values`` / ``pixel_values_videos`` from the processor; pass the whole dict to
        ``forward`` or ``generate``. The decode continuation of row ``b`` after ``n_b`` valid tokens is
        ``n_b + batch.deltas[b]`` on every axis. With ``model`` given, the names are those its
        ``forward`` takes (e.g. the omni thinkers' ``video_second_per_grid``; MiniCPM-V 4.7's
        ``target_sizes`` / ``target_sizes_videos``, each crop's ``(h, w)``, in place of the grids; no
        ``mm_token_type_ids`` where it takes none).
    """
    position_ids, attention_mask, _ = batch.torch()
    out = {
        "input_ids": torch.from_numpy(batch.input_ids),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "mm_token_type_ids": torch.from_numpy(batch.mm_token_type_ids),
        **grid_inputs(batch.sequences),
    }
    return out if model is None else named_for(type(model).forward, out)


def grid_inputs(sequences: Sequence[Positions]) -> dict[str, torch.Tensor]:
    """The grid keyword arguments of sequences taken in order (a padded batch's rows, or the samples of
    one packed row): ``image_grid_thw`` and ``images_per_sample`` (rules that generate images),
    ``video_grid_thw`` and ``second_per_grid_ts`` (rules whose video time is in seconds), each only when
    there are any."""
    out: dict[str, torch.Tensor] = {}
    if not sequences:
        return out
    rules = sequences[0].rules
    image_grid = np.concatenate([seq.image_grid_thw for seq in sequences]).reshape(-1, 3)
    video_grid = np.concatenate([seq.video_grid_thw for seq in sequences]).reshape(-1, 3)
    if len(image_grid):
        out["image_grid_thw"] = torch.from_numpy(image_grid)
        if rules.generates_images:
            counts = [len(seq.image_grid_thw) for seq in sequences]
            out["images_per_sample"] = torch.tensor(counts, dtype=torch.int64)
    if len(video_grid):
        out["video_grid_thw"] = torch.from_numpy(video_grid)
        if rules.temporal == "seconds":
            seconds = np.concatenate([seq.second_per_grid_ts for seq in sequences])
            out["second_per_grid_ts"] = torch.from_numpy(seconds).to(torch.float32)
    return out


__all__ = ["CROP_SIZES", "FORWARD_ALIASES", "grid_inputs", "grids_from_crops", "model_inputs", "named_for"]
