"""Benchmark: mrope.get_rope_index vs transformers' get_rope_index, and 1M-token throughput.

Workload (issues 2, 9, 14): 2000 text tokens + 4 images of grid (1, 64, 64) + 1 video of grid
(32, 16, 16), whose T' = 32 exceeds max(H', W') = 8, so the official rule (max+1) and transformers 5.x
(``s + max(H', W')``) really differ after it. One sequence, and a batch of 8 whose odd rows are 400 text
tokens shorter (left padding). Both sides get what a model's forward passes: ``input_ids``,
``mm_token_type_ids``, the grids and ``attention_mask``. mrope runs under the default
``convention="released"`` (the headline) and under ``convention="transformers5"``, whose outputs (positions
and deltas) are checked equal to transformers' before timing; both conventions' token-id outputs are
checked equal to the segment path's, and the released ones to differ from transformers'. Prints medians
and the ratios, and the segment path under both conventions. Run: ``python benchmarks/bench_builder.py``.

``--clock thread`` times with ``time.thread_time`` (CPU time of the calling thread, torch held to one
thread so that transformers' side runs on it too) instead of wall time: on a shared machine, where other
processes' load lands on the wall-clock medians, CPU time is the fairer of the two. Default ``wall``.

Every get_rope_index row is timed twice: **warm** (calls back to back, caches hot) and **cold** (before
every single call of either side, :func:`evict` scans 8 MB and does unrelated Python work, as a data
loader's or a scheduler's call comes after a processor, a tokenizer or a model step; only the call itself
is timed). ``--rope-index-only`` stops after that table.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import torch

import mrope
from mrope import Image, Text, Video

CLOCK = time.perf_counter
"""The timer of every sample (``time.thread_time`` under ``--clock thread``)."""


def median_seconds(fn: Callable[[], object], *, repeat: int = 30, min_time: float = 0.2) -> float:
    """Median wall time of one call, in seconds (each sample loops until ``min_time / repeat``)."""
    fn()
    loops = 1
    while True:
        t0 = CLOCK()
        for _ in range(loops):
            fn()
        if CLOCK() - t0 > min_time / repeat or loops > 1 << 16:
            break
        loops *= 2
    samples = []
    for _ in range(repeat):
        t0 = CLOCK()
        for _ in range(loops):
            fn()
        samples.append((CLOCK() - t0) / loops)
    return statistics.median(samples)


def paired_medians(
    fns: list[Callable[[], object]], *, repeat: int = 41, min_time: float = 0.6
) -> list[float]:
    """Median seconds per call of each function, sampled in turn so that load from elsewhere on a shared
    machine falls on every function alike and their ratios stay fair. Each round samples them in a new
    order (a seeded shuffle): the function sampled right after one that trashes the caches
    (transformers' call allocates and frees a few MB) pays for it, and a fixed order, or a rotation of
    it, which keeps every function's predecessor, made the one after transformers' up to 30 % slower."""
    loops = []
    for fn in fns:
        fn()
        n = 1
        while True:
            t0 = CLOCK()
            for _ in range(n):
                fn()
            if CLOCK() - t0 > min_time / repeat / len(fns) or n > 1 << 16:
                break
            n *= 2
        loops.append(n)
    samples: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    shuffle = random.Random(0).shuffle
    for _ in range(repeat):
        shuffle(order)
        for k in order:
            fn, n, out = fns[k], loops[k], samples[k]
            t0 = CLOCK()
            for _ in range(n):
                fn()
            out.append((CLOCK() - t0) / n)
    return [statistics.median(xs) for xs in samples]


EVICT_BYTES = 8 << 20
"""What :func:`evict` scans: more than this machine's last-level cache share (a Xeon's 2-core slice)."""
_EVICT = np.arange(EVICT_BYTES // 8, dtype=np.int64)


def evict() -> None:
    """The unrelated work before a cold call: an 8 MB read-modify-write scan (data caches and TLB) and
    some Python work of another kind (dicts, strings, sorting: the interpreter's own caches)."""
    _EVICT[::8] += 1  # one write per 64-byte line: every line of the 8 MB is touched
    words = {f"w{i}": i * 7 % 101 for i in range(2000)}
    sorted(words, key=words.__getitem__)


def cold_medians(fns: list[Callable[[], object]], *, repeat: int = 151) -> list[float]:
    """Median seconds of one call of each function right after :func:`evict`, the functions sampled in a
    new (seeded) order each round; the eviction itself is not timed."""
    for fn in fns:
        fn()
    samples: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    shuffle = random.Random(1).shuffle
    for _ in range(repeat):
        shuffle(order)
        for k in order:
            evict()
            t0 = CLOCK()
            fns[k]()
            samples[k].append(CLOCK() - t0)
    return [statistics.median(xs) for xs in samples]


def sample_segments(text_head: int = 500) -> list:
    segs: list = [Text(text_head)]
    for _ in range(4):
        segs += [Image(grid=(1, 64, 64)), Text(250)]
    segs += [Video(grid=(32, 16, 16), fps=2.0), Text(500)]
    return segs


def transformers_rope_index() -> Callable | None:
    try:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    except ImportError:
        return None
    fake = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2)))
    fake.get_vision_position_ids = functools.partial(Qwen2VLModel.get_vision_position_ids, fake)
    return functools.partial(Qwen2VLModel.get_rope_index, fake)


