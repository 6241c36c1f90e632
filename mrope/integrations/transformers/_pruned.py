"""Run a transformers M-RoPE model with its video tokens pruned: features cut after the vision tower.

:func:`pruned_video_inputs` runs the model's own vision tower on every video patch, keeps the features
that ``video_keep`` masks keep (given, or computed from the features by a callable such as a retention
rule), and builds the pruned prompt with mrope (``Video(..., keep=mask)``: the dropped placeholders
leave ``input_ids``, every kept token keeps its unpruned position). The model takes the result as it is:
``model(**inputs)`` scatters the kept features into the kept placeholders (``mm_encoder_outputs``, the
precomputed encoder outputs transformers 5.x forwards take) at mrope's ``position_ids``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from mrope._builder import build_batch
from mrope._errors import LayoutError, PatchError
from mrope._segments import Segment, Video
from mrope.integrations.transformers._inputs import model_inputs
from mrope.integrations.transformers._patching import model_rules

MaskRule = Callable[[Sequence[torch.Tensor], Sequence[tuple[int, int, int]]], Sequence[Any]]
"""A callable that picks the masks from the features: ``rule(features, llm_grids) -> masks``, with
``features[i]`` the ``[T' * H' * W', D]`` features of video ``i`` (``t`` outermost, ``w`` fastest) and
``llm_grids[i]`` its ``(T', H', W')``; one bool mask per video."""


def _encoder(model: torch.nn.Module) -> torch.nn.Module:
    owner = next((m for m in model.modules() if hasattr(type(m), "get_video_features")), None)
    if owner is None:
        raise PatchError(f"{type(model).__name__} has no get_video_features: it takes no videos")
    return owner


def _select(value: Any, masks: list[torch.Tensor]) -> Any:
    """Per-video features (a tuple of ``[n_i, D]``) with only the kept rows."""
    return tuple(f[m.to(f.device)] for f, m in zip(value, masks, strict=True))


def pruned_video_inputs(
    model: torch.nn.Module,
    samples: Sequence[Sequence[Segment]],
    *,
    pixel_values_videos: torch.Tensor,
    video_keep: Sequence[Any] | MaskRule,
    pixel_values: torch.Tensor | None = None,
    tokenizer: Any = None,
    padding_side: str = "left",
    convention: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``model(...)`` / ``model.generate(...)`` on ``samples`` with their videos'
    tokens pruned after the vision tower.

    Args:
        model: a transformers M-RoPE model (patched by :func:`~mrope.integrations.transformers.patch` or
            not: the positions come from mrope either way).
        samples: the batch's segment lists, unpruned (their ``Video`` segments in the order of
            ``pixel_values_videos``).
        pixel_values_videos: the processor's video patches of every video of the batch.
        video_keep: one bool mask per video (over its language-model tokens, ``t`` outermost, ``w``
            fastest), or a :data:`MaskRule` that computes them from the features.
        pixel_values: the images' patches, when the samples hold images (encoded, not pruned).
        tokenizer, padding_side: as :func:`mrope.build_batch` takes them.
        convention: the rules' convention (``None``: the model's default, as :func:`patch` uses).

    Returns:
        ``input_ids``, ``attention_mask``, ``position_ids`` of the pruned batch, the grids, and
        ``mm_encoder_outputs`` (the image features and the kept video features).
    """
    rules = model_rules(model, convention)
    owner = _encoder(model)
    videos = [
        (r, i) for r, sample in enumerate(samples) for i, seg in enumerate(sample) if type(seg) is Video
    ]
    unpruned = model_inputs(build_batch(samples, rules=rules, tokenizer=tokenizer, padding_side=padding_side))
    grids = unpruned.get("video_grid_thw")
    if grids is None or len(grids) != len(videos):
        raise LayoutError(f"pruned_video_inputs needs the samples' videos; got {len(videos)} Video segments")
    with torch.no_grad():
        encoded = owner.get_video_features(pixel_values_videos, grids, return_dict=True)
    features = list(encoded.pooler_output)
    merge, temporal = rules.merge_size, rules.temporal_merge_size
    llm_grids = [(int(t) // temporal, int(h) // merge, int(w) // merge) for t, h, w in grids.tolist()]
    masks = video_keep(features, llm_grids) if callable(video_keep) else video_keep
    if len(masks) != len(videos):
        raise LayoutError(f"video_keep has {len(masks)} masks for {len(videos)} videos")
    bool_masks = [torch.as_tensor(np.asarray(m.cpu() if hasattr(m, "cpu") else m)) for m in masks]
    for k, (mask, feats) in enumerate(zip(bool_masks, features, strict=True)):
        if mask.dtype != torch.bool or mask.shape != (feats.shape[0],):
            raise LayoutError(
                f"video_keep[{k}] must be a bool mask of the video's {feats.shape[0]} features; got dtype "
                f"{mask.dtype}, shape {tuple(mask.shape)}"
            )
    pruned = [list(sample) for sample in samples]
    for (r, i), mask in zip(videos, bool_masks, strict=True):
        pruned[r][i] = replace(pruned[r][i], keep=mask.numpy())
    out: dict[str, Any] = model_inputs(
        build_batch(pruned, rules=rules, tokenizer=tokenizer, padding_side=padding_side), model
    )
    encoded.pooler_output = _select(encoded.pooler_output, bool_masks)
    if getattr(encoded, "deepstack_features", None) is not None:  # Qwen3-VL: each deepstack layer too
        encoded.deepstack_features = [_select(layer, bool_masks) for layer in encoded.deepstack_features]
    outputs = {"video": encoded}
    if pixel_values is not None:
        with torch.no_grad():
            outputs["image"] = owner.get_image_features(pixel_values, out["image_grid_thw"], return_dict=True)
    out["mm_encoder_outputs"] = outputs
    return out


__all__ = ["MaskRule", "pruned_video_inputs"]
