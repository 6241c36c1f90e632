"""Launching the Triton kernel from torch: block sizes, the launch's arguments as one value, and the custom
ops ``mrope::rotary`` (functional) and ``mrope::rotary_`` (mutates ``q`` and ``k``), ``mrope::rerotate`` /
``mrope::rerotate_`` (keys moved between positions).

The custom ops work under ``torch.compile`` and CUDA graphs; their Python faces here are
:func:`triton_rotary`, :func:`triton_rotary_`, :func:`triton_rerotate` and :func:`triton_rerotate_` (the
public :func:`mrope.ops.apply_mrope` and :func:`mrope.ops.rerotate` check their inputs and call one of them).
Each builds one :class:`KernelLaunch` from its tensors and runs it. Layouts (``thd``, ``bhsd``, ``bshd``) are
those of :mod:`mrope.ops._layouts`; the kernel itself is :mod:`mrope.ops._triton_kernel`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import triton

import mrope.ops._layouts as layouts
from mrope.ops._triton_kernel import get_kernel, interpreting

PASS_CHUNK = {2: 8, 4: 16}
"""Pass-through channels copied per step, by bytes per element (others: 8). The copy's tile is
``[BLOCK_T, BLOCK_H, chunk]``, whose 64-bit load and store addresses a wider step keeps live at once: 32
channels a step took the 64-of-128 and 64-of-256 rotary shapes to 153-168 registers per thread; 8 keeps
bf16 / fp16 at the full-rotary shape's 96, and 16 keeps fp32 at 128 or fewer (8 made ptxas spill 20
bytes there), as ``benchmarks/aot_report.py`` reports."""
ONE_TENSOR_MAX_REGISTERS = 128
"""The register budget of a launch of one tensor (no k heads: a re-rotation of keys, or autograd's in-place
rotation of q or k alone) under ptxas ``.maxnreg``. Without it ptxas chose 48-96 registers and spilled 4-8
bytes in some such programs of 10 pairs a thread (re-rotation: 128 of 128 fp32, 64 of 256 bf16; k alone:
Qwen2-VL's 4 heads in fp32, 64 of 256 fp64 in place; MHRoPE's 8 key heads alone 28-40 bytes; sm_80); with
it they take 70-128 and do not spill. On q and k together it makes ptxas spill in programs that need
122-128 without it, and at 18 pairs a thread in one tensor alone too (Qwen2-VL's 28 q heads: 32 bytes), so
it is for one-tensor launches, at :data:`ONE_TENSOR_ELEMENTS_PER_THREAD`."""
ELEMENTS_PER_THREAD = 18
"""Most rotary pairs a thread of a program handles (the launch picks warps and head blocks to stay within
it): 18 is what the Qwen2-VL shape (28 + 4 heads x 64 frequencies, 4 warps) has always had, at 96
registers; 36 (head_dim 256, full rotary, 4 warps) took fp32 to 255 registers and spills."""
ONE_TENSOR_ELEMENTS_PER_THREAD = 12
"""The bound of a launch of one tensor (:data:`ONE_TENSOR_MAX_REGISTERS`). At 18 an exact re-rotation of 30
key heads (16.5 pairs a thread, CogVideoX's 64 of 64) spilled 16-32 bytes under the register cap (sm_80,
sm_90), and 28 q heads alone under the cap 24-40 bytes; at 12 the re-rotation takes 89-90 registers without
spills, and one tensor of Qwen2-VL's 4 key heads keeps its 10 pairs a thread (``benchmarks/aot_report.py``)."""
FP64_ELEMENTS_PER_THREAD = ELEMENTS_PER_THREAD // 2
"""The bound of fp64 q / k, whose every value takes two registers. At 18 fp64 took 152-162 registers per
thread (128 of 128, 256 of 256, 64 of 128 gptj at Qwen2-VL's heads, sm_80); at 12, 138 registers (HY-V4-VL's
64 at 192 of 256, 4 heads alone, out of place, sm_90) and 40-byte spills in its re-rotation; at 9, 64-80
registers without spills."""


ANGLES_PER_THREAD = 4
"""Most angles a thread of a per-head program computes: a head block of a per-head table turns by its own
table head, so its program computes ``BLOCK_T x BLOCK_F`` angles for one or two heads rather than sharing
them over all heads of a token. Unbounded, Falcon-OCR's shape (16 heads, a 16-head table, 32 GPT-J pairs)
took 2 warps and 145 registers in ``"exact"`` precision (128 in fp32), MHRoPE's fp32 128 (sm_90); with 4
angles a thread: 68, 70 and 80, no spills."""


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def _low_pow2(n: int) -> int:
    """The largest power of two dividing ``n`` (``n >= 1``)."""
    return n & -n


def launch_config(
    n_tokens: int,
    hq: int,
    hk: int,
    n_freq: int,
    d_pass: int = 0,
    elem_bytes: int = 2,
    table_heads: int = 1,
) -> dict[str, int]:
    """Block sizes, grid and warps for ``n_tokens`` tokens, ``hq``/``hk`` heads, ``n_freq`` frequencies,
    ``d_pass`` pass-through channels, ``elem_bytes`` bytes per q / k element and ``table_heads`` heads of
    the pair table (more than 1: a per-head table; a head block then stays within one table head).

    Few tokens (decode) split the heads over more programs; many tokens put all heads of a token in
    one program, so the angles are computed once per token, unless one token's heads hold more pairs
    than 8 warps take at :data:`ELEMENTS_PER_THREAD` (then the heads are split as well). A program
    takes as many tokens as 4 warps hold at that bound (at least one), and the fewest warps (1 to 8)
    that keep every thread within it, and under a per-head table within :data:`ANGLES_PER_THREAD` angles
    (registers follow the pairs and angles a thread holds); a launch of one tensor (``hk == 0``) and fp64
    launches within the lower :data:`ONE_TENSOR_ELEMENTS_PER_THREAD` and :data:`FP64_ELEMENTS_PER_THREAD`.
    """
    per_thread = ELEMENTS_PER_THREAD
    if hk == 0:
        per_thread = min(per_thread, ONE_TENSOR_ELEMENTS_PER_THREAD)
    if elem_bytes > 4:
        per_thread = min(per_thread, FP64_ELEMENTS_PER_THREAD)
    block_f = _pow2(n_freq)
    hsplit = 1 if n_tokens >= 256 else min(8, max(hq, hk, 1))
    most = 8 * 32 * per_thread  # pairs one program of 8 warps takes
    while True:
        block_hq = _pow2(triton.cdiv(hq, hsplit))
        block_hk = _pow2(triton.cdiv(hk, hsplit))
        if table_heads > 1:
            block_hq = min(block_hq, _low_pow2(max(hq // table_heads, 1)))
            block_hk = min(block_hk, _low_pow2(max(hk // table_heads, 1)))
        # The split counts the token's pairs over the frequencies the shape has, not over its tile's (padded
        # to a power of two): counting the padding splits shapes such as OmniGen2's (48 frequencies in a tile
        # of 64) into head blocks that spill under fp64 (benchmarks/aot_report.py, RESULTS.md).
        if (block_hq + block_hk) * n_freq <= most or (block_hq <= 1 and block_hk <= 1):
            break
        hsplit *= 2
    per_token = (block_hq + block_hk) * block_f  # the tile's, frequencies padded to a power of two
    block_t = max(1, min(16, _pow2(n_tokens), 4 * 32 * per_thread // per_token))
    block_t = 1 << (block_t.bit_length() - 1)  # a power of two
    n_head_blocks = max(triton.cdiv(hq, block_hq), triton.cdiv(hk, block_hk))
    elements = block_t * per_token
    angles = block_t * block_f if table_heads > 1 else 0  # a head block's own angles (one table head)
    num_warps = 1
    while num_warps < 8 and (
        elements > 32 * num_warps * per_thread or angles > 32 * num_warps * ANGLES_PER_THREAD
    ):
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


def compile_options(num_warps: int, hk: int) -> dict[str, Any]:
    """The compiler options of a launch with ``hk`` k heads: its warps, the register cap of a launch of one
    tensor (:data:`ONE_TENSOR_MAX_REGISTERS` when ``hk == 0``; ``None``: ptxas chooses) and no fp fusion."""
    return {
        "num_warps": num_warps,
        "maxnreg": ONE_TENSOR_MAX_REGISTERS if hk == 0 else None,
        "enable_fp_fusion": False,  # no mul+add contraction: the rotation rounds like the torch path
    }


def _pos_kind(positions: torch.Tensor) -> int:
    """``POS_KIND`` of a positions tensor: 0 integer, 1 fp32 / fp16 / bf16, 2 fp64."""
    if not positions.dtype.is_floating_point:
        return 0
    return 2 if positions.dtype == torch.float64 else 1


@dataclass(frozen=True)
class Rotation:
    """What a launch rotates by, besides the tensors.

    Attributes:
        layout: ``"thd"``, ``"bhsd"`` or ``"bshd"`` (of q, k and the outputs).
        rotary_dim: rotating channels (``2 F``); rotary_offset: the first of them.
        gptj: adjacent pairing (else split halves); exact: split-turn angles (else fp32 products).
        conj: rotate by ``-angle`` (the backward); attention_factor: cos / sin multiplier (YaRN).
    """

    layout: str
    rotary_dim: int
    gptj: bool
    exact: bool
    rotary_offset: int
    conj: bool = False
    attention_factor: float = 1.0


@dataclass(frozen=True)
class KernelLaunch:
    """One launch of the kernel: its grid, its runtime arguments (tensors, sizes, strides in elements and
    the attention factor, in the kernel's parameter order), its compile-time switches (the kernel's
    ``tl.constexpr`` parameters by name) and the compiler options. Built once from the tensors by
    :meth:`of`; :meth:`run` launches it."""

    grid: tuple[int, int]
    args: tuple[Any, ...]
    switches: dict[str, int | bool]
    options: dict[str, Any]
    device: torch.device

    @classmethod
    def of(
        cls,
        tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        positions: torch.Tensor,
        rows: torch.Tensor,
        freq: torch.Tensor,
        rotation: Rotation,
        from_positions: torch.Tensor | None = None,
    ) -> KernelLaunch:
        """The launch that rotates q into q_out and k into k_out.

        Args:
            tensors: ``(q, k, q_out, k_out)`` in ``rotation.layout``; ``q_out`` may be ``q`` (in place),
                likewise ``k_out``.
            positions: ``[A, B, S]`` integer or floating (``B = 1, S = T`` for ``thd``).
            rows, freq: the pair table's device form (:func:`mrope.ops._pairs.tables`), on the tensors'
                device: ``[HT, F]`` rows and fp32 ``[HT, F]`` or int64 ``[HT * 3, F]`` frequencies.
            rotation: what to rotate by.
            from_positions: ``[A, B, S]`` like ``positions``: rotate by ``angle(positions) -
                angle(from_positions)`` (re-rotation of keys rotated at ``from_positions``).
        """
        q, k, q_out, k_out = tensors
        layout = rotation.layout
        bsz, seq, hq = layouts.dims(q, layout)
        hk = layouts.dims(k, layout)[2]
        n_tokens = bsz * seq
        n_freq = rotation.rotary_dim // 2
        d_pass = q.shape[-1] - rotation.rotary_dim
        nt = max(1, rows.numel() // max(n_freq, 1))
        rerotate = from_positions is not None
        cfg = launch_config(n_tokens, hq, hk, n_freq, d_pass, q.element_size(), nt)
        pos2 = positions if from_positions is None else from_positions
        strides = [s for x in tensors for s in layouts.canonical_strides(x, layout)]
        args = (*tensors, positions, rows, freq, seq, n_tokens, hq, hk, *strides, *positions.stride())
        groups = (nt, max(1, hq // nt), max(1, hk // nt))
        args = (*args, pos2, *pos2.stride(), float(rotation.attention_factor), *groups)
        switches = {
            "F": n_freq,
            "D_PASS": d_pass,
            "ROT_OFF": int(rotation.rotary_offset),
            **{name: cfg[name] for name in ("BLOCK_T", "BLOCK_HQ", "BLOCK_HK", "BLOCK_F", "BLOCK_P")},
            "GPTJ": bool(rotation.gptj),
            "EXACT": bool(rotation.exact),
            "CONJ": bool(rotation.conj),
            "COPY_PASS": d_pass > 0 and q_out is not q,
            "F64": q.dtype == torch.float64,
            "POS_KIND": _pos_kind(positions),
            "POS2_KIND": _pos_kind(pos2),
            "REROTATE": rerotate,
            "RNE_BF16": q.dtype == torch.bfloat16 and interpreting(),
            "PER_HEAD": nt > 1,
        }
        options = compile_options(cfg["num_warps"], hk)
        grid = (cfg["grid_t"], cfg["grid_h"]) if n_tokens and (hq or hk) else (0, 0)
        return cls(grid, args, switches, options, q.device)

    def run(self) -> None:
        """Launch (nothing when there is no token or no head)."""
        if 0 in self.grid:
            return
        # Triton launches on the current device's current stream: make that the tensors' device.
        with torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext():
            get_kernel()[self.grid](*self.args, **self.switches, **self.options)


# ------------------------------------------------------------------------------------------ torch.library
# One argument list for the four ops (the schema torch would infer from typed signatures, written once):
# their tensors, the tables and the spec's rotary, then what only the rotation ops take. An op function
# receives the arguments positionally in this order.

_SPEC_ARGS = "Tensor rows, Tensor freq, str layout, SymInt rotary_dim, bool gptj, bool exact"
_ROTARY_ARGS = f"Tensor positions, {_SPEC_ARGS}, bool conj, float attention_factor, SymInt rotary_offset"
_REROTATE_ARGS = f"Tensor to_positions, Tensor from_positions, {_SPEC_ARGS}, SymInt rotary_offset"


def _rotation(
    layout: str,
    rotary_dim: int,
    gptj: bool,
    exact: bool,
    conj: bool = False,
    attention_factor: float = 1.0,
    rotary_offset: int = 0,
) -> Rotation:
    """The :class:`Rotation` of an op's arguments after the tables (``_SPEC_ARGS`` onwards)."""
    return Rotation(layout, rotary_dim, gptj, exact, rotary_offset, conj, attention_factor)


@torch.library.custom_op(
    "mrope::rotary", mutates_args=(), schema=f"(Tensor q, Tensor k, {_ROTARY_ARGS}) -> (Tensor, Tensor)"
)
def triton_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    *spec: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Functional M-RoPE: new ``(q_rot, k_rot)``, contiguous in ``layout``. ``spec``: ``layout,
    rotary_dim, gptj, exact, conj, attention_factor, rotary_offset`` (see :class:`Rotation`)."""
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    KernelLaunch.of((q, k, q_out, k_out), positions, rows, freq, _rotation(*spec)).run()
    return q_out, k_out


@triton_rotary.register_fake
def _rotary_fake(q, k, *rest):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.custom_op(
    "mrope::rotary_", mutates_args=("q", "k"), schema=f"(Tensor(a0!) q, Tensor(a1!) k, {_ROTARY_ARGS}) -> ()"
)
def triton_rotary_(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    *spec: Any,
) -> None:
    """In-place M-RoPE: rotates ``q`` and ``k`` (views allowed) in place. Arguments as :func:`triton_rotary`."""
    KernelLaunch.of((q, k, q, k), positions, rows, freq, _rotation(*spec)).run()


@triton_rotary_.register_fake
def _rotary_inplace_fake(q, k, *rest):
    return None


@torch.library.custom_op(
    "mrope::rerotate_", mutates_args=("k",), schema=f"(Tensor(a0!) k, {_REROTATE_ARGS}) -> ()"
)
def triton_rerotate_(
    k: torch.Tensor, to_positions: torch.Tensor, from_positions: torch.Tensor, *spec: Any
) -> None:
    """Re-rotate keys in place from ``from_positions`` to ``to_positions`` (both ``[A, B, S]``), one launch.
    ``spec``: ``rows, freq, layout, rotary_dim, gptj, exact, rotary_offset``."""
    _rerotate(k, k, to_positions, from_positions, *spec)


@triton_rerotate_.register_fake
def _rerotate_inplace_fake(k, *rest):
    return None


@torch.library.custom_op("mrope::rerotate", mutates_args=(), schema=f"(Tensor k, {_REROTATE_ARGS}) -> Tensor")
def triton_rerotate(
    k: torch.Tensor, to_positions: torch.Tensor, from_positions: torch.Tensor, *spec: Any
) -> torch.Tensor:
    """Functional re-rotation: new keys, contiguous in ``layout``. Arguments as :func:`triton_rerotate_`."""
    out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _rerotate(k, out, to_positions, from_positions, *spec)
    return out


@triton_rerotate.register_fake
def _rerotate_fake(k, *rest):
    return k.new_empty(k.shape)


def _rerotate(
    k: torch.Tensor,
    out: torch.Tensor,
    to_positions: torch.Tensor,
    from_positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    *spec: Any,
) -> None:
    """Re-rotate ``k`` into ``out`` (``out`` may be ``k``): the kernel's q is the keys, its k has no heads.
    ``spec``: ``layout, rotary_dim, gptj, exact, rotary_offset``."""
    *head, offset = spec
    rotation = _rotation(*head, rotary_offset=offset)
    tensors = (k, layouts.no_heads(k, rotation.layout), out, layouts.no_heads(out, rotation.layout))
    KernelLaunch.of(tensors, to_positions, rows, freq, rotation, from_positions).run()
