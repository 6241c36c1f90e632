"""Qwen2.5-VL video time: float32 arithmetic as the released model computes it.

Expected values never come from mrope: they are the issue's hand-checked numbers, the release code's own
expression written out here with torch float32 (transformers 4.49's Qwen2.5-VL ``get_rope_index``:
``(arange(T') * second_per_grid_t * tokens_per_second).long()`` with ``second_per_grid_t`` an element of
the float32 ``second_per_grid_ts`` tensor the processor returns), or transformers 5.24's own
``Qwen2_5_VLModel.get_rope_index`` run on a minimal object.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import mrope
from mrope import Text, Video, build_positions, get_rope_index

VS, VE, VIDEO = 151652, 151653, 151656
pytestmark = pytest.mark.filterwarnings("ignore::mrope.MRopeWarning")  # fast rates share t: expected

RATES = (12.5, 25.0, 50.0, 100.0, 1.2, 2 / 0.7, 2 / 0.9)
N_PATCHES = 60


def release_t(n_patches: int, fps: float, tokens_per_second: int = 2) -> list[int]:
    """The release code's time offsets: the processor's ``torch.tensor([2 / fps])`` (float32), multiplied
    in float32 by ``arange`` and then by the python int ``tokens_per_second``, then ``.long()``."""
    second_per_grid_ts = torch.tensor([2 / fps])  # what Qwen2_5_VLProcessor returns: float32
    assert second_per_grid_ts.dtype == torch.float32
    time_tensor = (
        torch.arange(n_patches).view(-1, 1).expand(-1, 4) * second_per_grid_ts[0] * tokens_per_second
    )
    return time_tensor.long()[:, 0].tolist()


def test_issue_example_26_patches_at_0_04_s() -> None:
    ids = torch.tensor([[VS] + [VIDEO] * 26 + [VE]])
    p, d = get_rope_index(
        ids, None, torch.tensor([[26, 2, 2]]), model="qwen2.5-vl", second_per_grid_ts=torch.tensor([0.04])
    )
    assert p[0, 0, 26].item() == 3  # the release, SGLang and transformers 5.24; float64 gives 2
    # every patch: s = 1 plus the release's float32 offsets
    assert p[0, 0, 1:27].tolist() == [1 + t for t in release_t(26, 50.0)]


def test_build_positions_at_2_over_0_7_fps() -> None:
    p = build_positions([Video(grid=(46, 2, 2), fps=2 / 0.7, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0, -1] == 63  # patch 45 at 0.7 s per patch, 2 tokens per second; float64 gives 62
    assert math.floor(45 * (2 / (2 / 0.7)) * 2) == 62  # the float64 product this replaces


@pytest.mark.parametrize("fps", RATES)
def test_common_rates_equal_the_release_float32_product(fps: float) -> None:
    expected = release_t(N_PATCHES, fps)
    # build_positions from a rate
    p = build_positions([Video(grid=(N_PATCHES, 2, 2), fps=fps, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0].tolist() == expected
    # get_rope_index from the processor's float32 tensor
    ids = torch.tensor([[VS] + [VIDEO] * N_PATCHES + [VE]])
    pos, _ = get_rope_index(
        ids,
        video_grid_thw=torch.tensor([[N_PATCHES, 2, 2]]),
        model="qwen2.5-vl",
        second_per_grid_ts=torch.tensor([2 / fps]),
    )
    assert pos[0, 0, 1:-1].tolist() == [1 + t for t in expected]


def test_the_rates_are_ones_where_float64_differs() -> None:
    """The regression cases discriminate: a float64 product gets at least one patch wrong at each rate
    (from the float32 tensor, as get_rope_index receives it, or from the rate itself)."""
    for fps in RATES:
        spg32 = float(torch.tensor([2 / fps])[0])
        expected = release_t(N_PATCHES, fps)
        from_tensor = [math.floor(i * spg32 * 2) for i in range(N_PATCHES)]
        from_rate = [math.floor(i * (2 / fps) * 2) for i in range(N_PATCHES)]
        assert from_tensor != expected or from_rate != expected, fps


def _hf_qwen25_rope_index(tokens_per_second: int):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    model = SimpleNamespace(
        config=SimpleNamespace(
            vision_config=SimpleNamespace(spatial_merge_size=2, tokens_per_second=tokens_per_second)
        )
    )
    model.get_vision_position_ids = functools.partial(Qwen2_5_VLModel.get_vision_position_ids, model)
    return functools.partial(Qwen2_5_VLModel.get_rope_index, model)


@pytest.mark.parametrize("tokens_per_second", [2, 25])
def test_transformers5_grouping_equals_transformers_5_24(tokens_per_second: int) -> None:
    """Under ``convention="transformers5"`` (5.x advance ``s + max(H', W')``, pads 0, ``i * (tps * spg)``)
    mrope equals 5.24's own get_rope_index; with tokens_per_second 25 (not a power of two) the two
    groupings really differ."""
    grids = [(12, 2, 2), (8, 4, 2), (6, 2, 2)]
    segs: list = [Text(3)]
    for grid, fps in zip(grids, (25.0, 2 / 0.7, 1.2), strict=True):
        segs += [Video(grid=grid, fps=fps), Text(2)]
    rules = {"tokens_per_second": tokens_per_second}
    p5 = build_positions(segs, model="qwen2.5-vl", rules=rules, convention="transformers5")
    spg = torch.tensor(p5.second_per_grid_ts.tolist())  # float32, as the processor returns it
    types = torch.from_numpy((p5.input_ids == VIDEO).astype(np.int64) * 2)[None]
    ids = torch.from_numpy(p5.input_ids)[None]
    grid_t = torch.from_numpy(p5.video_grid_thw)
    hf_pos, hf_delta = _hf_qwen25_rope_index(tokens_per_second)(
        ids, types, None, grid_t, second_per_grid_ts=spg
    )
    ours, delta = get_rope_index(
        ids, None, grid_t, model="qwen2.5-vl", rules=rules, convention="transformers5", second_per_grid_ts=spg
    )
    np.testing.assert_array_equal(ours.numpy(), hf_pos.numpy())
    np.testing.assert_array_equal(p5.ids, hf_pos[:, 0].numpy())
    assert delta.tolist() == hf_delta.tolist()
    released = build_positions(segs, model="qwen2.5-vl", rules={**rules, "advance": "spatial"})
    if tokens_per_second == 25:
        # 25 fps, patch 5: fl32(fl32(5 * 0.08) * 25) = 9.99.. -> 9; fl32(5 * fl32(25 * 0.08)) = 10
        assert release_t(12, 25.0, 25)[5] == 9
        assert (torch.arange(12) * (25 * torch.tensor([0.08])[0])).long()[5].item() == 10
        assert not np.array_equal(released.ids, p5.ids)
    else:
        np.testing.assert_array_equal(released.ids, p5.ids)  # x2 is exact in float32: no difference


def test_rules_refuse_an_unknown_grouping() -> None:
    with pytest.raises(mrope.LayoutError, match="seconds_grouping"):
        mrope.LayoutRules(seconds_grouping="i*spg")
