"""Benchmark: ``mrope.pack`` on 100k synthetic records: samples/s, and packing efficiency against
first-fit-decreasing's bound and against streaming and padded batches (issue 21).

Workload: ``--records`` (default 100,000) segment lists under Qwen2-VL's rules, seeded: a text run of
8..600 tokens, then with probability 0.6 one to three images of grids (1, 2a, 2b), a, b in 2..24, each
followed by 2..40 text tokens, and with probability 0.15 a video of grid (2c, 2a, 2b), c in 1..4, a, b in
2..12, then 2..40 text tokens. Rows of ``--max-length`` (default 4096) tokens.

Timed (one run each, wall seconds, the same process): the builder alone (``build_positions`` per record,
the reference: what the positions cost unpacked), ``pack`` first-fit-decreasing, ``pack`` streaming
(``open_rows`` 8 and 1, a generator in). Efficiency = tokens / (rows x max_length); FFD is compared with the
bound ``ceil(tokens / max_length)`` rows and with padded batches of 8 records (each padded to its longest).
Run: ``python benchmarks/bench_pack.py [--records N] [--max-length L]``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import time

import mrope
from mrope import Image, Text, Video


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
    args = ap.parse_args(argv)
    n, cap = args.records, args.max_length
    data = records(n)
    print(
        f"{n} records, max_length {cap}; {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}"
    )
    lay = mrope.models.resolve_rules("qwen2-vl", None)

    alone, t_build = timed(lambda: [mrope.build_positions(s, rules=lay) for s in data])
    lengths = [p.num_tokens for p in alone]
    tokens = sum(lengths)
    ffd, t_ffd = timed(lambda: mrope.pack(data, model="qwen2-vl", max_length=cap))
    s8, t_s8 = timed(lambda: list(mrope.pack(iter(data), model="qwen2-vl", max_length=cap, mode="stream")))
    s1, t_s1 = timed(
        lambda: list(mrope.pack(iter(data), model="qwen2-vl", max_length=cap, mode="stream", open_rows=1))
    )
    from_positions, t_pos = timed(lambda: mrope.pack(alone, max_length=cap))
    assert ffd.num_tokens == tokens == from_positions.num_tokens
    bound = math.ceil(tokens / cap)
    padded_slots = sum(max(lengths[i : i + 8]) * len(lengths[i : i + 8]) for i in range(0, n, 8))

    def eff(rows: int) -> float:
        return tokens / (rows * cap)

    print(f"tokens {tokens} (mean {tokens / n:.0f} per record, longest {max(lengths)})")
    print(f"{'what':<34}{'s':>8}{'samples/s':>12}{'rows':>9}{'efficiency':>12}{'x builder':>11}")
    table = [
        ("build_positions alone (ref.)", t_build, None),
        ("pack ffd (segment lists)", t_ffd, len(ffd)),
        ("pack ffd (Positions given)", t_pos, len(from_positions)),
        ("pack stream open_rows=8", t_s8, len(s8)),
        ("pack stream open_rows=1 (next-fit)", t_s1, len(s1)),
    ]
    for what, t, rows in table:
        effs = f"{eff(rows):>12.4f}" if rows else f"{'':>12}"
        print(f"{what:<34}{t:>8.2f}{n / t:>12.0f}{rows or '':>9}{effs}{t / t_build:>11.2f}")
    print(f"{'FFD bound ceil(tokens / max)':<34}{'':>8}{'':>12}{bound:>9}{eff(bound):>12.4f}")
    print(f"padded batches of 8: efficiency {tokens / padded_slots:.4f} (tokens / padded slots)")
    print(
        f"ffd rows / bound {len(ffd) / bound:.4f}; stream(8) rows / ffd rows {len(s8) / len(ffd):.4f}; "
        f"next-fit rows / ffd rows {len(s1) / len(ffd):.4f}"
    )
    return {
        "ffd_samples_per_s": n / t_ffd,
        "ffd_efficiency": ffd.efficiency,
        "stream_efficiency": eff(len(s8)),
    }


if __name__ == "__main__":
    main()
