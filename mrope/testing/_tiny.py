"""Tiny random-weight transformers models of a family, built from configs (no hub, no download).

:func:`tiny_model` builds the family's own transformers class (``AutoModelForImageTextToText``) from its
config class with a tiny text model (hidden 64, 2 layers), a one-block vision tower and the real
vocabulary (so the real special token ids work). The text rotary keeps the released layout: the released
``mrope_section`` divided by a common factor, the released theta, pairing and partial rotary factor, and
a head_dim scaled by the same factor. Config classes the generic shrink does not satisfy get a
family-specific edit (``_TEXT_SHRINK``: HY-V4-VL's latent attention, Cohere-Compass's per-layer-type rotary,
Qwen4-Exp's QSA indexer, EXAONE 4.5's text model type).
For tests, examples and benchmarks of code that puts mrope inside a
model; the weights mean nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mrope._errors import MRopeError, PatchError
from mrope.models import get_family

TEXT_HIDDEN = 64
"""Hidden size of the tiny text model."""

_VISION_SHRINK: dict[str, Any] = {
    "depth": 1,
    "embed_dim": 32,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "out_hidden_size": TEXT_HIDDEN,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0],
    "fullatt_block_indexes": [0],
}
"""Vision-config fields shrunk when the family's vision config has them."""

_AUDIO_SHRINK: dict[str, Any] = {
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "d_model": 32,
    "output_dim": TEXT_HIDDEN,
    "downsample_hidden_size": 32,
}
"""Audio-config fields shrunk (omni thinkers)."""

_TEXT_MOE_SHRINK: dict[str, Any] = {
    "num_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "moe_num_experts": 2,
    "moe_k": 1,
    "moe_num_shared_experts": 1,
}
"""Mixture-of-experts text-config fields shrunk when present."""

_BUILD: dict[str, tuple[str, str]] = {
    "qwen2_5_omni": ("qwen2_5_omni_thinker", "Qwen2_5OmniThinkerForConditionalGeneration"),
    "qwen3_omni_moe": ("qwen3_omni_moe_thinker", "Qwen3OmniMoeThinkerForConditionalGeneration"),
    "glm_image": ("glm_image", "GlmImageForConditionalGeneration"),
    "qwen3_asr": ("qwen3_asr", "Qwen3ASRForConditionalGeneration"),
}
"""Families whose M-RoPE text model is not what ``AutoModelForImageTextToText`` builds: model_type ->
(config model_type, transformers class) of the part that holds it (the omni thinkers; GLM-Image is an
image generator, not an image-text-to-text model; Qwen3-ASR takes audio and text)."""


def _hy_v4_vl_text(text: dict[str, Any], spec: Any) -> None:
    """HY-V4-VL: multi-head latent attention whose 64-channel rope slice (the released ``[12, 10, 10]``,
    which its config class requires to sum to ``qk_rope_head_dim / 2``) is kept; the latent ranks, the
    pass-through channels, the DSA indexer and the hyper-connection streams shrink."""
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": float(spec.theta),
        "mrope_section": list(spec.mrope_section),
    }
    text.pop("head_dim", None)  # the config class sets head_dim := qk_rope_head_dim
    text.update(
        qk_rope_head_dim=spec.rotary_dim,
        qk_nope_head_dim=32,
        v_head_dim=32,
        q_lora_rank=32,
        kv_lora_rank=32,
        index_n_heads=2,
        index_head_dim=spec.rotary_dim + 32,
        hc_mult=2,
        n_routed_experts=2,
        initializer_range=0.02,  # the class default 0.006 leaves a tiny model's logits nearly position-blind
    )


def _cohere_compass_text(text: dict[str, Any], spec: Any) -> None:
    """Cohere-Compass: ``rope_parameters`` keyed by layer type, as its config class requires (the class
    default ``{}`` cannot run). Two layers: a sliding-window layer with the M-RoPE rotary and a
    full-attention layer without rotary (``None``: NoPE), Cohere's interleaving of RoPE and NoPE layers."""
    text["layer_types"] = ["sliding_attention", "full_attention"]
    text["num_hidden_layers"] = 2
    text["rope_parameters"] = {"sliding_attention": text["rope_parameters"], "full_attention": None}


