"""Benchmark: every AGE position set against the one set on the training faces, in one process.

Workload: 300 random ``circle-rope-age`` prompts (text, images with encoder grids up to (1, 14, 14) and
one-frame videos, as tests/models/test_scheme_circle.py draws them; seeded). Times the pipeline's rows
(``Preprocessor.batch``), its packed rows (``pack_batch``, 512 tokens) and ``PackedCollator`` (the token
path) with ``layer_sets`` (the circle and the M-RoPE set) and without (the circle set), round-robin, and
prints medians and the ratio. Run: ``python benchmarks/bench_layer_sets.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _timing import compare

import mrope
from mrope.packing import PackedCollator
from mrope.pipeline import Preprocessor, pack_batch

MODEL = "circle-rope-age"


def _prompt(seed: int) -> list[dict]:
    """A record's segments: text, then 1 to 3 images or one-frame videos, each followed by text."""
    rng = np.random.default_rng(seed)
    segs: list[dict] = [{"type": "text", "tokens": int(rng.integers(1, 6))}]
    for _ in range(int(rng.integers(1, 4))):
        grid = [1, 2 * int(rng.integers(1, 8)), 2 * int(rng.integers(1, 8))]
        if rng.random() < 0.7:
            segs.append({"type": "image", "grid": grid})
        else:
            segs.append({"type": "video", "grid": grid, "second_per_grid": 1.0})
        segs.append({"type": "text", "tokens": int(rng.integers(1, 6))})
    return segs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    records = [{"id": str(i), "segments": _prompt(i)} for i in range(300)]
    one = Preprocessor(model=MODEL, labels=True)
    both = Preprocessor(model=MODEL, labels=True, layer_sets=True)
    outputs = []
    for r in records:
        p = one.positions(r)
        outputs.append(
            {
                "input_ids": p.input_ids,
                "image_grid_thw": p.image_grid_thw,
                "video_grid_thw": p.video_grid_thw,
                "second_per_grid_ts": p.second_per_grid_ts,
            }
        )
    c1 = PackedCollator(MODEL, max_length=512)
    c2 = PackedCollator(MODEL, max_length=512, layer_sets=True)
    fns = {
        "rows one": lambda: one.batch(records),
        "rows both": lambda: both.batch(records),
        "packed one": lambda: pack_batch(records, max_length=512, model=MODEL, labels=True),
        "packed both": lambda: pack_batch(records, max_length=512, model=MODEL, labels=True, layer_sets=True),
        "collator one": lambda: c1(outputs),
        "collator both": lambda: c2(outputs),
    }
    print(f"load {os.getloadavg()[0]:.2f}; medians of {args.repeat}; mrope {mrope.__version__}")
    med = compare(fns, repeat=args.repeat)
    for what in ("rows", "packed", "collator"):
        a, b = med[f"{what} one"], med[f"{what} both"]
        print(f"{what:9s} one set {a * 1e3:7.1f} ms  both sets {b * 1e3:7.1f} ms  ratio {b / a:.2f}")


if __name__ == "__main__":
    main()
