"""Benchmark: mrope's torch path against transformers' rotary path on CPU, and the angle-precision table.

Shapes are Qwen2-VL-7B's attention (28 query heads, 4 key/value heads, head_dim 128) at T = 4096 tokens,
fp32, with M-RoPE positions of an image-heavy prompt. Both sides get the same q, k and positions in
transformers' layout ``[B, H, S, D]``:

- transformers: ``Qwen2VLRotaryEmbedding(config)(q, position_ids)`` (cos/sin with the mrope section
  selection) + ``apply_rotary_pos_emb`` (transformers 5; in 4.x the selection lived in
  ``apply_multimodal_rotary_pos_emb``), fresh outputs;
- mrope: ``apply_mrope(q, k, positions, spec, layout="bhsd", backend="torch")``, fresh outputs;
- mrope thd: the same tokens in a serving engine's ``[T, H, D]`` layout (information only).

Prints medians (round-robin timing), the ratio (target >= 2x), the largest output difference, then the
rotation error against float64 at positions near 1e3, 1e5 and 1e6 for transformers' fp32 path and mrope's
``"fp32"`` and ``"exact"`` angle precisions.

bf16 section: the same shapes in bf16, ``thd`` layout, against a plain-torch bf16 rotation with a
cos/sin cache gather written here the way serving engines' ``forward_native`` does it (a bf16
``cos_sin_cache[max_pos, rotary_dim]``, gathered by the three position rows, the sections selected by
``split``/``cat``, then ``x1 * cos - x2 * sin`` etc. in bf16, one rounding per operation). mrope computes in
fp32 and rounds once; the max error of both against float64 is printed next to the times.

Run: ``python benchmarks/bench_apply.py`` (``--tokens 1024 --repeat 5`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch

from mrope import RopeSpec
from mrope.models import get_family
from mrope.ops import apply_mrope

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import compare  # noqa: E402


def transformers_path():
    """``(rotary_embedding, apply)`` from transformers (5.x API), with Qwen2-VL-7B's rope config."""
    import transformers
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    if int(transformers.__version__.split(".")[0]) < 5:
        raise SystemExit(
            f"bench_apply.py compares against transformers 5.x; found {transformers.__version__}"
        )
    config = Qwen2VLTextConfig(
        hidden_size=3584,
        num_attention_heads=28,
        num_key_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        max_position_embeddings=32768,
    )
    emb = m.Qwen2VLRotaryEmbedding(config)

    def apply(q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor):
        cos, sin = emb(q, position_ids)
        return m.apply_rotary_pos_emb(q, k, cos, sin)

    return apply


def image_prompt_positions(tokens: int) -> torch.Tensor:
    """``[3, 1, T]`` positions: text runs and 32 x 32 image blocks in turn (the Qwen2-VL rule,
    docs/conventions.md "Building positions")."""
    rows = torch.empty(3, tokens, dtype=torch.int64)
    i, s = 0, 0
    while i < tokens:
        n = min(64, tokens - i)  # text
        rows[:, i : i + n] = torch.arange(s, s + n)
        i, s = i + n, s + n
        n = min(1024, tokens - i)  # image grid (1, 32, 32)
        j = torch.arange(n)
        rows[0, i : i + n] = s
        rows[1, i : i + n] = s + j // 32
        rows[2, i : i + n] = s + j % 32
        i, s = i + n, s + 32
    return rows[:, None, :]


def reference64(x: torch.Tensor, positions: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """float64 rotation of ``x`` ``[T, H, D]`` by ``[3, T]`` positions (neox pairing)."""
    inv = torch.from_numpy(spec.inv_freq())
    ang = positions.T[:, torch.from_numpy(spec.axis_map())].double() * inv  # [T, F]
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    f = spec.num_freqs
    x = x.double()
    x1, x2 = x[..., :f], x[..., f : 2 * f]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s, x[..., 2 * f :]), dim=-1)


def precision_table(hf_apply, spec: RopeSpec) -> list[str]:
    """Markdown rows: max |rotated q - float64| near each position, for the three angle computations."""
    g = torch.Generator().manual_seed(1)
    t = 64
    q = torch.randn(t, 4, 128, generator=g)
    k = torch.randn(t, 1, 128, generator=g)
    rows = [
        "| position | transformers fp32 | mrope fp32 | mrope exact |",
        "|---:|---:|---:|---:|",
    ]
    for base in (1_000, 2_000, 100_000, 120_000, 1_000_000):
        pos = torch.randint(0, 64, (3, t), generator=g) + base
        want = reference64(q, pos, spec)
        hf_q = hf_apply(q.transpose(0, 1)[None], k.transpose(0, 1)[None], pos[:, None])[0][0].transpose(0, 1)
        errs = [
            (hf_q.double() - want).abs().max(),
            (apply_mrope(q, k, pos, spec, backend="torch")[0].double() - want).abs().max(),
            (apply_mrope(q, k, pos, spec, backend="torch", angle_precision="exact")[0].double() - want)
            .abs()
            .max(),
        ]
        rows.append(f"| {base:,} | " + " | ".join(f"{float(e):.1e}" for e in errs) + " |")
    return rows