def _qwen4_exp_text(text: dict[str, Any], spec: Any) -> None:
    """Qwen4-Exp: its indexed-attention layers need the QSA indexer fields (the class defaults are None and
    cannot build); the linear-attention heads and the hyper-connection rank shrink."""
    text.update(
        indexer_n_heads=2,
        indexer_kv_heads=1,
        indexer_head_dim=text.get("head_dim", spec.head_dim),
        indexer_budget=8,
        indexer_compress_ratio=2,
        hc_lowrank=8,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
    )


def _exaone4_5_text(text: dict[str, Any], spec: Any) -> None:
    """EXAONE 4.5: its config class reads the text config's ``model_type`` (``exaone4``, EXAONE 4.0's text
    model; transformers 5.24 configuration_exaone4_5.py:79-80)."""
    text["model_type"] = "exaone4"


_TEXT_SHRINK: dict[str, Any] = {
    "hy_v4_vl": _hy_v4_vl_text,
    "exaone4_5": _exaone4_5_text,
    "cohere_compass": _cohere_compass_text,
    "qwen4_exp": _qwen4_exp_text,
}
"""model_type -> ``shrink(text, spec)``: family-specific edits of the generic tiny text config, for
config classes the generic shrink does not satisfy."""


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


def _as_number(value: float) -> int | float:
    """An integral float as int (config classes type these fields int)."""
    return int(value) if float(value).is_integer() else value


def _tiny_vision(defaults: dict[str, Any], rules: Any) -> dict[str, Any]:
    """The shrunk vision-config fields of a vision config with ``defaults``."""
    vision = {k: v for k, v in _VISION_SHRINK.items() if k in defaults}
    if "embed_dim" in defaults and "out_hidden_size" not in defaults:
        vision["hidden_size"] = TEXT_HIDDEN  # Qwen2-VL: the merger's output size is the vision hidden_size
    if "tokens_per_second" in defaults:
        vision["tokens_per_second"] = _as_number(rules.tokens_per_second)
    return vision


