"""Benchmark: one rank's shard of a packed row against the whole row's build (``mrope.pack``), world
sizes 1-8, both layouts, rows up to 1 M tokens.

Workloads (``--workload``), packed into one row of ``--tokens`` tokens (default 65,536, 262,144 and
1,048,576; records are dropped to fit), Qwen2-VL rules: ``records``, the records of ``bench_pack.py``
(text runs, images, some videos: many short samples, about 570 tokens each), and ``video``, long-video
samples (a prompt, one 64-frame video of about 18,000 tokens, an answer), the training case the issue is about.
Reference: ``pack`` of those records into one row (every sample's positions, the row laid out).
Candidates, per world size and layout, timed round-robin with the reference (``--repeat`` rounds,
medians; the slowest rank shown), each printed as a ratio to the reference:

- ``shard``: ``mrope.packing.shard`` of the built row (a rank that has the row);
- ``rank``: ``mrope.packing.shard_samples`` of the records, the rank-local build (the samples planned
  and read into one piece table, only the rank's token ranges written, its vision map included),
  against the target ``1.5 / world_size``.

``--clock thread`` times this thread's CPU time instead of elapsed time (on a shared machine the waits
for a core then fall on no one).

Run: ``python benchmarks/bench_shard.py [--tokens N ...] [--repeat R] [--workload records|video]
[--clock wall|thread]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from bench_pack import records

import mrope
from mrope import Text, Video
from mrope.packing import SHARD_LAYOUTS, shard, shard_samples

CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}
"""``wall``: elapsed time; ``thread``: this thread's CPU time (on a shared, loaded machine the waits for
a core are not counted)."""


def round_robin(fns: list, repeat: int, clock: str = "wall") -> list[float]:  # noqa: ANN001
    """Median seconds of each function, timed one call of each in turn (load from elsewhere falls on all)."""
    now = CLOCKS[clock]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t0 = now()
            fn()
            times[k].append(now() - t0)
    return [statistics.median(t) for t in times]


def video_records(count: int) -> list[list]:
    """``count`` long-video samples: a prompt, a 64-frame video (grid (64, 34-40, 30)), an answer."""
    return [
        [
            Text(list(range(100 + i % 50))),
            Video(grid=(64, 34 + 2 * (i % 4), 30), fps=2.0),
            Text(list(range(40))),
        ]
        for i in range(count)
    ]


def row_records(tokens: int, workload: str = "records") -> list[list]:
    """Records of ``workload`` whose total length is at most ``tokens`` (the first ones of its stream)."""
    lay = mrope.models.resolve_rules("qwen2-vl", None)
    out, total = [], 0
    stream = records(tokens // 50 + 100) if workload == "records" else video_records(tokens // 10_000 + 2)
    for seg in stream:
        n = mrope.build_positions(seg, rules=lay).num_tokens
        if total + n > tokens:
            break
        out.append(seg)
        total += n
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workload", choices=["records", "video"], default="records")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = ap.parse_args(argv)
    print(f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}, clock {args.clock}")
    for tokens in args.tokens:
        data = row_records(tokens, args.workload)
        build = lambda data=data, cap=tokens: mrope.pack(data, model="qwen2-vl", max_length=cap)[0]  # noqa: E731
        row = build()
        print(f"\nrow of {row.num_tokens:,} tokens, {len(row.samples)} samples")
        print("layout      W  pack ms  shard ms  shard/pack  rank ms  rank/pack  target 1.5/W")
        for layout in SHARD_LAYOUTS:
            for w in range(1, 9):
                ranks = [
                    lambda row=row, w=w, r=r, lay=layout: shard(row, world_size=w, rank=r, layout=lay)
                    for r in range(w)
                ]
                local = [
                    lambda data=data, w=w, r=r, lay=layout: shard_samples(
                        data, model="qwen2-vl", world_size=w, rank=r, layout=lay
                    )
                    for r in range(w)
                ]
                whole, *each = round_robin([build, *ranks, *local], args.repeat, args.clock)
                cut, own = max(each[:w]), max(each[w:])
                print(
                    f"{layout:<10} {w:>2}  {whole * 1e3:7.1f}  {cut * 1e3:8.2f}  {cut / whole:10.3f}  "
                    f"{own * 1e3:7.1f}  {own / whole:9.3f}  {1.5 / w:12.3f}"
                )


if __name__ == "__main__":
    main()
