"""The Triton M-RoPE kernel: one launch rotates q and k, computing angles in registers.

Shapes (canonical; :func:`launch` derives the strides from the caller's layout):

- q, q_out: ``[B, S, HQ, D]``; k, k_out: ``[B, S, HK, D]``; any strides (views into a packed qkv buffer
  work, ``q_out is q`` rotates in place). fp32, bf16, fp16 or fp64.
- positions: ``[A, B, S]``, one row per axis (A = 1..4; t, h, w for A = 3), integer or floating, any
  strides (a stride-0 row axis is plain RoPE).
- axis: int32 ``[F]``, ``spec.axis_map()``, the row of ``positions`` that drives frequency i.
- freq: fp32 ``[1, F]`` (``EXACT=False``: radians per position) or int64 ``[3, F]`` (``EXACT=True``: turns per
  position in 96-bit fixed point, see :mod:`mrope.ops.freqs`).

``F = rotary_dim // 2`` frequencies; channel pairs are ``ROT_OFF + (i, i + F)`` (neox) or
``ROT_OFF + (2i, 2i + 1)`` (``GPTJ``); the other channels are copied when ``COPY_PASS`` (out of place) and
untouched otherwise.

Program ``(pid_t, pid_h)`` owns ``BLOCK_T`` tokens and q heads ``[pid_h * BLOCK_HQ, +BLOCK_HQ)`` and k heads
``[pid_h * BLOCK_HK, +BLOCK_HK)``: it loads the driving position of each frequency of its tokens, computes the
``[BLOCK_T, F]`` cos/sin table once and applies it to all of its heads of both tensors.

Compile-time switches (``tl.constexpr``): ``GPTJ`` (pairing), ``EXACT`` (angle precision), ``CONJ``
(inverse rotation, for backward), ``COPY_PASS`` (partial rotary, out of place), ``POS_KIND`` (integer,
fp32 or fp64 positions), ``ROT_OFF`` (the rotary slice's first channel).

The kernel source is a plain function; it is wrapped with ``triton.jit`` on first use (see
:func:`get_kernel`), so whether it is compiled or interpreted follows ``TRITON_INTERPRET`` at call time, not
at import time. Torch sees it as the custom ops ``mrope::rotary`` (functional) and ``mrope::rotary_``
(mutates ``q`` and ``k``), and ``mrope::rerotate`` / ``mrope::rerotate_`` (keys moved between positions),
which work under ``torch.compile`` and CUDA graphs; their Python faces here are :func:`triton_rotary`,
:func:`triton_rotary_`, :func:`triton_rerotate` and :func:`triton_rerotate_` (the public
:func:`mrope.ops.rerotate` checks its inputs and calls one of them).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
import triton
import triton.language as tl

import mrope.ops.layouts as layouts
from mrope.ops.freqs import TWO_PI_HI, TWO_PI_LO

_TWO_PI_HI = tl.constexpr(TWO_PI_HI)
_TWO_PI_LO = tl.constexpr(TWO_PI_LO)


def mrope_kernel(
    Q,
    K,
    QO,
    KO,
    POS,
    AXIS,
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
):
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)
    tok = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = tok < N
    b = (tok // S).to(tl.int64)
    s = (tok % S).to(tl.int64)
    fr = tl.arange(0, BLOCK_F)
    fmask = fr < F

    # ---- angles (radians). Source 0: POS; with REROTATE also source 1: POS2 (the positions the keys were
    # rotated at), and the rotation is by angle(POS) - angle(POS2).
    ax = tl.load(AXIS + fr, mask=fmask, other=0).to(tl.int64)
    m2 = tmask[:, None] & fmask[None, :]
    for src in tl.static_range(2 if REROTATE else 1):
        # pos[t, i] = positions[axis[i], b, s]                                            [BLOCK_T, BLOCK_F]
        if src == 0:
            p = tl.load(POS + ax[None, :] * sp_a + b[:, None] * sp_b + s[:, None] * sp_s, mask=m2, other=0)
        else:
            p = tl.load(
                POS2 + ax[None, :] * sp2_a + b[:, None] * sp2_b + s[:, None] * sp2_s, mask=m2, other=0
            )
        if EXACT:
            # Fraction of turns pos * G in signed 64-bit fixed point (value * 2^-64 turns), G = u2 2^-32 +
            # u1 2^-64 + u0 2^-96 (limbs < 2^32). int64 products wrap modulo 2^64 on purpose: that drops
            # whole turns. Identical integer operations to mrope.ops.freqs.turn_fraction (the torch path).
            # (the position kind of this source, as constexpr tests: no variable can hold it in both rounds)
            if (src == 0 and POS_KIND == 0) or (src == 1 and POS2_KIND == 0):
                a = p.to(tl.int64)
            else:
                if (src == 0 and POS_KIND == 2) or (src == 1 and POS2_KIND == 2):
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
            if (src == 0 and POS_KIND != 0) or (src == 1 and POS2_KIND != 0):
                turns = turns + frac * u2 + (((frac * u1) >> 32) & 0xFFFFFFFF)
            if src == 0:
                acc = turns
            else:
                acc = acc - turns  # the difference of two fractions, modulo one turn: still exact
        else:
            # transformers / vLLM: the fp32 product of the position and the fp32 inverse frequency
            inv = tl.load(FREQ + fr, mask=fmask, other=0.0)
            ang = p.to(tl.float32) * inv[None, :]
            if src == 0:
                cos = tl.cos(ang)
                sin = tl.sin(ang)
            else:  # rotate by angle(POS) - angle(POS2): cos/sin of a difference
                c_from = tl.cos(ang)
                s_from = tl.sin(ang)
                cos, sin = cos * c_from + sin * s_from, sin * c_from - cos * s_from
    if EXACT:
        # turns = hi + lo: hi the top 24 bits (exact in fp32), lo the rest (one rounding, < 2^-24)
        hi = (acc >> 40).to(tl.float32) * 5.9604644775390625e-08  # 2^-24
        lo = (acc & 0xFFFFFFFFFF).to(tl.float32) * 5.421010862427522e-20  # 2^-64
        ang = hi * _TWO_PI_HI + (hi * _TWO_PI_LO + lo * _TWO_PI_HI)
        cos = tl.cos(ang)
        sin = tl.sin(ang)
    cos = cos * attn_factor
    sin = sin * attn_factor
    if CONJ:
        sin = -sin
    if F64:
        cos = cos.to(tl.float64)
        sin = sin.to(tl.float64)
    cos = cos[:, None, :]
    sin = sin[:, None, :]

    if GPTJ:
        d1 = ROT_OFF + 2 * fr
        d2 = ROT_OFF + 2 * fr + 1
    else:
        d1 = ROT_OFF + fr
        d2 = ROT_OFF + fr + F
    d1 = d1[None, None, :]
    d2 = d2[None, None, :]
    if COPY_PASS:
        jp = tl.arange(0, BLOCK_P)

    # ---- q heads, then k heads (unrolled at compile time)                     [BLOCK_T, BLOCK_H, BLOCK_F]
    for which in tl.static_range(2):
        if which == 0:
            X, Y, H = Q, QO, HQ
            h = pid_h * BLOCK_HQ + tl.arange(0, BLOCK_HQ)
            xs_b, xs_s, xs_h, xs_d = sq_b, sq_s, sq_h, sq_d
            os_b, os_s, os_h, os_d = sqo_b, sqo_s, sqo_h, sqo_d
        else:
            X, Y, H = K, KO, HK
            h = pid_h * BLOCK_HK + tl.arange(0, BLOCK_HK)
            xs_b, xs_s, xs_h, xs_d = sk_b, sk_s, sk_h, sk_d
            os_b, os_s, os_h, os_d = sko_b, sko_s, sko_h, sko_d
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
            # Round fp32 to the nearest bf16 (ties to even) by hand: Triton's interpreter truncates in
            # .to(tl.bfloat16), compiled Triton rounds to nearest; this makes both round the same way.
            b1 = y1.to(tl.uint32, bitcast=True)
            b2 = y2.to(tl.uint32, bitcast=True)
            b1 = (b1 + (0x7FFF + ((b1 >> 16) & 1))) & 0xFFFF0000
            b2 = (b2 + (0x7FFF + ((b2 >> 16) & 1))) & 0xFFFF0000
            y1 = b1.to(tl.float32, bitcast=True)
            y2 = b2.to(tl.float32, bitcast=True)
        tl.store(o_base + d1 * os_d, y1.to(Y.dtype.element_ty), mask=mask)
        tl.store(o_base + d2 * os_d, y2.to(Y.dtype.element_ty), mask=mask)
        if COPY_PASS:
            # pass-through channels [0, ROT_OFF) and [ROT_OFF + 2F, head_dim), BLOCK_P at a time
            for c0 in tl.static_range(0, D_PASS, BLOCK_P):
                j = c0 + jp
                dp = tl.where(j < ROT_OFF, j, j + 2 * F)[None, None, :]
                pmask = mth & (j < D_PASS)[None, None, :]
                xp = tl.load(x_base + dp * xs_d, mask=pmask, other=0.0)
                tl.store(o_base + dp * os_d, xp, mask=pmask)


_KERNELS: dict[bool, Any] = {}
PASS_CHUNK = {2: 8, 4: 16}
"""Pass-through channels copied per step, by bytes per element (others: 8). The copy's tile is
``[BLOCK_T, BLOCK_H, chunk]``, whose 64-bit load and store addresses a wider step keeps live at once: 32
channels a step took the 64-of-128 and 64-of-256 rotary shapes to 153-168 registers per thread; 8 keeps
bf16 / fp16 at the full-rotary shape's 96, and 16 keeps fp32 at 128 or fewer (8 made ptxas spill 20
bytes there), as ``benchmarks/aot_report.py`` reports."""
REROTATE_MAX_REGISTERS = 128
"""The register budget a re-rotation launch compiles under (ptxas ``.maxnreg``). Without it ptxas chose
64-96 registers and spilled 4 bytes in some re-rotation programs of 10 pairs a thread (128 of 128 fp32,
64 of 256 bf16, sm_80); with it those take 96-128 and do not spill. (Applied to every launch it makes
ptxas spill in apply programs that need 122-128 without it, so it is for re-rotation only.)"""
ELEMENTS_PER_THREAD = 18
"""Most rotary pairs a thread of a program handles (the launch picks warps and head blocks to stay within
it): 18 is what the Qwen2-VL shape (28 + 4 heads x 64 frequencies, 4 warps) has always had, at 96
registers; 36 (head_dim 256, full rotary, 4 warps) took fp32 to 255 registers and spills."""


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter now (``TRITON_INTERPRET=1``, read at call time)."""
    # Read like triton reads it (os.environ rather than triton.knobs, so torch.compile can trace it).
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


