"""The Triton M-RoPE kernel source: one program rotates the q and k heads of its tokens, computing angles
in registers.

Shapes (canonical; :mod:`mrope.ops._triton_launch` derives the strides from the caller's layout):

- q, q_out: ``[B, S, HQ, D]``; k, k_out: ``[B, S, HK, D]``; any strides (views into a packed qkv buffer
  work, ``q_out is q`` rotates in place). fp32, bf16, fp16 or fp64.
- positions: ``[R, B, S]``, one row per position axis (any R >= 1; t, h, w for R = 3), integer or
  floating, any strides (a stride-0 row axis is plain RoPE).
- rows: int32 ``[HT, F]``, the pair table's row of ``positions`` that drives pair i (:mod:`mrope.ops._pairs`;
  ``HT = 1`` unless the table is per head).
- freq: fp32 ``[HT, F]`` (``EXACT=False``: radians per position) or int64 ``[HT * 3, F]`` (``EXACT=True``: turns
  per position in 96-bit fixed point, three limbs per table head, see :mod:`mrope.ops._freqs`).

The kernel reads nothing else of the rotary spec: section layouts, interleaving, NoPE pairs (row 0, frequency
0) and scaling are all in the table.

``F = rotary_dim // 2`` frequencies; channel pairs are ``ROT_OFF + (i, i + F)`` (neox) or
``ROT_OFF + (2i, 2i + 1)`` (``GPTJ``); the other channels are copied when ``COPY_PASS`` (out of place) and
untouched otherwise.

Program ``(pid_t, pid_h)`` owns ``BLOCK_T`` tokens and q heads ``[pid_h * BLOCK_HQ, +BLOCK_HQ)`` and k heads
``[pid_h * BLOCK_HK, +BLOCK_HK)``: it loads the driving position of each frequency of its tokens, computes the
``[BLOCK_T, F]`` cos/sin table once and applies it to all of its heads of both tensors. With a per-head
table (``PER_HEAD``) the launch keeps a program's q heads within one table head (``GQ`` q heads each) and
its k heads within one (``GK`` each), and the program computes one table for its q heads and one for its k.

Compile-time switches (``tl.constexpr``): ``GPTJ`` (pairing), ``EXACT`` (angle precision), ``CONJ``
(inverse rotation, for backward), ``COPY_PASS`` (partial rotary, out of place), ``POS_KIND`` (integer,
fp32 or fp64 positions), ``ROT_OFF`` (the rotary slice's first channel), ``PER_HEAD`` (a per-head table).

The kernel and its helpers are plain functions; they are wrapped with ``triton.jit`` on first use (see
:func:`get_kernel`), each interpreter setting in a namespace of its own, so whether they are compiled or
interpreted follows ``TRITON_INTERPRET`` at call time, not at import time (Triton inlines the helpers into
the compiled kernel).
"""

from __future__ import annotations

import os
import types
from typing import Any

import triton
import triton.language as tl

from mrope._caches import register
from mrope.ops._freqs import TWO_PI_HI, TWO_PI_LO

_TWO_PI_HI = tl.constexpr(TWO_PI_HI)
_TWO_PI_LO = tl.constexpr(TWO_PI_LO)


def _positions(P, sp_a, sp_b, sp_s, ax, b, s, m2):
    """``pos[t, i] = P[ax[i], b[t], s[t]]``: the driving position of each frequency of each token,
    ``[BLOCK_T, BLOCK_F]`` in P's dtype (0 where ``m2`` is off)."""
    return tl.load(P + ax[None, :] * sp_a + b[:, None] * sp_b + s[:, None] * sp_s, mask=m2, other=0)


def _turns(p, FREQ, fr, fmask, F: tl.constexpr, KIND: tl.constexpr):
    """The fraction of turns ``p * G`` of positions ``p`` ``[BLOCK_T, BLOCK_F]`` (of kind ``KIND``: 0
    integer, 1 fp32, 2 fp64) in signed 64-bit fixed point (value * 2^-64 turns), int64.

    ``G = u2 2^-32 + u1 2^-64 + u0 2^-96`` (limbs < 2^32, rows of the int64 ``[3, F]`` table FREQ). int64
    products wrap modulo 2^64 on purpose: that drops whole turns. The same integer operations as
    :func:`mrope.ops._freqs.turn_fraction` (the torch path); a floating position adds 32 bits of fraction."""
    if KIND == 0:
        a = p.to(tl.int64)
    else:
        if KIND == 2:
            pw = p.to(tl.float64)
        else:
            pw = p.to(tl.float32)
        whole = tl.floor(pw)
        a = whole.to(tl.int64)
        frac = ((pw - whole) * 4294967296.0).to(tl.int64)
    u2 = tl.load(FREQ + fr, mask=fmask, other=0)[None, :]
    u1 = tl.load(FREQ + F + fr, mask=fmask, other=0)[None, :]
    u0 = tl.load(FREQ + 2 * F + fr, mask=fmask, other=0)[None, :]
    ph = a >> 32
    pl = a & 0xFFFFFFFF
    turns = ((a * u2) << 32) + a * u1 + ph * u0 + (((pl * u0) >> 32) & 0xFFFFFFFF)
    if KIND != 0:
        turns = turns + frac * u2 + (((frac * u1) >> 32) & 0xFFFFFFFF)
    return turns


