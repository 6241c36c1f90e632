"""MiniMax-M3-VL (``positions_base="index"`` with images and videos): every token at its sequence index.

References, each run or written out here:

- transformers 5.24 (``models/minimax_m3_vl``), run here: its processor's text expansion
  (``MiniMaxM3VLProcessor.replace_image_token`` / ``replace_video_token``, processing_minimax_m3_vl.py:54-83,
  bound to a holder: its image processor needs torchvision, which does not import here), its
  ``smart_resize`` (image_processing_minimax_m3_vl.py:57-83, read from the file's source), and its text
  model's positions (modeling_minimax_m3_vl.py:757-760: ``arange(seq_len) + past``, read at its rotary
  embedding; the model passes none, :1459-1466). It ignores the mask, so a padded row's pads count on.
- NVIDIA Megatron-Bridge (commit 067f987df, ``src/megatron/bridge/models/minimax_m3/modeling_minimax_m3_vl.py``
  :515-517 and :566-569): the step's ``position_ids`` go to a Megatron GPT model with 1-D ``"rope"``
  (minimax_m3_bridge.py:314, ``rotary_percent = rotary_dim / head_dim`` at :333-337): the sequence index.
- mlx-vlm 0.7.10 (``mlx_vlm/models/minimax_m3_vl/language.py``:1938-1956, ``get_rope_index``; MLX cannot
  run here), written out below: ``arange(seq_len) - left_pad`` with ``left_pad`` the count of leading
  masked slots, deltas 0; its attention rotates from each row's ``position_ids[:, 0]`` on (:1449-1455,
  ``initialize_rope(rotary_dim, rope_theta, traditional=False)`` at :1069-1075). Its left pads sit at
  negative positions (``-left_pad .. -1``), which no rule writes: mrope equals it at every valid token and
  writes ``pad_position`` 1 at the pads.

Negative control: HunyuanOCR's ``"sequence"`` rule on the same prompts writes grids over the image tokens.
"""

from __future__ import annotations

import ast
import functools
import math
import string
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from support.special_text import char_tokenizer
from transformers import PreTrainedTokenizerFast
from transformers.models.minimax_m3_vl import configuration_minimax_m3_vl as minimax_config
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLTextModel
from transformers.models.minimax_m3_vl.processing_minimax_m3_vl import MiniMaxM3VLProcessor

from mrope import Image, Text, Video, build_batch, build_positions
from mrope._errors import MediaError
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.media import image_grid, load_video
from mrope.models import get_family

FAMILY = get_family("MiniMaxAI/MiniMax-M3")
RULES = FAMILY.rules
SPECIALS = {
    MiniMaxM3VLProcessor.IMAGE_TOKEN: 200025,
    MiniMaxM3VLProcessor.VIDEO_TOKEN: 200026,
    MiniMaxM3VLProcessor.VISION_START_TOKEN: 200029,  # mlx-vlm config.py:290-293
    MiniMaxM3VLProcessor.VISION_END_TOKEN: 200030,
    "<pad>": 200000,
}


