"""Benchmark: one rank's shard of a packed row (``mrope.packing.shard``) against the whole row's build
(``mrope.pack``), world sizes 1-8, both layouts, rows up to 1 M tokens.

Workload: the records of ``bench_pack.py`` (Qwen2-VL rules, text runs, images, some videos), packed into
one row of ``--tokens`` tokens (default 65,536, 262,144 and 1,048,576; the last record is cut to fit
by dropping records). Reference: ``pack`` of those records into one row (every sample's positions, the
row laid out). Candidates, per world size and layout: ``shard`` of the built row for each rank, timed
round-robin with the reference (``--repeat`` rounds, medians; the slowest rank shown), printed as a ratio
to the reference, and the rank's whole cost (the row built, then sharded) against the target
``1.5 / world_size``.

``shard`` takes a built :class:`PackedRow`: its own cost is its tokens plus the row's sample and span
count, but a rank that builds the row itself pays the whole row's positions first, so the second ratio
is above 1 (the rank-local build of positions from the layout plan is not written yet).
Run: ``python benchmarks/bench_shard.py [--tokens N ...] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from bench_pack import records

import mrope
from mrope.packing import SHARD_LAYOUTS, shard


def round_robin(fns: list, repeat: int) -> list[float]:  # noqa: ANN001
    """Median seconds of each function, timed one call of each in turn (load from elsewhere falls on all)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def row_records(tokens: int) -> list[list]:
    """Records whose total length is at most ``tokens`` (the first ones of bench_pack's stream)."""
    lay = mrope.models.resolve_rules("qwen2-vl", None)
    out, total = [], 0
    for seg in records(tokens // 50 + 100):
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
    args = ap.parse_args(argv)
    print(f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    for tokens in args.tokens:
        data = row_records(tokens)
        build = lambda data=data, cap=tokens: mrope.pack(data, model="qwen2-vl", max_length=cap)[0]  # noqa: E731
        row = build()
        print(f"\nrow of {row.num_tokens:,} tokens, {len(row.samples)} samples")
        print("layout      W  pack ms  shard ms  shard/pack  (pack+shard)/pack  target 1.5/W")
        for layout in SHARD_LAYOUTS:
            for w in range(1, 9):
                ranks = [
                    lambda row=row, w=w, r=r, lay=layout: shard(row, world_size=w, rank=r, layout=lay)
                    for r in range(w)
                ]
                whole, *each = round_robin([build, *ranks], args.repeat)
                slowest = max(each)
                print(
                    f"{layout:<10} {w:>2}  {whole * 1e3:7.1f}  {slowest * 1e3:8.2f}  {slowest / whole:10.3f}  "
                    f"{(whole + slowest) / whole:17.3f}  {1.5 / w:12.3f}"
                )


if __name__ == "__main__":
    main()
