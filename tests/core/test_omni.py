"""Qwen2.5-Omni and Qwen3-Omni: mrope against the families' own transformers 5.24 code.

- ``get_rope_index``: each family's thinker model class, instantiated with a tiny text / vision / audio
  config and the **released** token ids (the 5.24 config classes default ``vision_start_token_id`` to
  ``None``, which cannot run, and Qwen3-Omni's ``position_id_per_seconds`` to 25 where the released
  checkpoint and its processor use 13), on random padded batches with images, videos, audio and videos
  carrying their audio. Expected positions and deltas are the model's.
- ``build_positions``: token ids against the processors' own text expansion (``replace_*_token``,
  including ``replace_video_with_audio_token``), tokenized by a ``tokenizers`` tokenizer carrying the
  released special tokens. (The combined processor cannot be built here: its video processor needs
  torchvision, whose wheel is built against the CUDA build of torch, not the CPU build installed here.)
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

import mrope
from mrope import Audio, Image, LayoutError, Text, TokenError, Video
from mrope.models import get_family

pytestmark = pytest.mark.timeout(300)

Q25 = get_family("qwen2.5-omni").rules
Q3 = get_family("qwen3-omni").rules


@pytest.fixture(scope="module")
def thinkers():
    from transformers.models.qwen2_5_omni import configuration_qwen2_5_omni as c25
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as m25
    from transformers.models.qwen3_omni_moe import configuration_qwen3_omni_moe as c3
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as m3

    text = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=152064,
    )
    audio = dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32, output_dim=32)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32)
    torch.manual_seed(0)
    q25 = m25.Qwen2_5OmniThinkerForConditionalGeneration(
        c25.Qwen2_5OmniThinkerConfig(
            text_config={
                **text,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
            },
            vision_config={**vision, "fullatt_block_indexes": [0]},
            audio_config=audio,
            vision_start_token_id=151652,  # released (class default None)
        )
    )
    q3 = m3.Qwen3OmniMoeThinkerForConditionalGeneration(
        c3.Qwen3OmniMoeThinkerConfig(
            text_config={**text, "moe_intermediate_size": 16, "num_experts": 2, "num_experts_per_tok": 1},
            vision_config={**vision, "deepstack_visual_indexes": []},
            audio_config={**audio, "downsample_hidden_size": 8},
            # released thinker_config values (class defaults: vision_start None, pps 25, audio 151646/151647)
            vision_start_token_id=151652,
            position_id_per_seconds=13,
            audio_token_id=151675,
            audio_start_token_id=151669,
        )
    )
    assert q25.config.position_id_per_seconds == 25 and q25.config.audio_token_id == Q25.audio_pad_id
    assert q3.config.audio_config.n_window == 50
    return {"qwen2.5-omni": q25, "qwen3-omni": q3}


SPGS = [1.0, 2.0, 0.5, 2 / 0.9, 2 / 0.7, 0.3, 0.04, 3.7]


def _sample(rng: random.Random, with_audio_in_video: bool) -> list:
    segs: list = []
    kinds = ["text", "image", "audio", "av" if with_audio_in_video else "video"]
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(kinds)
        if kind == "text":
            segs.append(Text([rng.randint(10, 5000) for _ in range(rng.randint(1, 4))]))
        elif kind == "image":
            segs.append(Image((rng.choice([1, 1, 2]), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3))))
        elif kind == "audio":
            segs.append(Audio(mel_frames=rng.randint(5, 400)))
        else:
            grid = (rng.randint(1, 8), 2 * rng.randint(1, 2), 2 * rng.randint(1, 2))
            audio = Audio(mel_frames=rng.randint(5, 900)) if kind == "av" else None
            segs.append(Video(grid, second_per_grid=rng.choice(SPGS), audio=audio))
    segs.append(Text(rng.randint(1, 3)))
    return segs


@pytest.mark.parametrize("model", ["qwen2.5-omni", "qwen3-omni"])
def test_get_rope_index_equals_transformers(thinkers, model):
    thinker, rules = thinkers[model], get_family(model).rules
    rng = random.Random(11)
    compared = 0
    for case in range(36):
        av = case % 2 == 1
        samples = [_sample(rng, av) for _ in range(rng.randint(1, 3))]
        side = rng.choice(["left", "right"])
        batch = mrope.build_batch(samples, model=model, padding_side=side)
        images = [g for p in batch.sequences for g in p.image_grid_thw.tolist()]
        videos = [g for p in batch.sequences for g in p.video_grid_thw.tolist()]
        spg = [s for p in batch.sequences for s in p.second_per_grid_ts.tolist()]
        mel = [
            a.mel_frames
            for s in samples
            for seg in s
            for a in ([seg] if isinstance(seg, Audio) else [seg.audio] if isinstance(seg, Video) else [])
            if a is not None
        ]
        if not images and not videos:
            continue  # 5.24 then takes its text-only branch (cumsum positions)
        args = dict(
            image_grid_thw=torch.tensor(images).reshape(-1, 3) if images else None,
            video_grid_thw=torch.tensor(videos).reshape(-1, 3) if videos else None,
            attention_mask=torch.from_numpy(batch.attention_mask),
        )
        extra = dict(
            use_audio_in_video=av,
            audio_seqlens=torch.tensor(mel) if mel else None,
            second_per_grids=torch.tensor(spg, dtype=torch.float32) if spg else None,
        )
        ids = torch.from_numpy(batch.input_ids)
        want, want_d = thinker.get_rope_index(ids, **args, **extra)
        got, got_d = mrope.get_rope_index(ids, **args, **extra, model=model)
        assert got.dtype == want.dtype == (torch.float32 if rules.fractional_time else torch.int64)
        assert torch.equal(got, want), (model, case)
        assert torch.equal(got_d.to(want_d.dtype), want_d), (model, case)
        assert np.array_equal(batch.ids, want.numpy())  # the segment path gives the same
        if case % 3 == 0:  # audio lengths read from the ids when audio_seqlens is not given
            again, _ = mrope.get_rope_index(
                ids, **args, second_per_grids=extra["second_per_grids"], model=model
            )
            assert torch.equal(again, want)
        compared += 1
    assert compared >= 25


def test_qwen3_omni_positions_are_fractional(thinkers):
    # 3 patches at 0.9 s and 13 per second: t offsets 0, 11.7, 23.4 (float32), never truncated
    segs = [Text(2), Video((3, 4, 4), second_per_grid=0.9), Text(3)]
    p = mrope.build_positions(segs, model="qwen3-omni")
    assert p.ids.dtype == np.float32 and isinstance(p.delta, float)
    video = next(s for s in p.spans if s.kind == "video")
    t = p.ids[0, video.start : video.stop : 4]
    expected = (np.arange(3, dtype=np.float32) * np.float32(0.9)) * np.float32(13) + np.float32(3)
    assert np.array_equal(t, expected) and t[1] != np.trunc(t[1])
    # vision_end is one past the block's largest (fractional) position, the text after it one more
    assert p.ids[0, video.stop] == np.float32(expected[-1] + 1)
    assert p.ids[0, video.stop + 1] == np.float32(expected[-1] + 2)
    ids = torch.from_numpy(p.input_ids)[None]
    want, want_d = thinkers["qwen3-omni"].get_rope_index(
        ids,
        video_grid_thw=torch.tensor([[3, 4, 4]]),
        attention_mask=torch.ones_like(ids),
        second_per_grids=torch.tensor([0.9]),
    )
    assert np.array_equal(p.ids, want[:, 0].numpy())
    assert p.delta == float(want_d[0, 0])
    # JSON carries floats; decode continues in float32 from the float delta
    d = json.loads(json.dumps(p.to_dict()))
    assert d["positions"][0][video.start + 4] == pytest.approx(float(expected[1]))
    assert isinstance(d["delta"], float)
    nxt = p.window(p.num_tokens, p.num_tokens + 2)
    assert nxt.dtype == np.float32
    assert np.array_equal(
        nxt[0], np.float32(p.num_tokens) + np.float32(p.delta) + np.arange(2, dtype=np.float32)
    )
    # Qwen2.5-Omni truncates the same times: 0, 22, 45 at 25 per second
    p25 = mrope.build_positions(segs, model="qwen2.5-omni")
    assert p25.ids.dtype == np.int64
    v25 = next(s for s in p25.spans if s.kind == "video")
    assert (p25.ids[0, v25.start : v25.stop : 4] - 3).tolist() == [0, 22, 45]


def test_batch_pads_and_dtypes():
    samples = [[Text(2), Audio(5)], [Text(12)]]  # 9 and 12 tokens
    b3 = mrope.build_batch(samples, model="qwen3-omni", padding_side="right")
    assert b3.ids.dtype == np.float32 and b3.deltas.dtype == np.float32
    assert np.all(b3.ids[:, 1] == np.arange(12)) and np.all(b3.ids[:, 0, 9:] == 0)  # pads 0
    b25 = mrope.build_batch(samples, model="qwen2.5-omni", padding_side="left")
    assert b25.ids.dtype == np.int64 and np.all(b25.ids[:, 0, :3] == 1)  # pads 1
    assert np.all(b25.ids[:, 0, 3:] == np.arange(9)) and b25.deltas.tolist() == [0, 0]
    assert mrope.count_tokens([Text(2), Audio(5), Video((2, 4, 4), audio=Audio(7))], model="qwen3-omni") == (
        2 + 7 + 8 + 7 + 4
    )


# ------------------------------------------------------------------------------- processor text


def _tokenizer(model: str):
    """A ``tokenizers`` tokenizer carrying the family's released special tokens (and nothing else)."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel

    specials = {"<|vision_bos|>": 151652, "<|vision_eos|>": 151653}
    if model == "qwen2.5-omni":
        specials |= {"<|IMAGE|>": 151655, "<|VIDEO|>": 151656, "<|AUDIO|>": 151646}
        specials |= {"<|audio_bos|>": 151647, "<|audio_eos|>": 151648}
    else:
        specials |= {"<|image_pad|>": 151655, "<|video_pad|>": 151656, "<|audio_pad|>": 151675}
        specials |= {"<|audio_start|>": 151669, "<|audio_end|>": 151670}
    tok = Tokenizer(WordLevel({**specials, "[UNK]": 0}, unk_token="[UNK]"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    return tok


def _processor(model: str):
    """The family's processor object with only what its text-expansion methods read (the combined
    processor needs a video processor, which needs torchvision)."""
    from types import SimpleNamespace

    if model == "qwen2.5-omni":
        from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor as cls

        names = ("<|IMAGE|>", "<|VIDEO|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
    else:
        from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor as cls

        names = ("<|image_pad|>", "<|video_pad|>", "<|audio_pad|>", "<|audio_start|>", "<|audio_end|>")
    proc = object.__new__(cls)
    proc.image_token, proc.video_token, proc.audio_token, proc.audio_bos_token, proc.audio_eos_token = names
    proc.vision_bos_token, proc.vision_eos_token = "<|vision_bos|>", "<|vision_eos|>"
    proc.image_processor = proc.video_processor = SimpleNamespace(merge_size=2, temporal_patch_size=2)
    return cls, proc


@pytest.mark.parametrize("model", ["qwen2.5-omni", "qwen3-omni"])
def test_build_positions_ids_equal_the_processors_text(model):
    cls, proc = _processor(model)
    tok = _tokenizer(model)
    rules = get_family(model).rules
    pps = rules.tokens_per_second
    rng = random.Random(5)
    for _ in range(12):
        grid = (rng.randint(1, 9), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3))
        spg = rng.choice(SPGS)
        n_audio = rng.randint(1, 160)
        video_inputs = {"video_grid_thw": np.array([grid]), "video_second_per_grid": [spg]}
        text = cls.replace_video_with_audio_token(
            proc,
            video_inputs,
            0,
            {"num_audio_tokens": [n_audio]},
            0,
            position_id_per_seconds=pps,
            seconds_per_chunk=2.0,
        )
        text = "<|vision_bos|>" + text + "<|vision_eos|>"
        text += proc.audio_bos_token + cls.replace_audio_token(proc, {"num_audio_tokens": [n_audio + 3]}, 0)
        text += proc.audio_eos_token
        text += "<|vision_bos|>" + cls.replace_image_token(proc, {"image_grid_thw": np.array([[1, 4, 6]])}, 0)
        text += "<|vision_eos|>"
        text += (
            "<|vision_bos|>"
            + cls.replace_video_token(proc, video_inputs, 0, load_audio_from_video=False)
            + "<|vision_eos|>"
        )
        want = tok.encode(text).ids
        segs = [
            Video(grid, second_per_grid=spg, audio=Audio(n_audio)),
            Audio(n_audio + 3),
            Image((1, 4, 6)),
            Video(grid, second_per_grid=spg),
        ]
        got = mrope.build_positions(segs, model=model).input_ids.tolist()
        assert got == want, (grid, spg, n_audio)


# ---------------------------------------------------------------------------------------- errors


def test_token_errors():
    p = mrope.build_positions(
        [Text(2), Video((2, 4, 4), second_per_grid=1.0, audio=Audio(9)), Text(1)], model="qwen2.5-omni"
    )
    ids, grid = p.input_ids[None], [[2, 4, 4]]
    with pytest.raises(TokenError, match="no audio_seqlens values left"):
        mrope.numpy_rope_index(
            ids, None, grid, model="qwen2.5-omni", second_per_grid_ts=[1.0], audio_seqlens=[]
        )
    with pytest.raises(TokenError, match="video tokens"):  # 40 frames -> 9 tokens, not the 10 written
        mrope.numpy_rope_index(
            ids, None, grid, model="qwen2.5-omni", second_per_grid_ts=[1.0], audio_seqlens=[40]
        )
    with pytest.raises(TokenError, match="second_per_grid"):
        mrope.numpy_rope_index(ids, None, grid, model="qwen2.5-omni")
    silent = mrope.build_positions([Video((2, 4, 4), second_per_grid=1.0)], model="qwen2.5-omni")
    with pytest.raises(TokenError, match="carries no audio"):
        mrope.numpy_rope_index(
            silent.input_ids[None],
            None,
            grid,
            model="qwen2.5-omni",
            second_per_grid_ts=[1.0],
            use_audio_in_video=True,
        )
    stray = np.array([[5, Q25.audio_pad_id, 6]])
    with pytest.raises(TokenError, match="outside a start / end block"):
        mrope.numpy_rope_index(stray, model="qwen2.5-omni")
    with pytest.raises(LayoutError, match="wrap=False"):
        mrope.build_positions([Image((1, 4, 4), wrap=False)], model="qwen3-omni")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_apply_mrope_takes_qwen3_omni_float_positions(backend, monkeypatch):
    """Fractional positions rotate q and k as Qwen3-Omni's own rotary embedding does (released values:
    head_dim 128, interleaved [24, 20, 20], theta 1e6), in both backends (Triton under its interpreter)."""
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeTextConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeThinkerTextRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    p = mrope.build_positions(
        [Text(3), Video((3, 4, 4), second_per_grid=0.9), Audio(6), Text(2)], model="qwen3-omni"
    )
    assert p.ids.dtype == np.float32 and np.any(p.ids != np.trunc(p.ids))
    pos = torch.from_numpy(p.ids)[:, None]  # [3, 1, S]
    cfg = Qwen3OmniMoeTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        head_dim=128,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [24, 20, 20],
            "interleaved": True,
        },
    )
    rotary = Qwen3OmniMoeThinkerTextRotaryEmbedding(cfg)
    torch.manual_seed(1)
    q = torch.randn(1, 2, p.num_tokens, 128)
    k = torch.randn(1, 1, p.num_tokens, 128)
    cos, sin = rotary(q, pos)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    spec = get_family("qwen3-omni").spec
    got_q, got_k = mrope.apply_mrope(q, k, pos, spec, layout="bhsd", backend=backend)
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------- service


