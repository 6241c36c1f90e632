"""Small things a user tripped on: a batch's repr is a summary (the probe, crop, one-frame and progress
fixes are tested beside their commands and readers)."""

from __future__ import annotations

import mrope


def test_batch_repr_is_a_summary() -> None:
    samples = [[mrope.Text(3), mrope.Image(grid=(1, 4, 4))], [mrope.Text(40)]]
    batch = mrope.build_batch(samples, model="qwen2-vl")
    # by hand: 3 text + vision_start + 4 image tokens + vision_end = 9 valid tokens, max position 6
    # (text 0..2, start 3, image h, w in 4..5, end 6): delta 6 + 1 - 9 = -2; plain text: delta 0
    assert repr(batch) == (
        "Batch(qwen2-vl: 2 sequences x 40 slots, 3 axes, int64; valid tokens [9, 40]; deltas [-2, 0])"
    )
    many = mrope.build_batch([[mrope.Text(n + 1)] for n in range(20)], model="qwen2-vl")
    text = repr(many)
    assert len(text) < 200 and text.endswith("deltas [0, 0, 0, 0, 0, 0, 0, 0, ...])")
