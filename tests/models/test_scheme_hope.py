"""HoPE against its authors' code: hrlics/HoPE at 85b76c0, modeling_hope.py (paper: Li et al., "HoPE: Hybrid
of Position Embedding for Long Context Vision-Language Models", NeurIPS 2025, arXiv 2505.20444).

The authors' file is transformers 4.45.2's Qwen2-VL modeling with their changes (README.md:51-55):

- positions, ``get_dynamic_rope_index`` (:1539-1661), is VideoRoPE's ``get_t_scale_rope_index`` line for
  line (VideoRoPE's modeling_videorope.py:1507-1626, written out in ``test_schemes.videorope_index``) but
  for the scale, drawn per image or video by ``random.choice(scale_factors)`` (:1617-1620): a list of one
  user-chosen scale at inference (:2366-2369), 0.75 in their V-NIAH evaluation
  (vision_niah/eval_vision_niah.py:193-195), ``[0.5, 0.75, 1.0, 1.25, 1.5]`` in training (:2257);
- rotation, ``apply_hybrid_multimodal_rotary_pos_emb`` (:266-293), is VideoRoPE's
  ``apply_m_modify_multimodal_rotary_pos_emb`` with the t sections ones and zeros (:285-288), written out
  in ``test_schemes.videorope_cos_sin(nope_t=True)``.

Each check has a negative control.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import torch
from test_schemes import (
    COS_SIN,
    _check_rotation,
    _ids,
    _prompt,
    _tokenizer,
    rope_index_of,
    videorope_cos_sin,
    videorope_index,
)

import mrope
from mrope import RopeSpec
from mrope._cli import main
from mrope.models import get_family
from mrope.ops import pair_table

SEEDS = range(12)
TRAINING_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)  # modeling_hope.py:2257

hope_cos_sin = functools.partial(videorope_cos_sin, nope_t=True)


def hope_index(pos: mrope.Positions, rules: mrope.LayoutRules, scale: float):
    """``get_dynamic_rope_index`` with ``scale_factors=[scale]`` (inference): one row, no padding."""
    args = (pos.input_ids, pos.image_grid_thw, pos.video_grid_thw, _ids(rules))
    return videorope_index(*args, scale_factor=random.choice([scale]))


# ------------------------------------------------------------------------ positions


@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_authors_code(seed) -> None:
    """The scheme by name (scale 0.75): float32 positions from the builder and from token ids equal the
    authors' float32 positions bit for bit (0.75 is a multiple of a power of two: every sum is exact), and
    the delta (one past the last t) equals theirs."""
    rules = get_family("hope").rules
    pos = mrope.build_positions(_prompt(seed), model="hope", tokenizer=_tokenizer)
    want, delta = hope_index(pos, rules, 0.75)
    assert pos.ids.dtype == np.float32
    np.testing.assert_array_equal(pos.ids, want.numpy())
    assert pos.delta == delta
    got, deltas = rope_index_of(pos, model="hope")
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got[:, 0].numpy(), want.numpy())
    assert deltas.tolist() == [[delta]]


@pytest.mark.parametrize("scale", TRAINING_SCALES)
def test_every_training_scale_is_a_parameter(scale) -> None:
    """Each scale the authors train with, given as ``rules={"temporal_stride": s}``, equals their code at
    that scale (1.0: whole numbers, so int64 positions with the same values)."""
    overrides = {"temporal_stride": scale}
    rules = get_family("hope").rules.replace(**overrides)
    for seed in range(6):
        pos = mrope.build_positions(_prompt(seed), model="hope", rules=overrides, tokenizer=_tokenizer)
        want, delta = hope_index(pos, rules, scale)
        assert pos.ids.dtype == (np.int64 if scale == 1.0 else np.float32)
        np.testing.assert_array_equal(pos.ids, want.numpy())
        got, deltas = rope_index_of(pos, model="hope", rules=overrides)
        np.testing.assert_array_equal(got[:, 0].numpy(), want.numpy())
        assert pos.delta == delta and deltas.tolist() == [[delta]]


def test_negative_controls_of_the_positions() -> None:
    """The reference tells scales apart: VideoRoPE's scale 2 (the scheme without DTS) and a training draw
    per video differ from HoPE's inference scale wherever a video has two frames or more."""
    rules = get_family("hope").rules
    videos = 0
    for seed in SEEDS:
        prompt = _prompt(seed)
        if not any(isinstance(s, mrope.Video) and s.grid[0] > 1 for s in prompt):
            continue
        videos += 1
        pos = mrope.build_positions(prompt, model="hope", tokenizer=_tokenizer)
        other = mrope.build_positions(prompt, model="videorope", tokenizer=_tokenizer)
        assert not np.array_equal(other.ids, hope_index(pos, rules, 0.75)[0].numpy())
        assert not np.array_equal(pos.ids, hope_index(pos, rules, 1.5)[0].numpy())
    assert videos >= 3


def test_batch_and_packing_rows_equal_the_authors_code() -> None:
    prompts = [_prompt(s) for s in range(4)]
    rules = get_family("hope").rules
    batch = mrope.build_batch(prompts, model="hope", tokenizer=_tokenizer)
    assert batch.ids.dtype == np.float32
    for row, prompt in enumerate(prompts):
        pos = mrope.build_positions(prompt, model="hope", tokenizer=_tokenizer)
        valid = batch.attention_mask[row].astype(bool)
        np.testing.assert_array_equal(batch.ids[:, row][:, valid], hope_index(pos, rules, 0.75)[0].numpy())
    packed = mrope.pack(prompts[:3], model="hope", max_length=4096)
    for row in packed.rows:
        for k, sample in enumerate(row.samples):
            a, b = int(row.cu_seqlens[k]), int(row.cu_seqlens[k + 1])
            pos = mrope.build_positions(prompts[sample], model="hope")
            want, delta = hope_index(pos, rules, 0.75)
            np.testing.assert_array_equal(row.position_ids[1:, a:b], want.numpy())
            assert float(row.deltas[k]) == delta


