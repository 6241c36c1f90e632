"""Benchmark: positions for inference engines, each against its reference in the same process.

1. ``mrope.continue_positions`` of a new turn (text, an image, text) from the conversation's state,
   against rebuilding the whole conversation with ``mrope.build_positions`` (what a caller had to do);
   conversations of 4, 16 and 64 turns (each: 120 text tokens, an image of grid (1, 28, 28), 60
   generated tokens), for a counter family (Qwen2.5-VL), the sequence rule (HunyuanOCR) and the
   fractional omni timeline (Qwen3-Omni). The continued turn is checked equal to the rebuilt tail first.
2. ``mrope.evs_mask`` and ``mrope.vidcom2_mask`` of one video (grid (16, 28, 28), merge 2: 3136 tokens,
   hidden 1024, float32), against ``mrope.build_positions`` of a prompt holding that video (the builder's
   cost of the same video), on CPU, and on CUDA when there is one.

Prints medians and ratios. Run: ``python benchmarks/bench_engine.py``.
"""

from __future__ import annotations

import os
import platform
import warnings

import numpy as np
import torch
from _timing import compare

import mrope
from mrope import Image, Text, Video

FAMILIES = ("qwen2.5-vl", "hunyuan-ocr", "qwen3-omni")
TURNS = (4, 16, 64)


def _turn(i: int) -> list:
    return [Text(list(range(1000 + i, 1120 + i))), Image(grid=(1, 28, 28)), Text(list(range(2000, 2010)))]


def bench_continue() -> None:
    print("continue_positions of one turn vs rebuilding the whole conversation (median per call)")
    print(f"{'family':<12} {'turns':>5} {'tokens':>7} {'continue':>10} {'rebuild':>10} {'ratio':>7}")
    answer = list(range(3000, 3060))
    for name in FAMILIES:
        for turns in TURNS:
            history: list = []
            for i in range(turns):
                history += _turn(i) + [Text(answer)]
            new = _turn(turns)
            prior = mrope.build_positions(history[:-1], model=name)
            state = mrope.conversation_state(prior)
            whole = mrope.build_positions(history + new, model=name)
            turn = mrope.continue_positions(state, new, generated=len(answer), model=name)
            assert np.array_equal(turn.positions.ids, whole.ids[:, turn.offset :])
            times = compare(
                {
                    "continue": lambda s=state, n=new, m=name: mrope.continue_positions(
                        s, n, generated=len(answer), model=m
                    ),
                    "rebuild": lambda h=history + new, m=name: mrope.build_positions(h, model=m),
                },
                repeat=21,
            )
            ratio = times["rebuild"] / times["continue"]
            print(
                f"{name:<12} {turns:>5} {whole.num_tokens:>7} {times['continue'] * 1e6:>8.1f}us "
                f"{times['rebuild'] * 1e6:>8.1f}us {ratio:>6.1f}x"
            )


def bench_masks(device: str) -> None:
    grid, merge, hidden = (16, 28, 28), 2, 1024
    n = grid[0] * (grid[1] // merge) * (grid[2] // merge)
    embeds = torch.randn(n, hidden, generator=torch.Generator().manual_seed(0)).to(device)
    video = [Text(20), Video(grid=grid, fps=2.0), Text(20)]
    times = compare(
        {
            "evs q=0.75": lambda: mrope.evs_mask(embeds, grid, merge, 0.75),
            "vidcom2 r=0.25": lambda: mrope.vidcom2_mask(embeds, grid, merge, 0.25),
            "build_positions": lambda: mrope.build_positions(video, model="qwen2.5-vl"),
        },
        device=device,
        repeat=11,
    )
    base = times["build_positions"]
    print(f"masks of one video ({n} tokens x {hidden}, {device}) vs build_positions of its prompt (CPU)")
    for key, value in times.items():
        print(f"  {key:<16} {value * 1e6:>10.1f}us  {value / base:>7.1f}x build_positions")


def main() -> None:
    warnings.simplefilter("ignore", mrope.MRopeWarning)
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, threads {torch.get_num_threads()}"
    )
    bench_continue()
    bench_masks("cpu")
    if torch.cuda.is_available():
        bench_masks("cuda")


if __name__ == "__main__":
    main()