def test_service_uploads_audio_and_videos_with_audio(tmp_path):
    """A real server app: an audio file and a video with an audio track uploaded for an omni model give
    the library's positions (float32 in the npy form for Qwen3-Omni, floats in JSON)."""
    import io as _io
    import json as _json

    from fastapi.testclient import TestClient
    from support import media as tm

    from mrope.media import load_audio, load_video
    from mrope.service import Settings
    from mrope.service.app import create_app

    wav = tm.write_audio(tmp_path / "a.wav", 1.3, 44100)
    clip = tm.write_video_with_audio(tmp_path / "v.mp4", 24, 12, audio_seconds=1.9)
    spool = tmp_path / "spool"
    spool.mkdir()

    def post(client, model, layout, fmt="application/json"):
        files = [
            ("files", ("a.wav", wav.read_bytes(), "audio/wav")),
            ("files", ("v.mp4", clip.read_bytes(), "video/mp4")),
        ]
        data = {"model": model, "layout": _json.dumps(layout)}
        return client.post("/v1/positions/upload", data=data, files=files, headers={"accept": fmt})

    layout = [
        {"type": "text", "tokens": 3},
        {"type": "file", "index": 1, "use_audio_in_video": True},
        {"type": "file", "index": 0},
        {"type": "text", "tokens": 2},
    ]
    with TestClient(create_app(Settings(tmp_dir=str(spool)))) as client:
        for model in ("qwen2.5-omni", "qwen3-omni"):
            segs = [
                Text(3),
                load_video(clip, model=model, use_audio_in_video=True),
                load_audio(wav, model=model),
                Text(2),
            ]
            want = mrope.build_positions(segs, model=model)
            assert segs[1].audio is not None
            resp = post(client, model, layout)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            assert (
                body["positions"] == want.ids.tolist() and body["audio_tokens"] == want.audio_tokens.tolist()
            )
            npy = post(client, model, layout, "application/x-npy; dtype=int64")  # the library's dtype
            assert npy.status_code == 200, npy.text
            arr = np.load(_io.BytesIO(npy.content))
            assert arr.dtype == want.ids.dtype and np.array_equal(arr, want.ids)
        # an audio file for a model without audio is a clear 422
        resp = client.post(
            "/v1/positions/upload",
            data={"model": "qwen2-vl"},
            files=[("files", ("a.wav", wav.read_bytes(), "audio/wav"))],
        )
        assert resp.status_code == 422 and "audio" in resp.json()["error"]["message"]
    assert list(spool.iterdir()) == []


