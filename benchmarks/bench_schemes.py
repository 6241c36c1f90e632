"""Benchmark: the research schemes' positions against their base family's, in one process.

Workload: 2000 text tokens, 4 images of grid (1, 64, 64) and one video of grid (32, 16, 16), wrapped;
``build_positions`` (segments) and ``get_rope_index`` (token ids, one row) under each scheme and its base
family (Qwen2-VL for ``videorope``, ``hope``, ``tad-rope``, ``vrope`` (whose four rows write a third
more), ``v2pe`` and ``rope-dhr``; Qwen3-VL for ``mrope-interleave``, whose video is one block per frame, so
timestamp text with a one-token tokenizer; ``circle-rope`` against Qwen2.5-VL with a video of one temporal
patch, grid (1, 16, 16), as Circle-RoPE maps one frame). Prints medians and the ratio scheme / base.
Run: ``python benchmarks/bench_schemes.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os

import torch
from _timing import compare

import mrope
from mrope import Image, Text, Video

PAIRS = (
    ("videorope", "qwen2-vl", 32),
    ("mrope-interleave", "qwen3-vl", 32),
    ("hope", "qwen2-vl", 32),
    ("tad-rope", "qwen2-vl", 32),
    ("vrope", "qwen2-vl", 32),
    ("v2pe", "qwen2-vl", 32),
    ("rope-dhr", "qwen2-vl", 32),
    ("circle-rope", "qwen2.5-vl", 1),
)
"""(scheme, base family, temporal patches of the workload's video)."""


def _segments(frames: int) -> list:
    segs: list = [Text(500)]
    for _ in range(4):
        segs += [Image(grid=(1, 64, 64)), Text(300)]
    return [*segs, Video(grid=(frames, 16, 16), second_per_grid=1.0), Text(300)]


def _calls(model: str, frames: int) -> dict:
    segs = _segments(frames)

    def tok(text: str) -> list[int]:
        return [11]

    pos = mrope.build_positions(segs, model=model, tokenizer=tok)
    ids = torch.from_numpy(pos.input_ids)[None]
    grids = {
        "image_grid_thw": torch.from_numpy(pos.image_grid_thw),
        "video_grid_thw": torch.from_numpy(pos.video_grid_thw),
    }
    return {
        f"build {model}": lambda: mrope.build_positions(segs, model=model, tokenizer=tok).ids,
        f"token ids {model}": lambda: mrope.get_rope_index(ids, model=model, **grids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}; medians of {args.repeat}")
    for scheme, base, frames in PAIRS:
        fns = {**_calls(scheme, frames), **_calls(base, frames)}
        med = compare(fns, repeat=args.repeat)
        for what in ("build", "token ids"):
            a, b = med[f"{what} {scheme}"], med[f"{what} {base}"]
            print(f"{what:9s} {scheme:16s} {a * 1e6:8.1f} us  {base:9s} {b * 1e6:8.1f} us  ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
