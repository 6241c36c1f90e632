"""Qwen3-ASR (``positions_base="index"`` with audio): every token at its sequence index on all three axes.

Checked against two shipping implementations:

- transformers 5.24 (``models/qwen3_asr``), run here: its processor (a character tokenizer carrying the
  released audio tokens, its own feature extractor) writes the ids and mel frames; its tiny random-weight
  ``Qwen3ASRForConditionalGeneration`` runs on them and the positions its Qwen3 text rotary receives are read
  (modeling_qwen3_asr.py:535-575 passes none, models/qwen3/modeling_qwen3.py:380-383 counts ``arange``);
- Qwen's ``qwen-asr`` 0.0.6 (QwenLM/Qwen3-ASR; it pins transformers 4.57.6, so it cannot run here), its
  ``get_rope_index`` written out below in torch: ``qwen_asr/core/transformers_backend/modeling_qwen3_asr.py``
  :442-446 (NVIDIA Megatron-Bridge ``src/megatron/bridge/models/qwen3_asr/modeling_qwen3_asr/rope.py:38-48``
  is the same code): ``cumsum(mask) - 1`` in float32, 1 at masked slots, on three axes; deltas
  ``max + 1 - sum(mask)`` per row. Its processor's audio token count
  (``processing_qwen3_asr.py:39-47``) is written out too.

Prompts are random text and audio clips (what Qwen3-ASR takes). Negative controls: Qwen2.5-Omni's audio
token rule, no minimum clip length, pads at 0, the omni counter timeline on a prompt with an image (which
``get_rope_index`` also gives its sequence index, as it reads no ids), and a rotation on unequal axes.
"""

from __future__ import annotations

import string

import numpy as np
import pytest
import torch
from support.special_text import char_tokenizer
from transformers import (
    Qwen3ASRConfig,
    Qwen3ASRFeatureExtractor,
    Qwen3ASRForConditionalGeneration,
    Qwen3ASRProcessor,
    Qwen3Config,
)
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

import mrope
from mrope import Audio, Image, Text, Video, build_batch, build_positions, continue_positions, from_pretrained
from mrope._audio_grid import audio_mel_frames
from mrope._errors import LayoutError, MediaError
from mrope._token_ids import numpy_rope_index as rope_index
from mrope.media import image_grid
from mrope.models import get_family

FAMILY = get_family("qwen3_asr")
RULES = FAMILY.rules
SPECIALS = {
    "<|audio_start|>": 151669,
    "<|audio_end|>": 151670,
    "<|audio_pad|>": 151676,
    "<|endoftext|>": 151643,
}
CLIP = "<|audio_start|><|audio_pad|><|audio_end|>"


