"""The invariance kit: each assertion passes where the rule holds and fails where it must."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mrope
from mrope import Image, Text, Video, build_positions
from mrope.testing import (
    assert_crop_invariant,
    assert_prefill_decode_consistent,
    assert_tile_invariant,
    assert_time_aligned,
    assert_translation_invariant,
    rope_scores,
)


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_translation(model: str) -> None:
    p = build_positions([Text(3), Image(grid=(1, 6, 8)), Text(2)], model=model)
    assert_translation_invariant(p)
    assert_translation_invariant(p, shift=(5, -2, 7))
    assert_translation_invariant(p.ids, model, shift=10**6)


def test_text_only_mrope_is_plain_rope_scores() -> None:
    spec = mrope.models.get_family("qwen3-vl").spec
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(6, 1, 128, generator=gen, dtype=torch.float64)
    k = torch.randn(6, 1, 128, generator=gen, dtype=torch.float64)
    multi = rope_scores(mrope.text_positions(6), spec, q, k)
    one_d = rope_scores(torch.arange(6).expand(3, 6), spec, q, k)
    torch.testing.assert_close(multi, one_d, rtol=0, atol=0)


@pytest.mark.parametrize("rule", ["reset", "keep"])
def test_crop(rule: str) -> None:
    rules = {"crop": rule}
    whole = build_positions([Text(4), Image(grid=(1, 12, 16))], rules=rules, model="qwen2-vl")
    crop = build_positions([Text(4), Image(grid=(1, 4, 6), origin=(3, 4))], rules=rules, model="qwen2-vl")
    assert_crop_invariant(whole, crop)


def test_crop_fails_for_the_wrong_region() -> None:
    whole = build_positions([Image(grid=(1, 12, 16))], model="qwen2-vl")
    crop = build_positions([Image(grid=(1, 4, 4))], model="qwen2-vl")
    # a 2 x 2 crop scores like any 2 x 2 region (translation), but not like a region of another shape
    assert_crop_invariant(whole, crop)
    bent = build_positions([Image(grid=(1, 4, 4))], model="qwen2-vl")
    bent.ids[2, bent.spans[1].start + 1] += 1  # stretch one token sideways
    with pytest.raises(AssertionError, match="q.k scores differ"):
        assert_crop_invariant(whole, bent)


def test_tiles_any_order_under_global_rule() -> None:
    untiled = build_positions([Text(2), Image(grid=(1, 8, 12))], model="qwen2-vl")
    for order in (None, (3, 1, 5, 0, 2, 4)):
        tiled = build_positions(
            [Text(2), Image(grid=(1, 8, 12), tiles=(3, 2), tile_order=order)], model="qwen2-vl"
        )
        assert_tile_invariant(tiled, untiled)


def test_independent_tiles_lose_geometry() -> None:
    untiled = build_positions([Image(grid=(1, 8, 12))], model="qwen2-vl")
    tiled = build_positions(
        [Image(grid=(1, 8, 12), tiles=(3, 2))], rules={"tiles": "independent"}, model="qwen2-vl"
    )
    with pytest.raises(AssertionError, match="tile geometry lost"):
        assert_tile_invariant(tiled, untiled)


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_prefill_decode(chunk: int | None) -> None:
    segs = [Text(3), Image(grid=(1, 8, 8)), Text(2), Video(grid=(4, 4, 4), fps=1.0), Text(1)]
    assert_prefill_decode_consistent(segs, 5, model="qwen2.5-vl", chunk=chunk)
    stamps = lambda s: [ord(c) for c in s]  # noqa: E731
    assert_prefill_decode_consistent(segs, 3, model="qwen3-vl", tokenizer=stamps, chunk=chunk)


def _alone(video: Video, model: str):
    return build_positions([video], model=model)


def test_time_alignment_holds_in_seconds_and_fails_by_index() -> None:
    low, high = Video(grid=(4, 4, 4), fps=1.0), Video(grid=(8, 4, 4), fps=2.0)
    assert_time_aligned(_alone(low, "qwen2.5-vl"), _alone(high, "qwen2.5-vl"))
    assert_time_aligned(_alone(low, "qwen2.5-vl"), _alone(Video(grid=(16, 4, 4), fps=4.0), "qwen2.5-vl"))
    with pytest.raises(AssertionError, match="not time-aligned under 'qwen2-vl'"):
        assert_time_aligned(_alone(low, "qwen2-vl"), _alone(high, "qwen2-vl"))
    # explicit seconds per patch count as the sampling rate
    assert_time_aligned(
        _alone(Video(grid=(3, 4, 4), second_per_grid=3.0), "qwen2.5-vl"),
        _alone(Video(grid=(9, 4, 4), fps=2.0), "qwen2.5-vl"),
    )
    with pytest.raises(AssertionError, match="nothing to compare"):
        assert_time_aligned(
            _alone(Video(grid=(2, 4, 4), fps=1.0), "qwen2.5-vl"),
            _alone(Video(grid=(2, 4, 4), fps=1.5), "qwen2.5-vl"),
        )


def test_scores_use_the_apply_path_and_agree_with_float64_math() -> None:
    spec = mrope.models.get_family("qwen2-vl").spec
    p = build_positions([Text(2), Image(grid=(1, 4, 4), wrap=False)], model="qwen2-vl")
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(p.num_tokens, 1, 128, generator=gen, dtype=torch.float64)
    k = torch.randn(p.num_tokens, 1, 128, generator=gen, dtype=torch.float64)
    scores = rope_scores(p, spec, q, k)[0]
    # independent float64 rotation (chunked sections, neox pairing: transformers 5.24
    # models/qwen2_vl/modeling_qwen2_vl.py:138 and :147)
    inv = torch.from_numpy(spec.inv_freq())
    axis = torch.from_numpy(spec.axis_map())
    pos = torch.from_numpy(p.ids).double()
    ang = pos[axis].T * inv  # [T, 64]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rot(x: torch.Tensor) -> torch.Tensor:
        x = x[:, 0]
        half = torch.cat([-x[:, 64:], x[:, :64]], -1)
        return x * cos + half * sin

    np.testing.assert_allclose(scores.numpy(), (rot(q) @ rot(k).T).numpy(), rtol=1e-5, atol=1e-5)
