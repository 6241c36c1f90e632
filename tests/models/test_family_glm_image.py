"""GLM-Image: prefill positions and the decode-time positions of the images it generates.

Expected values come from transformers 5.24's own ``GlmImageModel.get_rope_index`` (bound to a minimal
object holding the class-default config: the method reads only ``self.config`` and
``self.get_vision_position_ids``), including the decode cache it fills, ``_cached_decode_position_ids``,
and from its own rotary embedding and apply function.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.glm_image.configuration_glm_image import GlmImageConfig, GlmImageTextConfig
from transformers.models.glm_image.modeling_glm_image import (
    GlmImageModel,
    GlmImageTextRotaryEmbedding,
    apply_rotary_pos_emb,
)

import mrope
from mrope import Image, LayoutError, Text, TokenError, build_batch, build_positions
from mrope._token_ids import generation_index
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.models import get_family, spec_from_config

START, END, PAD = 16384, 16385, 167855  # GlmImageConfig's image start / end / placeholder ids
RULES = get_family("glm_image").rules


def test_family_ids_are_the_configs() -> None:
    config = GlmImageConfig()
    assert (RULES.vision_start_id, RULES.vision_end_id, RULES.image_pad_id) == (
        config.image_start_token_id,
        config.image_end_token_id,
        config.image_token_id,
    )
    assert RULES.merge_size == config.vision_config.spatial_merge_size == 1


class _Shim:
    """The two methods get_rope_index uses, on an object that holds only the config."""

    get_rope_index = GlmImageModel.get_rope_index
    get_vision_position_ids = GlmImageModel.get_vision_position_ids

    def __init__(self) -> None:
        self.config = GlmImageConfig()


def _sample(rng: np.random.Generator) -> tuple[list[int], list[list[int]]]:
    """Token ids of one prompt (text, source images between start / end, a trailing image start) and
    its grids: the sources, then one or two images to generate (as the processor lists them)."""
    ids: list[int] = []
    grids: list[list[int]] = []
    for _ in range(int(rng.integers(0, 3))):
        ids += rng.integers(100, 16000, int(rng.integers(1, 5))).tolist()
        h, w = (int(v) for v in rng.integers(1, 6, 2))
        # inside the wrappers the model sees image codes, not the placeholder: any ids
        ids += [START, *rng.integers(0, 16000, h * w).tolist(), END]
        grids.append([1, h, w])
    ids += rng.integers(100, 16000, int(rng.integers(1, 6))).tolist() + [START]
    for _ in range(int(rng.integers(1, 3))):
        grids.append([1, *(int(v) for v in rng.integers(1, 7, 2))])
    return ids, grids


@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_and_decode_positions_equal_transformers(side: str) -> None:
    rng = np.random.default_rng(7 if side == "left" else 8)
    shim = _Shim()
    for k in range(6):
        samples = [_sample(rng) for _ in range(1 if k < 2 else int(rng.integers(2, 4)))]
        width = max(len(s[0]) for s in samples)
        ids = np.zeros((len(samples), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, (row, _) in enumerate(samples):
            sl = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[r, sl], mask[r, sl] = row, 1
        grids = torch.tensor([g for _, gs in samples for g in gs], dtype=torch.long)
        per_sample = torch.tensor([len(gs) for _, gs in samples])
        want_pos, want_deltas = shim.get_rope_index(
            torch.from_numpy(ids), grids, per_sample, attention_mask=torch.from_numpy(mask)
        )
        got_pos, got_deltas = rope_index(ids, grids, None, mask, rules=RULES, images_per_sample=per_sample)
        np.testing.assert_array_equal(got_pos, want_pos.numpy())  # pads hold 1, as GLM-Image writes
        np.testing.assert_array_equal(got_deltas, want_deltas.numpy()[:, 0])  # always 0
        got_decode = generation_index(ids, grids, mask, rules=RULES, images_per_sample=per_sample)
        np.testing.assert_array_equal(got_decode, shim._cached_decode_position_ids.numpy())
        if len(samples) == 1:  # one row: images_per_sample may be left out (every grid is that row's)
            want_pos, _ = shim.get_rope_index(
                torch.from_numpy(ids), grids, None, attention_mask=torch.from_numpy(mask)
            )
            np.testing.assert_array_equal(
                rope_index(ids, grids, None, mask, rules=RULES)[0], want_pos.numpy()
            )
            got_decode = generation_index(ids, grids, mask, rules=RULES)
            np.testing.assert_array_equal(got_decode, shim._cached_decode_position_ids.numpy())


def test_segments_give_the_processor_layout_and_the_model_positions() -> None:
    # text-to-image: the processor lists the large target, then the small preview, after the prompt
    samples = [
        [Text(4), Image((1, 3, 5)), Text(6), Image((1, 4, 4), generate=True)],
        [Text(9), Image((1, 8, 6), generate=True), Image((1, 3, 2), generate=True)],
    ]
    shim = _Shim()
    batch = build_batch(samples, rules=RULES)
    grids, per_sample = batch.image_grid_thw, torch.from_numpy(batch.images_per_sample)
    assert per_sample.tolist() == [2, 2] and grids.tolist() == [[1, 3, 5], [1, 4, 4], [1, 8, 6], [1, 3, 2]]
    first = batch.sequences[0]
    assert first.input_ids[4] == START and first.input_ids[20] == END
    assert (first.input_ids[5:20] == PAD).all()
    want_pos, _ = shim.get_rope_index(
        torch.from_numpy(batch.input_ids),
        torch.from_numpy(grids),
        per_sample,
        attention_mask=torch.from_numpy(batch.attention_mask),
    )
    np.testing.assert_array_equal(batch.ids, want_pos.numpy())
    assert batch.deltas.tolist() == [0, 0]
    for r, p in enumerate(batch.sequences):
        cache = shim._cached_decode_position_ids[r].numpy()
        np.testing.assert_array_equal(p.generation_ids, cache[:, : p.generation_ids.shape[1]])


def test_decode_positions_by_hand() -> None:
    # prompt of 3 text tokens (positions 0..2); targets (1, 2, 3) then (1, 1, 2): the last is made first
    p = build_positions(
        [Text(3), Image((1, 2, 3), generate=True), Image((1, 1, 2), generate=True)], rules=RULES
    )
    want = [
        [3, 3, 5, 5, 5, 5, 5, 5, 8],
        [3, 3, 5, 5, 5, 6, 6, 6, 8],
        [3, 4, 5, 6, 7, 5, 6, 7, 8],
    ]
    np.testing.assert_array_equal(p.generation_ids, want)


def test_bad_input() -> None:
    with pytest.raises(LayoutError, match="after every other segment"):
        build_positions([Image((1, 2, 2), generate=True), Text(2)], rules=RULES)
    with pytest.raises(LayoutError, match="generates_images"):
        build_positions([Text(2), Image((1, 2, 2), generate=True)], model="qwen2-vl")
    ids = np.array([[5, START, 9, 9, END, 6], [5, 6, 7, 8, 9, 10]])
    with pytest.raises(TokenError, match="images_per_sample"):
        rope_index(ids, [[1, 1, 2], [1, 2, 2]], rules=RULES)
    with pytest.raises(TokenError, match="needs 4 placeholder tokens"):
        rope_index(ids[:1], [[1, 2, 2]], rules=RULES)
    with pytest.raises(TokenError, match="out of order"):
        rope_index(np.array([[5, END, 9, START]]), [[1, 1, 1]], rules=RULES)


def test_rotary_from_config_rotates_like_the_model() -> None:
    # the text config with the partial factor the 5.24 class default lacks (its own rotary cannot run
    # without it); head_dim 4096 / 32 = 128, mrope_section [8, 12, 12]
    rope = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [8, 12, 12],
    }
    text = {
        "model_type": "glm_image_text",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_parameters": rope,
    }
    spec = spec_from_config({"model_type": "glm_image", "text_config": text})
    assert spec == get_family("glm-image").spec
    p = build_positions([Text(3), Image((1, 5, 7)), Text(2), Image((1, 4, 4), generate=True)], rules=RULES)
    positions = torch.from_numpy(np.concatenate([p.ids, p.generation_ids], axis=1))
    n = positions.shape[1]
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(n, 4, 128, generator=gen), torch.randn(n, 2, 128, generator=gen)
    rotary = GlmImageTextRotaryEmbedding(
        GlmImageTextConfig(**{k_: v for k_, v in text.items() if k_ != "model_type"})
    )
    cos, sin = rotary(q, positions[:, None, :])
    want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, backend="torch")
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1), rtol=1e-5, atol=1e-5)


def test_segments_give_the_processors_placeholders() -> None:
    """GlmImageProcessor's own expansion with the checkpoint's merge 1 (the class default 2, transformers 5.24
    models/glm_image/image_processing_glm_image.py:111, contradicts its model's positions, which never merge
    the grid: modeling_glm_image.py:1028), between the start / end tokens of its template."""
    from types import SimpleNamespace

    from support.special_text import encode_specials
    from transformers.models.glm_image.processing_glm_image import GlmImageProcessor

    proc = object.__new__(GlmImageProcessor)
    proc.image_token = "<|image|>"
    proc.image_processor = SimpleNamespace(merge_size=1)
    for grid in [(1, 4, 6), (1, 3, 5)]:
        text = proc.replace_image_token({"image_grid_thw": torch.tensor([grid])}, 0)
        p = build_positions([Image(grid)], rules=RULES)
        assert p.input_ids.tolist() == [START, *encode_specials(text, {"<|image|>": PAD}), END]


def test_decode_window_follows_the_generated_images() -> None:
    p = build_positions([Text(3), Image((1, 1, 2), generate=True)], rules=RULES)
    np.testing.assert_array_equal(p.window(2, 6), [[2, 3, 3, 5], [2, 3, 3, 5], [2, 3, 4, 5]])
    with pytest.raises(LayoutError, match="decodes 3 generated tokens"):
        p.window(0, 7)


def test_huge_generation_targets_are_refused() -> None:
    with pytest.raises(TokenError, match="at most 4,194,304"):
        rope_index(np.array([[5, START]]), [[1, 100_000, 100_000]], rules=RULES)
    with pytest.raises(LayoutError, match="at most 4,194,304"):
        build_positions([Text(1), Image((1, 4096, 4096), generate=True)], rules=RULES)
