"""HY-V4-VL: a newline token ends every merged row; each video frame is a block of its own.

Expected values: the installed transformers' own ``HYV4VLModel.get_rope_index`` (bound to a minimal object
holding the class-default config: spatial merge 2, image 120120, video 120124; 5.24 and 5.25 hold the same
code), its rotary (5.24 ``apply_rotary_pos_emb``, 5.25 ``apply_rotary_pos_emb_interleave``: one rotation
written in two channel orders), and the worked example in its docstring written out by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from support.hf_reference import hy_v4_vl_apply
from transformers.models.hy_v4_vl import modeling_hy_v4_vl
from transformers.models.hy_v4_vl.configuration_hy_v4_vl import HYV4VLConfig, HYV4VLTextConfig
from transformers.models.hy_v4_vl.modeling_hy_v4_vl import HYV4VLModel, HYV4VLRotaryEmbedding

import mrope
from mrope import Image, Text, TokenError, Video, build_batch, build_positions, count_tokens
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.models import get_family

IMAGE, VIDEO = 120120, 120124
FAMILY = get_family("hy_v4_vl")
RULES = FAMILY.rules


def test_family_values_are_the_configs() -> None:
    config = HYV4VLConfig()
    assert (RULES.image_pad_id, RULES.video_pad_id) == (config.image_token_id, config.video_token_id)
    assert RULES.merge_size == config.vision_config.spatial_merge_size
    assert FAMILY.rules_for("transformers5") == RULES and RULES.pad_position == 0


class _Shim:
    get_rope_index = HYV4VLModel.get_rope_index
    get_vision_position_ids = HYV4VLModel.get_vision_position_ids

    def __init__(self) -> None:
        self.config = HYV4VLConfig()


def _sample(rng: np.random.Generator) -> list:
    segments: list = [Text(int(rng.integers(1, 5)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = (2 * int(v) for v in rng.integers(1, 4, 2))
        if rng.random() < 0.5:
            segments.append(Image((1, h, w)))
        else:
            segments.append(Video((int(rng.integers(1, 4)), h, w)))
        segments.append(Text(int(rng.integers(0, 4))))
    return segments


@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_transformers(side: str) -> None:
    rng = np.random.default_rng(21 if side == "left" else 22)
    shim = _Shim()
    for _ in range(6):
        samples = [_sample(rng) for _ in range(3)]
        batch = build_batch(samples, rules=RULES, padding_side=side)
        images = np.concatenate([p.image_grid_thw for p in batch.sequences])
        videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
        types = ((batch.input_ids == IMAGE) + 2 * (batch.input_ids == VIDEO)) * batch.attention_mask
        want, want_deltas = shim.get_rope_index(
            torch.from_numpy(batch.input_ids),
            torch.from_numpy(types),
            torch.from_numpy(images) if len(images) else None,
            torch.from_numpy(videos) if len(videos) else None,
            torch.from_numpy(batch.attention_mask),
        )
        np.testing.assert_array_equal(batch.ids, want.numpy())
        np.testing.assert_array_equal(batch.deltas, want_deltas.numpy()[:, 0])
        for kwargs in ({"mm_token_type_ids": types}, {}):
            got, deltas = rope_index(
                batch.input_ids, images, videos, batch.attention_mask, rules=RULES, **kwargs
            )
            np.testing.assert_array_equal(got, want.numpy())
            np.testing.assert_array_equal(deltas, want_deltas.numpy()[:, 0])
        assert [count_tokens(s, rules=RULES) for s in samples] == [p.num_tokens for p in batch.sequences]


def test_docstring_example_by_hand() -> None:
    # 2 frames of 2x2 merged tokens: 2 x 3 tokens per frame (newline column), blocks of max(2, 3) = 3
    p = build_positions([Video((2, 4, 4), wrap=False), Text(1)], rules=RULES)
    want = [
        [0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 3, 6],
        [0, 0, 0, 1, 1, 1, 3, 3, 3, 4, 4, 4, 6],
        [0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 6],
    ]
    np.testing.assert_array_equal(p.ids, want)
    assert p.delta == 7 - 13


def test_run_that_misses_the_newline_column_is_refused() -> None:
    with pytest.raises(TokenError, match="needs 6 placeholder tokens"):
        rope_index(np.full((1, 4), IMAGE), [[1, 4, 4]], rules=RULES)


RELEASED_CONFIG = {
    "model_type": "hy_v4_vl",
    "text_config": {
        "model_type": "hy_v4_vl_text",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [12, 10, 10]},
    },
}


def test_rotary_from_config_rotates_like_the_model() -> None:
    # the class-default text config is the released rotary: a 64-channel rope slice (theta 1e4, interleaved
    # [12, 10, 10], adjacent pairs) after 192 pass-through channels of the 256-channel query and key
    text = HYV4VLTextConfig()
    assert (text.qk_nope_head_dim, text.qk_rope_head_dim) == (192, 64)
    p = build_positions([Text(3), Video((3, 4, 6)), Image((1, 6, 4)), Text(2)], rules=RULES)
    positions = torch.from_numpy(p.ids)
    n = positions.shape[1]
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(n, 4, 256, generator=gen), torch.randn(n, 1, 256, generator=gen)
    cos, sin = HYV4VLRotaryEmbedding(text)(q, positions[:, None, :])
    # the attention's own split (modeling_hy_v4_vl.py:174): pass-through first, rope slice last
    rot_q, rot_k = hy_v4_vl_apply(q[None, ..., 192:], k[None, ..., 192:], cos, sin, unsqueeze_dim=2)
    want_q = torch.cat([q[..., :192], rot_q[0]], dim=-1)
    want_k = torch.cat([k[..., :192], rot_k[0]], dim=-1)
    spec = mrope.models.spec_from_config(RELEASED_CONFIG)
    assert spec == FAMILY.spec
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, backend="torch")
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)


def test_attention_scores_equal_the_installed_transformers_rotation() -> None:
    """q.k of the rope slices as the installed transformers' attention forms them (5.24:
    ``apply_rotary_pos_emb``, 5.25: ``apply_rotary_pos_emb_interleave``, each taken as it is, in its own
    channel order) equal mrope's; a negative control: t-only positions give other scores."""
    own = getattr(modeling_hy_v4_vl, "apply_rotary_pos_emb", None) or (
        modeling_hy_v4_vl.apply_rotary_pos_emb_interleave
    )
    p = build_positions([Text(2), Video((2, 4, 6)), Image((1, 6, 4)), Text(1)], rules=RULES)
    positions = torch.from_numpy(p.ids)
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 2, positions.shape[1], 64, generator=gen), torch.randn(1, 2, positions.shape[1], 64)
    cos, sin = HYV4VLRotaryEmbedding(HYV4VLTextConfig())(q, positions[:, None, :])
    rot_q, rot_k = own(q, k, cos, sin)
    want = rot_q @ rot_k.transpose(-1, -2)
    spec = dataclasses.replace(FAMILY.spec, head_dim=64, rotary_offset=0)
    got_q, got_k = mrope.apply_mrope(q, k, positions[:, None, :], spec, layout="bhsd", backend="torch")
    torch.testing.assert_close(got_q @ got_k.transpose(-1, -2), want, rtol=1e-5, atol=1e-4)
    flat = positions[:1].expand(3, -1)[:, None, :]
    wrong_q, wrong_k = mrope.apply_mrope(q, k, flat, spec, layout="bhsd", backend="torch")
    assert not torch.allclose(wrong_q @ wrong_k.transpose(-1, -2), want, rtol=1e-5, atol=1e-4)