def _turns_cos_sin(acc):
    """cos and sin (fp32) of ``acc`` turns in 64-bit fixed point: split into hi (the top 24 bits, exact in
    fp32) and lo (the rest, one rounding, < 2^-24), times 2 pi in two parts."""
    hi = (acc >> 40).to(tl.float32) * 5.9604644775390625e-08  # 2^-24
    lo = (acc & 0xFFFFFFFFFF).to(tl.float32) * 5.421010862427522e-20  # 2^-64
    ang = hi * _TWO_PI_HI + (hi * _TWO_PI_LO + lo * _TWO_PI_HI)
    return tl.cos(ang), tl.sin(ang)


def _fp32_angle(p, FREQ, fr, fmask):
    """Radians as transformers and vLLM compute them: the fp32 product of the position and the fp32
    inverse frequency (FREQ ``[1, F]``), ``[BLOCK_T, BLOCK_F]``."""
    inv = tl.load(FREQ + fr, mask=fmask, other=0.0)
    return p.to(tl.float32) * inv[None, :]


def _cos_sin(
    ROWS,
    FREQ,
    th,
    POS,
    sp_a,
    sp_b,
    sp_s,
    POS2,
    sp2_a,
    sp2_b,
    sp2_s,
    b,
    s,
    tmask,
    fr,
    fmask,
    F: tl.constexpr,
    EXACT: tl.constexpr,
    POS_KIND: tl.constexpr,
    POS2_KIND: tl.constexpr,
    REROTATE: tl.constexpr,
):
    """cos and sin (fp32, ``[BLOCK_T, BLOCK_F]``) of each token's angle per pair of table head ``th`` (rows
    at ``ROWS + th F``, frequencies at ``FREQ + th F``, or ``+ th 3F`` for the exact limbs): ``angle(POS)``,
    or with ``REROTATE`` ``angle(POS) - angle(POS2)`` (POS2: the positions the keys were rotated at)."""
    if EXACT:
        freq = FREQ + th * (3 * F)
    else:
        freq = FREQ + th * F
    ax = tl.load(ROWS + th * F + fr, mask=fmask, other=0).to(tl.int64)
    m2 = tmask[:, None] & fmask[None, :]
    p = _positions(POS, sp_a, sp_b, sp_s, ax, b, s, m2)
    if EXACT:
        acc = _turns(p, freq, fr, fmask, F, POS_KIND)
        if REROTATE:  # the difference of two fractions, modulo one turn: still exact
            p2 = _positions(POS2, sp2_a, sp2_b, sp2_s, ax, b, s, m2)
            acc = acc - _turns(p2, freq, fr, fmask, F, POS2_KIND)
        cos, sin = _turns_cos_sin(acc)
    else:
        ang = _fp32_angle(p, freq, fr, fmask)
        cos = tl.cos(ang)
        sin = tl.sin(ang)
        if REROTATE:  # cos / sin of a difference of the two fp32 angles
            ang2 = _fp32_angle(_positions(POS2, sp2_a, sp2_b, sp2_s, ax, b, s, m2), freq, fr, fmask)
            c_from = tl.cos(ang2)
            s_from = tl.sin(ang2)
            cos, sin = cos * c_from + sin * s_from, sin * c_from - cos * s_from
    return cos, sin


def _finish(cos, sin, attn_factor, CONJ: tl.constexpr, F64: tl.constexpr):
    """``[BLOCK_T, 1, BLOCK_F]`` cos and sin times ``attn_factor``, sin negated when ``CONJ``, in the
    compute dtype (fp64 when ``F64``)."""
    cos = cos * attn_factor
    sin = sin * attn_factor
    if CONJ:
        sin = -sin
    if F64:
        cos = cos.to(tl.float64)
        sin = sin.to(tl.float64)
    return cos[:, None, :], sin[:, None, :]