def test_cli_positions_by_name(tmp_path, capsys) -> None:
    out = tmp_path / "p.npy"
    args = ["positions", "--model", "hope", "--text", "3", "--video-grid", "3,4,6", "--text", "2"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    segs = [mrope.Text(3), mrope.Video(grid=(3, 4, 6)), mrope.Text(2)]
    pos = mrope.build_positions(segs, model="hope")
    want, _ = hope_index(pos, get_family("hope").rules, 0.75)
    np.testing.assert_array_equal(np.load(out), want.numpy())


# ------------------------------------------------------------------------ rotation


def test_the_spec_marks_t_frequencies_nope() -> None:
    """``nope_axes=(0,)`` on ``hw_alternating``: the lowest 16 frequencies (t's) are NoPE pairs (row -1)
    in the axis map and the pair table; h and w keep VideoRoPE's rows."""
    spec = get_family("hope").spec
    video = get_family("videorope").spec
    rows = pair_table(spec).rows
    assert rows.tolist() == [-1 if a == 0 else int(a) for a in video.axis_map()]
    assert (rows[48:] == -1).all() and (rows[:48] >= 1).all()
    assert RopeSpec.from_json(spec.to_json()) == spec and spec.to_dict()["nope_axes"] == [0]


@pytest.mark.parametrize("seed", range(4))
def test_rotation_equals_the_authors_code(seed, monkeypatch) -> None:
    """cos / sin equal the authors' bit for bit (cos 1 and sin 0 on every t channel), and the torch path
    rotates q and k as they do."""
    spec = get_family("hope").spec
    positions = torch.from_numpy(mrope.build_positions(_prompt(seed), model="hope", tokenizer=_tokenizer).ids)
    cos_ref, sin_ref = hope_cos_sin(positions, spec.theta)
    cos, sin = mrope.cos_sin(positions, spec)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    assert bool((cos[:, 48:64] == 1).all() and (sin[:, 112:] == 0).all())
    monkeypatch.setitem(COS_SIN, "hope", hope_cos_sin)
    _check_rotation("hope", positions, seed, "torch")


def test_the_triton_kernel_rotates_as_the_authors_do(monkeypatch) -> None:
    """The Triton kernel (interpreted on the CPU) reads the NoPE pairs from the spec's table."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(COS_SIN, "hope", hope_cos_sin)
    segs = [mrope.Text(3), mrope.Video(grid=(3, 6, 8)), mrope.Text(2)]
    _check_rotation("hope", torch.from_numpy(mrope.build_positions(segs, model="hope").ids), 1, "triton")


def test_nope_pairs_stay_put_in_exact_precision_and_rerotation() -> None:
    """NoPE pairs are left as they are at any position: in ``"exact"`` angle precision (int64 positions
    below 2**40) and when cached keys move to new positions (``rerotate``)."""
    spec = get_family("hope").spec
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 2, 128, generator=gen), torch.randn(5, 2, 128, generator=gen)
    far = torch.randint(0, 2**40, (3, 5), generator=gen)
    qr, kr = mrope.apply_mrope(q, k, far, spec, angle_precision="exact")
    t_channels = [*range(48, 64), *range(112, 128)]
    assert torch.equal(qr[..., t_channels], q[..., t_channels]) and torch.equal(
        kr[..., t_channels], k[..., t_channels]
    )
    assert not torch.allclose(qr[..., :48], q[..., :48])
    near, shifted = torch.arange(15).reshape(3, 5), torch.arange(15).reshape(3, 5) + 1000
    _, k_near = mrope.apply_mrope(q, k, near, spec)
    moved = mrope.rerotate(k_near.clone(), near, shifted, spec)
    _, k_shifted = mrope.apply_mrope(q, k, shifted, spec)
    torch.testing.assert_close(moved, k_shifted, atol=1e-4, rtol=0)
    assert torch.equal(moved[..., t_channels], k[..., t_channels])


def test_negative_controls_of_the_rotation() -> None:
    """VideoRoPE's spec (t rotating) is not HoPE's rotation, nor HoPE's VideoRoPE's: their sines differ
    on the t channels by ``sin(t * inv_freq)``, above 1e-4 from t ~ 10 on (these are the lowest rates)."""
    pos = torch.from_numpy(mrope.build_positions(_prompt(3), model="hope", tokenizer=_tokenizer).ids)
    theta = get_family("hope").spec.theta
    video_sin = mrope.cos_sin(pos, get_family("videorope").spec)[1]
    assert not torch.allclose(video_sin, hope_cos_sin(pos, theta)[1], atol=1e-4)
    hope_sin = mrope.cos_sin(pos, get_family("hope").spec)[1]
    assert not torch.allclose(hope_sin, videorope_cos_sin(pos, theta)[1], atol=1e-4)


@pytest.mark.parametrize(
    ("nope_axes", "match"),
    [
        ((3,), r"distinct axis indices in \[0, 3\)"),
        ((0, 0), "distinct axis indices"),
        ((True,), "distinct axis indices"),
        ("t", "a sequence of axis indices"),
    ],
)
def test_nope_axes_refusals(nope_axes, match) -> None:
    with pytest.raises(mrope.MRopeError, match=match):
        RopeSpec(nope_axes=nope_axes)


def test_nope_axes_refuse_dynamic_ntk() -> None:
    with pytest.raises(mrope.MRopeError, match="other than 'dynamic'"):
        RopeSpec(nope_axes=(0,)).with_scaling(type="dynamic", factor=2.0, original_max_position_embeddings=64)