def main(argv: list[str] | None = None) -> None:
    global CLOCK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall", help="what a sample measures")
    parser.add_argument(
        "--rope-index-only", action="store_true", help="stop after the get_rope_index table (warm and cold)"
    )
    args = parser.parse_args(argv)
    if args.clock == "thread":
        CLOCK = time.thread_time
        torch.set_num_threads(1)
    import transformers

    p = mrope.build_positions(sample_segments(), model="qwen2-vl")
    print(f"# bench_builder on {platform.machine()} / {platform.python_version()}, torch {torch.__version__}")
    print(
        f"load average at start: {os.getloadavg()[0]:.2f} (shared machine: other processes slow both sides); "
        f"clock: {'thread CPU time, torch on one thread' if args.clock == 'thread' else 'wall time'}"
    )
    print(f"sequence: {p.num_tokens} tokens (2000 text + 4 images (1,64,64) + video (32,16,16) + wrappers)")
    hf = transformers_rope_index()
    conventions = ("released", "transformers5")  # the default convention first: the headline
    rows = []
    for batch in (1, 8):
        samples = [sample_segments(500 if row % 2 == 0 else 100) for row in range(batch)]
        b = mrope.build_batch(samples, model="qwen2-vl", convention="transformers5", padding_side="left")
        ids = torch.from_numpy(b.input_ids)
        mask = torch.from_numpy(b.attention_mask)
        types = torch.from_numpy(b.mm_token_type_ids).int()
        grids_i = torch.from_numpy(np.concatenate([s.image_grid_thw for s in b.sequences]))
        grids_v = torch.from_numpy(np.concatenate([s.video_grid_thw for s in b.sequences]))
        fns = []
        for convention in conventions:

            def ours(ids=ids, grids_i=grids_i, grids_v=grids_v, mask=mask, convention=convention):
                return mrope.get_rope_index(
                    ids, grids_i, grids_v, mask, model="qwen2-vl", convention=convention
                )

            def ours_types(
                ids=ids, grids_i=grids_i, grids_v=grids_v, mask=mask, types=types, convention=convention
            ):
                return mrope.get_rope_index(
                    ids,
                    grids_i,
                    grids_v,
                    mask,
                    model="qwen2-vl",
                    convention=convention,
                    mm_token_type_ids=types,
                )

            # both forms give what the segment path gives under the same convention
            want = mrope.build_batch(samples, model="qwen2-vl", convention=convention, padding_side="left")
            for fn in (ours, ours_types):
                got, got_deltas = fn()
                assert np.array_equal(got.numpy(), want.ids), f"{convention}: token ids path != segments"
                assert np.array_equal(got_deltas[:, 0].numpy(), [p.delta for p in want.sequences])
            fns += [ours, ours_types]
        released, mine = fns[0]()[0], fns[2]()[0]
        assert not torch.equal(released, mine), "the workload must separate the two conventions"
        if hf is not None:
            theirs, their_deltas = hf(ids, types, grids_i, grids_v, attention_mask=mask)
            mine, mine_deltas = fns[2]()
            assert torch.equal(mine, theirs), "outputs differ from transformers"
            assert torch.equal(mine_deltas, their_deltas), "deltas differ from transformers"
            assert torch.equal(fns[3]()[0], theirs)

            def reference(ids=ids, types=types, gi=grids_i, gv=grids_v, mask=mask):
                return hf(ids, types, gi, gv, attention_mask=mask)

            t_hf, *t_ours = paired_medians([reference, *fns])
            c_hf, *c_ours = cold_medians([reference, *fns])
        else:
            t_hf, t_ours = float("nan"), paired_medians(fns)
            c_hf, c_ours = float("nan"), cold_medians(fns)
        rows.append((batch, "warm", t_hf, t_ours))
        rows.append((batch, "cold", c_hf, c_ours))
    print(
        f"\ntransformers {transformers.__version__} Qwen2VLModel.get_rope_index vs mrope.get_rope_index "
        "(attention_mask and mm_token_type_ids passed to both; medians of interleaved samples; cold: each "
        "call of either side after an 8 MB scan and unrelated Python work). mrope under "
        "the default convention='released' (the headline; positions differ from transformers' by design) "
        "and under convention='transformers5' (equal to transformers')"
    )
    print(
        "| batch | caches | convention | transformers | mrope (token scan) | mrope (mm_token_type_ids) | "
        "speed-up (scan) | speed-up (types) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for batch, caches, t_hf, t_ours in rows:
        for k, convention in enumerate(conventions):
            t_scan, t_types = t_ours[2 * k], t_ours[2 * k + 1]
            print(
                f"| {batch} | {caches} | {convention} | {t_hf * 1e3:.3f} ms | {t_scan * 1e3:.3f} ms | "
                f"{t_types * 1e3:.3f} ms | "
                f"{t_hf / t_scan:.1f}x | {t_hf / t_types:.1f}x |"
            )
    print(f"load average after the get_rope_index rows: {os.getloadavg()[0]:.2f}")
    if args.rope_index_only:
        return

    # the segment path under either convention (the default must be no slower)
    print("\nbuild_positions / build_batch, released vs transformers5 (medians of interleaved samples)")
    print("| batch | released | transformers5 | released / transformers5 |")
    print("|---|---|---|---|")
    for batch in (1, 8):
        samples = [sample_segments(500 if row % 2 == 0 else 100) for row in range(batch)]
        if batch == 1:
            builds = [
                lambda c=c, segs=samples[0]: mrope.build_positions(segs, model="qwen2-vl", convention=c)
                for c in conventions
            ]
        else:
            builds = [
                lambda c=c, ss=samples: mrope.build_batch(
                    ss, model="qwen2-vl", convention=c, padding_side="left"
                )
                for c in conventions
            ]
        t_rel, t_t5 = paired_medians(builds)
        print(f"| {batch} | {t_rel * 1e3:.3f} ms | {t_t5 * 1e3:.3f} ms | {t_rel / t_t5:.2f} |")

    # the segment path against the token-id path on the same prompts (both mrope, both with
    # the ids, spans and grids they return; the token path is given the ids the segment path made)
    print(
        "\nsegments -> positions vs token ids -> positions, same prompts (medians; load average "
        f"{os.getloadavg()[0]:.2f})"
    )
    print("| batch | build from segments | get_rope_index (ids + mask + types) | segments / tokens |")
    print("|---|---|---|---|")
    for batch in (1, 8):
        samples = [sample_segments(500 if row % 2 == 0 else 100) for row in range(batch)]
        b = mrope.build_batch(samples, model="qwen2-vl", padding_side="left")
        ids, mask = torch.from_numpy(b.input_ids), torch.from_numpy(b.attention_mask)
        types = torch.from_numpy(b.mm_token_type_ids)
        grids_i = torch.from_numpy(np.concatenate([s.image_grid_thw for s in b.sequences]))
        grids_v = torch.from_numpy(np.concatenate([s.video_grid_thw for s in b.sequences]))

        def from_tokens(ids=ids, gi=grids_i, gv=grids_v, mask=mask, types=types):
            return mrope.get_rope_index(ids, gi, gv, mask, model="qwen2-vl", mm_token_type_ids=types)

        if batch == 1:

            def from_segments(segs=samples[0]):
                return mrope.build_positions(segs, model="qwen2-vl")

            assert np.array_equal(from_segments().ids, from_tokens()[0][:, 0].numpy())
        else:

            def from_segments(samples=samples):
                return mrope.build_batch(samples, model="qwen2-vl", padding_side="left")

            assert np.array_equal(from_segments().ids, from_tokens()[0].numpy())
        # spans are made when first read: the "+ spans" row reads every sequence's spans too
        if batch == 1:

            def with_spans(segs=samples[0]):
                return mrope.build_positions(segs, model="qwen2-vl").spans

        else:

            def with_spans(samples=samples):
                return [
                    p.spans
                    for p in mrope.build_batch(samples, model="qwen2-vl", padding_side="left").sequences
                ]

        t_seg, t_tok, t_spans = paired_medians([from_segments, from_tokens, with_spans])
        print(f"| {batch} | {t_seg * 1e3:.3f} ms | {t_tok * 1e3:.3f} ms | {t_seg / t_tok:.2f} |")
        print(f"| {batch}, every `.spans` read | {t_spans * 1e3:.3f} ms | | {t_spans / t_tok:.2f} |")
    print(f"load average after the segment rows: {os.getloadavg()[0]:.2f}")

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
        lambda: mrope.numpy_rope_index(ids, long.image_grid_thw, model="qwen2-vl"), repeat=7, min_time=0.5
    )
    print(
        f"rope_index (token form), {long.num_tokens} tokens: {t * 1e3:.2f} ms = {long.num_tokens / t / 1e6:.0f} M positions/s"
    )


if __name__ == "__main__":
    main()
