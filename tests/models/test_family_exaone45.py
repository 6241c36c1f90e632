"""EXAONE 4.5 (``exaone-4.5``): the sequence index on every axis; sliding-window layers rotate, global ones not.

References, all from outside mrope:

- transformers 5.24 runs here: ``Exaone4_5_Model`` gives its ``exaone4`` text model ``arange(seq_len)``
  (models/exaone4_5/modeling_exaone4_5.py:779-783), read at its rotary embedding's input; its
  ``Exaone4Config`` derives the layer types (configuration_exaone4.py:99-108) and its attention rotates a
  layer iff ``self.sliding_window is None or self.is_sliding`` (models/exaone4/modeling_exaone4.py:234,
  written out below on its own attention objects); its ``Exaone4RotaryEmbedding`` gives the cos / sin.
- NVIDIA-NeMo/Megatron-Bridge at 067f987df (Megatron cannot run here: CUDA, Transformer Engine), written out:
  the bridge sets ``position_embedding_type="rope"`` (src/megatron/bridge/models/exaone/exaone45/
  exaone45_bridge.py:92) and ``no_rope_freq`` 1 for every non-sliding layer (:77-85), so its model passes no
  position ids (modelling_exaone45/model.py:417-430) to Megatron-core's 1-D ``RotaryEmbedding``
  (modelling_exaone45/text_model.py:99-110). Megatron-core (NVIDIA/Megatron-LM at d98e8a64dd):
  ``get_freqs_non_repeated`` ``outer(arange(max_seq_len) + offset, inv_freq)``
  (megatron/core/models/common/embeddings/rotary_pos_embedding.py:79-81, :127-140, :166-168; the sequence
  length is the row's, gpt_model.py:412-420), applied as ``t * cos + rotate_half(t) * sin``
  (rope_utils.py:73-84, :142-147), skipped where ``no_rope_freq[layer]`` is 1 (transformer/attention.py:1320-1325).
- The bridge's ``get_rope_index`` (modelling_exaone45/rope.py:139-286): without grids, ``cumsum(mask) - 1``,
  pads 1 (:260-273), the family's rule on padded batches; with grids, Qwen3-VL's rule, run only under
  ``position_embedding_type="mrope"``, which the bridge never sets: written out as the negative control
  that tells the two apart on image and video prompts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from transformers import Exaone4Config
from transformers.models.exaone4.modeling_exaone4 import Exaone4Attention, Exaone4RotaryEmbedding
from transformers.models.exaone4_5.configuration_exaone4_5 import Exaone4_5_Config
from transformers.models.exaone4_5.modeling_exaone4_5 import Exaone4_5_Model

import mrope
from mrope import Image, Text, Video, build_batch, build_position_sets, build_positions, from_pretrained
from mrope._errors import LayoutError, PatchError
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.integrations import transformers as mt
from mrope.models import get_family
from mrope.ops import layer_cos_sin
from mrope.service import Settings
from mrope.service.app import create_app
from mrope.testing import tiny_model

FAMILY = get_family("exaone-4.5")
RULES = FAMILY.rules
TEXT = {
    "model_type": "exaone4",
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 128,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
}
"""A tiny EXAONE 4.5 text config (positions and layer types do not depend on the sizes)."""


def megatron_rope_positions(seq_len: int, offset: int = 0) -> np.ndarray:
    """rotary_pos_embedding.py:127-140 ``get_freqs_non_repeated``'s positions: ``arange(max_seq_len) + offset``."""
    return np.arange(seq_len, dtype=np.int64) + offset


