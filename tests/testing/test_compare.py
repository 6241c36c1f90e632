"""mrope.testing.compare_schemes: the schemes' invariances, id growth and per-axis decay, against values
derived by hand from each scheme's published rule (cited below), with negative controls.

Hand derivations used here (``F`` frequency pairs, ``w_p = theta ** (-2 p / rotary_dim)``; constant content
``q = k = 1`` makes a pair's product ``2 cos(angle difference)``, so the mean score per channel is
``(2 sum_p cos(d_p w_p) + passed-through channels) / head_dim``):

- Qwen2-VL (transformers 5.24 models/qwen2_vl/modeling_qwen2_vl.py:1113-1180 ``get_rope_index``: a video
  token ``(i, j, k)`` of a block at ``s`` is ``(s + i, s + j, s + k)``; chunked sections ``(16, 24, 24)``,
  :142): a frame step moves t only, so along t the 16 t pairs turn and the 48 others stay: score
  ``(sum_{p < 16} cos(d w_p) + 48) / 64``; along h the pairs 16..39.
- VideoRoPE (Wiselnn570/VideoRoPE@7712ca3 videorope-transformer/modeling_videorope.py:1507-1626: frame ``i``
  at ``t = s + 2 i``, ``h = t + j - (H' - 1) // 2``, ``w = t + k - (W' - 1) // 2``; lines 258-283: the
  first 48 frequencies alternate h (even) and w (odd), the last 16 are t): a frame step moves t, h and w
  by 2, so along t every pair turns by ``2 d w_p``: score ``mean_p cos(2 d w_p)``; along h only the 24
  even pairs below 48 turn by ``d w_p``.
- MHRoPE (JJJYmmm/Multimodal-RoPEs@cd413b9 multimodal_ropes/freq_allocation/mhrope.py:20-44: key-head
  groups ``(2, 3, 3)`` of 8 read t, h, w at every frequency, theta 5e6): along h three of the eight heads
  turn every pair: score ``(5 + 3 mean_p cos(d w_p)) / 8``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mrope import LayerSets, RopeSpec
from mrope._errors import LayoutError
from mrope.models import SCHEME_NAMES, get_family, names
from mrope.ops import pair_table
from mrope.testing import compare_schemes, rope_scores

SMALL = {"video_frames": 4, "decay_extent": 6}
"""Sizes that keep a comparison under a second or two per scheme."""


def _omega(theta: float, rotary_dim: int) -> np.ndarray:
    return theta ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)


def _one_pair(theta: float = 100.0) -> object:
    """Qwen2-VL's layout with a single rotary pair on t (frequency ``theta ** 0 = 1``)."""
    spec = RopeSpec(head_dim=2, rotary_dim=2, theta=theta, mrope_section=(1, 0, 0))
    return get_family("qwen2-vl").replace(name="one-pair", spec=spec)


def test_one_pair_rope_decays_as_the_cosine_of_the_distance() -> None:
    """One pair at frequency 1 on t: along t the score is ``cos(d)`` (Qwen2-VL's frame step is one t);
    along h and w nothing turns (1)."""
    d = np.arange(8)
    row = compare_schemes([_one_pair()], video_frames=2, decay_extent=8).rows[0]
    np.testing.assert_allclose(row.curve("t").scores, np.cos(d), atol=1e-6)
    np.testing.assert_allclose(row.curve("h").scores, 1.0, atol=1e-6)
    np.testing.assert_allclose(row.curve("w").scores, 1.0, atol=1e-6)


@pytest.mark.parametrize("stride", [2, 1.5])
def test_a_temporal_stride_scales_the_t_curve(stride: float) -> None:
    """With ``temporal_stride`` s the frame step is s (a fractional s gives float positions, which the
    scores take as they are): ``cos(s d)``. Negative control: far from the unstrided ``cos(d)``."""
    d = np.arange(8)
    rules = {"temporal_stride": stride}
    t = np.asarray(
        compare_schemes([_one_pair()], rules=rules, video_frames=2, decay_extent=8).rows[0].curve("t").scores
    )
    np.testing.assert_allclose(t, np.cos(stride * d), atol=1e-6)
    assert np.abs(t - np.cos(d)).max() > 0.5


