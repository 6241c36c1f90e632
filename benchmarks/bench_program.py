"""Benchmark: a position program against npy and JSON as the way positions cross a process boundary.

For prompts of about 1k, 10k, 100k and 1M tokens (Qwen2.5-VL: 200 text tokens, an image of grid
(1, 28, 28), a video of grid (2k, 28, 28) sized to the target, 100 text tokens; and the same video under
Qwen3-VL, whose timestamps cut it into one text run and one frame block per frame), prints the bytes on
the wire and the median time of each route, end to end:

- program: ``Positions.program()`` (build) + ``to_bytes`` + ``PositionProgram.from_bytes`` + ``expand``,
  and apart from it the build alone and the transfer alone (the three steps after the build: a sender
  that keeps the program, or a service that caches it, pays only these);
- npy: ``np.save`` of ``ids`` into memory + ``np.load`` (the positions are the array already);
- JSON: ``json.dumps(ids.tolist())`` + ``json.loads`` + ``np.asarray``.

Each route's output is checked equal to ``ids`` before timing; routes are timed round-robin in one process,
and the ratios are against npy. Also the torch expansion (``mrope.ops.expand_program``, CPU) alone.
Run: ``python benchmarks/bench_program.py [--sizes 1000,10000,100000,1000000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import io
import json

import numpy as np
import torch
from _timing import compare

import mrope
from mrope import Image, PositionProgram, Text, Video
from mrope.ops import expand_program


def prompt(family: str, tokens: int) -> mrope.Positions:
    """A prompt of about ``tokens`` tokens (at least one temporal group of video)."""
    groups = max(1, (tokens - 300 - 196) // 392)
    segments = [Text(200), Image(grid=(1, 28, 28)), Video(grid=(2 * groups, 28, 28), fps=2.0), Text(100)]
    return mrope.build_positions(segments, model=family, tokenizer=lambda s: [7] * len(s))


def routes(p: mrope.Positions) -> tuple[dict, dict]:
    """name -> zero-argument route returning the positions, and name -> bytes on the wire."""

    def program() -> np.ndarray:
        return PositionProgram.from_bytes(p.program().to_bytes()).expand()

    built = p.program()

    def transfer() -> np.ndarray:
        return PositionProgram.from_bytes(built.to_bytes()).expand()

    def npy() -> np.ndarray:
        buf = io.BytesIO()
        np.save(buf, p.ids)
        return np.load(io.BytesIO(buf.getvalue()))

    def as_json() -> np.ndarray:
        return np.asarray(json.loads(json.dumps(p.ids.tolist())), dtype=p.ids.dtype)

    buf = io.BytesIO()
    np.save(buf, p.ids)
    sizes = {
        "program": len(p.program().to_bytes()),
        "npy": len(buf.getvalue()),
        "JSON": len(json.dumps(p.ids.tolist())),
    }
    fns = {"program": program, "transfer": transfer, "npy": npy, "JSON": as_json}
    for name, fn in fns.items():
        if not np.array_equal(fn(), p.ids):
            raise SystemExit(f"{name} does not give the positions back")
    fns["build"] = p.program
    return fns, sizes


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        "| family | tokens | runs | program bytes | npy bytes | JSON bytes | program | build | transfer | npy | "
        "JSON | npy / program | npy / transfer | JSON / program | torch expand |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for family in ("qwen2.5-vl", "qwen3-vl"):
        for target in (int(x) for x in args.sizes.split(",")):
            p = prompt(family, target)
            fns, sizes = routes(p)
            program = p.program()
            arrays = {k: torch.from_numpy(v) for k, v in program.arrays().items()}
            fns["torch"] = lambda a=arrays, n=program.num_tokens: expand_program(**a, num_tokens=n)
            repeat = max(3, args.repeat if p.num_tokens < 500_000 else args.repeat // 2)
            t = compare(fns, repeat=repeat, warmup=1)
            print(
                f"| {family} | {p.num_tokens:,} | {program.num_runs} | {sizes['program']:,} | {sizes['npy']:,} | "
                f"{sizes['JSON']:,} | {ms(t['program'])} | {ms(t['build'])} | {ms(t['transfer'])} | "
                f"{ms(t['npy'])} | {ms(t['JSON'])} | {t['npy'] / t['program']:.2f}x | "
                f"{t['npy'] / t['transfer']:.2f}x | {t['JSON'] / t['program']:.1f}x | {ms(t['torch'])} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
