"""build_position_sets: the positions of each named position set of a model, for its per-layer choice.

A model's :class:`mrope.LayerSets` names its position sets as rule overrides; each set's positions are
:func:`mrope.build_positions` under the model's rules with the set's overrides applied last (after the
call's own ``rules=``). Which layer reads which set is ``get_family(model).layer_sets.for_layers(n)``,
and :func:`mrope.ops.layer_cos_sin` turns the sets' tensors into each layer's cos and sin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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


@cached("layout.position_set_rules_over", maxsize=64)
def _set_rules_over(family: ModelFamily, rules: LayoutRules, name: str) -> LayoutRules:
    """Set ``name``'s overrides on ``rules`` (a call's or a record's rules), made once per pair: a face
    lays out every record's sets under the same few rules."""
    return rules.replace(**family.layer_sets.sets[name])


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
    return {
        name: build_positions(segments, family, merged, tokenizer=tokenizer, convention=convention)
        for name, merged in position_set_rules(family, rules, convention).items()
    }


def position_set_rules(
    model: ModelLike,
    rules: LayoutRules | dict[str, Any] | None = None,
    convention: str = "released",
) -> dict[str, LayoutRules | dict[str, Any]]:
    """The rules of each position set of ``model``, as :func:`build_position_sets` lays them out: the
    call's ``rules`` (a :class:`LayoutRules` or a dict of overrides, or ``None``), then the set's own
    overrides. A :class:`LayoutRules` in gives :class:`LayoutRules` out (what a face counts tokens by)."""
    family = get_family(model)
    out: dict[str, LayoutRules | dict[str, Any]] = {}
    for name, overrides in family.layer_sets.sets.items():
        if rules is None and convention == "released":
            out[name] = _set_rules(family, name)
        elif rules is None:
            out[name] = dict(overrides)
        elif isinstance(rules, LayoutRules):
            out[name] = _set_rules_over(family, rules, name)
        elif isinstance(rules, dict):
            out[name] = {**rules, **overrides}
        else:
            raise LayoutError(
                f"rules must be a LayoutRules, a dict of overrides or None; got {type(rules).__name__}"
            )
    return out


def stacked_ids(sets: Mapping[str, Positions]) -> np.ndarray:
    """The ids of ``sets`` (as :func:`build_position_sets` returns them) as one ``[S, A, T]`` array in their
    order, in one dtype that holds every set exactly (int64 sets stay int64, float32 ones float32, and a
    mix of the two is float64).

    Raises:
        LayoutError: the sets' ids differ in shape (a set override that changes the token count or the
            number of position rows), so they do not stack.
    """
    shapes = {name: p.ids.shape for name, p in sets.items()}
    if not shapes or len(set(shapes.values())) != 1:
        raise LayoutError(f"position sets stack when their ids have one shape; got {shapes}")
    dtype = np.result_type(*(p.ids.dtype for p in sets.values()))
    return np.stack([p.ids.astype(dtype, copy=False) for p in sets.values()])


__all__ = ["build_position_sets", "position_set_rules", "stacked_ids"]
