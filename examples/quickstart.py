"""Build M-RoPE positions for a sample prompt (text, an image, a video) and print a summary.

Run: ``python examples/quickstart.py [--model qwen2.5-vl]``.
"""

from __future__ import annotations

import argparse

import mrope
from mrope import Image, Text, Video


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-vl", choices=sorted(mrope.models.PRESET_NAMES))
    args = parser.parse_args()
    segments = [
        Text(12),
        Image(grid=(1, 36, 48)),  # a 504 x 672 image under Qwen2-VL sizing
        Text(5),
        Video(grid=(8, 24, 32), fps=2.0),  # 16 frames sampled at 2 fps
        Text(3),
    ]
    stamps = (lambda text: [ord(c) for c in text]) if args.model in ("qwen3-vl", "glm-4.1v") else None
    p = mrope.build_positions(segments, model=args.model, tokenizer=stamps)
    print(f"model {args.model}: {p.num_tokens} tokens, delta {p.delta}")
    print(f"{'kind':<10} {'tokens':>13} {'t':>11} {'h':>11} {'w':>11}  grid")
    for span in p.spans:
        block = p.ids[:, span.start : span.stop]
        ranges = [f"{lo}..{hi}" for lo, hi in zip(block.min(axis=1), block.max(axis=1), strict=True)]
        grid = "" if span.grid is None else "x".join(map(str, span.grid))
        print(
            f"{span.kind:<10} {span.start:>6}-{span.stop - 1:<6} {ranges[0]:>11} {ranges[1]:>11} {ranges[2]:>11}  {grid}"
        )
    print("next decode positions:", mrope.next_positions(p.delta, p.num_tokens, 3)[0].tolist())


if __name__ == "__main__":
    main()
