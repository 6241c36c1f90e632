"""A request's ``layer_sets``: ask for every position set of the model, or name sets of one's own.

A model with a per-layer choice of positions (:class:`mrope.LayerSets`: Circle-RoPE's AGE alternates a
circle set and an M-RoPE set by layer) has one positions array per set. ``"layer_sets": true`` asks a
face for all of them and the layer pattern; ``"layer_sets": {"sets": {name: overrides}, "pattern":
[name, ...]}`` lays out sets of the request's own on any model (each a dict of :class:`mrope.LayoutRules`
overrides applied after the request's ``rules``; ``"nope"`` in the pattern is a layer without rotary).
The faces build them with :func:`mrope.build_position_sets` on :func:`sets_family`'s family.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from mrope._errors import MRopeError
from mrope._layer_sets import LayerSets
from mrope.models import ModelFamily, ModelLike, get_family

from ._fields import RulesOverrides, StrictModel, rules_dict

MAX_SETS = 16
"""Most position sets a request may name (each is a positions array of the whole prompt)."""
MAX_PATTERN = 4096
"""Longest layer pattern a request may give."""

SetName = Annotated[str, Field(min_length=1, max_length=64)]


class LayerSetsBody(StrictModel):
    """``layer_sets`` as an object: ``{}`` is the model's own sets; ``sets`` with ``pattern`` are the
    request's (names other than ``"nope"``; the pattern names sets of ``sets`` or ``"nope"``)."""

    sets: Annotated[dict[SetName, RulesOverrides], Field(min_length=1, max_length=MAX_SETS)] | None = None  # type: ignore[valid-type]
    pattern: Annotated[list[SetName], Field(min_length=1, max_length=MAX_PATTERN)] | None = None

    @model_validator(mode="after")
    def _checked(self) -> LayerSetsBody:
        if (self.sets is None) != (self.pattern is None):
            raise ValueError(
                "layer_sets takes 'sets' and 'pattern' together (sets of the request's own), or neither "
                "(the model's own sets: layer_sets true)"
            )
        if self.sets is not None:
            try:
                self.layer_sets()
            except MRopeError as exc:
                raise ValueError(str(exc)) from None
        return self

    def layer_sets(self) -> LayerSets | None:
        """The request's own :class:`mrope.LayerSets` (``None``: the model's)."""
        if self.sets is None or self.pattern is None:
            return None
        return LayerSets({name: rules_dict(o) or {} for name, o in self.sets.items()}, tuple(self.pattern))


def _true_is_own_sets(value: Any) -> Any:
    """``true`` asks for the model's own sets (``{}``), ``false`` for none (absent)."""
    if value is True:
        return {}
    if value is None or value is False:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"layer_sets is true or an object {{sets, pattern}}; got {type(value).__name__}")
    return value


def _boolean_too(schema: dict[str, Any]) -> None:
    """The field's JSON schema says what it accepts: ``true`` as well as the object."""
    schema.setdefault("anyOf", []).insert(0, {"type": "boolean"})


LayerSetsField = Annotated[
    LayerSetsBody | None,
    BeforeValidator(_true_is_own_sets),
    Field(
        description="return every position set with the layer pattern: the model's own (true) or the "
        "request's own {sets, pattern} (docs/schemes.md, per-layer position sets)",
        json_schema_extra=_boolean_too,
    ),
]
"""The ``layer_sets`` field of a request."""


def sets_family(model: ModelLike, layer_sets: LayerSetsBody | None) -> ModelFamily | None:
    """The family whose position sets a request asks for: ``model``'s, with the request's own sets when
    it names them; ``None`` when the request asks for none."""
    if layer_sets is None:
        return None
    family = get_family(model)
    own = layer_sets.layer_sets()
    return family if own is None else family.replace(layer_sets=own)


__all__ = ["MAX_PATTERN", "MAX_SETS", "LayerSetsBody", "LayerSetsField", "sets_family"]
