"""The torch path: M-RoPE with plain torch ops, on any device.

It reads only a pair table (:mod:`mrope.ops._pairs`: the row and frequency of every rotary pair) and works
on canonical views (``[B, S, H, D]`` for q and k, ``[R, B, S]`` positions, integer or floating; see
:mod:`mrope.ops._layouts`): one gather and one trig pass for the ``[B, S, HT, F]`` angle table
(``F = rotary_dim // 2`` pairs, ``HT`` table heads: 1 when every head shares it), then, per tensor, two
multiply and two fused multiply-add passes (full precision, out of place) or a loop over sequence chunks
through two reused fp32 scratch buffers (bf16 / fp16, in place; see :func:`rotate`). There is no Python
loop over heads, sections or axes: the pair-to-row map is one gather index.
"""

from __future__ import annotations

import math

import torch

from mrope.ops._freqs import turn_fraction
from mrope.ops._pairs import PairTable


def _driving(positions: torch.Tensor, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``[R, *P]`` positions -> ``[*P, HT, F]``: the driving position of every pair, on ``device``."""
    index = rows.to(device=device, dtype=torch.long)
    return positions.movedim(0, -1).to(device)[..., index.flatten()].unflatten(-1, tuple(index.shape))


def _exact_turns(pos: torch.Tensor, limbs: torch.Tensor) -> torch.Tensor:
    if pos.dtype.is_floating_point and pos.dtype != torch.float64:
        pos = pos.to(torch.float32)
    return turn_fraction(pos, limbs)


def angles(
    positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    from_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotation angles in radians, fp32 ``[*P, HT, F]``, for positions ``[R, *P]`` (integer or floating).

    Args:
        positions: ``[R, *P]``, one row per position axis (t, h, w for R = 3).
        rows: integer ``[HT, F]``, the pair table's rows (:func:`mrope.ops._pairs.rows_tensor`).
        freq: fp32 ``[HT, F]`` inverse frequencies (angle precision ``"fp32"``): the angle is
            ``float32(pos[rows[i]]) * freq[i]``, bit for bit what transformers computes, not reduced
            (cos/sin reduce it). int64 ``[HT * 3, F]`` turn limbs (``"exact"``,
            :func:`mrope.ops._freqs.turn_limbs` per head): the fraction of turns is computed exactly in
            fixed point (:func:`~mrope.ops._freqs.turn_fraction`), turned into radians in float64 and rounded
            to fp32 once.
        from_positions: exact mode only: return ``angle(positions) - angle(from_positions)``, reduced (the
            difference of the two fixed-point fractions, exact modulo one turn).
    """
    device = positions.device
    if freq.dtype == torch.float32:
        return _driving(positions, rows, freq.device).to(torch.float32) * freq
    limbs = freq.unflatten(0, (-1, 3)).transpose(0, 1)  # [3, HT, F]
    fraction = _exact_turns(_driving(positions, rows, freq.device), limbs)
    if from_positions is not None:
        fraction = fraction - _exact_turns(_driving(from_positions, rows, freq.device), limbs)
    ang = fraction.to(torch.float64) * (2 * math.pi / 2.0**64)
    return ang.to(device=device, dtype=torch.float32)


def cos_sin_table(
    positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    attention_factor: float,
    dtype: torch.dtype,
    from_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of :func:`angles`, times ``attention_factor``, ``[*P, HT, F]`` each.

    The trig is fp32 (as in transformers); YaRN's factor multiplies in fp32; the result is cast to
    ``dtype`` (the compute dtype of the rotation: fp32, or fp64 for fp64 inputs). With ``from_positions``
    the rotation is by ``angle(positions) - angle(from_positions)``: in exact mode the difference is
    reduced exactly, in fp32 mode it is the cos/sin of the difference of the two fp32 angles (the angles a
    model computes at each position).
    """
    if from_positions is not None and freq.dtype == torch.float32:
        a2, a1 = angles(positions, rows, freq), angles(from_positions, rows, freq)
        c2, s2, c1, s1 = a2.cos(), a2.sin(), a1.cos(), a1.sin()
        cos, sin = c2 * c1 + s2 * s1, s2 * c1 - c2 * s1
    else:
        ang = angles(positions, rows, freq, from_positions)
        cos, sin = ang.cos(), ang.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


def _pair_views(
    x: torch.Tensor, table: PairTable, offset: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members of every rotating pair, ``[..., F]`` views: neox ``o + i, o + i + F``; gptj
    ``o + 2i, o + 2i + 1`` (``o = table.rotary_offset`` unless ``offset`` is given)."""
    f, rd = table.num_freqs, table.rotary_dim
    o = table.rotary_offset if offset is None else offset
    if table.pairing == "neox":
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
    table: PairTable,
    *,
    inplace: bool,
) -> None:
    """Rotate ``x`` into ``out`` (both ``[B, S, H, D]``; ``out is x`` when ``inplace``).

    Args:
        cos, sin: ``[B, S, HT, F]`` in the compute dtype (fp32, or fp64 for fp64 ``x``); pass ``-sin`` for
            the inverse rotation. With ``HT > 1`` (a per-head table; ``HT`` divides ``H``) head ``h`` takes
            ``cos[:, :, h // (H / HT)]``.

    For each pair ``(x1, x2)``: ``y1 = x1 cos - x2 sin``, ``y2 = x2 cos + x1 sin``, computed in the compute
    dtype and rounded to ``x``'s dtype once. Channels outside the rotary slice are copied (out of place)
    or left alone (in place).

    Full-precision out of place (eager) writes straight into ``out`` (four passes). Otherwise (bf16 / fp16,
    or in place) the sequence is processed in chunks of about :data:`CHUNK_ELEMENTS` rotary elements
    through two reused compute-dtype scratch buffers: one conversion in, three arithmetic passes and one
    rounding out per chunk, all in cache, with no per-call allocation the size of ``x`` (fresh large
    allocations cost a page fault per 4 KiB on CPU, more than the arithmetic).
    """
    groups = cos.shape[2]
    if groups > 1:  # per-head table: heads [B, S, HT, H / HT, D], one cos / sin row per group
        x, out = (t.unflatten(2, (groups, t.shape[2] // groups)) for t in (x, out))
        cos, sin = cos.unsqueeze(3), sin.unsqueeze(3)
    if x.dtype == cos.dtype and not inplace and not torch.compiler.is_compiling():
        # straight into the output, whole tensors: four passes. There is no dtype conversion to keep in
        # cache here, and chunks would only add parallel regions, so only bf16 / fp16 (and in place) chunk.
        x1, x2 = _pair_views(x, table)
        o1, o2 = _pair_views(out, table)
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
    elif torch.compiler.is_compiling():
        # traced: whole-tensor ops (the compiler fuses them); in place needs the old x1 for y2
        x1, x2 = _pair_views(x, table)
        o1, o2 = _pair_views(out, table)
        a1, a2 = x1.to(cos.dtype), x2.to(cos.dtype)
        y1 = a1 * cos
        y1.addcmul_(a2, sin, value=-1)
        y2 = a2 * cos
        y2.addcmul_(a1, sin)
        o1.copy_(y1)
        o2.copy_(y2)
    else:
        _rotate_chunked(x, out, cos, sin, table)
    if not inplace:
        start, end = table.rotary_offset, table.rotary_offset + table.rotary_dim
        if start:
            out[..., :start].copy_(x[..., :start])
        if end < x.shape[-1]:
            out[..., end:].copy_(x[..., end:])


def _step(x: torch.Tensor, table: PairTable) -> int:
    """Sequence positions per chunk of ``x`` ``[B, S, *heads, D]``: about CHUNK_ELEMENTS rotary elements per intra-op thread."""
    budget = CHUNK_ELEMENTS * max(1, torch.get_num_threads())
    heads = math.prod(x.shape[2:-1])
    return max(1, min(x.shape[1], budget // max(1, x.shape[0] * heads * table.rotary_dim)))


def _chunks(x: torch.Tensor, table: PairTable) -> list[tuple[int, int]]:
    """``(start, end)`` sequence ranges of the chunked rotation of ``x`` ``[B, S, *heads, D]``."""
    step = _step(x, table)
    return [(s0, min(x.shape[1], s0 + step)) for s0 in range(0, x.shape[1], step)]


def _rotate_chunked(
    x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, table: PairTable
) -> None:
    """The rotary slice of ``x`` ``[B, S, *heads, D]`` into ``out``, a chunk of the sequence at a time."""
    o, rd, f = table.rotary_offset, table.rotary_dim, table.num_freqs
    if x[..., 0].numel() == 0:
        return
    step = _step(x, table)
    shape = (x.shape[0], step, *x.shape[2:-1], rd)
    src = torch.empty(shape, dtype=cos.dtype, device=x.device)
    dst = torch.empty(shape, dtype=cos.dtype, device=x.device)
    for s0, s1 in _chunks(x, table):
        a, y = src[:, : s1 - s0], dst[:, : s1 - s0]
        a.copy_(x[:, s0:s1, ..., o : o + rd])
        c, s = cos[:, s0:s1], sin[:, s0:s1]
        # y = a * cos for both pair members in one contiguous pass (the pair axis broadcast), then the
        # sin terms: five passes per chunk
        if table.pairing == "neox":
            torch.mul(a.unflatten(-1, (2, f)), c.unsqueeze(-2), out=y.unflatten(-1, (2, f)))
        else:
            torch.mul(a.unflatten(-1, (f, 2)), c.unsqueeze(-1), out=y.unflatten(-1, (f, 2)))
        a1, a2 = _pair_views(a, table, offset=0)
        y1, y2 = _pair_views(y, table, offset=0)
        y1.addcmul_(a2, s, value=-1)
        y2.addcmul_(a1, s)
        out[:, s0:s1, ..., o : o + rd].copy_(y)
