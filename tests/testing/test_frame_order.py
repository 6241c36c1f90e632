"""assert_frame_order_invariant: reordered / resampled frames keep their coordinates; the time
assertion on Positions, and its old Video form (a warning alias).

Expected coordinates are derived by hand from transformers 5.24 models/qwen2_5_vl/modeling_qwen2_5_vl.py
get_rope_index (video t = start + patch * second_per_grid * tokens_per_second, tokens_per_second 2;
h, w = start + row, col) and models/qwen2_vl/modeling_qwen2_vl.py get_rope_index (t = start + patch).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mrope import Text, Video, build_positions
from mrope.testing import assert_frame_order_invariant, assert_time_aligned

GRID = (6, 4, 4)  # 6 temporal patches of 2 x 2 merged tokens


def _video_tokens(p) -> np.ndarray:
    """``[T', tokens per patch]`` token indices of the (one) video: one span, or one per patch
    (the timestamps rule)."""
    spans = [s for s in p.spans if s.kind == "video"]
    tokens = np.concatenate([np.arange(s.start, s.stop) for s in spans])
    return tokens.reshape(sum(s.grid[0] for s in spans), -1)


def _carried(reference, order):
    """The reference with its video patches reordered and each patch's coordinates carried along: what
    a pipeline that reorders frames correctly does to the positions."""
    tokens = _video_tokens(reference)
    ids = reference.ids.copy()
    ids[:, tokens.reshape(-1)] = reference.ids[:, tokens[order].reshape(-1)]
    return dataclasses.replace(reference, ids=ids)


def test_hand_derived_coordinates_of_the_reference() -> None:
    # the premise of the checks below: Qwen2.5-VL at 2 fps (1 s a patch) puts patch i at t = 3 + 2 i
    p = build_positions([Text(3), Video(grid=GRID, fps=2.0, wrap=False)], model="qwen2.5-vl")
    tokens = _video_tokens(p)
    assert p.ids[0, tokens[:, 0]].tolist() == [3 + 2 * i for i in range(6)]
    assert p.ids[1:, tokens[0]].T.tolist() == [[3, 3], [3, 4], [4, 3], [4, 4]]


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl", "glm-4.1v"])
def test_reordered_frames_that_carry_their_coordinates_pass(model: str) -> None:
    # GLM-4.1V: the timestamps rule, one span per patch (bare: no time text to tokenize)
    reference = build_positions([Text(3), Video(grid=GRID, fps=2.0, wrap=False), Text(2)], model=model)
    order = [3, 0, 5, 1, 4, 2]
    assert_frame_order_invariant(reference, _carried(reference, order), order)


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl"])
def test_reordered_frames_given_their_slots_time_fail(model: str) -> None:
    # the builder gives time by slot: a reordered video built afresh does not move the coordinates
    reference = build_positions([Text(3), Video(grid=GRID, fps=2.0)], model=model)
    with pytest.raises(AssertionError, match="did not move with the frames"):
        assert_frame_order_invariant(reference, reference, [1, 0, 2, 3, 4, 5])
    assert_frame_order_invariant(reference, reference, range(6))  # the identity passes


def test_resampling_at_half_the_rate_keeps_times_under_seconds_not_index() -> None:
    # every other patch, at half the rate: patch k of the 1 fps video shows patch 2k of the 2 fps one;
    # by hand (Qwen2.5-VL), t = 2 * k * 2 s... = 4 k from the start in both; Qwen2-VL gives k vs 2 k
    for model, holds in (("qwen2.5-vl", True), ("qwen2-vl", False)):
        full = build_positions([Text(3), Video(grid=(8, 4, 4), fps=2.0)], model=model)
        half = build_positions([Text(7), Video(grid=(4, 4, 4), fps=1.0)], model=model)  # other text before
        if holds:
            assert_frame_order_invariant(full, half, [0, 2, 4, 6])
        else:
            with pytest.raises(AssertionError, match="did not move with the frames"):
                assert_frame_order_invariant(full, half, [0, 2, 4, 6])


def test_frame_order_fails_on_a_bent_frame_and_on_bad_input() -> None:
    reference = build_positions([Video(grid=GRID, fps=2.0)], model="qwen2.5-vl")
    bent = _carried(reference, list(range(6)))
    bent.ids[2, _video_tokens(bent)[4, 1]] += 1  # one token of frame 4 moved right
    with pytest.raises(AssertionError, match="patch 4 of changed .* token 1"):
        assert_frame_order_invariant(reference, bent, range(6))
    with pytest.raises(AssertionError, match="frames names 5 patches"):
        assert_frame_order_invariant(reference, reference, range(5))
    with pytest.raises(AssertionError, match="no video 1"):
        assert_frame_order_invariant(reference, reference, range(6), video=1)


def test_time_aligned_on_positions_with_text_before() -> None:
    low = build_positions([Text(5), Video(grid=(4, 4, 4), fps=1.0)], model="qwen2.5-vl")
    high = build_positions([Text(2), Video(grid=(8, 4, 4), fps=2.0)], model="qwen2.5-vl")
    assert_time_aligned(low, high)
    with pytest.raises(AssertionError, match="not time-aligned under 'qwen2-vl'"):
        assert_time_aligned(
            build_positions([Text(5), Video(grid=(4, 4, 4), fps=1.0)], model="qwen2-vl"),
            build_positions([Text(2), Video(grid=(8, 4, 4), fps=2.0)], model="qwen2-vl"),
        )
