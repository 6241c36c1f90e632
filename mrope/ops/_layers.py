"""layer_cos_sin: each decoder layer's cos and sin from the named position set it reads (NoPE included).

A model with a per-layer choice of positions (:class:`mrope.LayerSets`: Circle-RoPE's AGE alternates
two sets; a model whose global layers have no rotary reads ``"nope"`` there) computes each set's table
once; the layers share them. The op takes tensors by name and never the builder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mrope._errors import ApplyError
from mrope._layer_sets import NOPE
from mrope._spec import RopeSpec
from mrope._video_rope import VideoRope
from mrope.ops._dispatch import cos_sin
from mrope.ops._pairs import PairTable


def layer_cos_sin(
    positions: Mapping[str, torch.Tensor],
    layers: Sequence[str],
    spec: RopeSpec | VideoRope | PairTable,
    **options: Any,
) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """cos and sin of every layer: layer ``i`` gets :func:`mrope.ops.cos_sin` of
    ``positions[layers[i]]``, or for ``"nope"`` cos 1 and sin 0 in the same shape.

    Args:
        positions: set name -> positions tensor (``[A, T]`` etc., as :func:`cos_sin` takes them; every
            set of the same tokens). layers: the set name of each layer
            (``LayerSets.for_layers(num_layers)``). spec: the rotary spec or pair table.
        options: ``layout``, ``dtype``, ``angle_precision``, as :func:`cos_sin` takes them.

    Returns:
        One ``(cos, sin)`` per layer, each as :func:`cos_sin` returns it; layers of one set share the
        same tensors.
    """
    if isinstance(layers, str) or not len(layers):
        raise ApplyError(f"layers must be a non-empty sequence of set names; got {layers!r}")
    missing = sorted({name for name in layers if name != NOPE and name not in positions}, key=str)
    if missing or not positions:
        raise ApplyError(
            f"layers read position sets {missing} that positions does not have ({list(positions)})"
        )
    tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in layers:
        if name not in tables and name != NOPE:
            tables[name] = cos_sin(positions[name], spec, **options)
    if NOPE in layers:
        cos, _ = next(iter(tables.values()), None) or cos_sin(next(iter(positions.values())), spec, **options)
        tables[NOPE] = (torch.ones_like(cos), torch.zeros_like(cos))
    return tuple(tables[name] for name in layers)


__all__ = ["layer_cos_sin"]