def tiny_config(model: Any, *, layers: int = 2, text: dict[str, Any] | None = None) -> Any:
    """The transformers config of a tiny model of ``model`` (a family name, model_type or ModelFamily).

    ``text``: text-config fields set last (``rope_parameters`` entries are merged into the tiny rotary's,
    e.g. ``{"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 64}``).
    """
    from transformers import AutoConfig

    try:
        family = get_family(model)
    except MRopeError as exc:
        raise PatchError(f"tiny_config: {exc}") from None
    model_type = _BUILD.get(family.model_types[0], (family.model_types[0], ""))[0]
    try:
        base = AutoConfig.for_model(model_type)
    except (KeyError, ValueError) as exc:
        raise PatchError(
            f"tiny_config: transformers has no config class for {model_type!r} ({exc})"
        ) from None
    media = getattr(base, "vision_config", None) or getattr(base, "audio_config", None)
    if getattr(base, "text_config", None) is None or media is None:
        raise PatchError(
            f"tiny_config: {model_type!r} has no text_config with a vision or audio config to shrink"
        )
    spec = family.spec
    head_dim, section, partial = _tiny_rotary(spec)
    if spec.section_layout == "hw_alternating":
        section = (section[1], section[2], section[0])  # ERNIE's config lists (h, w, t)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(spec.theta)}
    if any(section[1:]):  # a 1-D text rotary (MiniMax-M3-VL: all pairs on axis 0) has no sections to give
        rope["mrope_section"] = list(section)
    if partial != 1.0:
        rope["partial_rotary_factor"] = partial
    if spec.section_layout == "interleaved":
        rope["mrope_interleaved"] = True
    has_head_dim = "head_dim" in base.text_config.to_dict()
    extra = dict(text or {})
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
    text_defaults = base.text_config.to_dict()
    kinds = list(dict.fromkeys(text_defaults.get("layer_types") or ()))
    if len(kinds) > 1:  # hybrid stacks (e.g. linear + full attention): one layer of each kind at least
        text["layer_types"] = [kinds[i % len(kinds)] for i in range(max(layers, len(kinds)))]
        text["num_hidden_layers"] = len(text["layer_types"])
    for key, value in _TEXT_MOE_SHRINK.items():
        if key in text_defaults:
            default = text_defaults[key]
            text[key] = [value] * len(default) if isinstance(default, list) else value
    if model_type in _TEXT_SHRINK:
        _TEXT_SHRINK[model_type](text, spec)
    rope_extra = extra.pop("rope_parameters", {})
    text.update(extra)
    if model_type == "cohere_compass":  # keyed by layer type: every rotary layer type gets the entries
        for layer_type, params in text["rope_parameters"].items():
            if params is not None:
                text["rope_parameters"][layer_type] = {**params, **rope_extra}
    else:
        text["rope_parameters"] = {**text["rope_parameters"], **rope_extra}
    rules = family.rules
    top_id = max(rules.image_pad_id, rules.video_pad_id, rules.vision_start_id, rules.vision_end_id)
    audio_ids = (rules.audio_pad_id, rules.audio_start_id, rules.audio_end_id)
    top_id = max([top_id, *(i for i in audio_ids if i is not None)])
    if text_defaults.get("vocab_size", 0) <= top_id:
        text["vocab_size"] = (top_id // 64 + 1) * 64  # the class default is too small for the real ids
    subconfigs: dict[str, Any] = {"text_config": text}
    if getattr(base, "vision_config", None) is not None:
        subconfigs["vision_config"] = _tiny_vision(base.vision_config.to_dict(), family.rules)
    if getattr(base, "vq_config", None) is not None:  # GLM-Image: its VQ encoder reads the vision output
        latent = subconfigs["vision_config"].get("hidden_size", TEXT_HIDDEN)
        subconfigs["vq_config"] = {"latent_channels": latent, "embed_dim": 32}
    if getattr(base, "audio_config", None) is not None:
        audio_defaults = base.audio_config.to_dict()
        subconfigs["audio_config"] = {k: v for k, v in _AUDIO_SHRINK.items() if k in audio_defaults}
    top: dict[str, Any] = {}
    defaults = base.to_dict()
    id_fields = {key: (f,) if isinstance(f, str) else tuple(f) for key, f in family.config_ids.items()}
    has_default = {f for key, fs in id_fields.items() if defaults.get(key) is not None for f in fs}
    for key, rule_fields in id_fields.items():  # released ids where the class has none for the field
        if defaults.get(key) is None and not has_default.intersection(rule_fields):
            top[key] = getattr(rules, rule_fields[0])
    if "position_id_per_seconds" in defaults:  # omni: time scale of the released checkpoints
        top["position_id_per_seconds"] = _as_number(rules.tokens_per_second)
    try:
        return AutoConfig.for_model(model_type, **subconfigs, **top)
    except Exception as exc:  # the config class rejects the shrunk values (its own validators' errors)
        raise PatchError(
            f"tiny_config: cannot shrink {model_type!r} generically ({type(exc).__name__}: {exc})"
        ) from None


def tiny_model(
    model: Any,
    *,
    seed: int = 0,
    layers: int = 2,
    dtype: torch.dtype = torch.float32,
    text: dict[str, Any] | None = None,
) -> Any:
    """A tiny random-weight ``...ForConditionalGeneration`` of a family, in eval mode.

    Args:
        model: a family name (``"qwen2.5-vl"``), model_type or :class:`mrope.models.ModelFamily`.
        seed: ``torch.manual_seed`` for the weights.
        layers: text decoder layers.
        dtype: parameter dtype.
        text: text-config fields set last (see :func:`tiny_config`).

    Raises:
        PatchError: the family has no transformers class this builder can shrink.
    """
    import transformers

    config = tiny_config(model, layers=layers, text=text)
    class_name = _BUILD.get(get_family(model).model_types[0], ("", ""))[1]
    torch.manual_seed(seed)
    try:
        if class_name:
            return getattr(transformers, class_name)._from_config(config, dtype=dtype).eval()
        return transformers.AutoModelForImageTextToText.from_config(config, dtype=dtype).eval()
    except Exception as exc:  # the model class rejects the shrunk config
        raise PatchError(
            f"tiny_model: cannot build {type(config).__name__} shrunk generically ({type(exc).__name__}: {exc})"
        ) from None


__all__ = ["TEXT_HIDDEN", "tiny_config", "tiny_model"]
