"""OmniRoPE and IL-RoPE against the MRoPE-Interleave authors' re-implementation of both.

Reference: JJJYmmm/Multimodal-RoPEs at cd413b9 (the survey package of Huang et al., ICLR 2026), whose README
lists "ILRoPE (arXiv 2505.05472) / OmniRoPE (arXiv 2506.18871)" as implemented: positions
``multimodal_ropes/pos_design/omnirope.py`` (IL-RoPE's ``pos_design/ilrope.py:4-5`` calls it), frequencies
``freq_allocation/mrope.py`` for OmniRoPE and ``freq_allocation/mrope_i.py`` for IL-RoPE (``entry.py:80-95``).
The papers' own code was not read. Written out below, one row, no padding; mrope must equal it on random
prompts of text, images and videos, with negative controls.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_schemes import (
    _blocks,
    _freqs,
    _ids,
    _prompt,
    _tokenizer,
    assert_rotates_as,
    grid_index,
    mrope_interleave_cos_sin,
    rope_index_of,
)

import mrope
from mrope.models import get_family

SEEDS = range(12)


def omnirope_index(input_ids, image_grid, video_grid, ids, temporal_stride: float = 1.0):
    """pos_design/omnirope.py:20-24 (a video split into one-frame blocks, as Qwen3-VL's timestamps do)
    and :48-121 (the block walk, which is mrope_i.py's, then the shifted layout): float ``[3, T]`` positions
    and the delta (:122-124)."""
    video_grid = torch.as_tensor(video_grid).reshape(-1, 3).clone()
    video_grid = torch.repeat_interleave(video_grid, video_grid[:, 0], dim=0)
    video_grid[:, 0] = 1
    tokens = [int(x) for x in input_ids]
    llm_pos_ids_list: list[torch.Tensor] = []
    walk = _blocks(tokens, ids, image_grid, video_grid)
    block = next(walk)
    st, pe_shift = 0, 0.0
    while block is not None:
        text_len, (llm_grid_t, llm_grid_h, llm_grid_w), ed = block
        if text_len > 0:
            text_pos = torch.arange(text_len).float() + pe_shift
            llm_pos_ids_list.append(text_pos.view(1, -1).expand(3, -1))
            pe_shift = float(text_pos[-1].item()) + 1
        t_index, h_index, w_index = grid_index(llm_grid_t, llm_grid_h, llm_grid_w)
        t_index = t_index * temporal_stride + pe_shift
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]))
        temporal_extent = (llm_grid_t - 1) * temporal_stride + 1
        pe_shift += max(temporal_extent, llm_grid_h, llm_grid_w)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
        block = walk.send(st)
    if st < len(tokens):
        text_pos = torch.arange(len(tokens) - st).float() + pe_shift
        llm_pos_ids_list.append(text_pos.view(1, -1).expand(3, -1))
    llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
    return llm_positions, float(llm_positions.max() + 1 - len(tokens))


def omnirope_cos_sin(positions, theta, section=(16, 24, 24)):
    """freq_allocation/mrope.py:35-56: each section of the angle table from its axis (t, h, w in turn),
    then ``cat((freqs, freqs))``: ``[T, 128]`` cos and sin."""
    freqs = _freqs(positions, theta)
    freqs = torch.cat([m[i % 3] for i, m in enumerate(freqs.split(list(section), dim=-1))], dim=-1)
    emb = torch.cat((freqs, freqs), dim=-1)[0]
    return emb.cos(), emb.sin()


def _reference(pos: mrope.Positions, name: str):
    rules = get_family(name).rules
    return omnirope_index(pos.input_ids, pos.image_grid_thw, pos.video_grid_thw, _ids(rules))


@pytest.mark.parametrize("name", ["omnirope", "il-rope"])
@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_reimplementation(name: str, seed: int) -> None:
    """The builder and the token-id interface give pos_design/omnirope.py's positions: for OmniRoPE, and
    for IL-RoPE, whose positions are the same function (so ``il-rope`` is MRoPE-Interleave's alias)."""
    pos = mrope.build_positions(_prompt(seed), model=name, tokenizer=_tokenizer)
    want, delta = _reference(pos, name)
    np.testing.assert_array_equal(pos.ids, want.numpy())
    assert pos.delta == delta
    got, deltas = rope_index_of(pos, model=name)
    np.testing.assert_array_equal(got[:, 0].numpy(), want.numpy())
    assert deltas.tolist() == [[delta]]


def test_il_rope_is_mrope_interleave() -> None:
    """configs/ilrope.py:4-28 (MRoPE-Interleave's config, spatial reset required) and entry.py:90 (its
    interleaved frequencies): one scheme under two names."""
    assert get_family("il-rope") is get_family("mrope-interleave")
    omni, interleave = get_family("omnirope").rules, get_family("mrope-interleave").rules
    assert omni.replace(name=interleave.name) == interleave


@pytest.mark.parametrize("seed", range(4))
def test_rotation_equals_the_reimplementation(seed: int) -> None:
    """cos / sin bit for bit (OmniRoPE chunked, IL-RoPE interleaved), and q, k rotated by the torch path
    as ``q * cos + rotate_half(q) * sin``."""
    pos = mrope.build_positions(_prompt(seed), model="omnirope", tokenizer=_tokenizer)
    positions = torch.from_numpy(pos.ids)
    for name, reference in (("omnirope", omnirope_cos_sin), ("il-rope", mrope_interleave_cos_sin)):
        spec = get_family(name).spec
        cos_ref, sin_ref = reference(positions, spec.theta)
        cos, sin = mrope.cos_sin(positions, spec)
        torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
        torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    omni = get_family("omnirope").spec
    assert_rotates_as(positions, omni, *omnirope_cos_sin(positions, omni.theta), "torch", seed=seed)


def test_the_triton_kernel_rotates_as_the_reimplementation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pos = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model="omnirope")
    positions, spec = torch.from_numpy(pos.ids), get_family("omnirope").spec
    assert_rotates_as(positions, spec, *omnirope_cos_sin(positions, spec.theta), "triton", seed=1)


def test_negative_controls() -> None:
    """The checks can fail: Qwen3-VL's own positions (no spatial reset) are not OmniRoPE's; a shift that
    advanced by ``max(...) + 1`` would move the text after an image; IL-RoPE's interleaved table is not
    OmniRoPE's chunked one."""
    segments = [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)]
    pos = mrope.build_positions(segments, model="omnirope")
    want, _ = _reference(pos, "omnirope")
    assert not np.array_equal(mrope.build_positions(segments, model="qwen3-vl").ids, want.numpy())
    shifted = want.clone()
    shifted[:, -2:] += 1  # the vision end and the text after it, one further
    assert not np.array_equal(pos.ids, shifted.numpy())
    positions = torch.from_numpy(pos.ids)
    theta = get_family("omnirope").spec.theta
    assert not torch.equal(
        omnirope_cos_sin(positions, theta)[0], mrope_interleave_cos_sin(positions, theta)[0]
    )
