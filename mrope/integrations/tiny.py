"""Tiny random-weight transformers models of a family, built from configs (no hub, no download).

:func:`tiny_model` builds the family's own transformers class (``AutoModelForImageTextToText``) from its
config class with a tiny text model (hidden 64, 2 layers), a one-block vision tower and the real
vocabulary (so the real special token ids work). The text rotary keeps the released layout: the released
``mrope_section`` divided by a common factor, the released theta, pairing and partial rotary factor, and
a head_dim scaled by the same factor. For tests, examples and benchmarks of code that puts mrope inside a
model; the weights mean nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mrope.errors import MRopeError, PatchError

TEXT_HIDDEN = 64
"""Hidden size of the tiny text model."""

_VISION_SHRINK: dict[str, Any] = {
    "depth": 1,
    "embed_dim": 32,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": TEXT_HIDDEN,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0],
    "fullatt_block_indexes": [0],
}
"""Vision-config fields shrunk when the family's vision config has them."""


def _tiny_rotary(spec: Any) -> tuple[int, tuple[int, ...], float]:
    """``(head_dim, mrope_section, partial_rotary_factor)``: the released layout scaled down to a head of
    at least 32 channels."""
    section = tuple(int(s) for s in spec.mrope_section)
    common = math.gcd(*section)
    factor = max(
        f
        for f in range(1, common + 1)
        if common % f == 0 and spec.head_dim % f == 0 and (f == 1 or spec.head_dim // f >= 32)
    )
    return spec.head_dim // factor, tuple(s // factor for s in section), spec.rotary_dim / spec.head_dim


def tiny_config(model: Any, *, layers: int = 2) -> Any:
    """The transformers config of a tiny model of ``model`` (a family name, model_type or ModelFamily)."""
    from transformers import AutoConfig

    from mrope.models import get_family

    try:
        family = get_family(model)
    except MRopeError as exc:
        raise PatchError(f"tiny_config: {exc}") from None
    model_type = family.model_types[0]
    try:
        base = AutoConfig.for_model(model_type)
    except (KeyError, ValueError) as exc:
        raise PatchError(
            f"tiny_config: transformers has no config class for {model_type!r} ({exc})"
        ) from None
    if getattr(base, "text_config", None) is None or getattr(base, "vision_config", None) is None:
        raise PatchError(f"tiny_config: {model_type!r} has no text_config / vision_config pair to shrink")
    spec = family.spec
    head_dim, section, partial = _tiny_rotary(spec)
    rope: dict[str, Any] = {
        "rope_type": "default",
        "rope_theta": float(spec.theta),
        "mrope_section": list(section),
    }
    if partial != 1.0:
        rope["partial_rotary_factor"] = partial
    if spec.section_layout == "interleaved":
        rope["mrope_interleaved"] = True
    has_head_dim = "head_dim" in base.text_config.to_dict()
    text = {
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 2 * TEXT_HIDDEN,
        "num_hidden_layers": layers,
        "num_attention_heads": 2 if has_head_dim else max(1, TEXT_HIDDEN // head_dim),
        "num_key_value_heads": 1,
        "rope_parameters": rope,
    }
    if has_head_dim:
        text["head_dim"] = head_dim
    vision_defaults = base.vision_config.to_dict()
    vision = {k: v for k, v in _VISION_SHRINK.items() if k in vision_defaults}
    if "embed_dim" in vision_defaults and "out_hidden_size" not in vision_defaults:
        vision["hidden_size"] = TEXT_HIDDEN  # Qwen2-VL: the merger's output size is the vision hidden_size
    if "tokens_per_second" in vision_defaults:
        tps = family.rules.tokens_per_second
        vision["tokens_per_second"] = int(tps) if float(tps).is_integer() else tps
    return AutoConfig.for_model(model_type, text_config=text, vision_config=vision)


def tiny_model(model: Any, *, seed: int = 0, layers: int = 2, dtype: torch.dtype = torch.float32) -> Any:
    """A tiny random-weight ``...ForConditionalGeneration`` of a family, in eval mode.

    Args:
        model: a family name (``"qwen2.5-vl"``), model_type or :class:`mrope.models.ModelFamily`.
        seed: ``torch.manual_seed`` for the weights.
        layers: text decoder layers.
        dtype: parameter dtype.

    Raises:
        PatchError: the family has no transformers class this builder can shrink.
    """
    from transformers import AutoModelForImageTextToText

    config = tiny_config(model, layers=layers)
    torch.manual_seed(seed)
    return AutoModelForImageTextToText.from_config(config, dtype=dtype).eval()


__all__ = ["TEXT_HIDDEN", "tiny_config", "tiny_model"]
