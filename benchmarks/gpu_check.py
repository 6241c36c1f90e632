"""GPU check for mrope.ops: correctness of the Triton kernel on CUDA, then bf16 timings and bandwidth.

Sized to finish within about 5 minutes on one H100/H200-class GPU (most of it Triton compilation). Sections:

1. Correctness against a float64 reference (written here from the released rotaries, docs/conventions.md
   "Rotation"; transformers 5.24 models/qwen2_vl/modeling_qwen2_vl.py:122-147) for every preset spec and a
   few scaled ones, both angle precisions, fp32 / bf16 / fp16, thd and bhsd layouts, in-place writes through
   views of a packed qkv buffer, partial rotary, positions up to 1e6 (exact mode); the torch path on CUDA
   too; CUDA-graph capture and replay; ``torch.compile(fullgraph=True)``; gradients (backward = inverse
   rotation). The grown op: 4 axes with NTK-alpha, a rotary slice at a channel offset (in place), float32
   positions, exact angles at the int64 extremes (kernel = torch path), and ``mrope.rerotate`` in place
   over shifts of +-1e6 (exact) against the raw keys rotated at the new positions.
2. bf16 timings at T = 1, 64, 8192, 65536 tokens with Qwen2-VL-7B shapes (28 q heads, 4 kv heads,
   head_dim 128, ``thd`` layout): the kernel (fp32 and exact angles, out of place and in place), the torch
   path, transformers' rotary path, and Liger's / vLLM's M-RoPE kernels when importable. Bandwidth is the
   bytes of q and k read and written over the time, against a measured device-to-device copy of the same
   bytes.

Prints markdown tables; exits 1 if a correctness check fails, 2 without CUDA. A check that cannot run
(CUDA graphs in a dry run) is reported as ``skipped``, never as ok.

Run: ``python benchmarks/gpu_check.py`` on a CUDA machine. ``--dry-run`` runs the same code on CPU tensors
in Triton's interpreter at tiny sizes (a check of this script's logic, not of the GPU): fewer tokens and
heads in the kernel checks, one-token-a-word prompts and 4 greedy tokens in the patched-model checks, one
warmup. ``--only`` picks sections (``SECTIONS``; default all): the tests run the dry run's in three
processes (tests/ops/test_gpu_check_*.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

QWEN2_VL_7B = {"hq": 28, "hk": 4, "head_dim": 128}
GPU_TOKENS = (1, 64, 8192, 65536)
DRY_TOKENS = (1, 16)
SECTIONS = ("correctness", "timings", "models", "variant-models")
"""``--only``'s choices: section 1 (less its patched-model rows), section 2, the patched-model check of
``bench_patch.FAMILIES`` with the dynamic-NTK check and bench_patch's rows, and the patched-model check of
``MODEL_CHECK_FAMILIES``."""
TOL = {torch.float32: 2e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


class Skipped(Exception):
    """Raised by a check that cannot run here (e.g. CUDA graphs in a CPU dry run): reported as skipped."""


class Report:
    """Collects correctness rows; ``failed`` is set by any failing check, ``skipped`` counts skipped ones."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.failed = False
        self.skipped = 0

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.failed |= not ok
        self.rows.append(f"| {name} | {'ok' if ok else 'FAIL'} | {detail} |")

    def run(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        try:
            ok, detail = fn()
        except Skipped as why:  # not run: never reported as ok
            self.skipped += 1
            self.rows.append(f"| {name} | skipped | {why} |")
            return
        except Exception as exc:  # a crash is a failed check, reported with its reason
            ok, detail = False, f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
            traceback.print_exc(file=sys.stderr)
        self.check(name, ok, detail)


# ------------------------------------------------------------------------------------------ reference


def ref_axis(spec) -> list[int]:
    """Axis of every frequency, from the rules (transformers 5.24 recomposition_frequencies: chunked
    models/qwen2_vl/modeling_qwen2_vl.py:138, interleaved models/qwen3_vl/modeling_qwen3_vl.py:410,
    hw_alternating models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py:124), not from spec.axis_map()."""
    sec, out = spec.mrope_section, []
    a = len(sec)
    for i in range(spec.rotary_dim // 2):
        if spec.section_layout == "chunked":
            axis, edge = 0, 0
            for j, size in enumerate(sec):
                axis = j if edge <= i < edge + size else axis
                edge += size
        elif spec.section_layout == "interleaved":
            axis = next((j for j in range(1, a) if i % a == j and i < a * sec[j]), 0)
        else:  # hw_alternating
            axis = (1 if i % 2 == 0 else 2) if i < sec[1] + sec[2] else 0
        out.append(axis)
    return out


def reference(x: torch.Tensor, positions: torch.Tensor, spec, layout: str) -> torch.Tensor:
    """float64 rotation of one tensor in ``layout``; positions ``[A, T]``/``[A, B, S]`` or 1-D forms, integer
    or floating; the rotary slice starts at ``spec.rotary_offset``."""
    a = spec.num_axes
    p = positions.to(torch.float64 if positions.dtype.is_floating_point else torch.int64)
    if layout == "thd":
        p = p.reshape(-1, 1, p.shape[-1])
    elif p.dim() == 2:
        p = p.unsqueeze(0)
    p = p.expand(a, p.shape[1], p.shape[2])
    f, o = spec.rotary_dim // 2, spec.rotary_offset
    d = spec.rotary_dim
    if spec.scaling.type in ("none", "ntk_alpha"):
        base = float(spec.theta)
        if spec.scaling.type == "ntk_alpha":
            base *= spec.scaling.alpha ** (d / (d - 2))
        inv = base ** (-2.0 * torch.arange(f, dtype=torch.float64) / d)
    else:  # scaled specs: the spec's formulas (checked against transformers in tests/core/test_spec.py)
        inv = torch.from_numpy(spec.inv_freq(int(p.max()) + 1))
    inv = inv.to(x.device)
    axis = torch.tensor(ref_axis(spec), device=x.device)
    ang = p.permute(1, 2, 0)[..., axis].double() * inv  # [B, S, F]
    cos = (ang.cos() * spec.attention_factor())[:, :, None]
    sin = (ang.sin() * spec.attention_factor())[:, :, None]
    xc = {"thd": lambda t: t.unsqueeze(0), "bhsd": lambda t: t.transpose(1, 2), "bshd": lambda t: t}[layout](
        x.double()
    )
    out = xc.clone()
    ar = torch.arange(f, device=x.device)
    i1 = o + (ar if spec.pairing == "neox" else 2 * ar)
    i2 = i1 + f if spec.pairing == "neox" else i1 + 1
    out[..., i1] = xc[..., i1] * cos - xc[..., i2] * sin
    out[..., i2] = xc[..., i2] * cos + xc[..., i1] * sin
    return {"thd": lambda t: t[0], "bhsd": lambda t: t.transpose(1, 2), "bshd": lambda t: t}[layout](out)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


# ------------------------------------------------------------------------------------------ correctness


def correctness(device: torch.device, compile_backend: str) -> Report:
    from mrope import RopeSpec
    from mrope.models import PRESET_NAMES, get_family
    from mrope.ops import apply_mrope

    rep = Report()
    g = torch.Generator(device="cpu").manual_seed(0)
    dry = device.type != "cuda"  # the interpreter's fewer tokens and heads (same head_dim and grouping)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    def pos_for(layout, t=9, b=2, s=5, high=5000, base=0, axes=3):
        shape = (axes, t) if layout == "thd" else (axes, b, s)
        return (torch.randint(0, high, shape, generator=g) + base).to(device)

    def qk(layout, spec, dtype, t=9, b=2, s=5, hq=None, hk=None):
        d = spec.head_dim
        hq, hk = hq or (2 if dry else 4), hk or (1 if dry else 2)  # grouped either way; half the programs
        if layout == "thd":
            return rand(t, hq, d, dtype=dtype), rand(t, hk, d, dtype=dtype)
        if layout == "bshd":
            return rand(b, s, hq, d, dtype=dtype), rand(b, s, hk, d, dtype=dtype)
        return rand(b, hq, s, d, dtype=dtype), rand(b, hk, s, d, dtype=dtype)

    base_spec = get_family("qwen2-vl").spec
    specs = {}  # one name per distinct released spec (equal specs need one run)
    for name in PRESET_NAMES:
        if get_family(name).spec not in specs.values():
            specs[name] = get_family(name).spec
    specs["qwen2-vl+linear"] = base_spec.with_scaling(type="linear", factor=4.0)
    specs["qwen2-vl+dynamic"] = base_spec.with_scaling(
        type="dynamic", factor=2.0, original_max_position_embeddings=64
    )
    specs["qwen3-vl+yarn"] = get_family("qwen3-vl").spec.with_scaling(
        type="yarn", factor=4.0, original_max_position_embeddings=256
    )

    def one(spec, layout, dtype, precision, backend, base=0, inplace=False):
        def fn():
            q, k = qk(layout, spec, dtype)
            pos = pos_for(layout, base=base, axes=spec.num_axes)
            want_q, want_k = reference(q, pos, spec, layout), reference(k, pos, spec, layout)
            out_q, out_k = apply_mrope(
                q, k, pos, spec, layout=layout, backend=backend, angle_precision=precision, inplace=inplace
            )
            # fp32 angles of size ~5000 carry ~5000 * 2^-24 rad of error; exact ones one rounding
            tol = TOL[dtype] if precision == "exact" else max(TOL[dtype], 5000 * 2**-22)
            err = max(rel_err(out_q, want_q), rel_err(out_k, want_k))
            same = (out_q is q) == inplace and out_q.dtype == dtype
            return err < tol and same, f"rel err {err:.1e} (tol {tol:.0e})"

        return fn

    for name, spec in specs.items():
        for precision in ("fp32", "exact"):
            rep.run(f"{name} {precision} thd bf16", one(spec, "thd", torch.bfloat16, precision, "triton"))
            rep.run(f"{name} {precision} bhsd fp32", one(spec, "bhsd", torch.float32, precision, "triton"))
    for dtype in (torch.float32, torch.float16):
        rep.run(f"qwen3-vl exact thd {dtype}", one(specs["qwen3-vl"], "thd", dtype, "exact", "triton"))
    for base in (1_000, 100_000, 1_000_000):
        rep.run(
            f"qwen2-vl exact fp32 at position {base:,}",
            one(specs["qwen2-vl"], "thd", torch.float32, "exact", "triton", base=base),
        )
    rep.run(
        "glm-4.1v exact bshd fp32 in place",
        one(specs["glm-4.1v"], "bshd", torch.float32, "exact", "triton", inplace=True),
    )
    rep.run(
        "torch path on device, qwen3-vl exact", one(specs["qwen3-vl"], "thd", torch.float32, "exact", "torch")
    )

    def packed_views():
        spec = specs["qwen2-vl"]
        t, hq, hk, d = 9 if dry else 33, 28, 4, 128
        qkv = rand(t, (hq + 2 * hk) * d, dtype=torch.bfloat16)
        before = qkv.clone()
        q = qkv[:, : hq * d].view(t, hq, d)
        k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
        pos = pos_for("thd", t=t)
        want_q = reference(before[:, : hq * d].view(t, hq, d), pos, spec, "thd")
        apply_mrope(q, k, pos, spec, inplace=True, backend="triton", angle_precision="exact")
        err = rel_err(q, want_q)
        v_same = bool(torch.equal(qkv[:, (hq + hk) * d :], before[:, (hq + hk) * d :]))
        return err < TOL[torch.bfloat16] and v_same, f"rel err {err:.1e}, v untouched: {v_same}"

    rep.run("in place through packed qkv views (bf16, 28/4 heads)", packed_views)

    def graph_replay():
        if device.type != "cuda":
            raise Skipped("needs CUDA (dry run on CPU)")
        spec = specs["qwen2-vl+dynamic"]
        q, k = qk("thd", spec, torch.bfloat16, t=64)
        pos = pos_for("thd", t=64, high=500)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: compile, cache the frequency tables
                apply_mrope(q, k, pos, spec, backend="triton")
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out_q, _ = apply_mrope(q, k, pos, spec, backend="triton")
        q.copy_(rand(*q.shape, dtype=q.dtype))
        pos.copy_(pos_for("thd", t=64, high=500))
        graph.replay()
        torch.cuda.synchronize()
        want, _ = apply_mrope(q, k, pos, spec, backend="triton")
        return bool(torch.equal(out_q, want)), "replay with new q and positions equals eager"

    rep.run("CUDA graph capture + replay (dynamic NTK, no host sync)", graph_replay)

    # ---- the op's rotary forms and rerotate, independent of which families are registered
    four_axes = RopeSpec(
        head_dim=128, rotary_dim=128, theta=1e4, mrope_section=(16, 16, 16, 16)
    ).with_scaling(type="ntk_alpha", alpha=1000.0)
    offset_slice = RopeSpec(
        head_dim=256,
        rotary_dim=64,
        theta=1e4,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
        rotary_offset=192,
    )
    for precision in ("fp32", "exact"):
        rep.run(
            f"4 axes chunked + ntk_alpha, {precision}, bf16",
            one(four_axes, "thd", torch.bfloat16, precision, "triton"),
        )
        rep.run(
            f"offset slice (192 + 64 of 256), gptj interleaved, {precision}, in place",
            one(offset_slice, "bshd", torch.float32, precision, "triton", inplace=True),
        )

    def float_positions(precision):
        def fn():
            spec = specs["qwen3-vl"]
            q, k = qk("thd", spec, torch.bfloat16)
            pos = (torch.rand(3, 9, generator=g, dtype=torch.float64) * 900).float().to(device)
            out_q, _ = apply_mrope(q, k, pos, spec, backend="triton", angle_precision=precision)
            err = rel_err(out_q, reference(q, pos, spec, "thd"))
            return err < TOL[torch.bfloat16], f"rel err {err:.1e}"

        return fn

    for precision in ("fp32", "exact"):
        rep.run(f"float32 positions (fractional), {precision}", float_positions(precision))

    def int64_ends():
        spec = specs["qwen2-vl"]
        q, k = qk("thd", spec, torch.float32, t=6)
        row = [2**31 - 1, 2**31, 2**32 + 5, 2**53 + 1, 2**62, -(2**63)]
        pos = torch.tensor([row, row[::-1], [v // 3 for v in row]], device=device)
        exact_q, _ = apply_mrope(q, k, pos, spec, backend="triton", angle_precision="exact")
        torch_q, _ = apply_mrope(q, k, pos, spec, backend="torch", angle_precision="exact")
        err = float((exact_q - torch_q).abs().max())
        small = torch.full((3, 1), 5, device=device)
        big = torch.full((3, 1), 2**32 + 5, device=device)
        a = apply_mrope(q[:1], k[:1], small, spec, backend="triton", angle_precision="exact")[0]
        b = apply_mrope(q[:1], k[:1], big, spec, backend="triton", angle_precision="exact")[0]
        moved = float((a - b).abs().max())
        return (
            err < 1e-5 and moved > 0.1,
            f"kernel vs torch path {err:.1e}; 2^32+5 vs 5 differ by {moved:.2f}",
        )

    rep.run("exact angles at int64 extremes (kernel = torch path, no 2^32 wrap)", int64_ends)

    def rerotated(precision, shift):
        def fn():
            spec = specs["qwen3-vl"]
            t = 9 if dry else 33
            raw = rand(t, 4, 128)
            p1 = pos_for("thd", t=t, high=2000)
            p2 = p1 + torch.tensor([[shift], [shift + 7], [2 * shift]], device=device)
            cache, _ = apply_mrope(raw, raw[:, :0], p1, spec, backend="triton", angle_precision=precision)
            mrope.rerotate(cache, p1, p2, spec, backend="triton", angle_precision=precision)
            err = rel_err(cache, reference(raw, p2, spec, "thd"))
            tol = 4e-6 if precision == "exact" else 2 * (abs(shift) + 2000) * 2**-22 + 1e-5
            return err < tol, f"vs raw keys rotated at p2: rel err {err:.1e} (tol {tol:.0e})"

        return fn

    import mrope

    for precision, shift in (("exact", 10**6), ("exact", -(10**6)), ("fp32", 1000)):
        rep.run(f"rerotate in place, {precision}, shift {shift:,}", rerotated(precision, shift))

    def compiled():
        torch._dynamo.reset()
        spec = specs["qwen3-vl"]
        q, k = qk("thd", spec, torch.bfloat16)
        pos = pos_for("thd")

        def f(q, k, pos):
            qr, kr = apply_mrope(q, k, pos, spec, backend="triton")
            return qr * 2, kr

        got = torch.compile(f, backend=compile_backend, fullgraph=True)(q, k, pos)
        want = f(q, k, pos)
        return bool(
            torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        ), f"backend={compile_backend}"

    rep.run("torch.compile(fullgraph=True)", compiled)

    def backward():
        spec = specs["glm-4.1v"]
        q, k = qk("thd", spec, torch.float32)
        q.requires_grad_(True)
        k.requires_grad_(True)
        pos = pos_for("thd")
        gq, gk = rand(*q.shape), rand(*k.shape)
        qr, kr = apply_mrope(q, k, pos, spec, backend="triton")
        torch.autograd.backward((qr, kr), (gq, gk))
        back_q, _ = apply_mrope(q.grad, k.grad, pos, spec, backend="triton")
        err = rel_err(back_q, gq.double())
        return err < 1e-5, f"R(R^T g) vs g: rel err {err:.1e}"

    rep.run("backward is the inverse rotation", backward)

    def transformers_parity():
        from transformers.models.qwen2_vl import modeling_qwen2_vl as m
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

        spec = specs["qwen2-vl"]
        config = Qwen2VLTextConfig(
            hidden_size=3584,
            num_attention_heads=28,
            num_key_value_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        )
        emb = m.Qwen2VLRotaryEmbedding(config).to(device)
        s = 8 if dry else 50
        q, k = rand(2, 28, s, 128), rand(2, 4, s, 128)
        pos = pos_for("bhsd", b=2, s=s, high=3000)
        cos, sin = emb(q, pos)
        want_q, want_k = m.apply_rotary_pos_emb(q, k, cos, sin)
        got_q, got_k = apply_mrope(q, k, pos, spec, layout="bhsd", backend="triton")
        err = max(float((got_q - want_q).abs().max()), float((got_k - want_k).abs().max()))
        same = float((got_q == want_q).float().mean())
        return err < 5e-6, f"fp32 max abs diff {err:.1e}, bit-identical {100 * same:.1f}%"

    rep.run("kernel vs transformers Qwen2-VL rotary (fp32 angles)", transformers_parity)
    return rep


# ------------------------------------------------------------------------------------------ timings


def image_prompt_positions(tokens: int, device: torch.device) -> torch.Tensor:
    """``[3, T]``: text runs of 64 and 32 x 32 image blocks in turn."""
    rows = torch.empty(3, tokens, dtype=torch.int64)
    i, s = 0, 0
    while i < tokens:
        n = min(64, tokens - i)
        rows[:, i : i + n] = torch.arange(s, s + n)
        i, s = i + n, s + n
        n = min(1024, tokens - i)
        j = torch.arange(n)
        rows[0, i : i + n], rows[1, i : i + n], rows[2, i : i + n] = s, s + j // 32, s + j % 32
        i, s = i + n, s + 32
    return rows.to(device)


def optional_paths(spec, q, k, pos) -> dict[str, Callable[[], object] | str]:
    """transformers, Liger and vLLM M-RoPE on the same inputs: callables, or a string saying why not."""
    out: dict[str, Callable[[], object] | str] = {}
    t, hq, d = q.shape
    hk = k.shape[1]
    try:
        from transformers.models.qwen2_vl import modeling_qwen2_vl as m
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

        config = Qwen2VLTextConfig(
            hidden_size=hq * d,
            num_attention_heads=hq,
            num_key_value_heads=hk,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": spec.theta,
                "mrope_section": list(spec.mrope_section),
            },
        )
        emb = m.Qwen2VLRotaryEmbedding(config).to(q.device)
        qb, kb, pb = q.transpose(0, 1)[None], k.transpose(0, 1)[None], pos[:, None]

        def hf():
            cos, sin = emb(qb, pb)
            return m.apply_rotary_pos_emb(qb, kb, cos, sin)

        out["transformers (rotary emb + apply)"] = hf
    except Exception as exc:
        out["transformers (rotary emb + apply)"] = f"n/a: {type(exc).__name__}: {exc}"[:120]
    try:
        from liger_kernel.ops.qwen2vl_mrope import LigerQwen2VLMRopeFunction

        inv = torch.from_numpy(spec.inv_freq()).float().to(q.device)
        freqs = pos[:, None, :, None].float() * inv  # [3, 1, T, F], transformers 4.x layout
        cos3 = torch.cat((freqs.cos(), freqs.cos()), -1).to(q.dtype)
        sin3 = torch.cat((freqs.sin(), freqs.sin()), -1).to(q.dtype)
        qb, kb = q.transpose(0, 1)[None].contiguous(), k.transpose(0, 1)[None].contiguous()

        def liger():
            return LigerQwen2VLMRopeFunction.apply(
                qb.clone(), kb.clone(), cos3, sin3, list(spec.mrope_section)
            )

        out["liger (kernel, cos/sin given; +clone)"] = liger
    except Exception as exc:
        out["liger (kernel, cos/sin given; +clone)"] = f"n/a: {type(exc).__name__}: {exc}"[:120]
    try:
        from vllm.model_executor.layers.rotary_embedding import MRotaryEmbedding

        rope = MRotaryEmbedding(
            d, d, 1 << 20, int(spec.theta), True, q.dtype, mrope_section=list(spec.mrope_section)
        )
        rope = rope.to(q.device)
        qf, kf = q.reshape(t, hq * d), k.reshape(t, hk * d)

        def vllm():
            return rope.forward_cuda(pos, qf.clone(), kf.clone())

        out["vllm MRotaryEmbedding (+clone)"] = vllm
    except Exception as exc:
        out["vllm MRotaryEmbedding (+clone)"] = f"n/a: {type(exc).__name__}: {exc}"[:120]
    return out


def time_tokens(device: torch.device, t: int, repeat: int) -> list[str]:
    """Markdown rows for one token count: every path's median time, bandwidth and share of a copy's."""
    from _timing import compare

    from mrope.models import get_family
    from mrope.ops import apply_mrope, rerotate

    spec = get_family("qwen2-vl").spec
    hq, hk, d = QWEN2_VL_7B["hq"], QWEN2_VL_7B["hk"], QWEN2_VL_7B["head_dim"]
    g = torch.Generator(device="cpu").manual_seed(t)
    q = torch.randn(t, hq, d, generator=g).to(device, torch.bfloat16)
    k = torch.randn(t, hk, d, generator=g).to(device, torch.bfloat16)
    pos = image_prompt_positions(t, device)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()  # bytes read + written
    src = torch.empty(q.numel() + k.numel(), dtype=q.dtype, device=device)
    dst = torch.empty_like(src)
    q_in, k_in = q.clone(), k.clone()
    pos_moved = pos + 1_000_000
    fns: dict[str, Callable[[], object]] = {
        "device copy of the same bytes": lambda: dst.copy_(src),
        "mrope triton, fp32 angles": lambda: apply_mrope(q, k, pos, spec, backend="triton"),
        "mrope triton, exact angles": lambda: apply_mrope(
            q, k, pos, spec, backend="triton", angle_precision="exact"
        ),
        "mrope triton, in place": lambda: apply_mrope(q_in, k_in, pos, spec, backend="triton", inplace=True),
        "mrope torch path": lambda: apply_mrope(q, k, pos, spec, backend="torch"),
        "mrope triton rerotate k in place, exact": lambda: rerotate(
            k_in, pos, pos_moved, spec, backend="triton", angle_precision="exact"
        ),
    }
    notes = []
    for name, fn in optional_paths(spec, q, k, pos).items():
        if callable(fn):
            fns[name] = fn
        else:
            notes.append(f"| {t} | {name} | {fn} | | |")
    times = compare(fns, device=device, repeat=repeat, warmup=3 if device.type == "cuda" else 1)
    copy_bw = moved / times["device copy of the same bytes"]
    rows = []
    for name, sec in times.items():
        bw = moved / sec
        rows.append(f"| {t} | {name} | {sec * 1e6:.1f} | {bw / 1e9:.0f} | {100 * bw / copy_bw:.0f}% |")
    return rows + notes


def timings(device: torch.device, tokens: tuple[int, ...], repeat: int) -> list[str]:
    rows = [
        "| T | path | median us | GB/s (q+k read+write) | % of copy |",
        "|---:|---|---:|---:|---:|",
    ]
    for t in tokens:
        rows.extend(time_tokens(device, t, repeat))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


MODEL_CHECK_FAMILIES = ("hy-v4-vl", "cohere-compass", "qwen4-exp")
"""Checked after ``bench_patch.FAMILIES``: HY-V4-VL's rope slice (non-contiguous q/k views, and its DSA
indexer's ``bshd`` layout), Cohere-Compass's per-layer-type rotary with a NoPE layer, and Qwen4-Exp's QSA
indexer (sliced and gathered table views, query-only and ``thd`` rotations), on the kernel."""

DYNAMIC_NTK = {"rope_parameters": {"rope_type": "dynamic", "factor": 4.0}, "max_position_embeddings": 24}
"""Text-config fields of the dynamic-NTK check: its prompt ends at position 12, so 16 greedy tokens decode
across the original length 24 (the table grows at every step past it)."""


def patched_model_check(
    device: torch.device,
    rep: Report,
    repeat: int,
    families: tuple[str, ...] | None = None,
    bench: bool = True,
) -> list[str]:
    """Tiny transformers models patched by ``mrope.integrations.transformers.patch`` (the Triton kernel
    inside the attention): prefill logits and 8 greedy tokens (4 in the dry run) against the same model
    unpatched (correctness rows in ``rep``) for each of ``families`` (default ``bench_patch.FAMILIES``
    then ``MODEL_CHECK_FAMILIES``); with ``bench``, a dynamic-NTK Qwen2-VL decoding 16 greedy tokens
    across its original length (the logits of every step), then ``benchmarks/bench_patch.py``'s prefill
    timing rows (returned; ``[]`` without ``bench``)."""
    import copy

    import bench_patch

    import mrope
    from mrope.integrations.transformers import model_inputs, model_rules, patch
    from mrope.testing import tiny_model

    dry = device.type != "cuda"
    # The dry run's prompts: the same text and media in a third to half of the tokens (one token a word):
    # the interpreter runs a kernel program per few tokens, and Qwen4-Exp's indexer one launch per query.
    tokenizer = bench_patch.tokenize_words if dry else None
    new_tokens = 4 if dry else 8
    for family in (*bench_patch.FAMILIES, *MODEL_CHECK_FAMILIES) if families is None else families:

        def check(family: str = family) -> tuple[bool, str]:
            plain = tiny_model(family).to(device)
            patched = patch(copy.deepcopy(plain), backend="triton")
            kw = bench_patch.prompt(plain, family, 1, device, tokenizer)
            outs = []
            for model in (plain, patched):
                model.model.rope_deltas = None
                with torch.no_grad():
                    logits = model(**kw, use_cache=False).logits
                    model.model.rope_deltas = None
                    tokens = model.generate(
                        **kw, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
                    )
                outs.append((logits, tokens))
            diff = (outs[0][0] - outs[1][0]).abs().max().item()
            same = torch.equal(outs[0][1], outs[1][1])
            return diff < 1e-4 and same, f"max logit diff {diff:.1e}, greedy tokens identical: {same}"

        rep.run(f"patched {family} model vs unpatched (fp32)", check)

    if not bench:
        return []

    def dynamic() -> tuple[bool, str]:
        plain = tiny_model("qwen2-vl", text=DYNAMIC_NTK).to(device)
        patched = patch(copy.deepcopy(plain), backend="triton")
        m = model_rules(plain).merge_size
        sample = [
            mrope.Text([1000, 1001, 1002, 1003]),
            mrope.Image(grid=(1, 2 * m, 3 * m)),
            mrope.Text([1004, 1005, 1006, 1007]),
        ]
        batch = mrope.build_batch([sample], model="qwen2-vl", rules=model_rules(plain))
        kw = {k: v.to(device) for k, v in model_inputs(batch, plain).items() if k != "position_ids"}
        runs = []
        for model in (plain, patched):
            model.model.rope_deltas = None
            with torch.no_grad():
                runs.append(
                    model.generate(
                        **kw,
                        max_new_tokens=16,
                        min_new_tokens=16,
                        do_sample=False,
                        output_logits=True,
                        return_dict_in_generate=True,
                    )
                )
        last = int(batch.sequences[0].ids.max()) + 16
        diff = max((a - b).abs().max().item() for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
        same = torch.equal(runs[0].sequences, runs[1].sequences)
        ok = diff < 1e-4 and same and last > DYNAMIC_NTK["max_position_embeddings"]
        return ok, f"positions up to {last}, max step-logit diff {diff:.1e}, greedy tokens identical: {same}"

    rep.run("patched dynamic-NTK qwen2-vl, 16 decode steps across L0 = 24 (fp32)", dynamic)
    rows = [
        "| family | tokens | unpatched ms | patched ms | ratio | get_rope_index ms (transformers / mrope) "
        "| max logit diff | patch() ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    scale = 1 if dry else 4  # the dry run's interpreter is slow
    for family in bench_patch.FAMILIES:
        rows.append(
            bench_patch.run_family(
                family, device, torch.float32, scale, repeat, tokenizer, warmup=1 if dry else 2
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU tensors, Triton interpreter, tiny sizes")
    parser.add_argument("--tokens", type=int, nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--skip-timings", action="store_true")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=SECTIONS,
        help="run only these sections (default all; the dry run's tests run them in separate processes)",
    )
    args = parser.parse_args()
    sections = set(args.only) - ({"timings"} if args.skip_timings else set())
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # read by mrope at call time
        device = torch.device("cpu")
        tokens = tuple(args.tokens or DRY_TOKENS)
        compile_backend = "aot_eager"
    else:
        if not torch.cuda.is_available():
            print(
                "gpu_check.py needs CUDA: no CUDA device is visible to torch "
                f"{torch.__version__}. Run it on a GPU machine, or pass --dry-run to check the script on CPU.",
                file=sys.stderr,
            )
            return 2
        device = torch.device("cuda")
        tokens = tuple(args.tokens or GPU_TOKENS)
        compile_backend = "inductor"
    import triton

    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU (dry run), {platform.machine()}"
    )
    print(f"# mrope gpu_check on {name}: torch {torch.__version__}, triton {triton.__version__}")
    t0 = time.perf_counter()
    rep = correctness(device, compile_backend) if "correctness" in sections else Report()
    model_rows = []
    if sections & {"models", "variant-models"}:
        import bench_patch

        families = (
            *(bench_patch.FAMILIES if "models" in sections else ()),
            *(MODEL_CHECK_FAMILIES if "variant-models" in sections else ()),
        )
        model_rows = patched_model_check(device, rep, args.repeat, families, bench="models" in sections)
    if sections - {"timings"}:
        print(f"\n## correctness ({time.perf_counter() - t0:.0f} s)\n")
        print("| check | result | detail |\n|---|---|---|")
        print("\n".join(rep.rows))
    if "timings" in sections:
        t0 = time.perf_counter()
        rows = timings(device, tokens, args.repeat)
        print(f"\n## bf16 timings, Qwen2-VL-7B shapes, thd layout ({time.perf_counter() - t0:.0f} s)\n")
        print("\n".join(rows))
    if "models" in sections:
        print("\n## patched tiny transformers models, fp32 prefill (benchmarks/bench_patch.py)\n")
        print("\n".join(model_rows))
    skipped = f" ({rep.skipped} skipped, see the table)" if rep.skipped else ""
    print(f"\n{'FAILED' if rep.failed else 'all checks passed'}{skipped}")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