def _round_bf16(y):
    """fp32 ``y`` rounded to the nearest bf16 (ties to even), still fp32.

    Triton's interpreter truncates in ``.to(tl.bfloat16)`` where compiled Triton rounds to nearest;
    rounding by hand first makes both round the same way."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


def _rotate_heads(
    X,
    Y,
    H,
    h,
    xs_b,
    xs_s,
    xs_h,
    xs_d,
    os_b,
    os_s,
    os_h,
    os_d,
    b,
    s,
    tmask,
    fmask,
    cos,
    sin,
    d1,
    d2,
    F: tl.constexpr,
    D_PASS: tl.constexpr,
    ROT_OFF: tl.constexpr,
    BLOCK_P: tl.constexpr,
    COPY_PASS: tl.constexpr,
    RNE_BF16: tl.constexpr,
):
    """Rotate heads ``h`` (of ``H``) of the program's tokens from X into Y: pairs ``(d1, d2)`` by
    ``cos`` / ``sin`` ``[BLOCK_T, 1, BLOCK_F]``, and with ``COPY_PASS`` copy the other channels.

    The tile is ``[BLOCK_T, BLOCK_H, BLOCK_F]``; strides are in elements (``xs_*`` of X, ``os_*`` of Y)."""
    mth = tmask[:, None, None] & (h < H)[None, :, None]
    mask = mth & fmask[None, None, :]
    hh = h.to(tl.int64)[None, :, None]
    x_base = X + b[:, None, None] * xs_b + s[:, None, None] * xs_s + hh * xs_h
    o_base = Y + b[:, None, None] * os_b + s[:, None, None] * os_s + hh * os_h
    x1 = tl.load(x_base + d1 * xs_d, mask=mask, other=0.0).to(cos.dtype)
    x2 = tl.load(x_base + d2 * xs_d, mask=mask, other=0.0).to(cos.dtype)
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    if RNE_BF16:
        y1 = _round_bf16(y1)
        y2 = _round_bf16(y2)
    tl.store(o_base + d1 * os_d, y1.to(Y.dtype.element_ty), mask=mask)
    tl.store(o_base + d2 * os_d, y2.to(Y.dtype.element_ty), mask=mask)
    if COPY_PASS:
        # pass-through channels [0, ROT_OFF) and [ROT_OFF + 2F, head_dim), BLOCK_P at a time
        jp = tl.arange(0, BLOCK_P)
        for c0 in tl.static_range(0, D_PASS, BLOCK_P):
            j = c0 + jp
            dp = tl.where(j < ROT_OFF, j, j + 2 * F)[None, None, :]
            pmask = mth & (j < D_PASS)[None, None, :]
            xp = tl.load(x_base + dp * xs_d, mask=pmask, other=0.0)
            tl.store(o_base + dp * os_d, xp, mask=pmask)


def mrope_kernel(
    Q,
    K,
    QO,
    KO,
    POS,
    ROWS,
    FREQ,
    S,  # tokens per batch row (B * S = N)
    N,  # tokens in all
    HQ,
    HK,
    sq_b,
    sq_s,
    sq_h,
    sq_d,
    sk_b,
    sk_s,
    sk_h,
    sk_d,
    sqo_b,
    sqo_s,
    sqo_h,
    sqo_d,
    sko_b,
    sko_s,
    sko_h,
    sko_d,
    sp_a,
    sp_b,
    sp_s,
    POS2,  # REROTATE: the positions k was rotated at ([A, B, S]); otherwise unused
    sp2_a,
    sp2_b,
    sp2_s,
    attn_factor,  # YaRN's cos/sin multiplier (1.0 otherwise)
    NT,  # table heads (1 unless PER_HEAD)
    GQ,  # PER_HEAD: q heads per table head
    GK,  # PER_HEAD: k heads per table head (at least 1)
    F: tl.constexpr,  # rotary_dim // 2
    D_PASS: tl.constexpr,  # head_dim - rotary_dim
    ROT_OFF: tl.constexpr,  # first rotary channel (spec.rotary_offset)
    BLOCK_T: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_F: tl.constexpr,
    BLOCK_P: tl.constexpr,
    GPTJ: tl.constexpr,
    EXACT: tl.constexpr,
    CONJ: tl.constexpr,
    COPY_PASS: tl.constexpr,
    F64: tl.constexpr,
    POS_KIND: tl.constexpr,  # positions: 0 integer, 1 fp32 (fp16 and bf16 too), 2 fp64
    POS2_KIND: tl.constexpr,
    REROTATE: tl.constexpr,  # rotate by angle(POS) - angle(POS2)
    RNE_BF16: tl.constexpr,  # bf16 output under the interpreter: round by hand (see below)
    PER_HEAD: tl.constexpr,  # a per-head table [NT, F]: q heads read row h // GQ, k heads h // GK
):
    """Rotate the q and k heads of one program's tokens (see the module docstring for the arguments)."""
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)
    tok = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = tok < N
    b = (tok // S).to(tl.int64)
    s = (tok % S).to(tl.int64)
    fr = tl.arange(0, BLOCK_F)
    fmask = fr < F
    if PER_HEAD:  # the table heads of this program's q heads and of its k heads (clamped: idle programs)
        tq = tl.minimum((pid_h * BLOCK_HQ) // GQ, NT - 1)
        tk = tl.minimum((pid_h * BLOCK_HK) // GK, NT - 1)
    else:
        tq = 0
        tk = 0
    cos, sin = _cos_sin(
        ROWS, FREQ, tq, POS, sp_a, sp_b, sp_s, POS2, sp2_a, sp2_b, sp2_s, b, s, tmask, fr, fmask,
        F, EXACT, POS_KIND, POS2_KIND, REROTATE,
    )  # fmt: skip
    cos, sin = _finish(cos, sin, attn_factor, CONJ, F64)
    if GPTJ:
        d1 = ROT_OFF + 2 * fr
        d2 = ROT_OFF + 2 * fr + 1
    else:
        d1 = ROT_OFF + fr
        d2 = ROT_OFF + fr + F
    d1 = d1[None, None, :]
    d2 = d2[None, None, :]
    # q heads, then k heads                                                    [BLOCK_T, BLOCK_H, BLOCK_F]
    _rotate_heads(
        Q, QO, HQ, pid_h * BLOCK_HQ + tl.arange(0, BLOCK_HQ),
        sq_b, sq_s, sq_h, sq_d, sqo_b, sqo_s, sqo_h, sqo_d,
        b, s, tmask, fmask, cos, sin, d1, d2, F, D_PASS, ROT_OFF, BLOCK_P, COPY_PASS, RNE_BF16,
    )  # fmt: skip
    if PER_HEAD:
        cos, sin = _cos_sin(
            ROWS, FREQ, tk, POS, sp_a, sp_b, sp_s, POS2, sp2_a, sp2_b, sp2_s, b, s, tmask, fr, fmask,
            F, EXACT, POS_KIND, POS2_KIND, REROTATE,
        )  # fmt: skip
        cos, sin = _finish(cos, sin, attn_factor, CONJ, F64)
    _rotate_heads(
        K, KO, HK, pid_h * BLOCK_HK + tl.arange(0, BLOCK_HK),
        sk_b, sk_s, sk_h, sk_d, sko_b, sko_s, sko_h, sko_d,
        b, s, tmask, fmask, cos, sin, d1, d2, F, D_PASS, ROT_OFF, BLOCK_P, COPY_PASS, RNE_BF16,
    )  # fmt: skip


_HELPERS = (
    _positions,
    _turns,
    _turns_cos_sin,
    _fp32_angle,
    _cos_sin,
    _finish,
    _round_bf16,
    _rotate_heads,
)
_KERNELS: dict[bool, Any] = {}  # the jitted kernel per interpreter setting
register("ops.triton_kernels", _KERNELS.clear, lambda: len(_KERNELS), 2)


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter now (``TRITON_INTERPRET=1``, read at call time)."""
    # Read like triton reads it (os.environ rather than triton.knobs, so torch.compile can trace it).
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


def get_kernel() -> Any:
    """The kernel wrapped by ``triton.jit`` for the current interpreter setting (cached per setting).

    The kernel and its helpers are wrapped together in a copy of this module's namespace, so an
    interpreted kernel calls interpreted helpers and a compiled one compiled helpers."""
    mode = interpreting()
    if mode not in _KERNELS:
        namespace = dict(globals())
        for fn in (*_HELPERS, mrope_kernel):
            copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)
            copy.__annotations__ = dict(fn.__annotations__)
            copy.__qualname__ = fn.__qualname__
            namespace[fn.__name__] = triton.jit(copy)
        _KERNELS[mode] = namespace["mrope_kernel"]
    return _KERNELS[mode]
