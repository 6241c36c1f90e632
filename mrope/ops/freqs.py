"""Frequency tables for the apply op: what the torch path and the Triton kernel read besides positions.

Two angle precisions (``angle_precision``):

- ``"fp32"``: the angle is the fp32 product ``float32(pos) * inv_freq32``, exactly as transformers and vLLM
  compute it, with ``inv_freq32`` computed by the same fp32 torch arithmetic that transformers uses
  (``1.0 / (theta ** (arange(0, d, 2, float32) / d))`` and its linear / dynamic-NTK / YaRN variants). This
  differs from ``float32(spec.inv_freq())`` in a quarter to a third of the entries by about one ulp, so it is computed
  here, and checked in the tests both against transformers (bit for bit) and against ``spec.inv_freq``
  (float64, to a few fp32 roundings). A pretrained model therefore sees the angles it was trained with.
- ``"exact"``: the angle is ``pos * inv_freq`` reduced to ``[-pi, pi]`` with an error of about one fp32
  rounding at any position. The kernel works in *turns*: ``g = spec.inv_freq() / (2 pi)`` in float64 is
  split into four fp32 parts ``g0 + g1 + g2 + g3`` (12, 12, 12 and 24 significant bits), the integer position
  is split into 12-bit chunks, every chunk-times-part product is then exact in fp32, its integer part is
  dropped exactly, and the fractions are summed error-free (TwoSum). The final fraction ``r`` (a hi/lo fp32
  pair, ``|r| <= 1/2``) is turned into radians with a split ``2 pi = C_hi + C_lo``. The torch path computes
  the same reduced angle in float64.

Tables are cached per (spec, precision, device); dynamic NTK tables depend on ``max(pos) + 1`` and are
computed per call (in ``"fp32"`` mode on the positions' device without a host sync, as transformers does;
in ``"exact"`` mode ``max(pos)`` is read on the host once).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
import torch

from mrope.spec import RopeSpec

AnglePrecision = Literal["fp32", "exact"]

TWO_PI_HI = float(np.float32(2 * math.pi))
"""``2 pi`` rounded to fp32 (radians per turn, high part)."""
TWO_PI_LO = float(np.float32(2 * math.pi - TWO_PI_HI))
"""``2 pi - TWO_PI_HI`` rounded to fp32 (low part); ``TWO_PI_HI + TWO_PI_LO`` is ``2 pi`` to ~2^-48."""

EXACT_PARTS = 4
"""Rows of the exact-mode table: ``g0, g1, g2`` (12 significant bits each) and ``g3`` (the fp32 rest)."""


# --------------------------------------------------------------------------- fp32: transformers' arithmetic


def _hf_default_fp32(theta: float | torch.Tensor, d: int, device: torch.device | None) -> torch.Tensor:
    """``1.0 / (theta ** (arange(0, d, 2) / d))`` in fp32, the expression transformers uses, ``[d // 2]``."""
    exponents = torch.arange(0, d, 2, dtype=torch.int64, device=device).to(torch.float32) / d
    return 1.0 / (theta**exponents)


def _hf_yarn_fp32(spec: RopeSpec) -> torch.Tensor:
    """transformers' ``_compute_yarn_parameters`` inverse frequencies, fp32 ``[rotary_dim // 2]``."""
    sc = spec.scaling
    d = spec.rotary_dim
    base = float(spec.theta)
    pos_freqs = base ** (torch.arange(0, d, 2).to(dtype=torch.float32) / d)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (sc.factor * pos_freqs)
    low, high = spec.yarn_ramp()
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor


def hf_inv_freq_fp32(spec: RopeSpec, max_position: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse frequencies (radians per position) in fp32 as transformers computes them, ``[rotary_dim // 2]``.

    Args:
        spec: the rotary spec; its ``scaling`` picks the formula (none, linear, dynamic NTK, YaRN).
        max_position: dynamic NTK only: a 0-d integer tensor ``max(pos)``; the table is computed on its
            device from ``seq_len = max(max_position + 1, original_max_position_embeddings)``, with no host
            sync. Ignored for the other scalings.

    Returns:
        fp32 tensor on CPU (static scalings) or on ``max_position``'s device (dynamic NTK).
    """
    sc = spec.scaling
    d = spec.rotary_dim
    if sc.type == "dynamic":
        l0 = sc.original_max_position_embeddings
        if max_position is None:
            return _hf_default_fp32(float(spec.theta), d, None)
        seq_len = torch.clamp(max_position.to(torch.int64) + 1, min=l0)
        base = spec.theta * ((sc.factor * seq_len / l0) - (sc.factor - 1)) ** (d / (d - 2))
        return _hf_default_fp32(base, d, seq_len.device)
    if sc.type == "yarn":
        return _hf_yarn_fp32(spec)
    inv = _hf_default_fp32(float(spec.theta), d, None)
    if sc.type == "linear":
        inv /= sc.factor
    return inv


# --------------------------------------------------------------------------- exact: split turns


def _round_to_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` (float64) rounded to ``bits`` significant bits, elementwise; exactly representable in fp32."""
    mant, exp = np.frexp(x)
    return np.ldexp(np.round(np.ldexp(mant, bits)), exp - bits)


def split_turns(inv_freq: np.ndarray) -> np.ndarray:
    """Split ``inv_freq / (2 pi)`` (turns per position) into fp32 parts, ``[EXACT_PARTS, F]`` float32.

    Rows 0..2 hold 12 significant bits each and row 3 the fp32-rounded rest, so that the product of any
    12-bit integer chunk of a position with rows 0..2 is exact in fp32, and the sum of the rows equals
    ``inv_freq / (2 pi)`` to about ``2^-60`` relative.
    """
    rest = np.asarray(inv_freq, dtype=np.float64) / (2 * math.pi)
    parts = []
    for _ in range(EXACT_PARTS - 1):
        part = _round_to_bits(rest, 12)
        parts.append(part)
        rest = rest - part
    parts.append(rest.astype(np.float32).astype(np.float64))
    out = np.stack(parts).astype(np.float32)
    assert np.array_equal(out.astype(np.float64), np.stack(parts)), "split parts must be exact in fp32"
    return out


# --------------------------------------------------------------------------- cached device tables
# The cached lookups are marked constant for torch.compile: dynamo calls them at trace time and bakes the
# small tables into the graph instead of tracing numpy.


@functools.lru_cache(maxsize=256)
def _axis_cached(spec: RopeSpec, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(spec.axis_map(), dtype=torch.int32).to(device)


@torch.compiler.assume_constant_result
def axis_tensor(spec: RopeSpec, device: torch.device) -> torch.Tensor:
    """``spec.axis_map()`` as int32 ``[rotary_dim // 2]`` on ``device`` (0 = t, 1 = h, 2 = w), cached."""
    return _axis_cached(spec, device)


@torch.compiler.assume_constant_result
def static_freq(spec: RopeSpec, precision: str, device: torch.device) -> torch.Tensor:
    """The frequency table of a spec without dynamic scaling, fp32 on ``device``, cached.

    Returns:
        ``"fp32"``: ``[1, F]``, transformers' fp32 ``inv_freq`` (radians per position).
        ``"exact"``: ``[EXACT_PARTS, F]``, the split turns per position of :func:`split_turns`.
    """
    return _static_freq_cached(spec, precision, device)


@functools.lru_cache(maxsize=256)
def _static_freq_cached(spec: RopeSpec, precision: str, device: torch.device) -> torch.Tensor:
    if precision == "fp32":
        freq = hf_inv_freq_fp32(spec).reshape(1, -1)
    else:
        freq = torch.from_numpy(split_turns(spec.inv_freq()))
    return freq.to(device=device, dtype=torch.float32).contiguous()


@functools.lru_cache(maxsize=256)
def _inv_freq64(spec: RopeSpec, device: torch.device, seq_len: int | None) -> torch.Tensor:
    return torch.from_numpy(spec.inv_freq(seq_len)).to(device)


def freq_table(spec: RopeSpec, precision: AnglePrecision, positions: torch.Tensor) -> torch.Tensor:
    """The kernel's frequency table (see :func:`static_freq`) on ``positions.device``, fp32.

    Dynamic NTK depends on ``max(positions) + 1``: ``"fp32"`` computes it on the device (no host sync),
    ``"exact"`` reads the maximum on the host.
    """
    if spec.scaling.type != "dynamic" or positions.numel() == 0:
        return static_freq(spec, precision, positions.device)
    if precision == "fp32":
        return hf_inv_freq_fp32(spec, positions.max()).reshape(1, -1).to(torch.float32)
    seq_len = int(positions.max()) + 1
    return torch.from_numpy(split_turns(spec.inv_freq(seq_len))).to(positions.device)


def inv_freq64(spec: RopeSpec, positions: torch.Tensor) -> torch.Tensor:
    """``spec.inv_freq(seq_len)`` as float64 ``[F]`` on ``positions.device`` (the torch path's exact mode).

    ``seq_len = max(pos) + 1`` is read on the host for dynamic NTK only.
    """
    dynamic = spec.scaling.type == "dynamic" and positions.numel() > 0
    seq_len = int(positions.max()) + 1 if dynamic else None
    return _inv_freq64(spec, positions.device, seq_len)
