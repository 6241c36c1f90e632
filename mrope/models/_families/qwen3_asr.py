"""Qwen3-ASR (``qwen3_asr``): every token, audio included, at its index in the sequence.

Released code: Qwen's PyPI ``qwen-asr`` 0.0.6 (QwenLM/Qwen3-ASR), also in NVIDIA Megatron-Bridge
(``src/megatron/bridge/models/qwen3_asr``). Its ``get_rope_index`` (qwen-asr
``qwen_asr/core/transformers_backend/modeling_qwen3_asr.py``:414-448; Megatron-Bridge
``modeling_qwen3_asr/rope.py``:18-48, the same lines) reads only the attention mask: ``cumsum(mask) - 1``
on all three axes, 1 at masked slots (pads 1), deltas ``max + 1 - sum(mask)`` (0 for a row of two or more
valid tokens; the model subtracts the pad count before decoding, modeling_qwen3_asr.py:1216-1220).
transformers 5.24 (models/qwen3_asr, the ``-hf`` checkpoints) runs a plain Qwen3 text model (1-D rotary)
and passes the positions it is given, none by default (modeling_qwen3_asr.py:535-575), so the text model
counts ``arange(seq_len)`` over the whole row, pads included (models/qwen3/modeling_qwen3.py:380-383): equal to the released rule on unpadded rows
and at the valid tokens of right-padded rows; a left-padded row starts at its pad count, which no rule
expresses. ``positions_base="index"`` with audio: the omni engine lays the pieces out and its timeline
writes the sequence index (:mod:`mrope._layout.omni_timeline`).
Audio tokens: each ``<|audio_pad|>`` becomes ``_get_audio_token_length(mel frames)`` of them (transformers
5.24 processing_qwen3_asr.py:410-433; qwen-asr processing_qwen3_asr.py:39-47): 13 per 100 mel frames plus
the remainder's ``((f - 1) // 2 + 1 - 1) // 2 + 1``, ``f = (r - 1) // 2 + 1``, Qwen3-Omni's rule
(``audio_tokens="window"``, window 50; qwen-asr writes the 100 in its code and 5.24's processor passes its own
``n_window`` 50, so the config's ``n_window`` is not read). Frames: its feature extractor
(feature_extraction_qwen3_asr.py:189-216) zero-pads a clip under ``min_length`` 8000 samples (0.5 s) to it,
counting the padding as frames (``audio_min_samples``, as qwen-asr's inference/utils.py:322-329 does), and
masks ``floor(samples / 160)`` frames of a clip alone or the longest of a call (``audio_frames="floor"``); a
shorter clip of a batch gets ``ceil`` from the padded mask: give ``Audio(mel_frames=...)`` from
``input_features_mask.sum(-1)`` to match such a call exactly.
Ids: audio 151676 (5.24 configuration_qwen3_asr.py ``audio_token_id``), start 151669 and end 151670 (the
tokenizer's ``<|audio_start|>`` / ``<|audio_end|>``, in qwen-asr checkpoints' ``thinker_config``; qwen-asr's
config class defaults 151646 / 151647 are not the checkpoints'). A checkpoint read by
:func:`mrope.from_pretrained` overrides them (``config_ids``). Videos: none (its processor takes text and
one audio clip per prompt); images are never its input either, but the index rule needs no grid and gives any
token its index, as ``get_rope_index`` does whatever the ids are.
Rotary: qwen-asr's (modeling_qwen3_asr.py:781-837) is interleaved [24, 20, 20] (the ``mrope_section``
default at :800), neox (``rotate_half``, :71-75), head_dim 128; with the same position on every axis it
rotates as 5.24's 1-D Qwen3 rotary. Theta 1e6 is the released text config's (qwen-asr's class default is
5e6, transformers' Qwen3 default 1e4): an assumption a checkpoint overrides.
"""

from mrope._rules import LayoutRules
from mrope.models._families import qwen2_5_omni, qwen3_omni
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="qwen3-asr",
    model_types=("qwen3_asr",),
    aliases=(
        "Qwen/Qwen3-ASR-1.7B",
        "Qwen/Qwen3-ASR-0.6B",
        "Qwen/Qwen3-ASR-1.7B-hf",
        "Qwen/Qwen3-ASR-0.6B-hf",
    ),
    rules=LayoutRules(
        positions_base="index",
        pad_position=1,  # qwen-asr modeling_qwen3_asr.py:443
        image_bounds="none",  # its processor takes no images
        video_support="none",
        audio_pad_id=151676,
        audio_start_id=151669,
        audio_end_id=151670,
        audio_tokens="window",
        audio_window=50,  # 13 tokens per 100 frames
        audio_frames="floor",
        audio_max_frames=None,  # truncation=False
        audio_min_samples=8000,  # feature_extraction_qwen3_asr.py min_length
    ),
    spec=qwen3_omni.FAMILY.spec,
    transformers5={},
    packed_input="none",
    exactness="qwen-asr 0.0.6 get_rope_index (written out in the tests; Megatron-Bridge's is the same) and "
    "transformers 5.24 (unpadded and right-padded rows' valid tokens): the sequence index on every axis, "
    "pads 1; build_positions ids = its processor's text expansion",
    config_ids=qwen2_5_omni.OMNI_CONFIG_IDS,
)
