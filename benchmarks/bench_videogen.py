"""Benchmark: mrope's video-generation rotation against diffusers' own rotary code, on CPU.

For each model a latent of ``--frames`` latent frames at 60 x 104 (Wan 2.1 480p's latent rows and columns;
the same for every model here) and its attention heads (Wan 2.1 1.3B: 12 x 128; HunyuanVideo: 24 x 128;
CogVideoX-5B: 48 x 64), q and k ``[1, S, H, D]`` (diffusers' layout for Wan and HunyuanVideo):

- diffusers: the model's rotary module (``WanRotaryPosEmbed``, ``HunyuanVideoRotaryPosEmbed``, CogVideoX's
  pipeline helper over ``get_3d_rotary_pos_embed``) for cos / sin, then its apply function on q and k;
- mrope: ``latent_positions`` + ``apply_mrope(q, k, positions, rope, layout="bshd", angle_precision=
  rope.angle_precision, backend="torch")``.

OmniGen2 (24 q / 8 kv heads x 96): a sequence of a 128-token caption, one reference latent and the output
latent, each 60 x 104 (``--frames`` does not apply); its rotation as its code runs it (VectorSpaceLab/OmniGen2
at 0f72fa9, repo.py:31-41 and attention_processor.py:190-193): the float64 ``get_1d_rotary_pos_embed``
tables (computed once, as its pipeline does) gathered per axis, then diffusers' ``apply_rotary_emb(...,
use_real=False)`` on q and k; mrope: ``apply_mrope`` as above. The positions, built once, are in neither
time (the builder's ``omnirope`` ones, equal to OmniGen2's, tests/models/test_scheme_omnirope_omnigen2.py).

Prints medians (round-robin timing, ``benchmarks/_timing.py``), the ratio diffusers / mrope (above 1:
mrope is faster), the largest output difference, and the load average. Needs diffusers (the dev extra).

Run: ``python benchmarks/bench_videogen.py`` (``--frames 2 --repeat 5`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import types

import torch
from diffusers.models import embeddings
from diffusers.models.transformers import transformer_wan
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed
from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

import mrope
from mrope.models import video_rope

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import compare  # noqa: E402

HEIGHT, WIDTH = 60, 104
CAPTION = 128  # OmniGen2's caption tokens
MODELS = {  # config, q heads, k heads
    "wan": (
        {"_class_name": "WanTransformer3DModel", "attention_head_dim": 128, "patch_size": [1, 2, 2]},
        12,
        12,
    ),
    "hunyuan-video": ({"_class_name": "HunyuanVideoTransformer3DModel"}, 24, 24),
    "cogvideox": (
        {
            "_class_name": "CogVideoXTransformer3DModel",
            "use_rotary_positional_embeddings": True,
            "attention_head_dim": 64,
            "sample_height": 60,
            "sample_width": 90,
        },
        48,
        48,
    ),
    "omnigen2": ({"_class_name": "OmniGen2Transformer2DModel"}, 24, 8),
}


def _wan_apply() -> types.FunctionType:
    """Wan's ``apply_rotary_emb`` (transformer_wan.py:104-115), rebuilt from its code object."""
    consts = transformer_wan.WanAttnProcessor.__call__.__code__.co_consts
    (code,) = [c for c in consts if isinstance(c, types.CodeType) and c.co_name == "apply_rotary_emb"]
    return types.FunctionType(code, vars(transformer_wan))


def omnigen2_positions(rope: mrope.VideoRope) -> torch.Tensor:
    """``[3, S]``: the caption, one reference latent and the output latent, as OmniGen2 numbers them."""
    segments = [mrope.Text(CAPTION)] + [mrope.Image(grid=(1, HEIGHT, WIDTH), wrap=False)] * 2
    rules = {"merge_size": rope.patch[1]}
    return torch.from_numpy(mrope.build_positions(segments, model="omnirope", rules=rules).ids)


def omnigen2_fn(rope: mrope.VideoRope, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
    """OmniGen2's rotation: its float64 tables (once), gathered per axis per call, applied to q and k."""
    tables = [
        embeddings.get_1d_rotary_pos_embed(d, n, theta=rope.theta, freqs_dtype=torch.float64)
        for d, n in zip(rope.axis_dims, (300, 512, 512), strict=True)
    ]

    def run():
        cis = torch.cat([table[positions[a]] for a, table in enumerate(tables)], dim=-1)[None]
        return tuple(embeddings.apply_rotary_emb(x, cis, use_real=False) for x in (q, k))

    return run


def diffusers_fn(name: str, frames: int, q: torch.Tensor, k: torch.Tensor):
    """A zero-argument function: the model's cos / sin and its apply on q and k, as diffusers runs them."""
    latent = torch.zeros(1, 1, frames, HEIGHT, WIDTH)
    if name == "wan":
        rope, apply = transformer_wan.WanRotaryPosEmbed(128, (1, 2, 2), 1024), _wan_apply()
        return lambda: (lambda cs: (apply(q, *cs), apply(k, *cs)))(rope(latent))
    if name == "hunyuan-video":
        rope = HunyuanVideoRotaryPosEmbed(2, 1, [16, 56, 56], 256.0)
        return lambda: (lambda cs: tuple(embeddings.apply_rotary_emb(x, cs, sequence_dim=1) for x in (q, k)))(
            rope(latent)
        )
    cfg = types.SimpleNamespace(
        attention_head_dim=64, patch_size=2, patch_size_t=None, sample_height=60, sample_width=90
    )
    pipe = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=types.SimpleNamespace(config=cfg))

    def run():
        cs = CogVideoXPipeline._prepare_rotary_positional_embeddings(
            pipe, HEIGHT * 8, WIDTH * 8, frames, q.device
        )
        return tuple(embeddings.apply_rotary_emb(x, cs, sequence_dim=1) for x in (q, k))

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}"
    )
    print("| model | tokens | diffusers ms | mrope ms | diffusers / mrope | max abs diff | load |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, (config, q_heads, k_heads) in MODELS.items():
        rope = video_rope(config)
        sequence = omnigen2_positions(rope) if name == "omnigen2" else None
        tokens = (args.frames // rope.patch[0]) * (HEIGHT // rope.patch[1]) * (WIDTH // rope.patch[2])
        tokens = tokens if sequence is None else sequence.shape[1]
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(1, tokens, q_heads, rope.head_dim, generator=gen).to(dtype)
        k = torch.randn(1, tokens, k_heads, rope.head_dim, generator=gen).to(dtype)

        def ours(rope=rope, q=q, k=k, sequence=sequence):
            if sequence is None:
                positions = torch.from_numpy(mrope.latent_positions(rope, args.frames, HEIGHT, WIDTH))
            else:
                positions = sequence
            return mrope.apply_mrope(
                q,
                k,
                positions[:, None],
                rope,
                layout="bshd",
                angle_precision=rope.angle_precision,
                backend="torch",
            )

        if sequence is None:
            theirs = diffusers_fn(name, args.frames, q, k)
        else:
            theirs = omnigen2_fn(rope, sequence, q, k)
        diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(ours(), theirs(), strict=True))
        times = compare({"diffusers": theirs, "mrope": ours}, repeat=args.repeat)
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        d, m = times["diffusers"] * 1e3, times["mrope"] * 1e3
        print(f"| {name} | {tokens} | {d:.1f} | {m:.1f} | {d / m:.2f}x | {diff:.2g} | {load} |")


if __name__ == "__main__":
    main()
