"""Rotary inverse-frequency formulas: one function per scaling type, written once for numpy and torch.

:data:`INV_FREQ_FORMULAS` maps ``RopeScaling.type`` to its formula (like transformers' rope utilities).
Every formula is written against a tiny array interface (:class:`ArrayOps`), so the same lines compute

- ``RopeSpec.inv_freq()``: numpy float64 (:data:`NUMPY_F64`), the spec's reference values and the
  ``"exact"`` angle precision's input;
- ``mrope.ops._freqs.hf_inv_freq_fp32``: torch float32, which reproduces transformers' fp32 arithmetic bit
  for bit (the ``"fp32"`` angle precision), because the operations are the same and in the same order.

Formulas (``d`` = rotary dim, ``e = arange(0, d, 2) / d``):

- ``none``: ``1 / theta**e``.
- ``linear``: ``1 / theta**e / factor``.
- ``dynamic`` (NTK-aware, grows with the sequence): ``base = theta * (factor * L / L0 - (factor - 1))**(d / (d - 2))``
  with ``L = max(seq_len, L0)``; ``1 / base**e``. No ``seq_len``: the plain table.
- ``ntk_alpha`` (HunYuan, fixed): ``base = theta * alpha**(d / (d - 2))``; ``1 / base**e``.
- ``yarn``: frequencies below the correction range keep ``1 / theta**e``, those above it are divided by
  ``factor``, with a linear ramp between (range from ``RopeSpec.yarn_ramp``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, get_args

import numpy as np

ScalingType = Literal["none", "linear", "dynamic", "ntk_alpha", "yarn"]
"""``RopeScaling.type``: the scaling types, one formula each in :data:`INV_FREQ_FORMULAS`."""
SCALING_TYPES: tuple[str, ...] = get_args(ScalingType)


class ArrayOps(Protocol):
    """What the formulas need from an array library (all results in the working dtype)."""

    def exponents(self, d: int) -> Any:
        """``arange(0, d, 2)`` (integers) cast to the working dtype, divided by ``d``: ``[d // 2]``."""

    def indices(self, n: int) -> Any:
        """``arange(n)`` in the working dtype."""

    def clip(self, x: Any, low: float, high: float) -> Any:
        """``x`` clamped elementwise to ``[low, high]``."""

    def at_least(self, x: Any, low: int) -> Any:
        """``max(x, low)`` for a sequence length (a Python int, or a 0-d tensor kept on its device)."""


class RotarySpec(Protocol):
    """What the formulas read of a :class:`~mrope.RopeSpec` (so this module needs no import of it)."""

    @property
    def theta(self) -> float:
        """The frequency base."""

    @property
    def rotary_dim(self) -> int:
        """Channels that rotate."""

    @property
    def scaling(self) -> Any:
        """The :class:`~mrope.RopeScaling` (``factor``, ``original_max_position_embeddings``, ``alpha``)."""

    def yarn_ramp(self) -> tuple[float, float]:
        """YaRN's correction range ``(low, high)`` in frequency indices."""


class _NumpyOps:
    """numpy float64."""

    def exponents(self, d: int) -> np.ndarray:
        return np.arange(0, d, 2, dtype=np.int64).astype(np.float64) / d

    def indices(self, n: int) -> np.ndarray:
        return np.arange(n, dtype=np.float64)

    def clip(self, x: np.ndarray, low: float, high: float) -> np.ndarray:
        return np.clip(x, low, high)

    def at_least(self, x: Any, low: int) -> int:
        return max(int(x), low)


NUMPY_F64: ArrayOps = _NumpyOps()


def _plain(ops: ArrayOps, base: Any, d: int) -> Any:
    return 1.0 / (base ** ops.exponents(d))


def _none(ops: ArrayOps, spec: RotarySpec, seq_len: Any) -> Any:
    return _plain(ops, float(spec.theta), spec.rotary_dim)


def _linear(ops: ArrayOps, spec: RotarySpec, seq_len: Any) -> Any:
    return _plain(ops, float(spec.theta), spec.rotary_dim) / spec.scaling.factor


def _dynamic(ops: ArrayOps, spec: RotarySpec, seq_len: Any) -> Any:
    sc, d = spec.scaling, spec.rotary_dim
    if seq_len is None:
        return _plain(ops, float(spec.theta), d)
    l0 = sc.original_max_position_embeddings
    length = ops.at_least(seq_len, l0)
    base = spec.theta * ((sc.factor * length / l0) - (sc.factor - 1)) ** (d / (d - 2))
    return _plain(ops, base, d)


def _ntk_alpha(ops: ArrayOps, spec: RotarySpec, seq_len: Any) -> Any:
    d = spec.rotary_dim
    base = spec.theta * spec.scaling.alpha ** (d / (d - 2))
    return _plain(ops, base, d)


def _yarn(ops: ArrayOps, spec: RotarySpec, seq_len: Any) -> Any:
    sc, d = spec.scaling, spec.rotary_dim
    pos_freqs = float(spec.theta) ** ops.exponents(d)
    extrapolated = 1.0 / pos_freqs
    interpolated = 1.0 / (sc.factor * pos_freqs)
    low, high = spec.yarn_ramp()
    ramp = ops.clip((ops.indices(d // 2) - low) / (high - low), 0.0, 1.0)
    extrapolation_weight = 1 - ramp
    return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight


INV_FREQ_FORMULAS: dict[ScalingType, Callable[[ArrayOps, RotarySpec, Any], Any]] = {
    "none": _none,
    "linear": _linear,
    "dynamic": _dynamic,
    "ntk_alpha": _ntk_alpha,
    "yarn": _yarn,
}
"""``RopeScaling.type`` -> ``formula(ops, spec, seq_len)``, inverse frequencies ``[rotary_dim // 2]``."""