def asr_get_rope_index(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """qwen-asr modeling_qwen3_asr.py:442-446, written out: ``(3, B, L)`` float positions, ``(B, 1)`` deltas."""
    position_ids = attention_mask.float().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    position_ids = position_ids.unsqueeze(0).expand(3, -1, -1).to(attention_mask.device)
    max_position_ids = position_ids.max(0, keepdim=False)[0].max(-1, keepdim=True)[0]
    mrope_position_deltas = max_position_ids + 1 - torch.sum(attention_mask, dim=-1, keepdim=True)
    return position_ids, mrope_position_deltas


def asr_audio_tokens(input_lengths: int) -> int:
    """qwen-asr processing_qwen3_asr.py:39-47 (``_get_feat_extract_output_lengths``), written out."""
    input_lengths_leave = input_lengths % 100
    feat_lengths = (input_lengths_leave - 1) // 2 + 1
    output_lengths = ((feat_lengths - 1) // 2 + 1 - 1) // 2 + 1 + (input_lengths // 100) * 13
    return output_lengths


@pytest.fixture(scope="module")
def processor() -> Qwen3ASRProcessor:
    """transformers 5.24's processor: its feature extractor and a character tokenizer with the audio tokens."""
    names = {
        "audio_token": "<|audio_pad|>",
        "audio_bos_token": "<|audio_start|>",
        "audio_eos_token": "<|audio_end|>",
    }
    fast = char_tokenizer(SPECIALS, "<|endoftext|>", extra_special_tokens=names)
    return Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=fast)


def transformers_positions(inputs: dict) -> torch.Tensor:
    """The positions transformers 5.24's Qwen3-ASR model gives its text rotary (a tiny random model: positions
    do not depend on the weights)."""
    audio = {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 16, "d_model": 16}
    text = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    text |= {"num_key_value_heads": 1, "head_dim": 16, "vocab_size": 151680}
    config = Qwen3ASRConfig(
        audio_config={**audio, "output_dim": 32, "downsample_hidden_size": 8}, text_config=text
    )
    torch.manual_seed(0)
    model = Qwen3ASRForConditionalGeneration(config).eval()
    seen: list[torch.Tensor] = []
    model.model.language_model.rotary_emb.register_forward_hook(lambda _m, a, _o: seen.append(a[1].clone()))
    with torch.no_grad():
        model(**inputs)
    return seen[0]


def _prompts(rng: np.random.Generator, n: int) -> tuple[list[str], list[np.ndarray]]:
    """``n`` prompts of random text around one clip (5.24's processor takes one clip per prompt), and the
    clips: random samples, some under the 0.5 s minimum."""
    letters = list(string.ascii_letters + " ")
    texts, waves = [], []
    for _ in range(n):
        before = "".join(rng.choice(letters, int(rng.integers(0, 8))))
        after = "".join(rng.choice(letters, int(rng.integers(0, 8))))
        texts.append(before + CLIP + after)
        waves.append(rng.standard_normal(int(rng.integers(1000, 40000))).astype(np.float32))
    return texts, waves


def _segments(text: str, frames: int, processor: Qwen3ASRProcessor) -> list:
    before, after = text.split(CLIP)
    tok = processor.tokenizer
    return [Text(tok.encode(before)), Audio(mel_frames=frames), Text(tok.encode(after))]


def test_family_values() -> None:
    assert (RULES.positions_base, RULES.pad_position, RULES.video_support) == ("index", 1, "none")
    assert RULES.audio_pad_id == Qwen3ASRConfig().audio_token_id == SPECIALS["<|audio_pad|>"]
    assert (RULES.audio_start_id, RULES.audio_end_id) == (
        SPECIALS["<|audio_start|>"],
        SPECIALS["<|audio_end|>"],
    )
    # qwen-asr modeling_qwen3_asr.py:800 mrope_section [24, 20, 20], interleaved, rotate_half (neox)
    assert FAMILY.spec.mrope_section == (24, 20, 20)
    assert (FAMILY.spec.section_layout, FAMILY.spec.pairing, FAMILY.spec.head_dim) == (
        "interleaved",
        "neox",
        128,
    )
    assert get_family("Qwen/Qwen3-ASR-1.7B") is get_family("Qwen/Qwen3-ASR-0.6B-hf") is FAMILY


def test_audio_token_counts_are_the_processors() -> None:
    frames = np.array([*range(1, 310), 999, 1000, 1001, 4799, 48000])
    want = Qwen3ASRProcessor._get_audio_token_length(None, torch.from_numpy(frames))  # reads no state
    got = [mrope.audio_tokens(Audio(mel_frames=int(f)), model=FAMILY) for f in frames]
    assert got == want.tolist() == [asr_audio_tokens(int(f)) for f in frames]
    other = RULES.replace(audio_tokens="stride4")  # negative control: Qwen2.5-Omni's rule
    longer = frames >= 8  # (it gives no token to shorter clips)
    stride4 = [mrope.audio_tokens(Audio(mel_frames=int(f)), other) for f in frames[longer]]
    assert stride4 != want[longer].tolist()


def test_clip_frames_are_the_feature_extractors() -> None:
    """A clip alone, by its sample count: floor(samples / 160) frames, at least 8000 samples (0.5 s)."""
    extractor = Qwen3ASRFeatureExtractor()
    rng = np.random.default_rng(3800)
    counts = [1, 159, 160, 7999, 8000, 8159, 8160, 16000, *rng.integers(1, 64000, 12).tolist()]
    unpadded = RULES.replace(audio_min_samples=0)
    for n in counts:
        features = extractor(
            np.zeros(n, dtype=np.float32), sampling_rate=16000, padding=True, return_attention_mask=True
        )
        want = int(features["attention_mask"].sum())
        clip = Audio(seconds=n / 16000)
        assert audio_mel_frames(clip, RULES) == want, n
        if n < 8000:  # negative control: without the minimum, a short clip has fewer frames
            assert audio_mel_frames(clip, unpadded) != want


@pytest.mark.parametrize("side", ["left", "right"])
def test_processor_ids_and_transformers_positions(processor, side: str) -> None:
    rng = np.random.default_rng(38 if side == "left" else 39)
    texts, waves = _prompts(rng, 4)
    inputs = processor(text=texts, audio=waves, sampling_rate=16000, padding_side=side)
    frames = inputs["input_features_mask"].sum(-1).tolist()
    batch = build_batch(
        [_segments(t, f, processor) for t, f in zip(texts, frames, strict=True)],
        rules=RULES,
        padding_side=side,
    )
    mask = inputs["attention_mask"].numpy()
    np.testing.assert_array_equal(batch.attention_mask, mask)
    valid = mask.astype(bool)
    np.testing.assert_array_equal(batch.input_ids[valid], inputs["input_ids"].numpy()[valid])
    want = transformers_positions(inputs).expand(len(texts), -1).numpy()  # one row for the whole batch
    pads = (~valid).sum(axis=1)
    for row in range(len(texts)):
        # 5.24 ignores the mask: a left-padded row's valid tokens start at its pad count
        shift = pads[row] if side == "left" else 0
        np.testing.assert_array_equal(
            batch.ids[:, row, valid[row]],
            np.broadcast_to(want[row, valid[row]] - shift, (3, valid[row].sum())),
        )
    if side == "left":
        assert pads.any() and not np.array_equal(batch.ids[0], np.broadcast_to(want, batch.ids.shape)[0])


def test_single_clip_prompt_ids_from_seconds(processor) -> None:
    rng = np.random.default_rng(3801)
    for _ in range(6):
        texts, waves = _prompts(rng, 1)
        inputs = processor(text=texts, audio=waves, sampling_rate=16000)
        before, after = texts[0].split(CLIP)
        tok = processor.tokenizer
        segments = [Text(tok.encode(before)), Audio(seconds=len(waves[0]) / 16000), Text(tok.encode(after))]
        pos = build_positions(segments, rules=RULES)
        assert pos.input_ids.tolist() == inputs["input_ids"][0].tolist()
        np.testing.assert_array_equal(pos.ids, transformers_positions(inputs).expand(3, -1).numpy())


def _sample(rng: np.random.Generator) -> list:
    """Random text and audio clips (qwen-asr's processor takes several per prompt)."""
    segments: list = []
    for _ in range(int(rng.integers(1, 4))):
        segments += [Text(int(rng.integers(0, 6))), Audio(mel_frames=int(rng.integers(1, 1200)))]
    return [*segments, Text(int(rng.integers(0, 6)))]


@pytest.mark.parametrize("side", ["left", "right"])
def test_batches_and_token_ids_equal_qwen_asr(side: str) -> None:
    rng = np.random.default_rng(380 if side == "left" else 381)
    for _ in range(8):
        samples = [_sample(rng) for _ in range(3)]
        batch = build_batch(samples, rules=RULES, padding_side=side)
        want, want_deltas = asr_get_rope_index(torch.from_numpy(batch.attention_mask))
        np.testing.assert_array_equal(batch.ids, want.numpy())
        seqlens = np.array([s.mel_frames for sample in samples for s in sample if isinstance(s, Audio)])
        got, deltas = rope_index(
            batch.input_ids, None, None, batch.attention_mask, rules=RULES, audio_seqlens=seqlens
        )
        np.testing.assert_array_equal(got, want.numpy())
        np.testing.assert_array_equal(deltas, want_deltas[:, 0].numpy())  # every row has >= 3 valid tokens
        other = build_batch(samples, rules=RULES.replace(pad_position=0), padding_side=side)
        assert not np.array_equal(other.ids, want.numpy())  # negative control: pads at 0


def test_image_tokens_take_their_index_where_the_counter_timeline_differs() -> None:
    """get_rope_index reads no token ids: an image's tokens, were they in a prompt, take their index."""
    rng = np.random.default_rng(3838)
    counter = RULES.replace(positions_base="counter")
    for _ in range(5):
        segments = [*_sample(rng), Image((1, 4, 6)), Text(2)]
        pos = build_positions(segments, rules=RULES)
        want, _ = asr_get_rope_index(torch.ones(1, pos.num_tokens, dtype=torch.long))
        np.testing.assert_array_equal(pos.ids[:, None], want.numpy())
        assert not np.array_equal(build_positions(segments, rules=counter).ids[:, None], want.numpy())


def test_continued_conversation_counts_on() -> None:
    """A new turn after ``g`` decoded tokens takes the positions get_rope_index gives the whole conversation
    (the model adds the delta 0 to the cache position while decoding)."""
    prev = build_positions([Text(4), Audio(mel_frames=321), Text(3)], rules=RULES)
    turn = continue_positions(prev, [Text(5), Audio(mel_frames=77)], generated=6)
    n, k = prev.num_tokens + 6 + turn.positions.num_tokens, turn.positions.num_tokens
    want, _ = asr_get_rope_index(torch.ones(1, n, dtype=torch.long))
    np.testing.assert_array_equal(turn.positions.ids, want[:, 0, n - k :].numpy())
    # negative control: the same check against a conversation that forgot the decoded tokens
    assert not np.array_equal(turn.positions.ids, want[:, 0, prev.num_tokens : prev.num_tokens + k].numpy())


def test_rotation_is_the_qwen3_text_rotary() -> None:
    """On its positions (one value on every axis) the family's M-RoPE rotates as 5.24's Qwen3 rotary does."""
    config = Qwen3Config(
        head_dim=128,
        hidden_size=256,
        num_attention_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": FAMILY.spec.theta},
    )
    rotary = Qwen3RotaryEmbedding(config)
    g = torch.Generator().manual_seed(38)
    q, k = torch.randn(1, 2, 40, 128, generator=g), torch.randn(1, 2, 40, 128, generator=g)
    positions = torch.from_numpy(
        build_positions(_sample(np.random.default_rng(1)), rules=RULES).ids[:, None, :40]
    )
    cos, sin = rotary(q, positions[0])
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = mrope.apply_mrope(q, k, positions, FAMILY.spec, layout="bhsd", backend="torch")
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-4)
    shifted = positions.clone()
    shifted[1] += 3  # negative control: unequal axes rotate otherwise
    other_q, _ = mrope.apply_mrope(q, k, shifted, FAMILY.spec, layout="bhsd", backend="torch")
    assert not torch.allclose(other_q, want_q, rtol=1e-5, atol=1e-4)


