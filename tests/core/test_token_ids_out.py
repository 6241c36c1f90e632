"""``out=`` on ``get_rope_index`` / ``numpy_rope_index``: the positions written into the caller's buffer.

Expected values come from outside the code under test: each family's own transformers 5.24
``get_rope_index`` (the tiny random-weight model's method) on a random prompt's row; the allocating call
on the batch is held equal to it row by row. Allocation is measured with ``tracemalloc`` (numpy reports
its buffers to it), with the allocating call as the negative control.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv
from support.hf_reference import named_for, own_get_rope_index
from support.random_prompts import random_segments
from support.tiny_vlm import FAMILIES, NO_VIDEO

import mrope
from mrope import Image, Text, TokenError, Video
from mrope.integrations import transformers as mt
from mrope.models import names


def _call_kwargs(kw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model inputs ``get_rope_index`` takes (no precomputed positions), under its names: the omni
    thinkers' seconds per grid and their audio lengths (``feature_attention_mask.sum(-1)``), MiniCPM-V's
    crop sizes ``(h, w)`` as ``(1, h, w)`` grids."""
    kw = {k: v for k, v in kw.items() if k not in ("position_ids", "deltas")}
    if "video_second_per_grid" in kw:
        kw["second_per_grid_ts"] = kw["video_second_per_grid"]
    if "feature_attention_mask" in kw:
        kw["audio_seqlens"] = kw["feature_attention_mask"].sum(-1)
    for sizes, grids in (("target_sizes", "image_grid_thw"), ("target_sizes_videos", "video_grid_thw")):
        if sizes in kw:
            kw[grids] = torch.nn.functional.pad(kw[sizes], (1, 0), value=1)
    return named_for(mrope.numpy_rope_index, kw)


@pytest.mark.parametrize("name", FAMILIES)
def test_out_equals_the_allocating_call_and_the_models_own(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net)
    rng = np.random.default_rng(sum(map(ord, name)))
    rows = [random_segments(rng, rules, name not in NO_VIDEO) for _ in range(2)]
    kw = tv.inputs(name, rows, with_pixels=False)
    args = _call_kwargs(kw)
    want, want_deltas = mrope.get_rope_index(**args, rules=rules)
    # the allocating call agrees with the model's own code on each row (its valid tokens)
    for r, segments in enumerate(rows):
        own, own_delta = own_get_rope_index(net, tv.inputs(name, [segments], with_pixels=False))
        valid = kw["attention_mask"][r].bool()
        np.testing.assert_array_equal(want[:, r, valid].numpy(), own)
        assert want_deltas[r, 0].item() == own_delta
    for make in (torch.empty_like, lambda t: np.full(tuple(t.shape), 7, dtype=t.numpy().dtype)):
        buffer = make(want)
        got, deltas = mrope.get_rope_index(**args, rules=rules, out=buffer)
        if isinstance(buffer, torch.Tensor):
            assert got is buffer
        else:  # a numpy buffer under tensor ids: a tensor sharing its memory
            assert got.data_ptr() == buffer.ctypes.data
        torch.testing.assert_close(torch.as_tensor(got), want, rtol=0, atol=0)
        torch.testing.assert_close(deltas, want_deltas, rtol=0, atol=0)


