"""Read a Hugging Face model config (a dict) into a :class:`~mrope.RopeSpec`, with the family deciding
what configs leave to the code.

Config shapes read: the top level, a nested ``text_config``, and an omni model's
``thinker_config.text_config`` (the text config wins over the levels above it); ``rope_scaling``
(transformers 4.x) and ``rope_parameters`` (5.x; it wins over ``rope_scaling``), including the per-layer-type
form (a dict keyed by layer type, where ``None`` means a layer without rotary); ``rope_theta``,
``mrope_section`` (or HunyuanOCR's ``xdrope_section``), ``mrope_interleaved``, ``partial_rotary_factor``,
``head_dim`` (else ``hidden_size // num_attention_heads``, as transformers computes it), a multi-head
latent attention query's ``qk_nope_head_dim`` + ``qk_rope_head_dim`` (only the rope slice rotates), and
HunYuan's ``"dynamic"`` rope with an ``alpha`` (fixed NTK-alpha scaling).

What a config does not say comes from the family, found by the TEXT config's ``model_type`` (then the
top-level one): the pairing (a config never says it: GLM-4.1V's ``glm4v_text`` and GLM-OCR pair adjacent
channels, GLM-4.5V's ``glm4v_moe_text`` rotates split halves), the section layout (no 5.24 model reads
``mrope_interleaved``: a config that contradicts its family is an error), a missing
``partial_rotary_factor`` (what transformers 5.24 uses for that config class:
:attr:`ModelFamily.config_partial_rotary_factor`, 1.0 for GLM-4.1V's ``glm4v_text`` although its released
checkpoints say 0.5), and a missing ``mrope_section`` or ``rope_theta`` (the family's released value).

An interleaved ``mrope_section`` is read as transformers 5.24's interleaved rotary reads it
(``recomposition_frequencies``, models/qwen3_vl/modeling_qwen3_vl.py:410): axis ``a >= 1`` takes the
frequencies ``a, a + 3, ...`` below ``3 s_a`` that the head has, so a section longer than the head's
frequencies is cut where they end (transformers' own test configs declare ``[16, 8, 8]`` for 4 frequencies).

Per-layer-type rotary: one :class:`RopeSpec` describes one kind of layer. ``layer_type=`` picks it; by
default the ``"full_attention"`` layers' (those that attend over the whole multimodal context), else the
only layer type that has a rotary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mrope._errors import LayoutError, SpecError
from mrope._spec import RopeScaling, RopeSpec
from mrope.models._family import ModelFamily
from mrope.models._registry import family_for_model_type, get_family, model_types

_SCALING_TYPES = {
    "default": "none",
    "mrope": "none",  # Qwen2-VL's 4.x configs name the plain M-RoPE this way
    "none": "none",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
}
_NOT_LAYER_KEYS = {"rope_type", "type", "rope_theta", "mrope_section", "factor", "partial_rotary_factor"}


def _dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{what} must be a JSON object; got {type(value).__name__}")
    return dict(value)


def config_levels(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The config's levels, innermost (text) first: ``[text_config, thinker_config, top]`` as present."""
    if not isinstance(config, Mapping):
        raise SpecError(
            f"a model config must be a dict (the parsed config.json); got {type(config).__name__}. "
            "To read a checkpoint folder use mrope.from_pretrained(path)"
        )
    top = dict(config)
    levels = [top]
    thinker = top.get("thinker_config")
    if isinstance(thinker, Mapping):
        levels.insert(0, dict(thinker))
    text = levels[0].get("text_config")
    if isinstance(text, Mapping):
        levels.insert(0, dict(text))
    return levels


def config_model_types(config: Mapping[str, Any]) -> list[str]:
    """The ``model_type`` strings of the config's levels, innermost (text) first."""
    return [str(level["model_type"]) for level in config_levels(config) if level.get("model_type")]


def family_of_config(config: Mapping[str, Any], *, outer_first: bool = False) -> ModelFamily:
    """The registered family a config belongs to.

    By default the text config's ``model_type`` decides (the rotary is the text model's: GLM-4.6V's
    ``glm46v`` holds a ``glm4v_text``); ``outer_first=True`` asks the top-level ``model_type`` first (the
    layout rules and processor are the whole model's: GLM-4.6V's video wrapper and time text).
    """
    found = config_model_types(config)
    for model_type in found[::-1] if outer_first else found:
        fam = family_for_model_type(model_type)
        if fam is not None:
            return fam
    raise SpecError(
        f"config model_type {found or 'missing'} is not a registered M-RoPE family; known model types: "
        f"{', '.join(model_types())}"
    )


def _pick_layer(params: dict[str, Any], layer_type: str | None) -> dict[str, Any]:
    """One layer type's rope parameters out of a per-layer-type dict."""
    with_rotary = [k for k, v in params.items() if v is not None]
    if layer_type is None:
        if params.get("full_attention") is not None:
            layer_type = "full_attention"
        elif len(with_rotary) == 1:
            layer_type = with_rotary[0]
        else:
            raise SpecError(
                f"rope_parameters is per layer type ({sorted(params)}) with no full_attention entry: pass "
                f"layer_type= (one of {sorted(with_rotary)})"
            )
    if layer_type not in params:
        raise SpecError(f"layer_type {layer_type!r} is not in rope_parameters (layer types {sorted(params)})")
    chosen = params[layer_type]
    if chosen is None:
        raise SpecError(
            f"layer type {layer_type!r} has no rotary (its rope_parameters entry is None: a NoPE layer); "
            f"layer types with a rotary: {sorted(with_rotary)}"
        )
    return _dict(chosen, f"rope_parameters[{layer_type!r}]")


