"""Benchmark: ``mrope.pack`` on 100k synthetic records: samples/s, and packing efficiency against
first-fit-decreasing's bound and against streaming and padded batches.

Workload: ``--records`` (default 100,000) segment lists under Qwen2-VL's rules, seeded: a text run of
8..600 tokens, then with probability 0.6 one to three images of grids (1, 2a, 2b), a, b in 2..24, each
followed by 2..40 text tokens, and with probability 0.15 a video of grid (2c, 2a, 2b), c in 1..4, a, b in
2..12, then 2..40 text tokens. Rows of ``--max-length`` (default 4096) tokens.

Speed: the records in windows of ``--window`` (default 10,000), each window timed round-robin (so load from
elsewhere falls on all alike): the builder alone (``build_positions`` per record: the reference, what the
positions cost unpacked), ``pack`` first-fit-decreasing, ``pack`` streaming (``open_rows=8``, a generator
in); medians over the windows. Efficiency = tokens / (rows x max_length) over all records at once (the
bins ``pack`` uses, on the records' lengths): FFD against the bound ``ceil(tokens / max_length)``,
streaming (8 and 1 open rows) and padded batches of 8 records (each padded to its longest).
Run: ``python benchmarks/bench_pack.py [--records N] [--max-length L] [--window W]``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import time

import mrope
from mrope import Image, Text, Video
from mrope.packing import first_fit_decreasing, stream_rows


def records(n: int, seed: int = 0) -> list[list]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seg: list = [Text(rng.randint(8, 600))]
        if rng.random() < 0.6:
            for _ in range(rng.randint(1, 3)):
                seg += [
                    Image(grid=(1, 2 * rng.randint(2, 24), 2 * rng.randint(2, 24))),
                    Text(rng.randint(2, 40)),
                ]
        if rng.random() < 0.15:
            grid = (2 * rng.randint(1, 4), 2 * rng.randint(2, 12), 2 * rng.randint(2, 12))
            seg += [Video(grid=grid, fps=2.0), Text(rng.randint(2, 40))]
        out.append(seg)
    return out


def timed(fn):  # noqa: ANN001, ANN201
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--window", type=int, default=10_000)
    args = ap.parse_args(argv)
    n, cap = args.records, args.max_length
    data = records(n)
    print(
        f"{n} records, max_length {cap}; {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}"
    )
    lay = mrope.models.resolve_rules("qwen2-vl", None)
    speeds: dict[str, list[float]] = {"build": [], "ffd": [], "stream": []}
    lengths: list[int] = []
    for start in range(0, n, args.window):
        part = data[start : start + args.window]
        alone, t = timed(lambda part=part: [mrope.build_positions(s, rules=lay) for s in part])
        speeds["build"].append(len(part) / t)
        lengths += [p.num_tokens for p in alone]
        ffd, t = timed(lambda part=part: mrope.pack(part, model="qwen2-vl", max_length=cap))
        speeds["ffd"].append(len(part) / t)
        stream, t = timed(
            lambda part=part: list(mrope.pack(iter(part), model="qwen2-vl", max_length=cap, mode="stream"))
        )
        speeds["stream"].append(len(part) / t)
        assert ffd.num_tokens == sum(r.num_tokens for r in stream) == sum(p.num_tokens for p in alone)
    tokens = sum(lengths)
    rows = {
        "ffd": len(first_fit_decreasing(lengths, cap)),
        "stream open_rows=8": sum(1 for _ in stream_rows(enumerate(lengths), cap, open_rows=8)),
        "stream open_rows=1 (next-fit)": sum(1 for _ in stream_rows(enumerate(lengths), cap, open_rows=1)),
        "bound ceil(tokens / max_length)": math.ceil(tokens / cap),
    }
    padded_slots = sum(max(lengths[i : i + 8]) * len(lengths[i : i + 8]) for i in range(0, n, 8))
    print(f"tokens {tokens} (mean {tokens / n:.0f} per record, longest {max(lengths)})")
    print(f"speed, median over {len(speeds['build'])} windows of {args.window} records (samples/s):")
    build = statistics.median(speeds["build"])
    for what, label in (
        ("build", "build_positions alone (ref.)"),
        ("ffd", "pack ffd"),
        ("stream", "pack stream open_rows=8"),
    ):
        med = statistics.median(speeds[what])
        print(f"  {label:<34}{med:>10.0f}  {med / build:>6.2f} x the builder's rate")
    print(f"efficiency over all {n} records (tokens / (rows x {cap})):")
    for what, count in rows.items():
        print(f"  {what:<34}{count:>8} rows  {tokens / (count * cap):.4f}")
    print(f"  {'padded batches of 8 records':<34}{'':>8}       {tokens / padded_slots:.4f}")
    return {
        "ffd_samples_per_s": statistics.median(speeds["ffd"]),
        "ffd_efficiency": tokens / (rows["ffd"] * cap),
        "stream_efficiency": tokens / (rows["stream open_rows=8"] * cap),
    }


if __name__ == "__main__":
    main()
