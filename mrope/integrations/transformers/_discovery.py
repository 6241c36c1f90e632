"""Read what a patch needs from a loaded model: its family, hook points, rotary spec and layout rules.

:func:`~mrope.integrations.transformers.patch` changes the modules found here (the position owners, the
text rotaries, the attention layers calling :data:`APPLY_FUNCTION`) and uses the spec and rules of the
model's config (:func:`spec_of`, :func:`rules_of`, both through mrope's checkpoint reader).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch

from mrope._checkpoint import from_pretrained
from mrope._errors import MRopeError, PatchError
from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models import get_family, spec_from_config

APPLY_FUNCTION = "apply_rotary_pos_emb"
"""The modeling-module function the supported families' text attention calls with ``(q, k, cos, sin)``."""

APPLY_HALVES = {APPLY_FUNCTION: False, "apply_rotary_pos_emb_interleave": True}
"""The modeling-module rotation functions a text attention may call, each with whether it writes its
output in split halves: ``apply_rotary_pos_emb`` writes every pair back on the channels it read it from;
``apply_rotary_pos_emb_interleave`` reads adjacent pairs ``(2i, 2i+1)`` and writes pair i on channels i
and i + d/2 (transformers 5.25 modeling_hy_v4_vl.py:64-100, deepseek_v3's of the same name)."""


def family_of(config: Any, family: Any = None) -> Any:
    """The family of a model's config, or ``family`` (a name, model_type or :func:`mrope.from_pretrained`
    result) when given; it must answer to the config's model_type."""
    model_type = getattr(config, "model_type", None)
    if not model_type:
        raise PatchError("patch needs a transformers model whose config has a model_type; got none")
    try:
        found = get_family(model_type if family is None else family)
    except MRopeError as exc:
        raise PatchError(f"cannot patch model_type {model_type!r}: {exc}") from None
    if found.learned_rotary is not None:  # a transformers rotary computes cos / sin from inv_freq alone
        learned = found.learned_rotary
        raise PatchError(
            f"cannot patch with family {found.name!r}: half of its rotation is the checkpoint tensor "
            f"{learned.buffer!r}, which a transformers rotary's inv_freq does not hold; rotate with "
            f"mrope.ops.apply_mrope(q, k, positions, mrope.from_pretrained(<checkpoint folder>)) or "
            f"{learned.table_builder}"
        )
    if model_type not in found.model_types:
        raise PatchError(
            f"family={found.name!r} answers to model_types {list(found.model_types)}, not to this model's "
            f"{model_type!r}"
        )
    return found


def position_owners(model: torch.nn.Module) -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    """``(text_owner, owners)``: the module whose ``language_model`` M-RoPE positions feed (it holds
    ``rope_deltas``), and every module with a ``get_rope_index`` (that one and its wrappers, e.g. a
    ``...ForConditionalGeneration`` whose ``generate`` calls its own)."""
    owners = [m for m in model.modules() if callable(getattr(type(m), "get_rope_index", None))]
    texts = [m for m in owners if isinstance(getattr(m, "language_model", None), torch.nn.Module)]
    if len(texts) != 1:
        raise PatchError(
            f"{type(model).__name__}: expected exactly one module with a get_rope_index method and a "
            f"language_model (the model whose M-RoPE positions mrope computes); found {len(texts)} among "
            f"{[type(m).__name__ for m in owners]}"
        )
    text_owner = texts[0]
    for other in owners:
        if other is not text_owner and not any(m is text_owner for m in other.modules()):
            raise PatchError(
                f"{type(model).__name__}: {type(other).__name__} computes positions for a model other than "
                f"{type(text_owner).__name__}.language_model (e.g. a speech talker); patch that text model's "
                "owner (e.g. model.thinker) instead"
            )
    return text_owner, owners


def text_rotaries(owner: torch.nn.Module) -> list[torch.nn.Module]:
    text = getattr(owner, "language_model", None)
    if not isinstance(text, torch.nn.Module):
        raise PatchError(f"{type(owner).__name__} has no language_model submodule to patch")
    found = [m for m in text.modules() if type(m).__name__.endswith("RotaryEmbedding") and layer_types(m)]
    if not found:
        raise PatchError(
            f"{type(text).__name__} has no rotary embedding module (…RotaryEmbedding with inv_freq, or "
            "<layer_type>_inv_freq per layer type)"
        )
    kinds = {type(m) for m in found}
    if len(kinds) != 1:
        raise PatchError(f"{type(text).__name__} mixes rotary classes {sorted(k.__name__ for k in kinds)}")
    return found


def inv_freq_buffer(rotary: torch.nn.Module, layer_type: str | None) -> torch.Tensor:
    """The rotary's frequency buffer for ``layer_type`` (one of :func:`layer_types`): ``inv_freq``, or
    ``<layer_type>_inv_freq`` of a per-layer-type rotary."""
    return getattr(rotary, "inv_freq" if layer_type is None else f"{layer_type}_inv_freq")