def megatron_rotate(t: torch.Tensor, seq_len: int, dim: int, base: float) -> torch.Tensor:
    """Megatron-core's 1-D rope on ``t`` ``[s, b, h, d]``, written out: inv_freq (rotary_pos_embedding.py:79-81),
    ``outer(arange, inv_freq)`` (:127-140), ``cat((freqs, freqs))`` (:166-168), ``t * cos + rotate_half(t) *
    sin`` (rope_utils.py:73-84, :142-147; not interleaved)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    seq = torch.arange(seq_len, dtype=torch.float32)
    freqs = torch.outer(seq, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]
    x1, x2 = torch.chunk(t, 2, dim=-1)
    return t * torch.cos(emb) + torch.cat((-x2, x1), dim=-1) * torch.sin(emb)


def bridge_get_rope_index(
    input_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None,
    video_grid_thw: torch.Tensor | None,
    attention_mask: torch.Tensor,
    spatial_merge_size: int = 2,
    image_token_id: int = 67,
    video_token_id: int = 68,
    vision_start_token_id: int = 73,
) -> torch.Tensor:
    """Megatron-Bridge modelling_exaone45/rope.py:139-286 ``get_rope_index``, written out (packing branch
    :158-171 left out: no packed_seq_params)."""
    if video_grid_thw is not None:  # :154-156 one grid per frame
        video_grid_thw = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
        video_grid_thw[:, 0] = 1
    if image_grid_thw is None and video_grid_thw is None:  # :260-273
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        return position_ids.unsqueeze(0).expand(3, -1, -1)
    position_ids = torch.ones(3, *input_ids.shape, dtype=input_ids.dtype)  # :185-191
    image_index, video_index = 0, 0
    for i, sample_input_ids in enumerate(input_ids):  # :194-256
        sample_input_ids = sample_input_ids[attention_mask[i] == 1]
        vision_start_indices = torch.argwhere(sample_input_ids == vision_start_token_id).squeeze(1)
        vision_tokens = sample_input_ids[vision_start_indices + 1]
        image_nums = (vision_tokens == image_token_id).sum()
        video_nums = (vision_tokens == video_token_id).sum()
        input_tokens = sample_input_ids.tolist()
        llm_pos_ids_list: list = []
        st = 0
        remain_images, remain_videos = image_nums, video_nums
        for _ in range(image_nums + video_nums):
            ed_image = (
                input_tokens.index(image_token_id, st)
                if image_token_id in input_tokens and remain_images > 0
                else len(input_tokens) + 1
            )
            ed_video = (
                input_tokens.index(video_token_id, st)
                if video_token_id in input_tokens and remain_videos > 0
                else len(input_tokens) + 1
            )
            if ed_image < ed_video:
                t, h, w = image_grid_thw[image_index]
                image_index, remain_images, ed = image_index + 1, remain_images - 1, ed_image
            else:
                t, h, w = video_grid_thw[video_index]
                video_index, remain_videos, ed = video_index + 1, remain_videos - 1, ed_video
            gt, gh, gw = t.item(), h.item() // spatial_merge_size, w.item() // spatial_merge_size
            text_len = ed - st
            st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
            t_index = torch.arange(gt).view(-1, 1).expand(-1, gh * gw).flatten()
            h_index = torch.arange(gh).view(1, -1, 1).expand(gt, -1, gw).flatten()
            w_index = torch.arange(gw).view(1, 1, -1).expand(gt, gh, -1).flatten()
            llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + gt * gh * gw
        if st < len(input_tokens):
            st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
            llm_pos_ids_list.append(torch.arange(len(input_tokens) - st).view(1, -1).expand(3, -1) + st_idx)
        llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
        position_ids[..., i, attention_mask[i] == 1] = llm_positions
    return position_ids


def transformers_positions(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The ``[B, L]`` positions transformers 5.24's ``Exaone4_5_Model`` gives its text rotary (no position
    ids passed, as its generation step does; a tiny random model: positions do not depend on weights)."""
    vision = {"depth": 1, "hidden_size": 16, "num_heads": 2, "num_key_value_heads": 1}
    vision |= {"intermediate_size": 16, "out_hidden_size": 64, "fullatt_block_indexes": [0]}
    config = Exaone4_5_Config(text_config={**TEXT, "num_hidden_layers": 1}, vision_config=vision)
    torch.manual_seed(0)
    model = Exaone4_5_Model(config).eval()
    seen: list[torch.Tensor] = []
    model.language_model.rotary_emb.register_forward_hook(lambda _m, a, _o: seen.append(a[1].clone()))
    with torch.no_grad():
        model(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention_mask))
    return seen[0].expand(input_ids.shape[0], -1).numpy()


