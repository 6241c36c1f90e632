"""Benchmark: mrope.get_rope_index vs transformers' get_rope_index, and 1M-token throughput.

Workload (issue 2): 2000 text tokens + 4 images of grid (1, 64, 64) + 1 video of grid (16, 32, 32),
one sequence and a batch of 8, same inputs for both; outputs are checked equal before timing.
Prints medians and the ratio. Run: ``python benchmarks/bench_builder.py``.
"""

from __future__ import annotations

import functools
import platform
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import torch

import mrope
from mrope import Image, Text, Video


def median_seconds(fn: Callable[[], object], *, repeat: int = 30, min_time: float = 0.2) -> float:
    """Median wall time of one call, in seconds (each sample loops until ``min_time / repeat``)."""
    fn()
    loops = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - t0 > min_time / repeat or loops > 1 << 16:
            break
        loops *= 2
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - t0) / loops)
    return statistics.median(samples)


def paired_medians(
    fns: list[Callable[[], object]], *, repeat: int = 41, min_time: float = 0.6
) -> list[float]:
    """Median seconds per call of each function, sampled in turn (a, b, c, a, b, c, ...) so that load
    from elsewhere on a shared machine falls on every function alike and their ratios stay fair."""
    loops = []
    for fn in fns:
        fn()
        n = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if time.perf_counter() - t0 > min_time / repeat / len(fns) or n > 1 << 16:
                break
            n *= 2
        loops.append(n)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, n, out in zip(fns, loops, samples, strict=True):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
    return [statistics.median(xs) for xs in samples]


def sample_segments() -> list:
    segs: list = [Text(500)]
    for _ in range(4):
        segs += [Image(grid=(1, 64, 64)), Text(250)]
    segs += [Video(grid=(16, 32, 32), fps=2.0), Text(500)]
    return segs


def transformers_rope_index() -> Callable | None:
    try:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    except ImportError:
        return None
    fake = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2)))
    fake.get_vision_position_ids = functools.partial(Qwen2VLModel.get_vision_position_ids, fake)
    return functools.partial(Qwen2VLModel.get_rope_index, fake)


def main() -> None:
    import transformers

    p = mrope.build_positions(sample_segments(), model="qwen2-vl")
    print(f"# bench_builder on {platform.machine()} / {platform.python_version()}, torch {torch.__version__}")
    print(f"sequence: {p.num_tokens} tokens (2000 text + 4 images (1,64,64) + video (16,32,32) + wrappers)")
    hf = transformers_rope_index()
    rules = mrope.LayoutRules.preset("qwen2-vl")
    rows = []
    for batch in (1, 8):
        ids = torch.from_numpy(np.tile(p.input_ids, (batch, 1)))
        grids_i = torch.from_numpy(np.tile(p.image_grid_thw, (batch, 1)))
        grids_v = torch.from_numpy(np.tile(p.video_grid_thw, (batch, 1)))
        types = ((ids == rules.image_pad_id).long() + 2 * (ids == rules.video_pad_id).long()).int()

        def ours(ids=ids, grids_i=grids_i, grids_v=grids_v):
            return mrope.get_rope_index(ids, grids_i, grids_v, model="qwen2-vl")

        def ours_types(ids=ids, grids_i=grids_i, grids_v=grids_v, types=types):
            return mrope.get_rope_index(ids, grids_i, grids_v, model="qwen2-vl", mm_token_type_ids=types)

        mine, _ = ours()
        if hf is not None:
            theirs, _ = hf(ids, types, grids_i, grids_v)
            assert torch.equal(mine, theirs), "outputs differ from transformers"
            assert torch.equal(ours_types()[0], theirs)

            def reference(ids=ids, types=types, gi=grids_i, gv=grids_v):
                return hf(ids, types, gi, gv)

            t_hf, t_ours, t_types = paired_medians([reference, ours, ours_types])
        else:
            t_hf, (t_ours, t_types) = float("nan"), paired_medians([ours, ours_types])
        rows.append((batch, t_hf, t_ours, t_types))
    print(
        f"\ntransformers {transformers.__version__} Qwen2VLModel.get_rope_index vs mrope.get_rope_index (medians)"
    )
    print("| batch | transformers | mrope (token scan) | mrope (mm_token_type_ids) | speed-up |")
    print("|---|---|---|---|---|")
    for batch, t_hf, t_ours, t_types in rows:
        print(
            f"| {batch} | {t_hf * 1e3:.3f} ms | {t_ours * 1e3:.3f} ms | {t_types * 1e3:.3f} ms | "
            f"{t_hf / t_ours:.1f}x |"
        )

    # 1M tokens: text only, and a mixed sequence of images and text
    for label, segs in (
        ("1M text tokens", [Text(1_000_000)]),
        (
            "~1M mixed (240 images (1,128,128) + text)",
            [s for _ in range(240) for s in (Text(64), Image(grid=(1, 128, 128)))],
        ),
    ):
        t = median_seconds(
            lambda segs=segs: mrope.build_positions(segs, model="qwen2-vl"), repeat=7, min_time=0.5
        )
        n = mrope.build_positions(segs, model="qwen2-vl").num_tokens
        print(f"build_positions, {label}: {n} tokens in {t * 1e3:.2f} ms = {n / t / 1e6:.0f} M positions/s")
    long = mrope.build_positions(
        [s for _ in range(240) for s in (Text(64), Image(grid=(1, 128, 128)))], model="qwen2-vl"
    )
    ids = long.input_ids[None]
    t = median_seconds(
        lambda: mrope.rope_index(ids, long.image_grid_thw, model="qwen2-vl"), repeat=7, min_time=0.5
    )
    print(
        f"rope_index (token form), {long.num_tokens} tokens: {t * 1e3:.2f} ms = {long.num_tokens / t / 1e6:.0f} M positions/s"
    )


if __name__ == "__main__":
    main()