def test_service_rope_index_takes_audio(tmp_path):
    from fastapi.testclient import TestClient

    from mrope.service import Settings
    from mrope.service.app import create_app

    segs = [Text(2), Video((2, 4, 4), second_per_grid=0.9, audio=Audio(mel_frames=150)), Audio(mel_frames=90)]
    p = mrope.build_positions(segs, model="qwen3-omni")
    body = {
        "model": "qwen3-omni",
        "input_ids": [p.input_ids.tolist()],
        "video_grid_thw": [[2, 4, 4]],
        "second_per_grid_ts": [0.9],
        "audio_seqlens": [150, 90],
        "use_audio_in_video": True,
    }
    with TestClient(create_app(Settings(tmp_dir=str(tmp_path)))) as client:
        resp = client.post("/v1/rope-index", json=body)
        assert resp.status_code == 200, resp.text
        # JSON carries each float32 as its shortest decimal: read back as float32 it is the same value
        got = np.asarray(resp.json()["position_ids"], dtype=np.float32)
        assert np.array_equal(got, p.ids[:, None]) and np.any(got != np.trunc(got))
        bad = client.post("/v1/rope-index", json={**body, "audio_seqlens": [150]})
        assert bad.status_code == 422 and "audio_seqlens" in bad.json()["error"]["message"]


