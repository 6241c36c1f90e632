"""build_position_sets: the positions of each named position set of a model, for its per-layer choice.

A model's :class:`mrope.LayerSets` names its position sets as rule overrides; each set's positions are
:func:`mrope.build_positions` under the model's rules with the set's overrides applied last (after the
call's own ``rules=``). Which layer reads which set is ``get_family(model).layer_sets.for_layers(n)``,
and :func:`mrope.ops.layer_cos_sin` turns the sets' tensors into each layer's cos and sin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrope._builder import build_positions
from mrope._caches import cached
from mrope._errors import LayoutError
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Segment
from mrope.models import ModelFamily, ModelLike, get_family


@cached("layout.position_set_rules", maxsize=64)
def _set_rules(family: ModelFamily, name: str) -> LayoutRules:
    """The rules of ``family``'s position set ``name`` (its overrides on the family's rules), made once:
    a dict of overrides would build and check new rules on every call."""
    return family.rules.replace(**family.layer_sets.sets[name])


def build_position_sets(
    segments: Sequence[Segment],
    model: ModelLike,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
    convention: str = "released",
) -> dict[str, Positions]:
    """Positions of one sequence under each position set of ``model`` (its ``layer_sets``).

    Args:
        segments, tokenizer, convention: as :func:`mrope.build_positions`.
        model: required: a family or scheme name, or a :class:`mrope.models.ModelFamily`.
        rules: a :class:`LayoutRules` or a dict of overrides, applied to every set before the set's own.

    Returns:
        ``{set name: Positions}`` in the order the model declares its sets (one set, ``"default"``, for a
        model that rotates every layer alike). Each set has its own ids and decode delta.
    """
    family = get_family(model)
    out: dict[str, Positions] = {}
    for name, overrides in family.layer_sets.sets.items():
        if rules is None and convention == "released":
            merged: LayoutRules | dict[str, Any] = _set_rules(family, name)
        elif rules is None:
            merged = dict(overrides)
        elif isinstance(rules, LayoutRules):
            merged = rules.replace(**overrides)
        elif isinstance(rules, dict):
            merged = {**rules, **overrides}
        else:
            raise LayoutError(
                f"rules must be a LayoutRules, a dict of overrides or None; got {type(rules).__name__}"
            )
        out[name] = build_positions(segments, family, merged, tokenizer=tokenizer, convention=convention)
    return out


__all__ = ["build_position_sets"]