def test_the_triton_kernel_measures_what_the_torch_path_does(monkeypatch) -> None:
    """``backend="triton"`` (the kernel, interpreted on CPU) gives the torch path's statuses, and score
    differences within float rounding of the scores' scale."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    sizes = {"video_frames": 2, "decay_extent": 3}
    torch_row = compare_schemes(["videorope"], **sizes).rows[0]
    triton_row = compare_schemes(["videorope"], backend="triton", **sizes).rows[0]
    for a, b in zip(torch_row.checks, triton_row.checks, strict=True):
        assert a.status == b.status, (a, b)
        gap_a, gap_b = a.measured["max_score_difference"], b.measured["max_score_difference"]
        assert abs(gap_a - gap_b) <= 1e-4 * max(1.0, gap_a), (a.name, gap_a, gap_b)
    for a, b in zip(torch_row.decay, triton_row.decay, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)


def test_fractional_positions_are_scored_as_they_are() -> None:
    """Float ids (a fractional stride) reach the rotation untruncated: one pair at frequency 1 on t, q = k
    = (1, 1), tokens at t = 0 and 0.5: the score between them is ``2 cos(0.5)`` (truncated to 0 it would
    be 2)."""
    spec = _one_pair().spec
    ids = np.array([[0.0, 0.5], [0.0, 0.0], [0.0, 0.0]])
    ones = torch.ones(2, 1, 2, dtype=torch.float64)
    scores = rope_scores(ids, spec, ones, ones)
    assert float(scores[0, 0, 1]) == pytest.approx(2 * np.cos(0.5), abs=1e-6)


def _hand_curves(model: str, d: np.ndarray) -> dict[str, np.ndarray]:
    c = np.cos
    if model == "qwen2-vl":
        w = _omega(1e6, 128)
        return {
            "t": (c(np.outer(d, w[:16])).sum(1) + 48) / 64,
            "h": (c(np.outer(d, w[16:40])).sum(1) + 40) / 64,
            "w": (c(np.outer(d, w[40:64])).sum(1) + 40) / 64,
        }
    if model == "videorope":
        w = _omega(1e6, 128)
        return {
            "t": c(np.outer(2 * d, w)).mean(1),
            "h": (c(np.outer(d, w[0:48:2])).sum(1) + 40) / 64,
            "w": (c(np.outer(d, w[1:48:2])).sum(1) + 40) / 64,
        }
    w = _omega(5e6, 128)  # mhrope
    spatial = (5 + 3 * c(np.outer(d, w)).mean(1)) / 8
    return {"h": spatial, "w": spatial}


@pytest.mark.parametrize("model", ["qwen2-vl", "videorope", "mhrope"])
def test_decay_curves_equal_the_hand_derivation(model: str) -> None:
    """Each axis's measured curve equals the one derived from the published rule (module docstring);
    negative control: the other scheme's derivation does not fit (VideoRoPE's diagonal frame step against
    Qwen2-VL's)."""
    d = np.arange(12)
    row = compare_schemes([model], video_frames=2, decay_extent=12).row(get_family(model).name)
    want = _hand_curves(model, d)
    for axis, curve in want.items():
        np.testing.assert_allclose(row.curve(axis).scores, curve, atol=1e-6, err_msg=f"{model} along {axis}")
    if model != "mhrope":
        other = _hand_curves("videorope" if model == "qwen2-vl" else "qwen2-vl", d)
        assert np.abs(np.asarray(row.curve("t").scores) - other["t"]).max() > 1e-2


EXPECTED = {
    # shift: offset and diagonal layouts move every coordinate of a prompt by the shift; spatial reset
    # (mrope_i.py:104-132) keeps image h, w at 0.. while the text after it moves: relative h, w change.
    # crop: under crop="reset" a crop's tokens differ from the region of the whole image by one constant
    # per axis (diagonal: the centre offset (H' - 1) // 2 changes, by a constant too): equal scores.
    # tiles: tiles="global" gives tile tokens their untiled coordinates in every scheme.
    # frames: "index" time (Qwen2-VL, VideoRoPE) puts patch 2k of the 2 fps video at 2k strides, patch k
    # of the 1 fps one at k; "timestamps" (Qwen3-VL-based) starts each patch's block after the tokens
    # before it; "seconds" (Qwen2.5-VL: t = i * seconds_per_patch * 2) gives both 4k.
    "qwen2-vl": {"shift": "pass", "crop": "pass", "tiles": "pass", "frames": "fail"},
    "qwen2.5-vl": {"shift": "pass", "crop": "pass", "tiles": "pass", "frames": "pass"},
    "mrope-interleave": {"shift": "fail", "crop": "pass", "tiles": "pass", "frames": "fail"},
    "mhrope": {"shift": "fail", "crop": "pass", "tiles": "pass", "frames": "fail"},
    "videorope": {"shift": "pass", "crop": "pass", "tiles": "pass", "frames": "fail"},
}