def _sample(rng: np.random.Generator) -> list:
    """Random text, images and videos (its processor takes both, each one run of placeholders)."""
    segments: list = [Text(int(rng.integers(1, 6)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = (2 * int(v) for v in rng.integers(1, 6, 2))
        if rng.random() < 0.5:
            segments.append(Image((1, h, w)))
        else:
            segments.append(Video((2 * int(rng.integers(1, 4)), h, w)))
        segments.append(Text(int(rng.integers(0, 5))))
    return segments


def _grids(batch, kind: str) -> np.ndarray | None:
    grids = [g for p in batch.sequences for g in getattr(p, f"{kind}_grid_thw")]
    return np.asarray(grids, dtype=np.int64).reshape(-1, 3) if grids else None


def test_family_values_are_the_sources() -> None:
    config = Exaone4_5_Config(text_config=TEXT)
    assert (RULES.image_pad_id, RULES.video_pad_id) == (config.image_token_id, config.video_token_id)
    # exaone45_bridge.py:144-145 (and exaone45_provider.py:68-69): vision start / end 73 / 74
    assert (RULES.vision_start_id, RULES.vision_end_id) == (73, 74)
    vision = config.vision_config
    assert (RULES.patch_size, RULES.merge_size, RULES.temporal_patch_size) == (
        vision.patch_size,
        vision.spatial_merge_size,
        vision.temporal_patch_size,
    )
    text = Exaone4Config()  # the class defaults the registry's layer pattern and head_dim assume
    assert FAMILY.spec.head_dim == text.hidden_size // text.num_attention_heads == FAMILY.spec.rotary_dim
    assert FAMILY.spec.theta == 1e6  # exaone45_provider.py:74 rotary_base
    sets = FAMILY.layer_sets.for_layers(text.num_hidden_layers)
    assert sets == tuple("rope" if t == "sliding_attention" else "nope" for t in text.layer_types)
    assert sets[:4] == ("rope", "rope", "rope", "nope")


def test_positions_equal_transformers_on_random_prompts() -> None:
    rng = np.random.default_rng(45)
    samples = [_sample(rng) for _ in range(4)]
    for segments in samples:
        pos = build_positions(segments, rules=RULES)
        want = transformers_positions(pos.input_ids[None], np.ones((1, pos.num_tokens), dtype=np.int64))
        np.testing.assert_array_equal(pos.ids, np.broadcast_to(want, pos.ids.shape))
        tokens = sum(int(np.prod(g)) // 4 for g in [*pos.image_grid_thw, *pos.video_grid_thw])
        # processing_exaone4_5.py:45-53: prod(grid) / merge**2 placeholders per image and per video
        assert int(np.isin(pos.input_ids, [67, 68]).sum()) == tokens
    # right padding: the valid tokens agree (transformers ignores the mask, so a left-padded row would
    # start at its pad count)
    batch = build_batch(samples, rules=RULES, padding_side="right")
    want = transformers_positions(batch.input_ids, batch.attention_mask)
    valid = batch.attention_mask.astype(bool)
    np.testing.assert_array_equal(batch.ids[:, valid], np.broadcast_to(want[valid], (3, valid.sum())))
    qwen = build_batch(samples, model="qwen2-vl", rules=RULES.to_dict() | {"positions_base": "counter"})
    assert not np.array_equal(qwen.ids[:, valid], np.broadcast_to(want[valid], (3, valid.sum())))


@pytest.mark.parametrize("side", ["left", "right"])
def test_batches_token_ids_and_the_bridge(side: str) -> None:
    rng = np.random.default_rng(450 if side == "left" else 451)
    for _ in range(4):
        samples = [_sample(rng) for _ in range(3)]
        batch = build_batch(samples, rules=RULES, padding_side=side)
        mask = torch.from_numpy(batch.attention_mask)
        want = bridge_get_rope_index(torch.from_numpy(batch.input_ids), None, None, mask).numpy()
        np.testing.assert_array_equal(batch.ids, want)
        images, videos = _grids(batch, "image"), _grids(batch, "video")
        got, deltas = rope_index(batch.input_ids, images, videos, batch.attention_mask, rules=RULES)
        np.testing.assert_array_equal(got, want)
        assert (deltas == 0).all()
        if side == "right":  # the configured rope path: arange over the row, equal at every valid token
            valid = batch.attention_mask.astype(bool)
            row = megatron_rope_positions(batch.input_ids.shape[1])
            np.testing.assert_array_equal(
                batch.ids[:, valid], np.broadcast_to(row, batch.ids.shape)[:, valid]
            )
        # negative control: the bridge's get_rope_index with grids (the unused mrope path) differs
        grid_path = bridge_get_rope_index(
            torch.from_numpy(batch.input_ids),
            None if images is None else torch.from_numpy(images),
            None if videos is None else torch.from_numpy(videos),
            mask,
        ).numpy()
        assert not np.array_equal(batch.ids, grid_path)


def test_service_face_answers_the_same_positions() -> None:
    segs = [
        {"type": "text", "tokens": 3},
        {"type": "image", "grid": [1, 4, 6]},
        {"type": "video", "grid": [4, 4, 4]},
        {"type": "text", "tokens": 2},
    ]
    with TestClient(create_app(Settings()), raise_server_exceptions=False) as client:
        resp = client.post("/v1/positions", json={"model": "exaone-4.5", "segments": segs})
    assert resp.status_code == 200, resp.text
    got = np.asarray(resp.json()["positions"])
    n = 3 + (2 + 1 * 4 * 6 // 4) + (2 + 4 * 4 * 4 // 4) + 2  # wrappers and prod(grid) / merge**2 each
    np.testing.assert_array_equal(got, np.broadcast_to(megatron_rope_positions(n), (3, n)))
    ids = build_positions([Text(3), Image((1, 4, 6)), Video((4, 4, 4)), Text(2)], rules=RULES).input_ids
    np.testing.assert_array_equal(got[0], transformers_positions(ids[None], np.ones((1, n), np.int64))[0])
    assert [s["kind"] for s in resp.json()["spans"]].count("video") == 1


def _attention_rotates(config: Exaone4Config) -> list[bool]:
    """Which layers transformers 5.24 rotates: ``self.sliding_window is None or self.is_sliding``
    (modeling_exaone4.py:234), written out on its own attention objects (:199-202)."""
    layers = [Exaone4Attention(config, i) for i in range(config.num_hidden_layers)]
    return [a.sliding_window is None or a.is_sliding for a in layers]


def test_layer_pattern_is_the_configs() -> None:
    rng = np.random.default_rng(4545)
    for _ in range(12):
        n = int(rng.integers(1, 13))
        text = {**TEXT, "num_hidden_layers": n}
        if rng.random() < 0.5:
            text["layer_types"] = [str(rng.choice(["sliding_attention", "full_attention"])) for _ in range(n)]
        else:
            text["sliding_window_pattern"] = int(rng.integers(1, 5))
        if rng.random() < 0.25 and "layer_types" in text:
            text["sliding_window"] = None
        rotates = _attention_rotates(Exaone4Config(**{k: v for k, v in text.items() if k != "model_type"}))
        folder_family = from_pretrained({"model_type": "exaone4_5", "text_config": text})
        got = folder_family.layer_sets.for_layers(n)
        assert got == tuple("rope" if r else "nope" for r in rotates), text
        # the bridge's no_rope_freq (exaone45_bridge.py:77-85) agrees wherever there is a window
        if text.get("sliding_window", 4096) is not None and "layer_types" in text:
            no_rope = [0 if t == "sliding_attention" else 1 for t in text["layer_types"]]
            assert [s == "nope" for s in got] == [bool(x) for x in no_rope]
    # negative control: the registry's default pattern is not every config's
    assert FAMILY.layer_sets.for_layers(4) != from_pretrained(
        {
            "model_type": "exaone4_5",
            "text_config": {**TEXT, "num_hidden_layers": 4, "sliding_window_pattern": 2},
        }
    ).layer_sets.for_layers(4)


def test_layer_cos_sin_is_nope_on_global_layers_and_the_rotary_elsewhere() -> None:
    segments = [Text(5), Image((1, 4, 6)), Video((4, 4, 4)), Text(3)]
    sets = build_position_sets(segments, model=FAMILY)
    assert list(sets) == ["rope"]
    layers = FAMILY.layer_sets.for_layers(8)
    positions = {k: torch.from_numpy(p.ids) for k, p in sets.items()}
    tables = layer_cos_sin(positions, layers, FAMILY.spec)  # each [T, head_dim]
    n, d = sets["rope"].num_tokens, FAMILY.spec.head_dim
    rope = {"rope_type": "default", "rope_theta": FAMILY.spec.theta}
    config = Exaone4Config(head_dim=d, hidden_size=2 * d, num_attention_heads=2, rope_parameters=rope)
    rotary = Exaone4RotaryEmbedding(config)
    want_cos, want_sin = rotary(torch.zeros(1, n, d), torch.arange(n)[None])
    g = torch.Generator().manual_seed(45)
    q = torch.randn(n, 1, 2, d, generator=g, dtype=torch.float64)
    want_q = megatron_rotate(q, n, d, FAMILY.spec.theta)
    for name, (cos, sin) in zip(layers, tables, strict=True):
        if name == "nope":
            torch.testing.assert_close(cos, torch.ones_like(cos))
            torch.testing.assert_close(sin, torch.zeros_like(sin))
            continue
        torch.testing.assert_close(cos, want_cos[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(sin, want_sin[0], rtol=0, atol=1e-5)
        x1, x2 = torch.chunk(q, 2, dim=-1)
        got_q = q * cos.double()[:, None, None] + torch.cat((-x2, x1), -1) * sin.double()[:, None, None]
        torch.testing.assert_close(got_q, want_q, rtol=0, atol=1e-5)
    # negative control: a global layer rotated is not NoPE
    assert not torch.allclose(tables[0][0], torch.ones(n, d))


def test_checkpoint_config_is_read() -> None:
    config = {
        "model_type": "exaone4_5",
        "image_token_id": 11,
        "video_token_id": 12,
        "vision_start_token_id": 13,
        "vision_end_token_id": 14,
        "vision_config": {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
        "text_config": {
            **TEXT,
            "head_dim": 128,
            "num_hidden_layers": 6,
            "layer_types": ["sliding_attention", "full_attention"] * 3,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
        },
    }
    fam = from_pretrained(json.loads(json.dumps(config)))
    assert fam.name == "exaone-4.5" and fam.spec.theta == 5e5 and fam.rules.patch_size == 16
    assert (fam.rules.image_pad_id, fam.rules.video_pad_id, fam.rules.vision_start_id) == (11, 12, 13)
    assert fam.layer_sets.for_layers(6) == ("rope", "nope") * 3
    bad = {**config, "text_config": {**config["text_config"], "layer_types": ["sliding_attention"] * 5}}
    with pytest.raises(LayoutError, match="6 layer types"):
        from_pretrained(bad)
    odd = {**config, "text_config": {**config["text_config"], "layer_types": ["chunked_attention"] * 6}}
    with pytest.raises(LayoutError, match="chunked_attention"):
        from_pretrained(odd)


def test_continued_conversation_counts_on() -> None:
    prev = build_positions([Text(4), Image((1, 4, 4)), Text(3)], rules=RULES)
    turn = mrope.continue_positions(prev, [Text(5), Video((2, 4, 6))], generated=6)
    n, k = prev.num_tokens + 6 + turn.positions.num_tokens, turn.positions.num_tokens
    np.testing.assert_array_equal(turn.positions.ids[0], megatron_rope_positions(k, n - k))
    assert not np.array_equal(turn.positions.ids[0], megatron_rope_positions(k, prev.num_tokens))


def test_patch_is_refused_naming_get_rope_index() -> None:
    """transformers 5.24's EXAONE 4.5 has no get_rope_index (its model gives the text model arange positions,
    modeling_exaone4_5.py:779-783), so patch() has nothing to replace and says so."""
    net = tiny_model("exaone-4.5")
    with pytest.raises(PatchError, match="get_rope_index"):
        mt.patch(net)
    assert not mt.is_patched(net)
