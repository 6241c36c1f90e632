"""The torch path: M-RoPE with plain torch ops, on any device.

It works on canonical views (``[B, S, H, D]`` for q and k, ``[A, B, S]`` positions, integer or floating;
see :mod:`mrope.ops._layouts`): one gather and one trig pass for the ``[B, S, F]`` angle table
(``F = rotary_dim // 2``, shared by every head), then, per tensor, two multiply and two fused
multiply-add passes (full precision, out of place) or a loop over sequence chunks through two reused fp32
scratch buffers (bf16 / fp16, in place; see :func:`rotate`). There is no Python loop over heads, sections
or axes: the frequency-to-axis map (``spec.axis_map()``) is one gather index.
"""

from __future__ import annotations

import math

import torch

from mrope._spec import RopeSpec
from mrope.ops._freqs import AnglePrecision, axis_tensor, freq_table, turn_fraction


def _driving(positions: torch.Tensor, axis: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``[A, *P]`` positions -> ``[*P, F]``: the driving position of every frequency, on ``device``."""
    index = axis.to(device=device, dtype=torch.long)
    return positions.movedim(0, -1).to(device)[..., index]


def _exact_turns(pos: torch.Tensor, limbs: torch.Tensor) -> torch.Tensor:
    if pos.dtype.is_floating_point and pos.dtype != torch.float64:
        pos = pos.to(torch.float32)
    return turn_fraction(pos, limbs)


def angles(
    positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    from_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotation angles in radians, fp32 ``[*P, F]``, for positions ``[A, *P]`` (integer or floating).

    Args:
        positions: ``[A, *P]``, one row per axis (t, h, w for A = 3).
        axis: integer ``[F]``, ``spec.axis_map()``: the row that drives each frequency.
        freq: fp32 ``[1, F]`` inverse frequencies (angle precision ``"fp32"``): the angle is
            ``float32(pos[axis(i)]) * freq[i]``, bit for bit what transformers computes, not reduced
            (cos/sin reduce it). int64 ``[3, F]`` turn limbs (``"exact"``, :func:`mrope.ops._freqs.turn_limbs`):
            the fraction of turns is computed exactly in fixed point (:func:`~mrope.ops._freqs.turn_fraction`),
            turned into radians in float64 and rounded to fp32 once.
        from_positions: exact mode only: return ``angle(positions) - angle(from_positions)``, reduced (the
            difference of the two fixed-point fractions, exact modulo one turn).
    """
    device = positions.device
    if freq.dtype == torch.float32:
        return _driving(positions, axis, freq.device).to(torch.float32) * freq[0]
    fraction = _exact_turns(_driving(positions, axis, freq.device), freq)
    if from_positions is not None:
        fraction = fraction - _exact_turns(_driving(from_positions, axis, freq.device), freq)
    ang = fraction.to(torch.float64) * (2 * math.pi / 2.0**64)
    return ang.to(device=device, dtype=torch.float32)


def tables(
    spec: RopeSpec, precision: AnglePrecision, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(axis, freq)`` for :func:`angles`: int32 ``[F]`` and fp32 ``[1, F]`` or int64 ``[3, F]`` (``"exact"``).

    The exact table lives on the positions' device, or on the CPU where that device has no float64 (MPS).
    """
    axis = axis_tensor(spec, positions.device)
    if precision == "fp32":
        return axis, freq_table(spec, "fp32", positions)
    calc = positions if positions.device.type != "mps" else positions.to("cpu")
    return axis, freq_table(spec, "exact", calc)


def cos_sin_table(
    positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    attention_factor: float,
    dtype: torch.dtype,
    from_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of :func:`angles`, times ``attention_factor``, ``[*P, F]`` each.

    The trig is fp32 (as in transformers); YaRN's factor multiplies in fp32; the result is cast to
    ``dtype`` (the compute dtype of the rotation: fp32, or fp64 for fp64 inputs). With ``from_positions``
    the rotation is by ``angle(positions) - angle(from_positions)``: in exact mode the difference is
    reduced exactly, in fp32 mode it is the cos/sin of the difference of the two fp32 angles (the angles a
    model computes at each position).
    """
    if from_positions is not None and freq.dtype == torch.float32:
        a2, a1 = angles(positions, axis, freq), angles(from_positions, axis, freq)
        c2, s2, c1, s1 = a2.cos(), a2.sin(), a1.cos(), a1.sin()
        cos, sin = c2 * c1 + s2 * s1, s2 * c1 - c2 * s1
    else:
        ang = angles(positions, axis, freq, from_positions)
        cos, sin = ang.cos(), ang.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


def _pair_views(
    x: torch.Tensor, spec: RopeSpec, offset: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members of every rotating pair, ``[..., F]`` views: neox ``o + i, o + i + F``; gptj
    ``o + 2i, o + 2i + 1`` (``o = spec.rotary_offset`` unless ``offset`` is given)."""
    f, rd = spec.num_freqs, spec.rotary_dim
    o = spec.rotary_offset if offset is None else offset
    if spec.pairing == "neox":
        return x[..., o : o + f], x[..., o + f : o + rd]
    return x[..., o : o + rd : 2], x[..., o + 1 : o + rd : 2]


CHUNK_ELEMENTS = 1 << 18
"""Rotary elements per step and per intra-op thread of the chunked rotation (one thread: two fp32 scratch
buffers of 1 MiB each)."""


def rotate(
    x: torch.Tensor,
    out: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    spec: RopeSpec,
    *,
    inplace: bool,
) -> None:
    """Rotate ``x`` into ``out`` (both ``[B, S, H, D]``; ``out is x`` when ``inplace``).

    Args:
        cos, sin: ``[B, S, 1, F]`` in the compute dtype (fp32, or fp64 for fp64 ``x``); pass ``-sin`` for
            the inverse rotation.

    For each pair ``(x1, x2)``: ``y1 = x1 cos - x2 sin``, ``y2 = x2 cos + x1 sin``, computed in the compute
    dtype and rounded to ``x``'s dtype once. Channels outside the rotary slice are copied (out of place)
    or left alone (in place).

    Full-precision out of place (eager) writes straight into ``out`` (four passes). Otherwise (bf16 / fp16,
    or in place) the sequence is processed in chunks of about :data:`CHUNK_ELEMENTS` rotary elements
    through two reused compute-dtype scratch buffers: one conversion in, three arithmetic passes and one
    rounding out per chunk, all in cache, with no per-call allocation the size of ``x`` (fresh large
    allocations cost a page fault per 4 KiB on CPU, more than the arithmetic).
    """
    if x.dtype == cos.dtype and not inplace and not torch.compiler.is_compiling():
        # straight into the output, whole tensors: four passes. There is no dtype conversion to keep in
        # cache here, and chunks would only add parallel regions, so only bf16 / fp16 (and in place) chunk.
        x1, x2 = _pair_views(x, spec)
        o1, o2 = _pair_views(out, spec)
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
    elif torch.compiler.is_compiling():
        # traced: whole-tensor ops (the compiler fuses them); in place needs the old x1 for y2
        x1, x2 = _pair_views(x, spec)
        o1, o2 = _pair_views(out, spec)
        a1, a2 = x1.to(cos.dtype), x2.to(cos.dtype)
        y1 = a1 * cos
        y1.addcmul_(a2, sin, value=-1)
        y2 = a2 * cos
        y2.addcmul_(a1, sin)
        o1.copy_(y1)
        o2.copy_(y2)
    else:
        _rotate_chunked(x, out, cos, sin, spec)
    if not inplace:
        start, end = spec.rotary_offset, spec.rotary_offset + spec.rotary_dim
        if start:
            out[..., :start].copy_(x[..., :start])
        if end < x.shape[-1]:
            out[..., end:].copy_(x[..., end:])


def _step(x: torch.Tensor, spec: RopeSpec) -> int:
    """Sequence positions per chunk: about CHUNK_ELEMENTS rotary elements per intra-op thread."""
    budget = CHUNK_ELEMENTS * max(1, torch.get_num_threads())
    return max(1, min(x.shape[1], budget // max(1, x.shape[0] * x.shape[2] * spec.rotary_dim)))


def _chunks(x: torch.Tensor, spec: RopeSpec) -> list[tuple[int, int]]:
    """``(start, end)`` sequence ranges of the chunked rotation of ``x`` ``[B, S, H, D]``."""
    step = _step(x, spec)
    return [(s0, min(x.shape[1], s0 + step)) for s0 in range(0, x.shape[1], step)]


def _rotate_chunked(
    x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, spec: RopeSpec
) -> None:
    """The rotary slice of ``x`` ``[B, S, H, D]`` into ``out``, a chunk of the sequence at a time."""
    bsz, seq, heads = x.shape[0], x.shape[1], x.shape[2]
    o, rd, f = spec.rotary_offset, spec.rotary_dim, spec.num_freqs
    if bsz * seq * heads == 0:
        return
    step = _step(x, spec)
    shape = (bsz, step, heads, rd)
    src = torch.empty(shape, dtype=cos.dtype, device=x.device)
    dst = torch.empty(shape, dtype=cos.dtype, device=x.device)
    for s0, s1 in _chunks(x, spec):
        a, y = src[:, : s1 - s0], dst[:, : s1 - s0]
        a.copy_(x[:, s0:s1, :, o : o + rd])
        c, s = cos[:, s0:s1], sin[:, s0:s1]
        # y = a * cos for both pair members in one contiguous pass (the pair axis broadcast), then the
        # sin terms: five passes per chunk
        if spec.pairing == "neox":
            torch.mul(a.unflatten(-1, (2, f)), c.unsqueeze(-2), out=y.unflatten(-1, (2, f)))
        else:
            torch.mul(a.unflatten(-1, (f, 2)), c.unsqueeze(-1), out=y.unflatten(-1, (f, 2)))
        a1, a2 = _pair_views(a, spec, offset=0)
        y1, y2 = _pair_views(y, spec, offset=0)
        y1.addcmul_(a2, s, value=-1)
        y2.addcmul_(a1, s)
        out[:, s0:s1, :, o : o + rd].copy_(y)
