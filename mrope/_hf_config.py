"""Read the rotary fields of a Hugging Face ``config.json`` into :class:`~mrope.RopeSpec` arguments."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mrope.errors import SpecError

_INTERLEAVED_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_vl_text", "qwen3_vl_moe_text")
_GPTJ_MODEL_TYPES = ("glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text")
_SCALING_TYPES = {
    "default": "none",
    "mrope": "none",  # Qwen2-VL's configs name the plain M-RoPE this way
    "none": "none",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
}


def _load(config: dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(config, dict):
        return config
    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"no model config at {str(path)!r}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"model config {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"model config {str(path)!r} must hold a JSON object; got {type(data).__name__}")
    return data


def spec_kwargs_from_hf_config(config: dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """The keyword arguments of :class:`~mrope.RopeSpec` that a model config describes."""
    from mrope.spec import RopeScaling

    top = _load(config)
    text = top.get("text_config") if isinstance(top.get("text_config"), dict) else {}
    model_type = str(top.get("model_type") or text.get("model_type") or "")

    def get(key: str, default: Any = None) -> Any:
        if key in text and text[key] is not None:
            return text[key]
        if key in top and top[key] is not None:
            return top[key]
        return default

    rope = dict(get("rope_parameters") or {})
    legacy = get("rope_scaling") or {}
    if not isinstance(rope, dict) or not isinstance(legacy, dict):
        raise SpecError("rope_parameters / rope_scaling must be JSON objects")
    rope = {**legacy, **rope}

    theta = rope.get("rope_theta", get("rope_theta", 10_000.0))
    head_dim = get("head_dim")
    if head_dim is None:
        hidden, heads = get("hidden_size"), get("num_attention_heads")
        if not hidden or not heads:
            raise SpecError("config has neither head_dim nor hidden_size and num_attention_heads")
        head_dim = hidden // heads
    partial = rope.get("partial_rotary_factor", get("partial_rotary_factor", 1.0))
    rotary_dim = int(head_dim * partial)

    section = rope.get("mrope_section")
    if section is None:
        raise SpecError(
            f"config (model_type {model_type!r}) has no mrope_section in rope_scaling or rope_parameters"
        )
    section = list(section)
    if len(section) != 3:
        raise SpecError(f"mrope_section must have 3 entries (t, h, w); got {section}")

    interleaved = rope.get("mrope_interleaved")
    if interleaved is None:
        interleaved = model_type in _INTERLEAVED_MODEL_TYPES
    pairing = "gptj" if model_type in _GPTJ_MODEL_TYPES else "neox"

    kind = str(rope.get("rope_type", rope.get("type", "default")))
    if kind not in _SCALING_TYPES:
        raise SpecError(f"unsupported rope type {kind!r}; mrope reads {sorted(_SCALING_TYPES)}")
    scaling_type = _SCALING_TYPES[kind]
    if scaling_type == "none":
        scaling = RopeScaling()
    else:
        # transformers grows dynamic NTK past max_position_embeddings; YaRN reads the original length.
        if scaling_type == "dynamic":
            l0 = get("max_position_embeddings") or rope.get("original_max_position_embeddings")
        else:
            l0 = rope.get("original_max_position_embeddings") or get("max_position_embeddings")
        factor = rope.get("factor")
        if factor is None and scaling_type == "yarn" and l0:
            factor = get("max_position_embeddings") / l0
        scaling = RopeScaling(
            type=scaling_type,
            factor=float(factor) if factor is not None else 1.0,
            original_max_position_embeddings=int(l0) if l0 is not None else None,
            beta_fast=float(rope.get("beta_fast") or 32.0),
            beta_slow=float(rope.get("beta_slow") or 1.0),
            mscale=rope.get("mscale"),
            mscale_all_dim=rope.get("mscale_all_dim"),
            attention_factor=rope.get("attention_factor"),
            truncate=bool(rope.get("truncate", True)),
        )
    return {
        "head_dim": int(head_dim),
        "rotary_dim": rotary_dim,
        "theta": float(theta),
        "mrope_section": tuple(int(s) for s in section),
        "section_layout": "interleaved" if interleaved else "chunked",
        "pairing": pairing,
        "scaling": scaling,
    }
