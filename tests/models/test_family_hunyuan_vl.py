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
from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLConfig, HunYuanVLTextConfig
from transformers.models.hunyuan_vl.modeling_hunyuan_vl import (
    HunYuanVLModel,
    HunYuanVLRotaryEmbedding,
    rotate_half,
)

import mrope
from mrope import Image, Text, TokenError, Video, build_batch, build_positions
from mrope._errors import LayoutError
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.models import get_family

IMAGE, START, END = 120120, 120118, 120119
FAMILY = get_family("tencent/HunyuanOCR")
RULES = FAMILY.rules


def test_family_values_are_the_configs() -> None:
    config = HunYuanVLConfig()
    assert (RULES.image_pad_id, RULES.vision_start_id, RULES.vision_end_id) == (
        config.image_token_id,
        config.im_start_id,
        config.im_end_id,
    )
    assert RULES.merge_size == config.vision_config.spatial_merge_size
    assert FAMILY.rules_for("transformers5").image_index_scope == "batch"


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
        torch.from_numpy((ids == IMAGE) * mask),  # the processor's types: every placeholder is 1
        torch.from_numpy(grids),
        torch.from_numpy(mask),
    )
    return pos.numpy(), deltas.numpy()[:, 0]


@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_transformers(side: str) -> None:
    rng = np.random.default_rng(31 if side == "left" else 32)
    shim = _Shim([16, 16, 16, 16])
    batch_rules = FAMILY.rules_for("transformers5")
    for _ in range(5):
        samples = [_sample(rng) for _ in range(3)]
        grids = np.concatenate([build_positions(s, rules=RULES).image_grid_thw for s in samples])
        # 5.24 counts images across the batch
        batch = build_batch(samples, rules=batch_rules, padding_side=side)
        want, want_deltas = _call(shim, batch.input_ids, batch.attention_mask, grids)
        np.testing.assert_array_equal(batch.ids, want)
        np.testing.assert_array_equal(
            batch.mm_token_type_ids, (batch.input_ids == IMAGE) * batch.attention_mask
        )
        got, deltas = rope_index(
            batch.input_ids, grids, None, batch.attention_mask, rules=batch_rules, pad_position=0
        )
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(deltas, want_deltas)
        # the released layout: the index restarts in every sequence = 5.24 run on each row alone
        batch = build_batch(samples, rules=RULES, padding_side=side)
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


# the released text config's rotary (HunyuanOCR config.json: head_dim 128, rope_theta 1e4, rope_scaling
# {"type": "dynamic", "alpha": 1000, "xdrope_section": [16, 16, 16, 16]}), in 5.24's normalised form
RELEASED_TEXT = {
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "head_dim": 128,
    "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
}


RELEASED_CONFIG = {  # HunyuanOCR's flat config.json shape (4.x rope_scaling with the xdrope section)
    "model_type": "hunyuan_vl",
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "head_dim": 128,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "xdrope_section": [16, 16, 16, 16]},
}


def test_rotary_from_config_is_the_official_xdrope() -> None:
    """Frequencies: 5.24's own NTK-alpha. Layout: Tencent's xdrope apply written out (the section list
    repeated for the two halves of ``cat(f, f)``, then ``rotate_half``), not 5.24's recomposition."""
    text = HunYuanVLTextConfig(
        **{
            **RELEASED_TEXT,
            "rope_parameters": {**RELEASED_TEXT["rope_parameters"], "mrope_section": [16] * 4},
        }
    )
    rotary = HunYuanVLRotaryEmbedding(text)
    assert rotary.rope_type == "ntk_alpha"
    p = build_positions([Text(3), Image((1, 4, 6)), Text(2), Image((1, 2, 2))], rules=RULES)
    positions = torch.from_numpy(p.ids)  # [4, T]
    n = positions.shape[1]
    freqs = positions[..., None].float() * rotary.inv_freq  # [4, T, 64]
    emb = torch.cat([freqs, freqs], dim=-1)  # [4, T, 128]
    chunks = emb.split([16] * 8, dim=-1)
    emb = torch.cat([chunk[i % 4] for i, chunk in enumerate(chunks)], dim=-1)  # official: section * 2
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(n, 4, 128, generator=gen), torch.randn(n, 2, 128, generator=gen)
    want_q, want_k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    spec = mrope.models.spec_from_config(RELEASED_CONFIG)
    assert spec == FAMILY.spec
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, backend="torch")
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)
    # 5.24's recomposition differs on the image tokens (axis 0 with axis 2 in one pair): not followed
    cos524, _ = rotary(q, positions[:, None, :])
    image = [i for i, s in enumerate(p.spans) if s.grid is not None][0]
    a = p.spans[image].start
    assert not torch.allclose(cos524[0, a], emb.cos()[a])


def test_segments_give_the_processors_placeholders() -> None:
    """HunYuanVLProcessor's own expansion (``cat_extra_token`` on, as released), inside the start / end
    tokens its chat template writes."""
    from types import SimpleNamespace

    from support.special_text import encode_specials
    from transformers.models.hunyuan_vl.processing_hunyuan_vl import HunYuanVLProcessor

    proc = object.__new__(HunYuanVLProcessor)
    proc.image_token, proc.cat_extra_token = "<image>", True
    proc.image_processor = SimpleNamespace(merge_size=2, spatial_patch_size=1)
    for grid in [(1, 4, 6), (1, 10, 2)]:
        text = proc.replace_image_token({"image_grid_thw": np.array([grid])}, 0)
        p = build_positions([Image(grid)], rules=RULES)
        assert p.input_ids.tolist() == [START, *encode_specials(text, {"<image>": IMAGE}), END]


def test_decode_window_has_four_axes() -> None:
    p = build_positions([Text(2), Image((1, 2, 2)), Text(1)], rules=RULES)
    w = p.window(p.num_tokens - 1, p.num_tokens + 2)
    assert w.shape == (4, 3) and (w[:, 1:] == np.arange(p.num_tokens, p.num_tokens + 2) + p.delta).all()


def test_image_sizing_equals_the_image_processor() -> None:
    """mrope.media sizes an image as the family's own image processor (Pillow backend, class defaults)."""
    from PIL import Image as PILImage
    from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import HunYuanVLImageProcessorPil

    from mrope.media import image_grid

    proc = HunYuanVLImageProcessorPil()
    for h, w in [(300, 400), (1080, 1920), (2600, 2000), (50, 70)]:
        want = proc(images=[PILImage.new("RGB", (w, h))], return_tensors="np")["image_grid_thw"][0].tolist()
        assert list(image_grid(h, w, model=FAMILY.name)) == want, (h, w)
