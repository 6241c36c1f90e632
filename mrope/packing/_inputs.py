"""Packed rows -> the torch keyword arguments of a transformers forward (no attention mask, no cache).

The names are those the model's ``forward`` takes (:func:`mrope.integrations.transformers._inputs.named_for`),
the grids those of :func:`~mrope.integrations.transformers._inputs.grid_inputs`; a model that cannot keep
packed samples apart is refused first (:func:`mrope.packing._support.check_packed_input`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mrope._positions import Positions
from mrope.integrations.transformers._inputs import grid_inputs, named_for
from mrope.models import family_for_model_type
from mrope.packing._support import check_packed_input


def model_packed_input(model: torch.nn.Module | None, packed_input: str, family: str) -> tuple[str, str]:
    """``(packed_input, family name)`` of ``model`` (read from its config's model_type), else the given ones."""
    config = getattr(model, "config", None)
    found = family_for_model_type(getattr(config, "model_type", "") or "") if config is not None else None
    return (found.packed_input, found.name) if found is not None else (packed_input, family or "this model")


def seq_len_inputs(cu_seqlens: np.ndarray, max_seqlen: int) -> dict[str, Any]:
    """``cu_seq_lens_q/k`` (int32) and ``max_length_q/k`` (int), as flash-attention's varlen path takes them."""
    cu = torch.from_numpy(np.ascontiguousarray(cu_seqlens, dtype=np.int32))
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": max_seqlen, "max_length_k": max_seqlen}


def packed_inputs(
    input_ids: np.ndarray,
    position_ids: np.ndarray,
    mm_token_type_ids: np.ndarray,
    cu_seqlens: np.ndarray,
    max_seqlen: int,
    sequences: Sequence[Positions],
    model: torch.nn.Module | None = None,
    *,
    seq_lens: bool = True,
    packed_input: str = "text-row",
    family: str = "",
) -> dict[str, Any]:
    """The forward keyword arguments of packed rows.

    Returns:
        ``input_ids [R, L]``, ``position_ids [1 + A, R, L]`` (the text row first: transformers splits
        it off and keeps the samples apart by it, when no attention mask and no cache are given),
        ``mm_token_type_ids [R, L]``, the samples' grids in row order (``image_grid_thw``,
        ``video_grid_thw``, ``second_per_grid_ts``, under the names ``model.forward`` takes when a model
        is given), and with ``seq_lens`` ``cu_seq_lens_q/k`` and ``max_length_q/k`` (flash-attention's
        varlen path), and ``use_cache=False`` (transformers reads the boundaries from the text row only
        without a cache: ``masking_utils._preprocess_mask_arguments``). Add the pixel values in row order.

    ``seq_lens=False`` leaves the boundaries to the text row (flash-attention reads them from the
    position ids too): needed with pixel values under flash-attention, where transformers 5.24 hands
    the forward's keyword arguments to the vision tower, whose attention passes its own
    ``cu_seq_lens_q`` beside them (models/qwen2_vl/modeling_qwen2_vl.py:383-397).

    Raises:
        PackingError: the model (or the family packed for) cannot keep packed samples apart.
    """
    check_packed_input(*model_packed_input(model, packed_input, family))
    out: dict[str, Any] = {
        "input_ids": torch.from_numpy(input_ids),
        "position_ids": torch.from_numpy(np.ascontiguousarray(position_ids)),
        "mm_token_type_ids": torch.from_numpy(mm_token_type_ids),
        **grid_inputs(sequences),
    }
    if model is not None:
        out = named_for(type(model).forward, out)
    if seq_lens:
        out.update(seq_len_inputs(cu_seqlens, max_seqlen))
    out["use_cache"] = False  # with a cache, transformers builds no packed-sequence mask (it would leak)
    return out


__all__ = ["model_packed_input", "packed_inputs", "seq_len_inputs"]