def test_json_segments_carry_audio(tmp_path):
    """The one JSON form (mrope.schema) takes audio segments and a grid video's audio, for every face."""
    from fastapi.testclient import TestClient

    from mrope import schema
    from mrope.service import Settings
    from mrope.service.app import create_app

    body = {
        "model": "qwen2.5-omni",
        "segments": [
            {"type": "text", "tokens": 2},
            {"type": "video", "grid": [3, 4, 4], "second_per_grid": 0.9, "audio": {"seconds": 2.7}},
            {"type": "audio", "mel_frames": 130},
        ],
    }
    want = mrope.build_positions(
        [Text(2), Video((3, 4, 4), second_per_grid=0.9, audio=Audio(seconds=2.7)), Audio(mel_frames=130)],
        model="qwen2.5-omni",
    )
    parsed = schema.PositionsRequest.model_validate(body)
    segs = schema.to_segments(parsed.segments, want.rules)
    assert np.array_equal(mrope.build_positions(segs, model="qwen2.5-omni").ids, want.ids)
    with TestClient(create_app(Settings(tmp_dir=str(tmp_path)))) as client:
        resp = client.post("/v1/positions", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["positions"] == want.ids.tolist()
        for bad in (
            {"type": "audio"},
            {"type": "audio", "tokens": 3, "seconds": 1.0},
            {"type": "audio", "tokens": 0},
        ):
            assert client.post("/v1/positions", json={**body, "segments": [bad]}).status_code == 422
        no_audio = {**body, "model": "qwen2.5-vl"}
        resp = client.post("/v1/positions", json=no_audio)
        assert resp.status_code == 422 and "no audio" in resp.json()["error"]["message"]


@pytest.mark.parametrize("model", ["qwen2.5-omni", "qwen3-omni"])
def test_audio_only_batches(thinkers, model):
    """Without image or video grids 5.24 takes its text-only branch (cumsum positions, pads 1): the
    valid positions agree; Qwen2.5-Omni's pads too (1), Qwen3-Omni's pads are 1 there and 0 (its
    released rule with grids) here."""
    samples = [
        [Text(3), Audio(mel_frames=210), Text(2)],
        [Audio(mel_frames=57), Text(4), Audio(mel_frames=99)],
    ]
    batch = mrope.build_batch(samples, model=model, padding_side="left")
    mask = torch.from_numpy(batch.attention_mask)
    mel = torch.tensor([210, 57, 99])
    want, want_d = thinkers[model].get_rope_index(
        torch.from_numpy(batch.input_ids), attention_mask=mask, audio_seqlens=mel
    )
    valid = batch.attention_mask.astype(bool)
    assert np.array_equal(batch.ids[:, valid], want.numpy()[:, valid])
    assert np.array_equal(batch.deltas, want_d[:, 0].numpy())
    pad = get_family(model).rules.pad_position
    assert np.all(batch.ids[:, ~valid] == pad) and np.all(want.numpy()[:, ~valid] == 1)
    got, _ = mrope.get_rope_index(
        torch.from_numpy(batch.input_ids), attention_mask=mask, audio_seqlens=mel, model=model
    )
    assert np.array_equal(got.numpy(), batch.ids)


def test_audio_bounds():
    with pytest.raises(LayoutError, match="at most"):
        mrope.count_tokens([Audio(seconds=1e9)], model="qwen3-omni")
    with pytest.raises(LayoutError, match="below 2\\*\\*32"):
        Audio(seconds=2.0**33)
    with pytest.raises(TokenError):  # a clip longer than its row
        mrope.numpy_rope_index(
            [[Q3.audio_start_id, Q3.audio_pad_id, Q3.audio_end_id]], model="qwen3-omni", audio_seqlens=[2**31]
        )


def test_plot_shows_audio_and_fractional_time(tmp_path):
    from mrope._plot import KIND_COLOURS, render_layout, vision_maps

    p = mrope.build_positions(
        [Text(2), Video((3, 4, 4), second_per_grid=0.9, audio=Audio(seconds=1.5)), Audio(mel_frames=120)],
        model="qwen3-omni",
    )
    assert "audio" in KIND_COLOURS
    maps = vision_maps(p)
    assert maps[0].t_values == pytest.approx([4.0, 15.7, 27.4], abs=1e-5)
    render_layout(p)  # renders without error


def test_pipeline_keeps_fractional_positions():
    """A job whose model keeps fractional time writes float32 positions; a mixed job refuses such a record
    (its columns are int64) instead of truncating it."""
    from mrope.pipeline import Preprocessor

    record = {
        "id": 1,
        "segments": [
            {"type": "text", "tokens": 2},
            {"type": "video", "grid": [3, 4, 4], "second_per_grid": 0.9},
        ],
    }
    want = mrope.build_positions([Text(2), Video((3, 4, 4), second_per_grid=0.9)], model="qwen3-omni")
    table = Preprocessor(model="qwen3-omni").batch({"id": [1], "segments": [record["segments"]]})
    got = np.asarray(table.column("positions").to_pylist()[0], dtype=np.float32)
    assert table.schema.field("positions").type.value_type.value_type == "float"
    assert np.array_equal(got, want.ids) and table.column("delta").to_pylist() == [want.delta]
    row = Preprocessor().record({**record, "model": "qwen3-omni"})
    assert "fractional" in row["error"] and row["positions"].shape == (3, 0)
    assert Preprocessor().record({**record, "model": "qwen2.5-omni"})["error"] == ""


def _full_processor(model: str):
    """The family's combined processor with a ``tokenizers`` tokenizer carrying the released special
    tokens, the Pillow image processor with the released sizing, and the released Whisper feature
    extractor. Its video processor needs torchvision (not importable beside the CPU build of torch here),
    so it is left out: this processor takes text, images and audio."""
    from types import SimpleNamespace

    from tokenizers import AddedToken, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if model == "qwen2.5-omni":
        from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor as cls

        names = dict(
            image="<|IMAGE|>",
            audio="<|AUDIO|>",
            video="<|VIDEO|>",
            audio_bos="<|audio_bos|>",
            audio_eos="<|audio_eos|>",
        )
    else:
        from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor as cls

        names = dict(
            image="<|image_pad|>",
            audio="<|audio_pad|>",
            video="<|video_pad|>",
            audio_bos="<|audio_start|>",
            audio_eos="<|audio_end|>",
        )
    rules = get_family(model).rules
    ids = {
        names["image"]: rules.image_pad_id,
        names["video"]: rules.video_pad_id,
        names["audio"]: rules.audio_pad_id,
        names["audio_bos"]: rules.audio_start_id,
        names["audio_eos"]: rules.audio_end_id,
        "<|vision_bos|>": 151652,
        "<|vision_eos|>": 151653,
    }
    tok = Tokenizer(WordLevel({**ids, "[UNK]": 0, "hello": 5}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ids])
    extra = {f"{k}_token": v for k, v in names.items()} | {
        "vision_bos_token": "<|vision_bos|>",
        "vision_eos_token": "<|vision_eos|>",
    }
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, extra_special_tokens=extra)
    proc = object.__new__(cls)  # its __init__ insists on a video processor
    proc.tokenizer = fast
    proc.feature_extractor = WhisperFeatureExtractor(
        feature_size=128, chunk_length=300, hop_length=160, sampling_rate=16000
    )
    proc.image_processor = Qwen2VLImageProcessorPil(
        min_pixels=3136, max_pixels=12845056, patch_size=rules.patch_size, merge_size=2, temporal_patch_size=2
    )
    proc.video_processor = SimpleNamespace(merge_size=2, temporal_patch_size=2)
    proc.chat_template = None
    for k in ("image", "audio", "video", "vision_bos", "vision_eos", "audio_bos", "audio_eos"):
        setattr(proc, f"{k}_token", getattr(fast, f"{k}_token"))
    for k in ("image", "audio", "video"):
        setattr(proc, f"{k}_token_id", getattr(fast, f"{k}_token_id"))
    return proc, names


