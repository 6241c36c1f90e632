"""``PackedCollator(layer_sets=...)``: a training step's packed rows of every position set, for a model whose
layers rotate by different sets (docs/packing.md).

Expected values: each row of a set is the text row (0 .. n - 1 per sample) over the samples' ids of that
set side by side (written out here), each sample's ids :func:`mrope.build_position_sets` of its segments
and, for ``circle-rope-age``, the authors' code as tests/models/test_scheme_circle.py writes it out
(lose4578/CircleRoPE at 063fb2c, ``code/modular_qwen2_5_vl_circle_rope.py:310-329``; imported from there).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mrope
from mrope._errors import PackingError
from mrope.models import get_family
from mrope.packing import PackedCollator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_scheme_circle import _prompt, _reference, assert_close_positions  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SEEDS = range(5)


def processor_output(p: mrope.Positions) -> dict:
    """What a processor gives for the prompt of ``p``: its ids and grids."""
    out = {"input_ids": p.input_ids, "image_grid_thw": p.image_grid_thw, "video_grid_thw": p.video_grid_thw}
    return {**out, "second_per_grid_ts": p.second_per_grid_ts} if len(p.video_grid_thw) else out


def expected_row(sets: list[dict[str, mrope.Positions]], name: str) -> np.ndarray:
    text = np.concatenate([np.arange(s[name].num_tokens) for s in sets])
    return np.concatenate([text[None], np.concatenate([s[name].ids for s in sets], axis=1)])


def test_every_set_of_each_row_equals_the_library_and_the_authors_code() -> None:
    """circle-rope-age: position_sets['circle'] and ['mrope'] [4, R, L] of each packed row are the text row
    over the samples' sets; the mrope set's samples are the authors' M-RoPE index, the circle set's their
    circle index; position_ids is the circle set; the pattern is strategy 4's."""
    want = [mrope.build_position_sets(_prompt(s), model="circle-rope-age") for s in SEEDS]
    records = [processor_output(w["circle"]) for w in want]
    collator = PackedCollator("circle-rope-age", max_length=200, layer_sets=True)
    out = collator(records)
    assert out["layer_pattern"] == ["circle", "mrope"] and list(out["position_sets"]) == ["circle", "mrope"]
    rows = collator.bins([w["circle"].num_tokens for w in want])
    for r, row in enumerate(rows):
        n = sum(want[i]["circle"].num_tokens for i in row)
        for name in ("circle", "mrope"):
            got = out["position_sets"][name][:, r, :n].numpy()
            np.testing.assert_array_equal(got, expected_row([want[i] for i in row], name))
        start = 0
        for i in row:
            stop = start + want[i]["circle"].num_tokens
            m, _ = _reference(want[i]["circle"], use_m_index=True)
            np.testing.assert_array_equal(out["position_sets"]["mrope"][1:, r, start:stop].numpy(), m.numpy())
            circle, _ = _reference(want[i]["circle"])
            assert_close_positions(out["position_sets"]["circle"][1:, r, start:stop].numpy(), circle)
            start = stop
    np.testing.assert_array_equal(out["position_ids"].numpy(), out["position_sets"]["circle"].numpy())
    circle, mrope_set = (out["position_sets"][k].numpy().astype(np.float64) for k in ("circle", "mrope"))
    assert not np.allclose(circle, mrope_set, atol=1e-3)  # negative control: the sets differ
    assert "position_sets" not in PackedCollator("circle-rope-age", max_length=200)(records)  # the control


def test_a_collators_own_sets_on_any_model() -> None:
    """A LayerSets of one's own on qwen2-vl: each set as build_position_sets lays it out for the family
    with those sets."""
    own = mrope.LayerSets({"offset": {}, "reset": {"spatial": "reset"}}, ("offset", "reset", "nope"))
    family = get_family("qwen2-vl").replace(layer_sets=own)
    segs = [mrope.Text(3), mrope.Image(grid=(1, 4, 6)), mrope.Text(2), mrope.Image(grid=(1, 8, 4))]
    want = mrope.build_position_sets(segs, model=family)
    out = PackedCollator("qwen2-vl", max_length=64, layer_sets=own)([processor_output(want["offset"])])
    assert out["layer_pattern"] == ["offset", "reset", "nope"]
    for name in ("offset", "reset"):
        np.testing.assert_array_equal(out["position_sets"][name][:, 0].numpy(), expected_row([want], name))
    assert not np.array_equal(out["position_sets"]["offset"], out["position_sets"]["reset"])  # control
    with pytest.raises(PackingError, match="layer_sets is True or a mrope.LayerSets; got 'reset'"):
        PackedCollator("qwen2-vl", max_length=64, layer_sets="reset")


def unpadded(index: np.ndarray, lengths: np.ndarray, layout: str, world_size: int = 2) -> np.ndarray:
    """Each token's index in the unpadded row from its index in the padded row (-1: padding). Zigzag pads
    each sample to a multiple of 2 x world_size, contiguous the row (after its samples), as
    docs/packing.md (context parallelism) says."""
    unit = 2 * world_size
    padded = -(-lengths // unit) * unit if layout == "zigzag" else lengths
    padded_starts = np.concatenate([[0], np.cumsum(padded)])
    real_starts = np.concatenate([[0], np.cumsum(lengths)])
    seg = np.searchsorted(padded_starts, index, side="right") - 1
    inside = seg < len(lengths)
    offset = index - padded_starts[np.minimum(seg, len(lengths))]
    real = inside & (offset < np.append(lengths, 0)[np.minimum(seg, len(lengths))])
    return np.where(real, real_starts[np.minimum(seg, len(lengths))] + offset, -1)


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_a_ranks_share_of_every_set(layout) -> None:
    """cp_size 2: each rank's position_sets hold its tokens of every set: read back through token_index,
    the real tokens of both ranks are the uncut rows' sets, every one of them once; the first set is each
    rank's position_ids."""
    want = [mrope.build_position_sets(_prompt(s), model="circle-rope-age") for s in SEEDS]
    records = [processor_output(w["circle"]) for w in want]
    whole = PackedCollator("circle-rope-age", max_length=200, layer_sets=True)
    full = whole(records)["position_sets"]
    rows = whole.bins([w["circle"].num_tokens for w in want])
    seen: dict[int, list[int]] = {r: [] for r in range(len(rows))}
    for rank in range(2):
        out = PackedCollator(
            "circle-rope-age", max_length=200, layer_sets=True, cp_size=2, cp_rank=rank, cp_layout=layout
        )(records)
        np.testing.assert_array_equal(out["position_ids"].numpy(), out["position_sets"]["circle"].numpy())
        for r, row in enumerate(rows):
            at = unpadded(
                out["token_index"][r].numpy(), np.array([want[i]["circle"].num_tokens for i in row]), layout
            )
            real = at >= 0
            for name in ("circle", "mrope"):
                mine = out["position_sets"][name][:, r].numpy()
                np.testing.assert_array_equal(mine[:, real], full[name][:, r].numpy()[:, at[real]])
            seen[r] += at[real].tolist()
        assert not np.array_equal(out["position_sets"]["circle"], out["position_sets"]["mrope"])  # control
    for r, row in enumerate(rows):
        assert sorted(seen[r]) == list(range(sum(want[i]["circle"].num_tokens for i in row)))
