"""The model registry: one module per released model family, indexed by name, model_type and repo id.

Each family module defines ``FAMILY = ModelFamily(...)`` (:mod:`mrope.models.family`, the value type);
:mod:`mrope.models.registry` indexes the families and holds every lookup by name (:func:`get_family`,
:func:`resolve_rules`, :func:`resolve_spec`, :data:`PRESET_NAMES`); :mod:`mrope.models.config` reads a
Hugging Face config dict into a spec (:func:`spec_from_config`); :mod:`mrope.models.table` renders the
family table of docs/families.md. This package gathers their public names, and installs the deprecated aliases the
value types used to carry (``LayoutRules.preset``, ``RopeSpec.preset``, ``RopeSpec.from_hf_config``,
``mrope.rules.resolve_rules``, ``mrope.rules.PRESET_NAMES``, ``mrope.spec.PRESET_NAMES``): the value types
import nothing of the registry, so the registry puts the old paths back onto them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mrope.rules as _rules_module
import mrope.spec as _spec_module
from mrope._deprecated import moved_names, warn_moved
from mrope.errors import LayoutError, SpecError
from mrope.models.config import spec_from_config
from mrope.models.family import CONVENTIONS, CheckpointChoice, Convention, ModelFamily
from mrope.models.registry import (
    FAMILY_MODULES,
    PRESET_NAMES,
    ModelLike,
    families,
    family_for_model_type,
    get_family,
    model_types,
    names,
    resolve_rules,
    resolve_spec,
    resolve_tokenizer,
)
from mrope.models.table import family_table
from mrope.rules import LayoutRules
from mrope.spec import RopeSpec

__all__ = [
    "CONVENTIONS",
    "FAMILY_MODULES",
    "PRESET_NAMES",
    "CheckpointChoice",
    "Convention",
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
    "spec_from_config",
]


# ---------------------------------------------------------------- deprecated aliases on the value types


def _preset_rules(cls: type[LayoutRules], name: str) -> LayoutRules:
    """Deprecated: ``mrope.models.get_family(name).rules``."""
    warn_moved("mrope.LayoutRules.preset(name)", "mrope.models.get_family(name).rules")
    return get_family(name).rules


def _preset_spec(cls: type[RopeSpec], name: str) -> RopeSpec:
    """Deprecated: ``mrope.models.get_family(name).spec`` (an unknown name is a :class:`SpecError` here)."""
    warn_moved("mrope.RopeSpec.preset(name)", "mrope.models.get_family(name).spec")
    try:
        return get_family(name).spec
    except LayoutError as exc:
        raise SpecError(str(exc)) from None


def _spec_from_hf_config(
    cls: type[RopeSpec], config: Mapping[str, Any], *, layer_type: str | None = None, family: Any = None
) -> RopeSpec:
    """Deprecated: :func:`mrope.models.spec_from_config`."""
    warn_moved("mrope.RopeSpec.from_hf_config", "mrope.models.spec_from_config")
    return spec_from_config(config, layer_type=layer_type, family=family)


LayoutRules.preset = classmethod(_preset_rules)  # type: ignore[attr-defined]
RopeSpec.preset = classmethod(_preset_spec)  # type: ignore[attr-defined]
RopeSpec.from_hf_config = classmethod(_spec_from_hf_config)  # type: ignore[attr-defined]
_rules_module.__getattr__ = moved_names(  # type: ignore[method-assign]
    "mrope.rules",
    {
        "PRESET_NAMES": (PRESET_NAMES, "mrope.models.PRESET_NAMES"),
        "resolve_rules": (resolve_rules, "mrope.models.resolve_rules"),
    },
)
_spec_module.__getattr__ = moved_names(  # type: ignore[method-assign]
    "mrope.spec", {"PRESET_NAMES": (PRESET_NAMES, "mrope.models.PRESET_NAMES")}
)
