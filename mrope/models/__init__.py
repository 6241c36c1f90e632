"""The model registry: one module per released model family (and per research scheme), indexed by name,
model_type and repo id.

Each family module defines ``FAMILY = ModelFamily(...)`` (:mod:`mrope.models._family`, the value type);
:mod:`mrope.models._registry` indexes the families and holds every lookup by name (:func:`get_family`,
:func:`resolve_rules`, :func:`resolve_spec`, :data:`PRESET_NAMES`); :mod:`mrope.models._config` reads a
Hugging Face config dict into a spec (:func:`spec_from_config`); :mod:`mrope.models._video_models` reads
a diffusers video transformer's config into a :class:`mrope.VideoRope` (:func:`video_rope`); :mod:`mrope.models._table` renders the
family table of docs/families.md. This package gathers their public names.
"""

from __future__ import annotations

from mrope._learned_rotary import LearnedRotary
from mrope.models._config import spec_from_config
from mrope.models._family import CONVENTIONS, CheckpointChoice, Convention, ModelFamily
from mrope.models._registry import (
    FAMILY_MODULES,
    PRESET_NAMES,
    SCHEME_NAMES,
    VIDEO_MODEL_NAMES,
    ModelLike,
    families,
    family_for_model_type,
    get_family,
    model_types,
    names,
    resolve_rules,
    resolve_spec,
    resolve_tokenizer,
    schemes,
    video_rope,
)
from mrope.models._table import family_table

__all__ = [
    "CONVENTIONS",
    "FAMILY_MODULES",
    "PRESET_NAMES",
    "SCHEME_NAMES",
    "VIDEO_MODEL_NAMES",
    "CheckpointChoice",
    "Convention",
    "LearnedRotary",
    "ModelFamily",
    "ModelLike",
    "families",
    "family_table",
    "family_for_model_type",
    "get_family",
    "model_types",
    "names",
    "resolve_rules",
    "resolve_spec",
    "resolve_tokenizer",
    "schemes",
    "spec_from_config",
    "video_rope",
]