def test_invariances_of_the_released_schemes_are_as_derived() -> None:
    """Every check's status as derived by hand (see EXPECTED); a pass differs by rounding only, a failure
    by whole score units."""
    comparison = compare_schemes(list(EXPECTED), **SMALL)
    for model, checks in EXPECTED.items():
        row = comparison.row(model)
        for name, status in checks.items():
            result = row.check(name)
            assert result.status == status, (model, name, result)
            gap = result.measured["max_score_difference"]
            assert (gap < 1e-4) if status == "pass" else (gap > 1.0), (model, name, gap)


def test_negative_controls_turn_the_checks() -> None:
    """The cause of each outcome, changed alone, changes it: MRoPE-Interleave with ``spatial="offset"``
    passes the shift (its reset was the cause); Qwen2-VL with ``tiles="independent"`` (each tile its own
    block) fails the tiles; VideoRoPE with ``crop="keep"`` still passes the crop (its origin shifts every
    token of the crop alike)."""
    assert (
        compare_schemes(["mrope-interleave"], rules={"spatial": "offset"}, **SMALL)
        .rows[0]
        .check("shift")
        .status
        == "pass"
    )
    assert (
        compare_schemes(["qwen2-vl"], rules={"tiles": "independent"}, **SMALL).rows[0].check("tiles").status
        == "fail"
    )
    assert (
        compare_schemes(["videorope"], rules={"crop": "keep"}, **SMALL).rows[0].check("crop").status == "pass"
    )


@pytest.mark.parametrize("frames", [4, 9])
def test_id_growth_of_a_long_video_is_as_derived(frames: int) -> None:
    """A video of ``T`` patches of 8 x 8 merged tokens, wrapped: ``64 T + 2`` tokens. Qwen2-VL
    (get_rope_index above): vision start 0, the block at 1, t up to ``T``, the end wrapper at
    ``1 + max(T - 1, 7) + 1``. VideoRoPE: t up to ``1 + 2 (T - 1)``, h up to that plus ``7 - 3``, the end
    one past the last t (lines 1574, 1596): the largest id is ``2 T + 3``."""
    comparison = compare_schemes(["qwen2-vl", "videorope"], video_frames=frames, decay_extent=2)
    tokens = 64 * frames + 2
    for model, top in (("qwen2-vl", 1 + max(frames - 1, 7) + 1), ("videorope", 2 * frames + 3)):
        row = comparison.row(model)
        assert (row.video_tokens, row.max_id) == (tokens, top)
        assert row.id_growth == pytest.approx(top / tokens)
    assert comparison.row("qwen2-vl").max_id != comparison.row("videorope").max_id  # the control


def test_every_registered_name_compares() -> None:
    """Any family or scheme name gives a row: four checks, each pass / fail with its largest score
    difference or not applicable with a reason; decay curves (where the rules lay a video out as a grid
    per frame) start at ``(rotary_dim * attention_factor ** 2 + head_dim - rotary_dim) / head_dim`` (no
    angle difference at distance 0) and stay within ``[-1, 1]`` times that. Falcon-OCR, whose rotation is
    partly a checkpoint tensor, is refused instead (tests/models/test_family_falcon_ocr.py)."""
    everything = [m for m in (*names(), *SCHEME_NAMES) if get_family(m).learned_rotary is None]
    assert [m for m in names() if m not in everything] == ["falcon-ocr"]
    comparison = compare_schemes(everything, video_frames=2, decay_extent=3)
    # a model with per-layer position sets has a row per set (circle-rope-age: circle, mrope)
    rows = [m for m in everything for _ in get_family(m).layer_sets.sets]
    assert [r.model for r in comparison.rows] == rows and len(rows) == len(everything) + 1
    for row in comparison.rows:
        assert [c.name for c in row.checks] == ["shift", "crop", "tiles", "frames"]
        for check in row.checks:
            if check.status == "not-applicable":
                assert check.reason, (row.model, check)
            else:
                assert check.measured["max_score_difference"] >= 0.0, (row.model, check)
        spec = get_family(row.model).spec
        table = pair_table(spec)
        start = (
            table.rotary_dim * table.attention_factor**2 + spec.head_dim - table.rotary_dim
        ) / spec.head_dim
        for curve in row.decay:
            assert curve.scores[0] == pytest.approx(start, abs=1e-6), (row.model, curve.axis)
            assert max(abs(s) for s in curve.scores) <= start + 1e-6
    assert len(comparison.rows[0].decay) == 3  # qwen2-vl has its curves: the check above ran
    back = json.loads(comparison.to_json())
    assert [r["model"] for r in back["rows"]] == rows