@pytest.mark.parametrize("model", ["qwen2.5-omni", "qwen3-omni"])
def test_build_positions_equals_the_full_processor_and_model(thinkers, model):
    """Real audio arrays and a real image through the family's processor; its ids equal build_positions'
    and the model's positions on them equal build_positions' positions."""
    from PIL import Image as PILImage

    from mrope.media import load_image

    proc, names = _full_processor(model)
    rng = np.random.default_rng(0)
    # 37939 samples is no multiple of the hop (160): Qwen2.5-Omni's padded mask gives ceil, Qwen3-Omni's
    # floor for the longest clip of a call; 12960 is, so both rules agree on the second clip
    waves = [np.zeros(n, dtype=np.float32) for n in (37939, 12960)]
    pil = PILImage.fromarray(rng.integers(0, 255, (150, 230, 3), dtype=np.uint8))
    audio = names["audio_bos"] + names["audio"] + names["audio_eos"]
    text = f"hello {audio} hello <|vision_bos|>{names['image']}<|vision_eos|> hello {audio}"
    out = proc(text=text, audio=waves, images=[pil], return_tensors="pt")
    segs = [
        Text([5]),
        Audio(seconds=37939 / 16000),
        Text([5]),
        load_image(pil, model=model),
        Text([5]),
        Audio(seconds=12960 / 16000),
    ]
    p = mrope.build_positions(segs, model=model)
    assert out["input_ids"][0].tolist() == p.input_ids.tolist()
    assert out["image_grid_thw"].tolist() == p.image_grid_thw.tolist()
    lengths = out["feature_attention_mask"].sum(-1)
    want, _ = thinkers[model].get_rope_index(
        out["input_ids"],
        image_grid_thw=out["image_grid_thw"],
        attention_mask=out["attention_mask"],
        audio_seqlens=lengths,
    )
    assert np.array_equal(want[:, 0].numpy(), p.ids)
    if model == "qwen3-omni":
        # Qwen3-Omni's processor pads a call's clips to the longest: a shorter clip that is no multiple of
        # the hop gets ceil(n / 160) frames there, while alone (and in _get_num_audio_tokens) floor: mrope
        # follows the single-clip rule; Audio(mel_frames=...) takes the processor's own count
        two = proc(text=f"{audio} {audio}", audio=[waves[0], np.zeros(13012, dtype=np.float32)])
        assert two["feature_attention_mask"].sum(-1).tolist() == [237, 82]
        assert mrope.audio_tokens(Audio(seconds=13012 / 16000), model=model) == mrope.audio_tokens(
            Audio(mel_frames=81), model=model
        )


