"""HunyuanOCR (``hunyuan_vl``): every axis is the sequence index; an image's grid tokens carry
(w, h, image index) with a newline column; four axes.

Expected values: transformers 5.24's own ``HunYuanVLModel.get_rope_index`` (bound to a minimal object
holding a config with the released ``mrope_section`` [16, 16, 16, 16] and head_dim 128: the class default
has no section, and its get_rope_index raises "at least 3 axes").

The one difference from 5.24 is the image index: 5.24 keeps counting images across the rows of a
batch; the released layout restarts it in every sequence (vLLM computes it per request; Tencent's own
packed training calls get_rope_index one sample at a time). So the released rule is checked against
5.24 run on each row alone, and 5.24's batch-wide count against ``image_index_scope="batch"``.
(Tencent's original batch-1 processor wrote 0 on this axis for every image; the two agree for the
single-image prompts it was written for.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLConfig
from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

from mrope import Image, LayoutRules, Text, TokenError, Video, build_batch, build_positions
from mrope.errors import LayoutError
from mrope.tokens import rope_index

IMAGE, START, END = 120120, 120118, 120119
RULES = LayoutRules(
    name="hunyuan-ocr",
    temporal_patch_size=1,
    row_newline=True,
    positions_base="sequence",
    num_axes=4,
    grid_border=True,
    vision_start_id=START,
    vision_end_id=END,
    image_pad_id=IMAGE,
    patch_size=16,
)


class _Shim:
    get_rope_index = HunYuanVLModel.get_rope_index
    get_vision_position_ids = HunYuanVLModel.get_vision_position_ids

    def __init__(self, sections: list[int]) -> None:
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections}
        self.config = HunYuanVLConfig(
            text_config={
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "head_dim": 128,
                "rope_parameters": rope,
            }
        )


def _sample(rng: np.random.Generator) -> list:
    segments: list = [Text(int(rng.integers(1, 5)))]
    for _ in range(int(rng.integers(1, 3))):
        h, w = (2 * int(v) for v in rng.integers(1, 4, 2))
        segments += [Image((1, h, w)), Text(int(rng.integers(0, 4)))]
    return segments


def _call(shim: _Shim, ids: np.ndarray, mask: np.ndarray, grids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos, deltas = shim.get_rope_index(
        torch.from_numpy(ids),
        torch.from_numpy((ids == IMAGE) * mask),
        torch.from_numpy(grids),
        torch.from_numpy(mask),
    )
    return pos.numpy(), deltas.numpy()[:, 0]


@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_transformers(side: str) -> None:
    rng = np.random.default_rng(31 if side == "left" else 32)
    shim = _Shim([16, 16, 16, 16])
    batch_rules = RULES.replace(image_index_scope="batch")
    for _ in range(5):
        samples = [_sample(rng) for _ in range(3)]
        grids = np.concatenate([build_positions(s, rules=RULES).image_grid_thw for s in samples])
        # 5.24 counts images across the batch
        batch = build_batch(samples, rules=batch_rules, padding_side=side, pad_position=0)
        want, want_deltas = _call(shim, batch.input_ids, batch.attention_mask, grids)
        np.testing.assert_array_equal(batch.ids, want)
        got, deltas = rope_index(
            batch.input_ids, grids, None, batch.attention_mask, rules=batch_rules, pad_position=0
        )
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(deltas, want_deltas)
        # the released layout: the index restarts in every sequence = 5.24 run on each row alone
        batch = build_batch(samples, rules=RULES, padding_side=side, pad_position=0)
        got, deltas = rope_index(
            batch.input_ids, grids, None, batch.attention_mask, rules=RULES, pad_position=0
        )
        np.testing.assert_array_equal(got, batch.ids)
        used = 0
        for r, p in enumerate(batch.sequences):
            n = len(p.image_grid_thw)
            row_want, row_deltas = _call(
                shim, batch.input_ids[r : r + 1], batch.attention_mask[r : r + 1], grids[used : used + n]
            )
            used += n
            np.testing.assert_array_equal(got[:, r : r + 1], row_want)
            assert deltas[r] == row_deltas[0]


def test_three_axes_and_runs_without_border_tokens() -> None:
    shim = _Shim([22, 21, 21])
    rules = RULES.replace(num_axes=3)
    # a run of grid tokens only (5.24 accepts both forms): 2 x (3 + 1) tokens
    ids = np.array([[7, START, *[IMAGE] * 8, END, 7, 7]])
    mask = np.ones_like(ids)
    want, want_deltas = _call(shim, ids, mask, np.array([[1, 4, 6]]))
    got, deltas = rope_index(ids, [[1, 4, 6]], None, mask, rules=rules)
    np.testing.assert_array_equal(got, want)
    assert deltas.tolist() == want_deltas.tolist()


def test_layout_by_hand() -> None:
    p = build_positions([Text(1), Image((1, 4, 2)), Text(1)], rules=RULES)
    # start, border, 2 rows of (1 + newline) grid tokens, border, end
    assert p.input_ids.tolist() == [0, START, IMAGE, *[IMAGE] * 4, IMAGE, END, 0]
    seq = list(range(10))
    want = [
        seq,
        [0, 1, 2, 0, 1, 0, 1, 7, 8, 9],
        [0, 1, 2, 0, 0, 1, 1, 7, 8, 9],
        [0, 1, 2, 0, 0, 0, 0, 7, 8, 9],
    ]
    np.testing.assert_array_equal(p.ids, want)
    assert p.delta == 0


def test_bad_input() -> None:
    with pytest.raises(LayoutError, match="images only"):
        build_positions([Video((2, 4, 4))], rules=RULES)
    with pytest.raises(TokenError, match="with the two border tokens"):
        rope_index(np.full((1, 5), IMAGE), [[1, 4, 2]], rules=RULES)
