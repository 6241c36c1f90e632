"""The registry's index: every lookup by name (family, its rules and spec, the family names, the media
routes, the video-generation transformers) lives here.

Each family module of :mod:`mrope.models` defines ``FAMILY = ModelFamily(...)`` (see :class:`ModelFamily`).
Everything that takes ``model=`` (the builder, the token interface, the media sizing helpers) resolves it
here, so a family's ids, rules, spec and sizing live in exactly one place. Adding a family is one module
plus one line in :data:`FAMILY_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from mrope._errors import LayoutError, MediaError, SpecError
from mrope._route import Route
from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope._tokenizer import load_tokenizer
from mrope._video_rope import VideoRope
from mrope.models._family import ModelFamily, check_convention
from mrope.models._routes import DEFAULT_ROUTE, ROUTE_NAMES, ROUTES
from mrope.models._video_models import VIDEO_MODELS

FAMILY_MODULES: tuple[str, ...] = (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "glm4v",
    "qwen3_vl_moe",
    "cosmos3_omni",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen4_exp",
    "cosmos3_edge",
    "cohere_compass",
    "glm4v_moe",
    "glm46v",
    "glm_ocr",
    "paddleocr_vl",
    "glm_image",
    "ernie4_5_vl",
    "hy_v4_vl",
    "hunyuan_vl",
    "minicpmv4_7",
    "minicpmv4_6",
    "qwen2_5_omni",
    "qwen3_omni",
    "qwen3_asr",
    "exaone4_5",
    "minimax_m3_vl",
    "falcon_ocr",
)
"""Modules of :mod:`mrope.models` that define a ``FAMILY``, in the order :func:`families` lists them."""

SCHEME_MODULES: tuple[str, ...] = (
    "mrope_interleave",
    "mhrope",
    "omnirope",
    "videorope",
    "hope",
    "tad_rope",
    "vrope",
    "v2pe",
    "rope_dhr",
    "circle_rope",
    "circle_rope_age",
)
"""Modules of ``mrope.models._schemes`` that define a research ``SCHEME`` (a :class:`ModelFamily` on a base
family's ids and sizing): chosen by name like a family, never listed among the released families."""

ModelLike = str | ModelFamily
"""What ``model=`` takes: a family name, a Hugging Face model_type, a repo id, or a :class:`ModelFamily`
(for example what :func:`mrope.from_pretrained` returns)."""


def _load() -> tuple[tuple[ModelFamily, ...], tuple[ModelFamily, ...], dict[str, ModelFamily]]:
    fams = tuple(importlib.import_module(f"mrope.models._families.{m}").FAMILY for m in FAMILY_MODULES)
    schemes = tuple(importlib.import_module(f"mrope.models._schemes.{m}").SCHEME for m in SCHEME_MODULES)
    index: dict[str, ModelFamily] = {}
    for fam in (*fams, *schemes):
        for key in (fam.name, *fam.model_types, *fam.aliases):
            k = key.lower()
            if k in index and index[k] is not fam:
                raise LayoutError(f"registry: {key!r} names both {index[k].name!r} and {fam.name!r}")
            index[k] = fam
    return fams, schemes, index


_FAMILIES, _SCHEMES, _INDEX = _load()
_BY_MODEL_TYPE: dict[str, ModelFamily] = {t.lower(): f for f in _FAMILIES for t in f.model_types}

PRESET_NAMES: tuple[str, ...] = tuple(f.name for f in _FAMILIES)
"""The canonical family names, in registry order (what :func:`names` returns)."""
SCHEME_NAMES: tuple[str, ...] = tuple(f.name for f in _SCHEMES)
"""The research schemes' names (``model="videorope"``), in :data:`SCHEME_MODULES` order."""


def families() -> tuple[ModelFamily, ...]:
    """Every registered family, in registry order."""
    return _FAMILIES


def names() -> tuple[str, ...]:
    """The canonical family names, in registry order: :data:`PRESET_NAMES`."""
    return PRESET_NAMES


def schemes() -> tuple[ModelFamily, ...]:
    """Every research scheme, in :data:`SCHEME_MODULES` order."""
    return _SCHEMES


def _unknown(what: str) -> LayoutError:
    return LayoutError(
        f"{what}; expected a model family name ({', '.join(PRESET_NAMES)}), a research scheme "
        f"({', '.join(SCHEME_NAMES)}), a Hugging Face model_type "
        f"(e.g. 'qwen2_5_vl'), a repo id (e.g. 'Qwen/Qwen2.5-VL-7B-Instruct'), a ModelFamily, or "
        "mrope.from_pretrained(<checkpoint folder>)"
    )


def get_family(model: Any) -> ModelFamily:
    """The :class:`ModelFamily` a ``model=`` value names.

    Args:
        model: a family name (``"qwen2.5-vl"``), a Hugging Face ``model_type`` (``"qwen2_5_vl"``), a repo id
            (``"Qwen/Qwen2.5-VL-7B-Instruct"``; all matched case-insensitively), or a :class:`ModelFamily`.

    Raises:
        LayoutError: no model given, or an unknown one; the message lists the names.
    """
    if isinstance(model, ModelFamily):
        return model
    if model is None:
        raise _unknown("no model given: mrope has no default model, pass model=")
    if not isinstance(model, str):
        raise _unknown(f"model must be a name or a ModelFamily; got {type(model).__name__}")
    fam = _INDEX.get(model.strip().lower())
    if fam is None:
        raise _unknown(f"unknown model {model!r}")
    return fam


def family_for_model_type(model_type: str) -> ModelFamily | None:
    """The family a Hugging Face ``model_type`` belongs to, or ``None``."""
    return _BY_MODEL_TYPE.get(str(model_type).lower())


def model_types() -> tuple[str, ...]:
    """Every Hugging Face ``model_type`` a registered family answers to."""
    return tuple(_BY_MODEL_TYPE)


def resolve_rules(
    model: Any = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    convention: str = "released",
) -> LayoutRules:
    """The :class:`LayoutRules` for a ``model=`` / ``rules=`` / ``convention=`` triple.

    - ``rules`` a :class:`LayoutRules`: used as given (``model`` may then be omitted); under
      ``convention="transformers5"`` the model's transformers 5.24 overrides are applied to it.
    - otherwise the model's rules under ``convention`` (``"released"``: the official semantics;
      ``"transformers5"``: the family's own transformers 5.24 ``get_rope_index``), with a ``rules`` dict's
      overrides applied last.

    Raises:
        LayoutError: no model (and no full rules), an unknown model or convention, bad overrides.
    """
    check_convention(convention)
    if isinstance(rules, LayoutRules):
        if convention == "released":
            return rules
        if model is None:
            raise LayoutError(
                "convention='transformers5' needs model= (the family whose transformers 5.24 conventions "
                "apply); got rules= alone"
            )
        return rules.replace(**get_family(model).transformers5)
    base = get_family(model).rules_for(convention)
    if rules is None:
        return base
    if not isinstance(rules, dict):
        raise LayoutError(f"rules must be a LayoutRules or a dict of overrides; got {type(rules).__name__}")
    return base.replace(**rules)


def resolve_tokenizer(model: Any, tokenizer: Any = None) -> Any:
    """``tokenizer`` if given (a ``tokenizer.json`` path loaded by :func:`mrope._tokenizer.load_tokenizer`,
    as the pipeline and the command line load one), else the tokenizer a :class:`ModelFamily` carries (a
    checkpoint's ``tokenizer.json`` read by :func:`mrope.from_pretrained`), else ``None``."""
    if tokenizer is not None or not isinstance(model, ModelFamily):
        return load_tokenizer(tokenizer)
    return model.tokenizer


def resolve_spec(model: Any) -> RopeSpec:
    """The :class:`RopeSpec` of a ``model=`` value (a :class:`RopeSpec` is returned as is).

    Raises:
        SpecError: a family whose rotation is partly a checkpoint tensor (its ``learned_rotary``,
            Falcon-OCR's ``freqs_cis_golden``): no :class:`RopeSpec` is its rotation; the message names the
            tensor and the op that applies it.
    """
    if isinstance(model, RopeSpec):
        return model
    family = get_family(model)
    if family.learned_rotary is not None:
        learned = family.learned_rotary
        raise SpecError(
            f"model {family.name!r}: no RopeSpec is its rotation; half of each head turns by the checkpoint "
            f"tensor {learned.buffer!r}. Pass mrope.from_pretrained(<checkpoint folder>) to "
            f"mrope.ops.apply_mrope, or build the table with {learned.table_builder}({learned.buffer}, "
            f"theta={family.spec.theta:g})"
        )
    return family.spec


def get_route(route: str | Route | None) -> Route:
    """The :class:`~mrope._route.Route` named ``route`` (a ``Route`` as is; ``None``: the default,
    ``"processor"``; the table: :mod:`mrope.models._routes`).

    Raises:
        MediaError: an unknown name (the message lists the known ones).
    """
    if isinstance(route, Route):
        return route
    found = ROUTES.get(DEFAULT_ROUTE if route is None else route)
    if found is None:
        raise MediaError(f"unknown route {route!r}; expected one of {', '.join(ROUTE_NAMES)}")
    return found


VIDEO_MODEL_NAMES: tuple[str, ...] = tuple(m.name for m in VIDEO_MODELS)
"""The video-generation transformers :func:`video_rope` reads (Wan 2.x, HunyuanVideo, CogVideoX, and
OmniGen2's image DiT)."""
_VIDEO_INDEX = {key.lower(): m for m in VIDEO_MODELS for key in (m.name, m.class_name)}


def video_rope(config: dict[str, Any], model: str | None = None) -> VideoRope:
    """The :class:`mrope.VideoRope` of a diffusers video (or OmniGen2 image) transformer, from its config
    (``transformer/config.json`` as a dict).

    Args:
        config: the transformer's config; keys it lacks take the transformer's defaults.
        model: a name of :data:`VIDEO_MODEL_NAMES` or a diffusers class name; ``None``: the config's
            ``_class_name`` (``"WanTransformer3DModel"``, ``"HunyuanVideoTransformer3DModel"``,
            ``"CogVideoXTransformer3DModel"``, ``"OmniGen2Transformer2DModel"``).

    Raises:
        SpecError: an unknown model, or a config value of the wrong kind.
    """
    if not isinstance(config, dict):
        raise SpecError(f"config must be a dict (a transformer's config.json); got {type(config).__name__}")
    key = config.get("_class_name") if model is None else model
    found = _VIDEO_INDEX.get(key.strip().lower()) if isinstance(key, str) else None
    if found is None:
        known = ", ".join(f"{m.name!r} ({m.class_name})" for m in VIDEO_MODELS)
        what = f"model {model!r}" if model is not None else f"config _class_name {key!r}"
        raise SpecError(f"unknown video model: {what}; expected one of {known}")
    return found.read(config)


__all__ = [
    "FAMILY_MODULES",
    "PRESET_NAMES",
    "SCHEME_MODULES",
    "SCHEME_NAMES",
    "VIDEO_MODEL_NAMES",
    "ModelLike",
    "families",
    "family_for_model_type",
    "get_family",
    "get_route",
    "model_types",
    "names",
    "resolve_rules",
    "resolve_spec",
    "resolve_tokenizer",
    "schemes",
    "video_rope",
]