def mlx_get_rope_index(attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mlx-vlm language.py:1946-1956, written out: ``(B, L)`` positions and ``(B, 1)`` deltas."""
    batch_size, seq_length = attention_mask.shape
    positions = np.broadcast_to(np.arange(seq_length, dtype=np.int32)[None, :], (batch_size, seq_length))
    seen_token = np.cumsum(attention_mask.astype(np.int32), axis=-1) > 0
    left_padding = seq_length - np.sum(seen_token.astype(np.int32), axis=-1)
    positions = positions - left_padding.astype(positions.dtype)[:, None]
    return positions, np.zeros((batch_size, 1), dtype=positions.dtype)


def video_chunks(grid: tuple[int, int, int], max_frames: int = 4) -> list[list[int]]:
    """video_processing_minimax_m3_vl.py:190-194 (``vision_segment_max_frames`` 4), written out."""
    t, h, w = grid
    return [[min(max_frames, t - start), h, w] for start in range(0, t, max_frames)]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """A character tokenizer carrying MiniMax-M3-VL's four vision tokens at their ids."""
    return char_tokenizer(SPECIALS, "<pad>")


def processor_text(parts: list, fps: float) -> str:
    """transformers 5.24's expansion of a prompt of text, image grids and video grids (its processor's own
    ``replace_image_token`` / ``replace_video_token`` on a holder with the processors' sizes)."""
    sizes = SimpleNamespace(merge_size=2, temporal_patch_size=2)
    holder = SimpleNamespace(image_processor=sizes, video_processor=sizes)
    for name in ("IMAGE_TOKEN", "VIDEO_TOKEN", "VISION_START_TOKEN", "VISION_END_TOKEN"):
        setattr(holder, name, getattr(MiniMaxM3VLProcessor, name))
    out = ""
    for part in parts:
        if isinstance(part, str):
            out += part
        elif part[0] == "image":
            inputs = {"image_grid_thw": [np.array(part[1])]}
            out += MiniMaxM3VLProcessor.replace_image_token(holder, inputs, 0)
        else:
            chunks = video_chunks(part[1])
            meta = SimpleNamespace(fps=fps, frames_indices=list(range(2 * part[1][0] - part[2])))
            inputs = {
                "video_grid_thw": np.array(chunks),
                "num_chunks_per_video": [len(chunks)],
                "video_metadata": [meta],
            }
            out += MiniMaxM3VLProcessor.replace_video_token(holder, inputs, 0)
    return out


def _parts(rng: np.random.Generator) -> list:
    """Random text, image grids and video grids (frames: an odd count drops one of the last patch)."""
    letters = list(string.ascii_letters + " ")
    parts: list = ["".join(rng.choice(letters, int(rng.integers(1, 6))))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = (2 * int(v) for v in rng.integers(1, 5, 2))
        if rng.random() < 0.5:
            parts.append(("image", (1, h, w)))
        else:
            parts.append(("video", (int(rng.integers(1, 7)), h, w), int(rng.integers(0, 2))))
        parts.append("".join(rng.choice(letters, int(rng.integers(0, 5)))))
    return parts


def _segments(parts: list, tok: PreTrainedTokenizerFast, fps: float) -> list:
    segments: list = []
    for part in parts:
        if isinstance(part, str):
            segments.append(Text(tok.encode(part, add_special_tokens=False)))
        elif part[0] == "image":
            segments.append(Image(grid=part[1]))
        else:
            frames = 2 * part[1][0] - part[2]
            segments.append(Video(grid=part[1], frame_times=[k / fps for k in range(frames)]))
    return segments


def transformers_positions(attention_mask: np.ndarray) -> np.ndarray:
    """The ``(B, L)`` positions transformers 5.24's MiniMax-M3-VL text model gives its rotary embedding when
    no position ids are passed (a one-layer model; positions do not depend on the weights)."""
    config = minimax_config.MiniMaxM3VLTextConfig(
        hidden_size=32,
        intermediate_size=16,
        dense_intermediate_size=32,
        shared_intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        rotary_dim=8,
        vocab_size=8,
        num_local_experts=2,
        num_experts_per_tok=1,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = MiniMaxM3VLTextModel(config).eval()
    seen: list[torch.Tensor] = []
    model.rotary_emb.register_forward_hook(
        lambda _m, _args, kwargs, _out: seen.append(kwargs["position_ids"].clone()), with_kwargs=True
    )
    b, n = attention_mask.shape
    with torch.no_grad():
        model(inputs_embeds=torch.zeros(b, n, 32), attention_mask=torch.from_numpy(attention_mask))
    return np.broadcast_to(seen[0].numpy(), (b, n))


def test_family_values_are_transformers() -> None:
    config = minimax_config.MiniMaxM3VLConfig()
    vision, text = config.vision_config, config.text_config
    assert (RULES.image_pad_id, RULES.video_pad_id) == (config.image_token_id, config.video_token_id)
    assert (RULES.patch_size, RULES.merge_size, RULES.temporal_patch_size) == (
        vision.patch_size,
        vision.spatial_merge_size,
        vision.temporal_patch_size,
    )
    spec = FAMILY.spec
    assert (spec.head_dim, spec.rotary_dim, spec.theta) == (
        text.head_dim,
        text.rotary_dim,
        text.default_theta,
    )
    assert (spec.pairing, spec.mrope_section[1:]) == ("neox", (0, 0))  # one axis: the 1-D rotary
    # 5.24 reads partial_rotary_factor only: a config without it rotates whole heads there
    assert "partial_rotary_factor" not in text.rope_parameters and FAMILY.config_partial_rotary_factor == 1.0


def test_image_grids_equal_its_smart_resize() -> None:
    path = Path(transformers.__file__).parent / "models/minimax_m3_vl/image_processing_minimax_m3_vl.py"
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize")
    scope: dict = {"math": math}
    exec(compile(ast.Module([node], []), str(path), "exec"), scope)  # its own function, run
    rng = np.random.default_rng(3003)
    for h, w in [(20, 30), (700, 900), (28, 28), *rng.integers(10, 3000, (30, 2)).tolist()]:
        rh, rw = scope["smart_resize"](h, w, factor=28, min_pixels=4 * 28 * 28, max_pixels=451584)
        assert tuple(image_grid(h, w, model=FAMILY)) == (1, rh // 14, rw // 14), (h, w)


def test_ids_and_positions_equal_transformers_on_random_prompts(tokenizer) -> None:
    rng = np.random.default_rng(3838)
    tok = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    samples = []
    for _ in range(12):
        parts, fps = _parts(rng), float(rng.choice([1.0, 2.0, 3.0]))
        want_ids = tokenizer.encode(processor_text(parts, fps), add_special_tokens=False)
        segments = _segments(parts, tokenizer, fps)
        pos = build_positions(segments, rules=RULES, tokenizer=tok)
        assert pos.input_ids.tolist() == want_ids
        want = transformers_positions(np.ones((1, pos.num_tokens), dtype=np.int64))
        np.testing.assert_array_equal(pos.ids, np.broadcast_to(want, pos.ids.shape))
        assert pos.delta == 0
        samples.append(segments)
    # right padding: the valid tokens agree (5.24 ignores the mask: its pads count on)
    batch = build_batch(samples[:4], rules=RULES, padding_side="right", tokenizer=tok)
    want = transformers_positions(batch.attention_mask)
    valid = batch.attention_mask.astype(bool)
    np.testing.assert_array_equal(batch.ids[:, valid], np.broadcast_to(want[valid], (3, valid.sum())))


@pytest.mark.parametrize("side", ["left", "right"])
def test_batches_and_token_ids_equal_mlx_vlm(side: str, tokenizer) -> None:
    rng = np.random.default_rng(3900 if side == "left" else 3901)
    tok = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    for _ in range(5):
        samples = [_segments(_parts(rng), tokenizer, 2.0) for _ in range(3)]
        batch = build_batch(samples, rules=RULES, padding_side=side, tokenizer=tok)
        want, want_deltas = mlx_get_rope_index(batch.attention_mask)
        valid = batch.attention_mask.astype(bool)
        np.testing.assert_array_equal(batch.ids[:, valid], np.broadcast_to(want[valid], (3, valid.sum())))
        np.testing.assert_array_equal(batch.deltas, want_deltas[:, 0])
        images = [p.image_grid_thw for p in batch.sequences]
        videos = [np.array(c) for p in batch.sequences for g in p.video_grid_thw for c in video_chunks(g)]
        got, deltas = rope_index(
            batch.input_ids,
            np.concatenate(images) if images else None,
            np.stack(videos) if videos else None,  # its processor's chunks of 4 temporal patches
            batch.attention_mask,
            rules=RULES,
        )
        np.testing.assert_array_equal(got, batch.ids)
        np.testing.assert_array_equal(deltas, batch.deltas)
        pads = ~valid
        assert (batch.ids[:, pads] == RULES.pad_position).all()
        if side == "left" and pads.any():  # mlx-vlm's left pads are negative: no rule writes them
            assert (want[pads] < 0).all()


def test_negative_control_the_sequence_rule_differs(tokenizer) -> None:
    rng = np.random.default_rng(3939)
    other = RULES.replace(positions_base="sequence")
    tok = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    for _ in range(6):
        parts = [p for p in _parts(rng) if isinstance(p, str) or p[0] == "image"]  # "sequence": images only
        parts += [("image", (1, 4, 4)), "x"]
        pos = build_positions(_segments(parts, tokenizer, 1.0), rules=other, tokenizer=tok)
        want = transformers_positions(np.ones((1, pos.num_tokens), dtype=np.int64))
        assert not np.array_equal(pos.ids, np.broadcast_to(want, pos.ids.shape))


def test_video_files_are_refused_grids_are_not(tmp_path) -> None:
    with pytest.raises(MediaError, match="video_grid_thw"):
        load_video(str(tmp_path / "clip.mp4"), model=FAMILY)
    pos = build_positions([Text(2), Video(grid=(3, 4, 4), wrap=False)], rules=RULES)
    np.testing.assert_array_equal(pos.ids, np.broadcast_to(np.arange(pos.num_tokens), pos.ids.shape))


@pytest.mark.parametrize("factor", [0.5, None])
def test_rotation_equals_its_rotary_on_the_sequence_index(factor: float | None) -> None:
    """The spec read from a text config rotates q and k as 5.24's MiniMaxM3VLRotaryEmbedding and
    ``apply_rotary_pos_emb`` (modeling_minimax_m3_vl.py:278-405) at positions equal on every axis: 64 of 128
    channels with the released ``partial_rotary_factor`` 0.5, all 128 without it (5.24 ignores
    ``rotary_dim``). Every pair reads axis 0 (the h and w rows are not read); negative control: moving
    axis 0 changes the rotation."""
    from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as modeling

    from mrope import apply_mrope
    from mrope.models import spec_from_config

    rope = {"rope_type": "default", "rope_theta": 5e6}
    if factor is not None:
        rope["partial_rotary_factor"] = factor
    text = minimax_config.MiniMaxM3VLTextConfig(head_dim=128, rotary_dim=64, rope_parameters=rope)
    spec = spec_from_config({"model_type": "minimax_m3_vl", "text_config": text.to_dict()})
    assert spec.rotary_dim == (64 if factor else 128)
    g = torch.Generator().manual_seed(38)
    q, k = torch.randn(2, 4, 9, 128, generator=g), torch.randn(2, 1, 9, 128, generator=g)
    index = torch.randint(0, 40_000, (2, 9), generator=g)
    cos, sin = modeling.MiniMaxM3VLRotaryEmbedding(text)(q, index)
    want_q, want_k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = apply_mrope(q, k, index.expand(3, -1, -1), spec, layout="bhsd", backend="torch")
    for got, want in ((got_q, want_q), (got_k, want_k)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    rotate = functools.partial(apply_mrope, q, k, spec=spec, layout="bhsd", backend="torch")
    torch.testing.assert_close(rotate(torch.stack([index, index + 7, index + 11]))[0], got_q, rtol=0, atol=0)
    assert not torch.allclose(rotate(torch.stack([index + 7, index, index]))[0], want_q)


def test_service_positions_equal_transformers() -> None:
    """One face: ``POST /v1/positions`` with images and videos by grid (bare frames, no time text) answers
    the sequence index that 5.24's text model counts; negative control: Qwen2-VL's rules do not."""
    from fastapi.testclient import TestClient

    from mrope.service import Settings
    from mrope.service.app import create_app

    segments = [
        {"type": "text", "ids": [5, 6, 7]},
        {"type": "image", "grid": [1, 4, 6]},
        {"type": "text", "tokens": 2},
        {"type": "video", "grid": [3, 4, 4], "wrap": False},
        {"type": "text", "ids": [8]},
    ]
    with TestClient(create_app(Settings())) as client:
        answer = client.post("/v1/positions", json={"model": "minimax-m3-vl", "segments": segments})
        other = client.post("/v1/positions", json={"model": "qwen2-vl", "segments": segments})
    assert answer.status_code == 200 and other.status_code == 200, answer.text
    got = np.asarray(answer.json()["positions"])
    want = transformers_positions(np.ones((1, got.shape[1]), dtype=np.int64))
    np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))
    assert answer.json()["video_grid_thw"] == [[3, 4, 4]]
    assert not np.array_equal(np.asarray(other.json()["positions"]), got)