def test_video_and_image_files_are_refused() -> None:
    with pytest.raises(LayoutError, match="video_support"):
        build_positions([Text(2), Video((2, 4, 4))], rules=RULES)
    with pytest.raises(MediaError, match="takes no images"):
        image_grid(224, 224, rules=RULES)


def test_checkpoint_configs_are_read() -> None:
    """transformers 5.24's config (no start / end ids: the registry's stay) and qwen-asr's thinker_config."""
    hf = from_pretrained(Qwen3ASRConfig(text_config={"rope_parameters": {"rope_theta": 1e6}}).to_dict())
    assert hf.rules == RULES.replace(name=hf.name) and hf.spec == FAMILY.spec
    ids = {"audio_token_id": 151646, "audio_start_token_id": 151647, "audio_end_token_id": 151648}
    fam = from_pretrained({"model_type": "qwen3_asr", "thinker_config": ids})
    assert (fam.rules.audio_pad_id, fam.rules.audio_start_id, fam.rules.audio_end_id) == (
        151646,
        151647,
        151648,
    )
    pos = build_positions([Text(1), Audio(mel_frames=100)], model=fam)
    assert pos.input_ids.tolist() == [0, 151647, *[151646] * 13, 151648]


def test_deltas_differ_only_where_a_pad_is_a_rows_maximum() -> None:
    """qwen-asr's deltas take the row's maximum over pads too (modeling_qwen3_asr.py:445): a padded row of
    one valid token has maximum 1 (a pad), so its delta is 1 where mrope's (the valid tokens') is 0."""
    samples = [[Text(1)], [Text(2)], [Text(3), Audio(mel_frames=200)]]
    batch = build_batch(samples, rules=RULES, padding_side="left")
    _, want = asr_get_rope_index(torch.from_numpy(batch.attention_mask))
    _, deltas = rope_index(
        batch.input_ids, None, None, batch.attention_mask, rules=RULES, audio_seqlens=[200]
    )
    assert want[:, 0].tolist() == [1, 0, 0] and deltas.tolist() == [0, 0, 0]