def bf16_cache_reference(spec: RopeSpec, max_position: int):
    """A plain-torch bf16 M-RoPE with a cos/sin cache gather (serving engines' ``forward_native`` style).

    Returns ``apply(q, k, positions)`` for ``thd`` q ``[T, HQ, D]``, k ``[T, HK, D]``, positions ``[3, T]``;
    chunked (neox) sections, full rotary.
    """
    inv = torch.from_numpy(spec.inv_freq()).float()
    freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(torch.bfloat16)  # [P, rotary_dim]
    sections = list(spec.mrope_section)

    def apply(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        cos, sin = cache[positions].chunk(2, dim=-1)  # [3, T, F] each
        cos = torch.cat([m[i] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1).unsqueeze(-2)
        sin = torch.cat([m[i] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1).unsqueeze(-2)
        out = []
        for x in (q, k):
            x1, x2 = x.chunk(2, dim=-1)
            out.append(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
        return out[0], out[1]

    return apply


def bf16_section(spec: RopeSpec, tokens: int, repeat: int) -> list[str]:
    """Markdown rows: bf16 mrope (torch path) against the bf16 cache-gather reference, same process."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(tokens, 28, 128, generator=g).to(torch.bfloat16)
    k = torch.randn(tokens, 4, 128, generator=g).to(torch.bfloat16)
    pos = image_prompt_positions(tokens)[:, 0]
    ref = bf16_cache_reference(spec, int(pos.max()) + 1)
    want = reference64(q.float(), pos, spec)
    err_ref = float((ref(q, k, pos)[0].double() - want).abs().max())
    err_ours = float((apply_mrope(q, k, pos, spec, backend="torch")[0].double() - want).abs().max())
    times = compare(
        {
            "plain torch bf16, cos/sin cache gather": lambda: ref(q, k, pos),
            "mrope bf16 (fp32 compute, one rounding)": lambda: apply_mrope(q, k, pos, spec, backend="torch"),
            "mrope bf16 in place": lambda: apply_mrope(q, k, pos, spec, backend="torch", inplace=True),
        },
        repeat=repeat,
    )
    base = times["plain torch bf16, cos/sin cache gather"]
    errs = {"plain torch bf16, cos/sin cache gather": err_ref}
    errs["mrope bf16 (fp32 compute, one rounding)"] = errs["mrope bf16 in place"] = err_ours
    rows = ["| path | median ms | vs plain bf16 | max abs err vs float64 |", "|---|---:|---:|---:|"]
    for name, sec in times.items():
        rows.append(f"| {name} | {sec * 1e3:.2f} | {base / sec:.2f}x | {errs[name]:.3f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--bf16-only", action="store_true", help="only the bf16 section")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    spec = get_family("qwen2-vl").spec
    t = args.tokens
    bf16_rows = bf16_section(spec, t, args.repeat)
    bf16_title = f"# bf16 apply M-RoPE on CPU, thd layout, Qwen2-VL-7B shapes, T = {t}, {torch.get_num_threads()} threads"
    if args.bf16_only:
        print(bf16_title)
        print("\n".join(bf16_rows))
        return
    hf_apply = transformers_path()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 28, t, 128, generator=g)
    k = torch.randn(1, 4, t, 128, generator=g)
    pos = image_prompt_positions(t)
    q_thd, k_thd, pos_thd = q[0].transpose(0, 1).contiguous(), k[0].transpose(0, 1).contiguous(), pos[:, 0]

    hf_q, hf_k = hf_apply(q, k, pos)
    ours_q, ours_k = apply_mrope(q, k, pos, spec, layout="bhsd", backend="torch")
    diff = max(float((hf_q - ours_q).abs().max()), float((hf_k - ours_k).abs().max()))
    thd_q, _ = apply_mrope(q_thd, k_thd, pos_thd, spec, backend="torch")
    diff_thd = float((thd_q - ours_q[0].transpose(0, 1)).abs().max())
    assert diff < 1e-5 and diff_thd < 1e-5, (diff, diff_thd)

    times = compare(
        {
            "transformers": lambda: hf_apply(q, k, pos),
            "mrope": lambda: apply_mrope(q, k, pos, spec, layout="bhsd", backend="torch"),
            "mrope thd": lambda: apply_mrope(q_thd, k_thd, pos_thd, spec, backend="torch"),
            "mrope exact": lambda: apply_mrope(
                q, k, pos, spec, layout="bhsd", backend="torch", angle_precision="exact"
            ),
        },
        repeat=args.repeat,
    )
    print(
        f"# apply M-RoPE on CPU: Qwen2-VL-7B shapes (28 q heads, 4 kv heads, head_dim 128), T = {t}, fp32\n"
        f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}"
    )
    print("| path | median ms | vs transformers |")
    print("|---|---:|---:|")
    for name, sec in times.items():
        print(f"| {name} | {sec * 1e3:.1f} | {times['transformers'] / sec:.2f}x |")
    print(f"max |mrope - transformers| over q and k: {diff:.1e} (thd layout vs bhsd: {diff_thd:.1e})")
    print(f"speed-up of the torch path over transformers: {times['transformers'] / times['mrope']:.2f}x")
    print()
    print("# rotation error against float64 (max abs, unit-normal q), by position")
    print("\n".join(precision_table(hf_apply, spec)))
    print()
    print(bf16_title)
    print("\n".join(bf16_rows))


if __name__ == "__main__":
    main()
