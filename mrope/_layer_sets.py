"""LayerSets: the named position sets of a model and which one each decoder layer rotates by.

Most models rotate every layer by one set of positions. Some choose per layer: Circle-RoPE's AGE
(lose4578/CircleRoPE at 063fb2c, ``code/modular_qwen2_5_vl_circle_rope.py:17-27`` and :310-329) gives
even layers the Circle-RoPE positions and odd layers Qwen2.5-VL's; a model whose global-attention
layers have no rotary (NoPE) reads the set :data:`NOPE` there (cos 1, sin 0). A set is a dict of
:class:`mrope.LayoutRules` overrides on the model's own rules (``{}``: the model's rules), so the builder
lays it out like any ``rules=`` (:func:`mrope.build_position_sets`), and the ops take the tensors of the
sets by name (:func:`mrope.ops.layer_cos_sin`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mrope._errors import LayoutError

NOPE = "nope"
"""The set name of a layer without rotary: its cos is 1 and its sin 0 on every channel."""
DEFAULT_SET = "default"
"""The one set of a model that rotates every layer by its own positions."""


@dataclass(frozen=True)
class LayerSets:
    """Named position sets and the set of each layer.

    Attributes:
        sets: set name -> :class:`mrope.LayoutRules` field overrides on the model's rules (``{}``: its
            own rules). Names are non-empty strings other than :data:`NOPE`.
        pattern: the set each layer reads, repeated over the layers: layer ``i`` reads
            ``pattern[i % len(pattern)]`` (a name of ``sets``, or :data:`NOPE`).
    """

    sets: Mapping[str, Mapping[str, Any]]
    pattern: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.sets, Mapping) or not self.sets:
            raise LayoutError(
                f"LayerSets.sets must be a non-empty dict of name -> overrides; got {self.sets!r}"
            )
        for name, overrides in self.sets.items():
            if not isinstance(name, str) or not name or name == NOPE:
                raise LayoutError(
                    f"LayerSets: a set name is a non-empty string other than {NOPE!r}; got {name!r}"
                )
            if not isinstance(overrides, Mapping):
                raise LayoutError(
                    f"LayerSets: set {name!r} must be a dict of rule overrides; got {overrides!r}"
                )
        frozen = {name: MappingProxyType(dict(o)) for name, o in self.sets.items()}
        object.__setattr__(self, "sets", MappingProxyType(frozen))
        if isinstance(self.pattern, str) or not self.pattern:
            raise LayoutError(
                f"LayerSets.pattern must be a non-empty sequence of set names; got {self.pattern!r}"
            )
        object.__setattr__(self, "pattern", tuple(self.pattern))
        unknown = sorted({p for p in self.pattern if p != NOPE and p not in self.sets}, key=str)
        if unknown:
            raise LayoutError(
                f"LayerSets.pattern names sets {unknown} that are not in sets {list(self.sets)} (or {NOPE!r})"
            )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as the constructor call (the read-only mappings do not pickle themselves)."""
        return (LayerSets, ({k: dict(v) for k, v in self.sets.items()}, self.pattern))

    def for_layers(self, num_layers: int) -> tuple[str, ...]:
        """The set name of each of ``num_layers`` layers (the pattern repeated)."""
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise LayoutError(f"num_layers must be an int >= 1; got {num_layers!r}")
        return tuple(self.pattern[i % len(self.pattern)] for i in range(num_layers))


SINGLE_SET = LayerSets({DEFAULT_SET: {}}, (DEFAULT_SET,))
"""Every layer rotated by the model's own positions: the layer sets of a model that declares none."""

__all__ = ["DEFAULT_SET", "NOPE", "SINGLE_SET", "LayerSets"]
