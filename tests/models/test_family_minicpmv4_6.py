"""MiniCPM-V 4.6 (``positions_base="index"``): every token at its sequence index on all three axes.

transformers 5.24 runs it (models/minicpmv4_6/modeling_minicpmv4_6.py:734-741 hands ``position_ids=None``
to its Qwen3.5 text model, which writes ``arange`` on every axis, models/qwen3_5/modeling_qwen3_5.py:1242-1245):
checked by running that text model and reading the positions its rotary embedding receives. mlx-vlm
(Blaizzy/mlx-vlm; PyPI ``mlx-vlm`` 0.7.10) needs MLX (Apple silicon) and cannot run here; its code is written
out below in numpy:

- ``mlx_vlm/models/minicpmv4_6/minicpmv4_6.py:254-259`` (``Model._set_position_state``, called by
  ``get_input_embeddings`` at :356): ``arange(seq_len)`` broadcast to ``(3, batch, seq_len)``, deltas 0;
- ``mlx_vlm/models/minicpmv4_6/language.py:23-32`` (``LanguageModel.get_rope_index`` with an attention
  mask): ``cumsum(mask) - 1``, 1 where the mask is 0, broadcast to three axes, deltas
  ``max + 1 - seq_len``. mrope's deltas count a row's valid tokens instead (its convention for every
  family), so in a padded row they differ by the row's pad count; unpadded, both are 0.

Prompts are random text and images (each crop of a picture is one ``Image`` grid, merged 4x4 under the
default ``downsample_mode="16x"``, minicpmv4_6.py:319-321). Negative control: HunyuanOCR's ``"sequence"``
rule on the same prompts writes grids over the image tokens, and the same checks tell it apart.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextModel

from mrope import Image, Text, Video, build_batch, build_positions
from mrope._errors import LayoutError, MediaError
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.media import image_grid
from mrope.models import get_family

FAMILY = get_family("minicpmv4_6")
RULES = FAMILY.rules


def mlx_set_position_state(input_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """minicpmv4_6.py:254-259, written out: ``(3, B, L)`` positions and ``(B, 1)`` deltas."""
    batch_size, seq_len = input_ids.shape
    position_ids = np.arange(seq_len, dtype=np.int32).reshape(1, 1, -1)
    position_ids = np.broadcast_to(position_ids, (3, batch_size, seq_len))
    return position_ids, np.zeros((batch_size, 1), dtype=np.int32)


def mlx_get_rope_index(input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """language.py:23-32, written out (the attention-mask branch)."""
    position_ids = np.cumsum(attention_mask.astype(np.int64), axis=-1) - 1
    position_ids = np.where(attention_mask == 0, np.ones_like(position_ids), position_ids)
    max_position_ids = position_ids.max(axis=-1, keepdims=True)
    position_ids = np.broadcast_to(position_ids[None, :, :], (3, *position_ids.shape))
    mrope_position_deltas = max_position_ids + 1 - attention_mask.shape[-1]
    return position_ids, mrope_position_deltas


def _sample(rng: np.random.Generator) -> list:
    segments: list = [Text(int(rng.integers(1, 6)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = (4 * int(v) for v in rng.integers(1, 5, 2))
        segments += [Image((1, h, w)), Text(int(rng.integers(0, 5)))]
    return segments


def test_family_values_are_mlx_vlms() -> None:
    # minicpmv4_6/config.py:37 patch 14, :129 downsample_mode "16x" (4x4 merge, minicpmv4_6.py:319-321);
    # config.py:96-106 mrope_section [11, 11, 10], partial 0.25, theta 1e7
    assert (RULES.patch_size, RULES.merge_size, RULES.pad_position) == (14, 4, 1)
    assert FAMILY.spec.mrope_section == (11, 11, 10)
    assert FAMILY.spec.theta == 1e7
    assert FAMILY.spec.rotary_dim == FAMILY.spec.head_dim // 4


def test_positions_equal_mlx_vlm_on_random_prompts() -> None:
    rng = np.random.default_rng(46)
    for _ in range(20):
        pos = build_positions(_sample(rng), rules=RULES)
        input_ids = pos.input_ids[None]
        want, want_deltas = mlx_set_position_state(input_ids)
        np.testing.assert_array_equal(pos.ids[:, None], want)
        assert pos.delta == want_deltas[0, 0]
        n_image = int(sum(t * h * w for t, h, w in pos.image_grid_thw)) // 16
        assert int((pos.input_ids == RULES.image_pad_id).sum()) == n_image


def transformers_positions(attention_mask: np.ndarray) -> np.ndarray:
    """The ``(3, B, L)`` positions transformers 5.24's Qwen3.5 text model gives its rotary embedding when
    MiniCPM-V 4.6 passes no position ids (a one-layer model; positions do not depend on the weights)."""
    config = Qwen3_5TextConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=32,
        vocab_size=8,
        layer_types=["full_attention"],
    )
    model = Qwen3_5TextModel(config).eval()
    seen: list[torch.Tensor] = []
    model.rotary_emb.register_forward_hook(lambda _m, args, _out: seen.append(args[1].clone()))
    b, n = attention_mask.shape
    with torch.no_grad():
        model(inputs_embeds=torch.zeros(b, n, 32), attention_mask=torch.from_numpy(attention_mask))
    return seen[0].numpy()


def test_positions_equal_transformers_on_random_prompts() -> None:
    rng = np.random.default_rng(4600)
    samples = [_sample(rng) for _ in range(4)]
    for segments in samples:
        pos = build_positions(segments, rules=RULES)
        want = transformers_positions(np.ones((1, pos.num_tokens), dtype=np.int64))
        np.testing.assert_array_equal(pos.ids[:, None], want)
    # right padding: the valid tokens agree (5.24 ignores the mask, so its pads count on and a left-padded
    # row would start at its pad count)
    batch = build_batch(samples, rules=RULES, padding_side="right")
    want = transformers_positions(batch.attention_mask)
    valid = batch.attention_mask.astype(bool)
    np.testing.assert_array_equal(batch.ids[:, valid], want[:, valid])
    other = build_batch(samples, rules=RULES.replace(positions_base="sequence"), padding_side="right")
    assert not np.array_equal(other.ids[:, valid], want[:, valid])  # negative control


@pytest.mark.parametrize("side", ["left", "right"])
def test_batches_and_token_ids_equal_mlx_vlm(side: str) -> None:
    rng = np.random.default_rng(460 if side == "left" else 461)
    for _ in range(5):
        samples = [_sample(rng) for _ in range(3)]
        batch = build_batch(samples, rules=RULES, padding_side=side)
        want, want_deltas = mlx_get_rope_index(batch.input_ids, batch.attention_mask)
        np.testing.assert_array_equal(batch.ids, want)
        grids = np.concatenate([p.image_grid_thw for p in batch.sequences])
        got, deltas = rope_index(batch.input_ids, grids, None, batch.attention_mask, rules=RULES)
        np.testing.assert_array_equal(got, want)
        # mrope's deltas count a row's valid tokens (every family's convention); language.py:32 subtracts
        # the padded length, so the two differ by the row's pad count
        pads = batch.attention_mask.shape[1] - batch.attention_mask.sum(axis=1)
        np.testing.assert_array_equal(deltas, want_deltas[:, 0] + pads)
        assert (deltas == 0).all()


def test_negative_control_the_sequence_rule_differs() -> None:
    rng = np.random.default_rng(4646)
    other = RULES.replace(positions_base="sequence")
    for _ in range(5):
        segments = _sample(rng)
        pos = build_positions(segments, rules=other)
        want, _ = mlx_set_position_state(pos.input_ids[None])
        assert not np.array_equal(pos.ids[:, None], want)
        batch = build_batch([segments, _sample(rng)], rules=other)
        assert not np.array_equal(batch.ids, mlx_get_rope_index(batch.input_ids, batch.attention_mask)[0])


def test_videos_and_image_files_are_refused() -> None:
    with pytest.raises(LayoutError):
        build_positions([Text(2), Video((4, 8, 8))], rules=RULES)
    with pytest.raises(MediaError, match="tgt_sizes"):
        image_grid(448, 448, model=FAMILY)
