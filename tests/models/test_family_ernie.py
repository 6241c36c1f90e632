"""ERNIE-4.5-VL: video frames merged in pairs (``temporal_merge_size``), wrappers as text, its own ids.

Expected values: transformers 5.24's own ``Ernie4_5_VLMoeModel.get_rope_index`` (bound to a minimal
object holding the class-default config, whose vision config has the released merge sizes 2 and 2),
and, for the official max+1 advance that 5.24 replaces by ``s + max(H', W')``, a hand derivation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import (
    Ernie4_5_VLMoeConfig,
    Ernie4_5_VLMoeTextConfig,
)
from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import (
    Ernie4_5_VLMoeModel,
    Ernie4_5_VLMoeTextRotaryEmbedding,
    apply_rotary_pos_emb,
)

import mrope
from mrope import Image, LayoutError, Text, TokenError, Video, build_batch, build_positions
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.models import get_family

IMAGE, VIDEO = 100295, 103367
FAMILY = get_family("ernie4_5_vl_moe")
RULES = FAMILY.rules
RULES_T5 = FAMILY.rules_for("transformers5")  # 5.24's advance s + max(H', W')


def test_family_values_are_the_configs() -> None:
    config = Ernie4_5_VLMoeConfig()
    ids = (RULES.image_pad_id, RULES.video_pad_id, RULES.vision_start_id, RULES.vision_end_id)
    assert ids == (
        config.image_token_id,
        config.video_token_id,
        config.image_start_token_id,
        config.image_end_token_id,
    )
    assert (RULES.video_start_id, RULES.video_end_id) == (
        config.video_start_token_id,
        config.video_end_token_id,
    )
    assert RULES.temporal_merge_size == config.vision_config.temporal_merge_size
    assert RULES.merge_size == config.vision_config.spatial_merge_size
    assert RULES_T5.advance == "spatial" and RULES.advance == "max+1" and RULES.pad_position == 0


class _Shim:
    get_rope_index = Ernie4_5_VLMoeModel.get_rope_index
    get_vision_position_ids = Ernie4_5_VLMoeModel.get_vision_position_ids

    def __init__(self) -> None:
        self.config = Ernie4_5_VLMoeConfig()


def _sample(rng: np.random.Generator) -> list:
    segments: list = [Text(int(rng.integers(1, 5)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = (2 * int(v) for v in rng.integers(1, 4, 2))
        if rng.random() < 0.5:
            segments.append(Image((1, h, w)))
        else:  # t counts frames; pairs of frames make one LLM frame, so long videos test the advance
            segments.append(Video((2 * int(rng.integers(1, 6)), h, w)))
        segments.append(Text(int(rng.integers(0, 4))))
    return segments


def _types(input_ids: np.ndarray) -> np.ndarray:
    return (input_ids == IMAGE).astype(np.int64) + 2 * (input_ids == VIDEO)


@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_transformers(side: str) -> None:
    rng = np.random.default_rng(11 if side == "left" else 12)
    shim = _Shim()
    for _ in range(6):
        batch = build_batch(
            [_sample(rng) for _ in range(3)], rules=RULES_T5, padding_side=side, pad_position=0
        )
        images = np.concatenate([p.image_grid_thw for p in batch.sequences])
        videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
        types = _types(batch.input_ids) * batch.attention_mask
        want, want_deltas = shim.get_rope_index(
            torch.from_numpy(batch.input_ids),
            torch.from_numpy(types),
            torch.from_numpy(images) if len(images) else None,
            torch.from_numpy(videos) if len(videos) else None,
            torch.from_numpy(batch.attention_mask),
        )
        np.testing.assert_array_equal(batch.ids, want.numpy())  # segments -> the model's positions
        np.testing.assert_array_equal(batch.deltas, want_deltas.numpy()[:, 0])
        got, deltas = rope_index(
            batch.input_ids,
            images,
            videos,
            batch.attention_mask,
            rules=RULES_T5,
            mm_token_type_ids=types,
            pad_position=0,
        )
        np.testing.assert_array_equal(got, want.numpy())
        np.testing.assert_array_equal(deltas, want_deltas.numpy()[:, 0])
        # the placeholder scan finds the same runs as the type ids
        got_scan, _ = rope_index(
            batch.input_ids, images, videos, batch.attention_mask, rules=RULES_T5, pad_position=0
        )
        np.testing.assert_array_equal(got_scan, want.numpy())


def test_video_layout_and_official_advance_by_hand() -> None:
    # 1 text token; a video of 6 frames (3 merged frames) of 2x2 merged tokens; 1 text token
    p = build_positions([Text(1), Video((6, 4, 4)), Text(1)], rules=RULES)
    assert p.input_ids.tolist() == [0, 101306, *[VIDEO] * 12, 101307, 0]
    assert p.video_grid_thw.tolist() == [[6, 4, 4]]
    t = [2] * 4 + [3] * 4 + [4] * 4
    h = [2, 2, 3, 3] * 3
    w = [2, 3, 2, 3] * 3
    # the official rule resumes at max + 1 = 5; 5.24 at s + max(H', W') = 2 + 2 = 4, inside the video's time
    np.testing.assert_array_equal(p.ids, [[0, 1, *t, 5, 6], [0, 1, *h, 5, 6], [0, 1, *w, 5, 6]])
    p5 = build_positions([Text(1), Video((6, 4, 4)), Text(1)], rules=RULES_T5)
    np.testing.assert_array_equal(p5.ids[:, -2:], [[4, 5]] * 3)
    # images are not merged in time
    assert build_positions([Image((1, 4, 6), wrap=False)], rules=RULES).num_tokens == 6


def test_odd_frame_counts_are_refused() -> None:
    with pytest.raises(LayoutError, match="temporal merge size 2"):
        build_positions([Video((3, 4, 4))], rules=RULES)
    with pytest.raises(TokenError, match="temporal merge size 2"):
        rope_index(np.full((1, 4), VIDEO), None, [[3, 4, 4]], rules=RULES)


RELEASED_CONFIG = {
    "model_type": "ernie4_5_vl_moe",
    "text_config": {
        "model_type": "ernie4_5_vl_moe_text",
        "hidden_size": 2560,
        "num_attention_heads": 20,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [22, 22, 20]},
    },
}


def test_rotary_from_config_rotates_like_the_model() -> None:
    # class-default text config = the released rotary: theta 5e5, head_dim 128, mrope_section (22, 22, 20)
    spec = mrope.models.spec_from_config(RELEASED_CONFIG)
    assert spec == FAMILY.spec
    p = build_positions([Text(3), Video((8, 6, 4)), Image((1, 4, 8)), Text(2)], rules=RULES)
    positions = torch.from_numpy(p.ids)
    n = positions.shape[1]
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(n, 4, 128, generator=gen), torch.randn(n, 2, 128, generator=gen)
    cos, sin = Ernie4_5_VLMoeTextRotaryEmbedding(Ernie4_5_VLMoeTextConfig())(q, positions[:, None, :])
    want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, backend="torch")
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1), rtol=1e-5, atol=1e-5)


def test_segments_give_the_processors_placeholders() -> None:
    """The processor's own expansion (``replace_image_token`` / ``replace_video_token``) between the
    wrappers its chat template writes; the combined processor needs torchvision for its video part."""
    from types import SimpleNamespace

    from support.special_text import encode_specials
    from transformers.models.ernie4_5_vl_moe.processing_ernie4_5_vl_moe import Ernie4_5_VLMoeProcessor

    proc = object.__new__(Ernie4_5_VLMoeProcessor)
    proc.image_token, proc.video_token = "<|IMAGE_PLACEHOLDER|>", "<|VIDEO_PLACEHOLDER|>"
    proc.image_processor = SimpleNamespace(merge_size=2)
    proc.video_processor = SimpleNamespace(merge_size=2, temporal_patch_size=2)
    specials = {"<|IMAGE_PLACEHOLDER|>": IMAGE, "<|VIDEO_PLACEHOLDER|>": VIDEO}
    for grid in [(1, 4, 6), (1, 10, 2)]:
        text = proc.replace_image_token({"image_grid_thw": np.array([grid])}, 0)
        p = build_positions([Image(grid)], rules=RULES)
        assert p.input_ids.tolist() == [
            RULES.vision_start_id,
            *encode_specials(text, specials),
            RULES.vision_end_id,
        ]
    for grid in [(2, 4, 4), (6, 8, 2)]:
        text = proc.replace_video_token({"video_grid_thw": np.array([grid])}, 0)
        p = build_positions([Video(grid)], rules=RULES)
        assert p.input_ids.tolist() == [
            RULES.video_start_id,
            *encode_specials(text, specials),
            RULES.video_end_id,
        ]


def test_image_sizing_equals_the_image_processor() -> None:
    """mrope.media sizes an image as the family's own image processor (Pillow backend, class defaults)."""
    from PIL import Image as PILImage
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil,
    )

    from mrope.media import image_grid

    proc = Ernie4_5_VLMoeImageProcessorPil()
    for h, w in [(300, 400), (1080, 1920), (2600, 2000), (50, 70)]:
        want = proc(images=[PILImage.new("RGB", (w, h))], return_tensors="np")["image_grid_thw"][0].tolist()
        assert list(image_grid(h, w, model=FAMILY.name)) == want, (h, w)