def get_kernel() -> Any:
    """The kernel wrapped by ``triton.jit`` for the current interpreter setting (cached per setting)."""
    mode = interpreting()
    if mode not in _KERNELS:
        _KERNELS[mode] = triton.jit(mrope_kernel)
    return _KERNELS[mode]


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def launch_config(
    n_tokens: int, hq: int, hk: int, n_freq: int, d_pass: int = 0, elem_bytes: int = 2
) -> dict[str, int]:
    """Block sizes, grid and warps for ``n_tokens`` tokens, ``hq``/``hk`` heads, ``n_freq`` frequencies,
    ``d_pass`` pass-through channels and ``elem_bytes`` bytes per q / k element.

    Few tokens (decode) split the heads over more programs; many tokens put all heads of a token in
    one program, so the angles are computed once per token, unless one token's heads hold more pairs
    than 8 warps take at :data:`ELEMENTS_PER_THREAD` (then the heads are split as well). A program
    takes as many tokens as 4 warps hold at that bound (at least one), and the fewest warps (1 to 8)
    that keep every thread within it (registers follow the pairs a thread holds).
    """
    block_f = _pow2(n_freq)
    hsplit = 1 if n_tokens >= 256 else min(8, max(hq, hk))
    most = 8 * 32 * ELEMENTS_PER_THREAD  # pairs one program of 8 warps takes
    while True:
        block_hq = _pow2(triton.cdiv(hq, hsplit))
        block_hk = _pow2(triton.cdiv(hk, hsplit))
        per_token = (block_hq + block_hk) * block_f
        if per_token <= most or (block_hq <= 1 and block_hk <= 1):
            break
        hsplit *= 2
    block_t = max(1, min(16, _pow2(n_tokens), 4 * 32 * ELEMENTS_PER_THREAD // per_token))
    block_t = 1 << (block_t.bit_length() - 1)  # a power of two
    n_head_blocks = max(triton.cdiv(hq, block_hq), triton.cdiv(hk, block_hk))
    elements = block_t * per_token
    num_warps = 1
    while num_warps < 8 and elements > 32 * num_warps * ELEMENTS_PER_THREAD:
        num_warps *= 2
    return {
        "BLOCK_T": block_t,
        "BLOCK_HQ": block_hq,
        "BLOCK_HK": block_hk,
        "BLOCK_F": block_f,
        "BLOCK_P": min(_pow2(d_pass), PASS_CHUNK.get(elem_bytes, 8)),
        "grid_t": triton.cdiv(n_tokens, block_t),
        "grid_h": n_head_blocks,
        "num_warps": num_warps,
    }


def _pos_kind(positions: torch.Tensor) -> int:
    """``POS_KIND`` of a positions tensor: 0 integer, 1 fp32 / fp16 / bf16, 2 fp64."""
    if not positions.dtype.is_floating_point:
        return 0
    return 2 if positions.dtype == torch.float64 else 1


def launch(
    q: torch.Tensor,
    k: torch.Tensor,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
    positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    conj: bool,
    attention_factor: float,
    rotary_offset: int = 0,
    from_positions: torch.Tensor | None = None,
) -> None:
    """Rotate ``q`` into ``q_out`` and ``k`` into ``k_out`` with one kernel launch.

    Args:
        q, k, q_out, k_out: in ``layout`` (``thd`` ``[T, H, D]``, ``bhsd`` ``[B, H, S, D]``, ``bshd``
            ``[B, S, H, D]``); ``q_out`` may be ``q`` (in place), likewise ``k_out``.
        positions: ``[A, B, S]`` integer or floating (``B = 1, S = T`` for ``thd``).
        axis, freq: the tables of :mod:`mrope.ops.freqs`, on the tensors' device.
        rotary_dim: rotating channels; ``gptj``: adjacent pairing; ``exact``: split-turn angles;
        conj: rotate by ``-angle``; attention_factor: cos/sin multiplier; rotary_offset: first rotary channel.
        from_positions: ``[A, B, S]`` like ``positions``: rotate by ``angle(positions) - angle(from_positions)``
            (re-rotation of keys rotated at ``from_positions``).
    """
    bsz, seq, hq = layouts.dims(q, layout)
    hk = layouts.dims(k, layout)[2]
    head_dim = q.shape[-1]
    n_tokens = bsz * seq
    if n_tokens == 0 or (hq == 0 and hk == 0):
        return
    n_freq = rotary_dim // 2
    d_pass = head_dim - rotary_dim
    copy_pass = d_pass > 0 and q_out is not q
    cfg = launch_config(n_tokens, hq, hk, n_freq, d_pass, q.element_size())
    pos2 = positions if from_positions is None else from_positions
    grid = (cfg["grid_t"], cfg["grid_h"])
    strides = [layouts.canonical_strides(x, layout) for x in (q, k, q_out, k_out)]
    # Triton launches on the current device's current stream: make that the tensors' device.
    with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():
        get_kernel()[grid](
            q,
            k,
            q_out,
            k_out,
            positions,
            axis,
            freq,
            seq,
            n_tokens,
            hq,
            hk,
            *strides[0],
            *strides[1],
            *strides[2],
            *strides[3],
            positions.stride(0),
            positions.stride(1),
            positions.stride(2),
            pos2,
            pos2.stride(0),
            pos2.stride(1),
            pos2.stride(2),
            float(attention_factor),
            F=n_freq,
            D_PASS=d_pass,
            ROT_OFF=int(rotary_offset),
            BLOCK_T=cfg["BLOCK_T"],
            BLOCK_HQ=cfg["BLOCK_HQ"],
            BLOCK_HK=cfg["BLOCK_HK"],
            BLOCK_F=cfg["BLOCK_F"],
            BLOCK_P=cfg["BLOCK_P"],
            GPTJ=bool(gptj),
            EXACT=bool(exact),
            CONJ=bool(conj),
            COPY_PASS=bool(copy_pass),
            F64=q.dtype == torch.float64,
            POS_KIND=_pos_kind(positions),
            POS2_KIND=_pos_kind(pos2),
            REROTATE=from_positions is not None,
            RNE_BF16=q.dtype == torch.bfloat16 and interpreting(),
            num_warps=cfg["num_warps"],
            maxnreg=REROTATE_MAX_REGISTERS if from_positions is not None else None,
            enable_fp_fusion=False,  # no mul+add contraction: the rotation rounds like the torch path
        )


# ------------------------------------------------------------------------------------------ torch.library


@torch.library.custom_op("mrope::rotary", mutates_args=())
def triton_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    conj: bool,
    attention_factor: float,
    rotary_offset: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Functional M-RoPE: new ``(q_rot, k_rot)``, contiguous in ``layout``. Arguments as :func:`launch`."""
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    launch(
        q,
        k,
        q_out,
        k_out,
        positions,
        axis,
        freq,
        layout,
        rotary_dim,
        gptj,
        exact,
        conj,
        attention_factor,
        rotary_offset,
    )
    return q_out, k_out


@triton_rotary.register_fake
def _rotary_fake(
    q, k, positions, axis, freq, layout, rotary_dim, gptj, exact, conj, attention_factor, rotary_offset
):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.custom_op("mrope::rotary_", mutates_args=("q", "k"))
def triton_rotary_(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    conj: bool,
    attention_factor: float,
    rotary_offset: int,
) -> None:
    """In-place M-RoPE: rotates ``q`` and ``k`` (views allowed) in place. Arguments as :func:`launch`."""
    launch(
        q,
        k,
        q,
        k,
        positions,
        axis,
        freq,
        layout,
        rotary_dim,
        gptj,
        exact,
        conj,
        attention_factor,
        rotary_offset,
    )


@triton_rotary_.register_fake
def _rotary_inplace_fake(
    q, k, positions, axis, freq, layout, rotary_dim, gptj, exact, conj, attention_factor, rotary_offset
):
    return None


@torch.library.custom_op("mrope::rerotate_", mutates_args=("k",))
def triton_rerotate_(
    k: torch.Tensor,
    to_positions: torch.Tensor,
    from_positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    rotary_offset: int,
) -> None:
    """Re-rotate keys in place from ``from_positions`` to ``to_positions`` (both ``[A, B, S]``), one launch."""
    launch(
        k,
        layouts.no_heads(k, layout),
        k,
        layouts.no_heads(k, layout),
        to_positions,
        axis,
        freq,
        layout,
        rotary_dim,
        gptj,
        exact,
        False,
        1.0,
        rotary_offset,
        from_positions,
    )


@triton_rerotate_.register_fake
def _rerotate_inplace_fake(
    k, to_positions, from_positions, axis, freq, layout, rotary_dim, gptj, exact, rotary_offset
):
    return None


@torch.library.custom_op("mrope::rerotate", mutates_args=())
def triton_rerotate(
    k: torch.Tensor,
    to_positions: torch.Tensor,
    from_positions: torch.Tensor,
    axis: torch.Tensor,
    freq: torch.Tensor,
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    rotary_offset: int,
) -> torch.Tensor:
    """Functional re-rotation: new keys, contiguous in ``layout``. Arguments as :func:`triton_rerotate_`."""
    out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    launch(
        k,
        layouts.no_heads(k, layout),
        out,
        layouts.no_heads(out, layout),
        to_positions,
        axis,
        freq,
        layout,
        rotary_dim,
        gptj,
        exact,
        False,
        1.0,
        rotary_offset,
        from_positions,
    )
    return out


@triton_rerotate.register_fake
def _rerotate_fake(
    k, to_positions, from_positions, axis, freq, layout, rotary_dim, gptj, exact, rotary_offset
):
    return k.new_empty(k.shape)
