"""The apply op's frequencies and angle arithmetic: transformers' fp32 inverse frequencies, exact fixed-point
turns, and dynamic NTK per call (the pair tables of :mod:`mrope.ops._pairs` hold the rest).

Two angle precisions (``angle_precision``):

- ``"fp32"``: the angle is the fp32 product ``float32(pos) * inv_freq32``, exactly as transformers and vLLM
  compute it, with ``inv_freq32`` computed by the same fp32 torch arithmetic that transformers uses
  (``1.0 / (theta ** (arange(0, d, 2, float32) / d))`` and its scaled variants: the formulas of
  :mod:`mrope._scaling`, evaluated in torch fp32). This
  differs from ``float32(spec.inv_freq())`` in a quarter to a third of the entries by about one ulp, so it is computed
  here, and checked in the tests both against transformers (bit for bit) and against ``spec.inv_freq``
  (float64, to a few fp32 roundings). A pretrained model therefore sees the angles it was trained with.
- ``"exact"``: the angle is ``pos * inv_freq`` reduced to ``[-pi, pi]`` exactly, then rounded to fp32 once,
  for every int64 position (and floating positions, see below), where ``inv_freq = spec.inv_freq()`` is the
  spec's float64 value. The table holds turns per position ``G = inv_freq / (2 pi)`` in 96-bit fixed point,
  ``U = round(G * 2^96) mod 2^96`` (the integer part of G drops out: whole turns), as three 32-bit limbs
  ``u2, u1, u0`` (int64 ``[3, F]``, see :func:`turn_limbs`). Both backends compute the fraction of turns
  ``pos * G`` as a signed 64-bit fixed-point number with wrapping int64 arithmetic (:func:`turn_fraction`
  shows the formula in torch; the kernel has the same lines), so they agree bit for bit on it and are exact
  to ``2^-63`` turns for any position: nothing wraps at ``2^31`` or ``2^53``. A floating position is split
  into ``floor(pos)`` (int64) and its fraction (32 fixed-point bits). The torch path turns the fraction
  into radians in float64, the kernel in a hi/lo pair of fp32 with a split ``2 pi = C_hi + C_lo``.

The pair tables (:mod:`mrope.ops._pairs`) cache these per (table, precision, device); dynamic NTK
frequencies depend on ``max(pos) + 1`` and are computed per call (:func:`dynamic_freq`: in ``"fp32"`` mode
on the positions' device without a host sync, as transformers does; in ``"exact"`` mode ``max(pos)`` is
read on the host once).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from mrope._scaling import INV_FREQ_FORMULAS
from mrope._spec import RopeSpec

AnglePrecision = Literal["fp32", "exact"]

TWO_PI_HI = float(np.float32(2 * math.pi))
"""``2 pi`` rounded to fp32 (radians per turn, high part)."""
TWO_PI_LO = float(np.float32(2 * math.pi - TWO_PI_HI))
"""``2 pi - TWO_PI_HI`` rounded to fp32 (low part); ``TWO_PI_HI + TWO_PI_LO`` is ``2 pi`` to ~2^-48."""

TURN_BITS = 96
"""Fixed-point bits of the exact-mode table: ``U = round(inv_freq / (2 pi) * 2^96) mod 2^96``."""
LIMB_MASK = 0xFFFFFFFF
FRAC_BITS = 32
"""Fixed-point bits kept of the fractional part of a floating position in exact mode."""


def _arccot_fixed(x: int, unity: int) -> int:
    """``arccot(x) * unity`` in integer arithmetic (alternating series), for Machin's formula."""
    total = term = unity // x
    n, sign, x2 = 3, -1, x * x
    while term:
        term //= x2
        total += sign * (term // n)
        sign, n = -sign, n + 2
    return total


_PI_BITS = 256
_TWO_PI_FIXED = (
    8 * (4 * _arccot_fixed(5, 1 << (_PI_BITS + 16)) - _arccot_fixed(239, 1 << (_PI_BITS + 16)))
) >> 16
"""``2 pi * 2^256`` as an integer (Machin: ``pi = 16 arccot 5 - 4 arccot 239``), exact to a few units."""

# --------------------------------------------------------------------------- fp32: transformers' arithmetic


class TorchOps:
    """:class:`mrope._scaling.ArrayOps` in torch float32 on one device: the scaling formulas evaluated with
    these give transformers' fp32 inverse frequencies bit for bit (same operations, same order)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device

    def exponents(self, d: int) -> torch.Tensor:
        return torch.arange(0, d, 2, dtype=torch.int64, device=self.device).to(torch.float32) / d

    def indices(self, n: int) -> torch.Tensor:
        return torch.arange(n, dtype=torch.float32, device=self.device)

    def clip(self, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return torch.clamp(x, low, high)

    def at_least(self, x: torch.Tensor, low: int) -> torch.Tensor:
        return torch.clamp(x, min=low)


def hf_inv_freq_fp32(spec: RopeSpec, max_position: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse frequencies (radians per position) in fp32 as transformers computes them, ``[rotary_dim // 2]``.

    The formula is ``mrope._scaling.INV_FREQ_FORMULAS[spec.scaling.type]``, the one ``spec.inv_freq`` uses,
    evaluated in torch fp32 (:class:`TorchOps`).

    Args:
        spec: the rotary spec; its ``scaling`` picks the formula.
        max_position: dynamic NTK only: a 0-d tensor ``max(pos)``; the table is computed on its device
            from ``seq_len = max(max_position + 1, original_max_position_embeddings)`` (integer positions
            count as int64), with no host sync. Ignored for the other scalings.

    Returns:
        fp32 tensor on CPU (static scalings) or on ``max_position``'s device (dynamic NTK).
    """
    formula = INV_FREQ_FORMULAS[spec.scaling.type]
    if spec.scaling.type != "dynamic" or max_position is None:
        return formula(TorchOps(), spec, None).to(torch.float32)
    if not max_position.dtype.is_floating_point:
        max_position = max_position.to(torch.int64)
    return formula(TorchOps(max_position.device), spec, max_position + 1).to(torch.float32)


# --------------------------------------------------------------------------- exact: split turns


def turn_limbs(inv_freq: np.ndarray) -> np.ndarray:
    """Turns per position ``inv_freq / (2 pi)`` in 96-bit fixed point, as limbs: int64 ``[3, F]``.

    Row 0 holds bits 64..95 of ``U = round(inv_freq / (2 pi) * 2^96) mod 2^96``, row 1 bits 32..63, row 2
    bits 0..31; every entry is in ``[0, 2^32)``. ``inv_freq`` (float64) is taken as exact and divided by
    ``2 pi`` with 256-bit integer arithmetic, so ``U`` is ``inv_freq / (2 pi)`` to ``2^-97`` turns.
    """
    out = np.empty((3, len(inv_freq)), dtype=np.int64)
    for i, value in enumerate(np.asarray(inv_freq, dtype=np.float64).tolist()):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"inverse frequencies must be finite and >= 0; got {value!r}")
        num, den = value.as_integer_ratio()  # exact: value = num / den, den a power of two
        numerator = num << (TURN_BITS + _PI_BITS)
        denominator = den * _TWO_PI_FIXED
        u = ((2 * numerator + denominator) // (2 * denominator)) % (1 << TURN_BITS)
        out[:, i] = (u >> 64, (u >> 32) & LIMB_MASK, u & LIMB_MASK)
    return out


def turn_fraction(positions: torch.Tensor, limbs: torch.Tensor) -> torch.Tensor:
    """Fraction of turns ``pos * G`` as signed 64-bit fixed point (``value * 2^-64`` turns, in ``[-1/2, 1/2)``).

    Args:
        positions: ``[*P, F]`` the driving position of every frequency: int64, or floating (split into
            ``floor`` and 32 fixed-point bits of fraction).
        limbs: int64 ``[3, F]`` from :func:`turn_limbs`.

    Returns:
        int64 ``[*P, F]``. The arithmetic wraps modulo ``2^64`` on purpose: that drops whole turns. The
        Triton kernel runs the same operations on the same integers, so both backends get the same bits.
    """
    u2, u1, u0 = limbs[0], limbs[1], limbs[2]
    if positions.dtype.is_floating_point:
        whole = positions.floor()
        frac = ((positions - whole) * float(1 << FRAC_BITS)).to(torch.int64)
        a = whole.to(torch.int64)
    else:
        frac = None
        a = positions.to(torch.int64)
    ph, pl = a >> 32, a & LIMB_MASK
    acc = ((a * u2) << 32) + a * u1 + ph * u0 + (((pl * u0) >> 32) & LIMB_MASK)
    if frac is not None:
        acc = acc + frac * u2 + (((frac * u1) >> 32) & LIMB_MASK)
    return acc


# --------------------------------------------------------------------------- dynamic NTK, per call


def dynamic_freq(spec: RopeSpec, precision: AnglePrecision, positions: torch.Tensor) -> torch.Tensor:
    """Dynamic NTK's frequencies for ``max(positions) + 1``, on ``positions.device``: fp32 ``[1, F]``
    (``"fp32"``, computed on the device without a host sync) or int64 limbs ``[3, F]`` (``"exact"``, the
    maximum read on the host once). ``positions`` must not be empty."""
    if precision == "fp32":
        return hf_inv_freq_fp32(spec, positions.max()).reshape(1, -1).to(torch.float32)
    seq_len = math.floor(positions.max().item()) + 1
    return torch.from_numpy(turn_limbs(spec.inv_freq(seq_len))).to(positions.device)