@pytest.mark.parametrize("name", [n for n in names() if n not in FAMILIES])
def test_out_in_families_without_a_tiny_model(name: str) -> None:
    # grids scaled by 2 where 4 x 4 patches merge (MiniCPM-V 4.6)
    m = max(1, mrope.models.resolve_rules(name).merge_size // 2)
    segments = [Text(7), Image(grid=(1, 4 * m, 6 * m)), Text(3), Image(grid=(1, 2 * m, 2 * m)), Text(2)]
    b = mrope.build_batch([segments, segments[:3]], model=name)
    args = dict(
        input_ids=b.input_ids,
        image_grid_thw=np.concatenate([s.image_grid_thw for s in b.sequences]),
        attention_mask=b.attention_mask,
        model=name,
    )
    if mrope.models.resolve_rules(name).generates_images:
        args["images_per_sample"] = np.array([len(s.image_grid_thw) for s in b.sequences])
    want, want_deltas = mrope.numpy_rope_index(**args)
    np.testing.assert_array_equal(want[:, 0], b.ids[:, 0])  # the segment path's positions
    buffer = np.zeros_like(want)
    got, deltas = mrope.numpy_rope_index(**args, out=buffer)
    assert got is buffer
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(deltas, want_deltas)


def _workload(batch: int) -> dict:
    """The benchmark's Qwen2-VL workload (about 8k tokens a row: 4 images, a video, text; odd rows
    shorter, left padded)."""
    rows = []
    for r in range(batch):
        segs: list = [Text(500 if r % 2 == 0 else 100)]
        for _ in range(4):
            segs += [Image(grid=(1, 64, 64)), Text(250)]
        rows.append([*segs, Video(grid=(32, 16, 16), fps=2.0), Text(500)])
    b = mrope.build_batch(rows, model="qwen2-vl", padding_side="left")
    return dict(
        input_ids=torch.from_numpy(b.input_ids),
        image_grid_thw=torch.from_numpy(np.concatenate([s.image_grid_thw for s in b.sequences])),
        video_grid_thw=torch.from_numpy(np.concatenate([s.video_grid_thw for s in b.sequences])),
        attention_mask=torch.from_numpy(b.attention_mask),
        mm_token_type_ids=torch.from_numpy(b.mm_token_type_ids),
        model="qwen2-vl",
    )


def _peak_and_growth(fn, calls: int = 20) -> tuple[int, int]:
    """Peak traced bytes above the start over ``calls`` steady-state calls, and the bytes still held after."""
    fn()
    fn()  # caches filled: the steady state
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(calls):
            fn()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base, current - base


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("buffer_kind", ["numpy", "torch"])
def test_out_allocates_nothing_of_the_results_size(batch: int, buffer_kind: str) -> None:
    args = _workload(batch)
    want, _ = mrope.get_rope_index(**args)
    buffer = np.empty(tuple(want.shape), dtype=np.int64) if buffer_kind == "numpy" else torch.empty_like(want)
    peak, growth = _peak_and_growth(lambda: mrope.get_rope_index(**args, out=buffer))
    torch.testing.assert_close(torch.as_tensor(buffer), want, rtol=0, atol=0)
    # scratch only, nothing held between calls: a block's add, whose strided [3, n] output numpy's ufunc
    # machinery stages through its buffer (8192 elements: at most 64 KiB whatever the length), and two
    # bytes a token (the bytes of the placeholder comparisons, or of the mask check), against the
    # result's 24 bytes a token
    tokens = want.shape[1] * want.shape[2]
    assert peak < (64 << 10) + 2 * tokens + 8192, (peak, want.numpy().nbytes)
    assert peak < want.numpy().nbytes // 2
    assert growth < 256  # (a small object of the first traced call may outlive it; 20 calls hold no more)
    # negative control: the allocating call's peak holds a result
    peak_alloc, _ = _peak_and_growth(lambda: mrope.get_rope_index(**args))
    assert peak_alloc >= want.numpy().nbytes


def test_out_with_pruned_ids_and_omni_families() -> None:
    segments = [Text(5), Video(grid=(4, 4, 4), fps=2.0), Text(3)]
    p = mrope.build_positions(segments, model="qwen2.5-vl")
    keep = np.random.default_rng(0).random(int((p.mm_token_type_ids == 2).sum())) < 0.5
    pruned = mrope.build_positions(
        [Text(5), Video(grid=(4, 4, 4), fps=2.0, keep=keep), Text(3)], model="qwen2.5-vl"
    )
    args = dict(input_ids=pruned.input_ids[None], video_grid_thw=p.video_grid_thw, model="qwen2.5-vl")
    want, want_deltas = mrope.numpy_rope_index(**args, video_keep=[keep])
    np.testing.assert_array_equal(want[:, 0], pruned.ids)
    buffer = np.zeros_like(want)
    got, deltas = mrope.numpy_rope_index(**args, video_keep=[keep], out=buffer)
    assert got is buffer
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(deltas, want_deltas)


@pytest.mark.parametrize(
    ("out", "needle"),
    [
        (np.zeros((3, 1, 9), dtype=np.int64), r"shape \[3, 1, 8\]"),
        (np.zeros((3, 1, 8), dtype=np.int32), "int64 array"),
        (np.zeros((2, 1, 8), dtype=np.int64), "got int64 \\[2, 1, 8\\]"),
        (np.broadcast_to(np.int64(0), (3, 1, 8)), "writeable"),
    ],
)
def test_bad_out_is_a_token_error(out: np.ndarray, needle: str) -> None:
    with pytest.raises(TokenError, match=needle):
        mrope.numpy_rope_index(np.arange(8)[None], model="qwen2-vl", out=out)


def test_out_off_the_cpu() -> None:
    """numpy_rope_index writes on the host only; get_rope_index copies into a tensor on another device
    (``meta`` here: a device without storage stands in for an accelerator)."""
    ids = torch.arange(8)[None]
    buffer = torch.empty((3, 1, 8), dtype=torch.int64, device="meta")
    with pytest.raises(TokenError, match="on the CPU"):
        mrope.numpy_rope_index(ids, model="qwen2-vl", out=buffer)
    got, deltas = mrope.get_rope_index(ids, model="qwen2-vl", out=buffer)
    assert got is buffer and deltas.device.type == "cpu"