def test_segments_give_the_processors_placeholders() -> None:
    """The processor's own expansion; the combined processor needs torchvision for its video part."""
    from types import SimpleNamespace

    from support.special_text import encode_specials
    from transformers.models.hy_v4_vl.processing_hy_v4_vl import HYV4VLProcessor

    proc = object.__new__(HYV4VLProcessor)
    proc.image_token, proc.video_token = "<|image_pad|>", "<|video_pad|>"
    proc.image_processor = proc.video_processor = SimpleNamespace(merge_size=2)
    specials = {"<|image_pad|>": IMAGE, "<|video_pad|>": VIDEO}
    for grid in [(1, 4, 6), (1, 10, 2)]:
        text = proc.replace_image_token({"image_grid_thw": np.array([grid])}, 0)
        assert build_positions([Image(grid, wrap=False)], rules=RULES).input_ids.tolist() == encode_specials(
            text, specials
        )
    for grid in [(2, 4, 4), (3, 8, 2)]:
        text = proc.replace_video_token({"video_grid_thw": np.array([grid])}, 0)
        assert build_positions([Video(grid, wrap=False)], rules=RULES).input_ids.tolist() == encode_specials(
            text, specials
        )


def test_image_sizing_equals_the_image_processor() -> None:
    """mrope.media sizes an image as the family's own image processor (Pillow backend, class defaults)."""
    from PIL import Image as PILImage
    from transformers.models.hy_v4_vl.image_processing_pil_hy_v4_vl import HYV4VLImageProcessorPil

    from mrope.media import image_grid

    proc = HYV4VLImageProcessorPil()
    for h, w in [(300, 400), (1080, 1920), (2600, 2000), (50, 70)]:
        want = proc(images=[PILImage.new("RGB", (w, h))], return_tensors="np")["image_grid_thw"][0].tolist()
        assert list(image_grid(h, w, model=FAMILY.name)) == want, (h, w)