def _is_per_layer(params: dict[str, Any]) -> bool:
    return (
        bool(params)
        and not (set(params) & _NOT_LAYER_KEYS)
        and all(v is None or isinstance(v, Mapping) for v in params.values())
    )


def _interleaved_as_read(section: tuple[int, ...], num_freqs: int) -> tuple[int, ...]:
    """An interleaved ``mrope_section`` (frequency pairs per axis) as transformers 5.24 reads it for a head
    of ``num_freqs`` frequencies: axis ``a >= 1`` keeps the slots ``a, a + A, ...`` that exist below
    ``num_freqs``, axis 0 at most the frequencies left (it takes every one the others do not). A section
    whose slots all exist comes back unchanged."""
    axes = len(section)
    kept = [min(count, len(range(axis, num_freqs, axes))) for axis, count in enumerate(section)]
    kept[0] = min(section[0], num_freqs - sum(kept[1:]))
    return tuple(kept)


def spec_kwargs_from_config(
    config: Mapping[str, Any], *, layer_type: str | None = None, family: Any = None
) -> dict[str, Any]:
    """The :class:`~mrope.RopeSpec` keyword arguments a model config describes (see the module
    docstring). ``family`` (a name or :class:`ModelFamily`) overrides the one found by model_type."""
    levels = config_levels(config)
    try:
        fam = get_family(family) if family is not None else family_of_config(config)
    except LayoutError as exc:
        raise SpecError(str(exc)) from None

    def get(key: str) -> Any:
        for level in levels:
            if level.get(key) is not None:
                return level[key]
        return None

    params = _dict(get("rope_parameters"), "rope_parameters")
    if _is_per_layer(params):
        params = _pick_layer(params, layer_type)
    elif layer_type is not None:
        raise SpecError(f"layer_type={layer_type!r} given, but rope_parameters is not per layer type")
    rope = {**_dict(get("rope_scaling"), "rope_scaling"), **params}

    def param(key: str) -> Any:
        return rope[key] if rope.get(key) is not None else get(key)

    released = fam.spec
    theta = param("rope_theta")
    theta = released.theta if theta is None else theta
    head_dim = get("head_dim")
    if head_dim is None:
        hidden, heads = get("hidden_size"), get("num_attention_heads")
        head_dim = hidden // heads if hidden and heads else released.head_dim
    partial = param("partial_rotary_factor")
    if partial is None:
        partial = fam.config_partial_rotary_factor
    rotary_dim = int(head_dim * partial)
    rotary_offset = 0
    nope, rope_dim = get("qk_nope_head_dim"), get("qk_rope_head_dim")
    if nope is not None and rope_dim is not None:
        # a multi-head-latent-attention query: only its rope slice rotates; the family says which end
        head_dim, rotary_dim = int(nope) + int(rope_dim), int(rope_dim)
        rotary_offset = int(nope) if released.rotary_offset else 0
    section = param("mrope_section")
    if section is None:
        section = param("xdrope_section")  # HunyuanOCR's released config.json
    if section is None:
        section = released.mrope_section
    else:
        section = tuple(int(s) for s in section)
        if fam.config_section_axes is not None:
            if len(section) != len(fam.config_section_axes):
                raise SpecError(
                    f"mrope_section {list(section)} has {len(section)} entries; the {fam.name!r} family's "
                    f"configs have {len(fam.config_section_axes)}"
                )
            ordered = [0] * len(section)
            for entry, axis in zip(section, fam.config_section_axes, strict=True):
                ordered[axis] = entry
            section = tuple(ordered)
    if released.section_layout == "interleaved":
        section = _interleaved_as_read(section, rotary_dim // 2)

    interleaved = param("mrope_interleaved")
    layout = released.section_layout
    if interleaved is not None and bool(interleaved) != (layout == "interleaved"):
        raise SpecError(
            f"config says mrope_interleaved={interleaved!r}, but the {fam.name!r} family's rotary "
            f"({layout} sections) ignores that flag: the model would not do what the config says"
        )

    kind = str(rope.get("rope_type", rope.get("type", "default")))
    if kind not in _SCALING_TYPES:
        raise SpecError(f"unsupported rope type {kind!r}; mrope reads {sorted(_SCALING_TYPES)}")
    scaling_type = _SCALING_TYPES[kind]
    if scaling_type == "none":
        scaling = RopeScaling()
    elif scaling_type == "dynamic" and rope.get("alpha") is not None:
        # HunYuan's "dynamic" with an alpha is a fixed NTK-alpha base growth, not dynamic NTK
        scaling = RopeScaling(type="ntk_alpha", alpha=float(rope["alpha"]))
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
        "rotary_offset": rotary_offset,
        "theta": float(theta),
        "mrope_section": section,
        "section_layout": layout,
        "pairing": released.pairing,
        "scaling": scaling,
    }


def spec_from_config(
    config: Mapping[str, Any], *, layer_type: str | None = None, family: Any = None
) -> RopeSpec:
    """:class:`~mrope.RopeSpec` of a model config dict (see the module docstring)."""
    return RopeSpec(**spec_kwargs_from_config(config, layer_type=layer_type, family=family))