def layer_types(rotary: torch.nn.Module) -> list[str | None]:
    """``[None]`` for a rotary with one ``inv_freq``; the layer types of a per-layer-type rotary
    (``<layer_type>_inv_freq`` buffers, ``forward(x, position_ids, layer_type)``: Cohere-Compass);
    ``[]`` for neither."""
    if isinstance(getattr(rotary, "inv_freq", None), torch.Tensor):
        return [None]
    return [
        name[: -len("_inv_freq")]
        for name, buffer in rotary.named_buffers(recurse=False)
        if name.endswith("_inv_freq") and not name.endswith("_original_inv_freq") and buffer is not None
    ]


def attention_modules(owner: torch.nn.Module, name: str = APPLY_FUNCTION) -> list[torch.nn.Module]:
    """Text attention layers whose forward calls the modeling module's function ``name``."""
    text = owner.language_model
    out = []
    for m in text.modules():
        code = getattr(inspect.unwrap(type(m).forward), "__code__", None)
        if code is not None and name in code.co_names:
            out.append(m)
    return out


def apply_hook(owner: torch.nn.Module, module: Any) -> tuple[str, list[torch.nn.Module]]:
    """``(name, attentions)``: the first of :data:`APPLY_HALVES` that the modeling ``module`` defines and
    the text attention layers call, with those layers.

    Raises:
        PatchError: no text attention layer calls any of them.
    """
    for name in APPLY_HALVES:
        if callable(getattr(module, name, None)):
            attentions = attention_modules(owner, name)
            if attentions:
                return name, attentions
    raise PatchError(
        f"no text attention layer of {type(owner).__name__} calls a function of {module.__name__} that mrope "
        f"routes through apply_mrope (one of {list(APPLY_HALVES)})"
    )


def spec_of(config: Any, layer_type: str | None = None) -> RopeSpec:
    try:
        return spec_from_config(config.to_dict(), layer_type=layer_type)
    except MRopeError as exc:
        raise PatchError(f"cannot read the rotary spec of {config.model_type!r}: {exc}") from None


def applied_spec(spec: RopeSpec, attentions: list[torch.nn.Module]) -> RopeSpec:
    """The spec of the tensors the attention layers hand ``apply_rotary_pos_emb``.

    Attention with a ``qk_rope_head_dim`` (multi-head latent attention: HY-V4-VL, and its DSA indexer)
    splits off the rope slice itself and passes only those ``rotary_dim`` channels, so the rotation acts
    on a ``rotary_dim``-wide head; every other attention passes whole ``head_dim`` heads.
    """
    widths = {getattr(attn, "qk_rope_head_dim", None) for attn in attentions}
    if widths == {None}:
        for attn in attentions:
            head_dim = getattr(attn, "head_dim", spec.head_dim)
            if head_dim != spec.head_dim:
                raise PatchError(
                    f"{type(attn).__name__}.head_dim is {head_dim} but the config's rotary spec has head_dim "
                    f"{spec.head_dim}; refusing to patch"
                )
        return spec
    if widths != {spec.rotary_dim}:
        raise PatchError(
            f"the text attention layers rotate slices of {sorted(widths, key=str)} channels (qk_rope_head_dim) but "
            f"the config's rotary spec rotates {spec.rotary_dim}; refusing to patch"
        )
    return dataclasses.replace(spec, head_dim=spec.rotary_dim, rotary_offset=0)


def rules_of(config: Any, family: Any, convention: str) -> LayoutRules:
    """The family's rules under ``convention`` with what this model's config says (token ids, vision
    sizes, time scale), read by :func:`mrope.from_pretrained` from ``config.to_dict()``."""
    data = config.to_dict()
    try:
        rules = from_pretrained(data, family=family).rules_for(convention)
    except MRopeError as exc:
        raise PatchError(f"cannot build the layout rules of {config.model_type!r}: {exc}") from None
    missing = [
        key
        for key, rule_fields in family.config_ids.items()
        if any(
            getattr(rules, f) is None
            for f in ((rule_fields,) if isinstance(rule_fields, str) else rule_fields)
        )
    ]
    if missing:
        raise PatchError(
            f"{type(config).__name__} has no {', '.join(missing)} (None) and the {family.name!r} family has no "
            "value for them: set them on model.config as the checkpoint's config.json has them, or pass "
            "family=mrope.from_pretrained(checkpoint_folder)"
        )
    return rules


__all__ = [
    "APPLY_FUNCTION",
    "APPLY_HALVES",
    "apply_hook",
    "applied_spec",
    "attention_modules",
    "family_of",
    "inv_freq_buffer",
    "layer_types",
    "position_owners",
    "rules_of",
    "spec_of",
    "text_rotaries",
]