def test_from_pretrained_reads_the_omni_thinker_config():
    """Released config.json shapes (values from the checkpoints' thinker_config): ids and time scale."""
    text25 = {"model_type": "qwen2_5_omni_text", "hidden_size": 3584, "num_attention_heads": 28}
    text25 |= {"rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    cfg25 = {
        "model_type": "qwen2_5_omni",
        "thinker_config": {
            "model_type": "qwen2_5_omni_thinker",
            "audio_token_index": 151646,
            "image_token_index": 151655,
            "video_token_index": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "audio_start_token_id": 151647,
            "audio_end_token_id": 151648,
            "position_id_per_seconds": 25,
            "seconds_per_chunk": 2,
            "text_config": text25,
        },
    }
    fam = mrope.from_pretrained(cfg25)
    assert fam.name == "qwen2.5-omni" and fam.rules == get_family("qwen2.5-omni").rules.replace(
        tokens_per_second=25
    )
    cfg3 = {
        "model_type": "qwen3_omni_moe",
        "thinker_config": {
            "model_type": "qwen3_omni_moe_thinker",
            "audio_token_id": 151675,
            "audio_start_token_id": 151669,
            "audio_end_token_id": 151670,
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "position_id_per_seconds": 13,
            "seconds_per_chunk": 2,
            "text_config": {
                "model_type": "qwen3_omni_moe_text",
                "head_dim": 128,
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 1e6,
                    "mrope_section": [24, 20, 20],
                    "interleaved": True,
                },
            },
        },
    }
    fam3 = mrope.from_pretrained(cfg3)
    assert fam3.name == "qwen3-omni" and fam3.rules.fractional_time
    assert (fam3.rules.tokens_per_second, fam3.rules.audio_pad_id, fam3.rules.audio_start_id) == (
        13,
        151675,
        151669,
    )
    assert fam3.spec.section_layout == "interleaved" and fam3.spec.mrope_section == (24, 20, 20)