def test_a_scheme_with_position_sets_has_a_row_per_set() -> None:
    """circle-rope-age (Circle-RoPE's AGE, strategy 4: lose4578/CircleRoPE at 063fb2c,
    code/modular_qwen2_5_vl_circle_rope.py:17-27) rotates even layers by the circle set and odd ones by
    Qwen2.5-VL's own M-RoPE index (``_get_m_index``, :76-84): a designer sees each set as the layers that
    read it do, so the circle row measures what circle-rope does and the mrope row what qwen2.5-vl does
    (the same spec, Qwen2.5-VL's), each with a note naming its layers; the two rows differ (the control)."""
    comparison = compare_schemes(["circle-rope-age", "circle-rope", "qwen2.5-vl"], **SMALL)
    assert [r.label for r in comparison.rows] == [
        "circle-rope-age [circle]",
        "circle-rope-age [mrope]",
        "circle-rope",
        "qwen2.5-vl",
    ]
    for name, same in (("circle", "circle-rope"), ("mrope", "qwen2.5-vl")):
        row, want = comparison.row("circle-rope-age", name), comparison.row(same)
        assert row.position_set == name and want.position_set is None
        assert row.checks == want.checks and row.decay == want.decay
        assert (row.video_tokens, row.max_id) == (want.video_tokens, want.max_id)
        layers = "[0]" if name == "circle" else "[1]"
        assert row.notes[0] == (
            f"position set {name!r}: layers {layers} of every 2 read it (pattern ['circle', 'mrope'])"
        )
        assert row.notes[1:] == want.notes
    circle, m = comparison.rows[0], comparison.rows[1]
    assert circle.check("crop").status == "fail" and m.check("crop").status == "pass"  # the control
    with pytest.raises(KeyError, match=r"a row per position set \['circle', 'mrope'\]: name one"):
        comparison.row("circle-rope-age")
    assert [r["position_set"] for r in json.loads(comparison.to_json())["rows"]] == [
        "circle",
        "mrope",
        None,
        None,
    ]
    table = comparison.table().splitlines()
    assert table[1].startswith("circle-rope-age [circle]") and table[2].startswith("circle-rope-age [mrope]")


def test_a_nope_layer_has_no_row() -> None:
    """A model whose every fourth layer has no rotary: one row, its rotary set's, whose note says the
    "nope" layers rotate nothing; the set's measures are the model's own (its overrides are none)."""
    family = get_family("qwen2.5-vl").replace(
        name="local-rope-global-nope", layer_sets=LayerSets({"rope": {}}, ("rope", "rope", "rope", "nope"))
    )
    comparison = compare_schemes([family, "qwen2.5-vl"], **SMALL)
    row, plain = comparison.rows
    assert row.label == "local-rope-global-nope [rope]" and "'nope' layers rotate nothing" in row.notes[0]
    assert "layers [0, 1, 2] of every 4" in row.notes[0]
    assert row.checks == plain.checks and row.decay == plain.decay


def test_table_and_bad_input() -> None:
    """The table has a line per scheme naming each check's status and score difference; bad sizes and
    unknown names are LayoutErrors saying what was expected."""
    table = compare_schemes(["qwen2-vl", "mrope-i"], **SMALL).table()
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["scheme", "shift", "crop", "tiles", "frames"]
    assert lines[1].startswith("qwen2-vl") and "fail" in lines[1]
    assert lines[2].startswith("mrope-interleave") and lines[2].split()[1] == "fail"
    with pytest.raises(LayoutError, match="decay_extent must be an int >= 1; got 0"):
        compare_schemes(["qwen2-vl"], decay_extent=0)
    with pytest.raises(LayoutError, match="unknown model 'nope'"):
        compare_schemes(["nope"])
    with pytest.raises(LayoutError, match="models is empty"):
        compare_schemes([])
