"""Cohere Compass (``cohere_compass``, North-Micro-Vision): Qwen3-VL's rules with Cohere's ids.

transformers 5.24: get_rope_index (modeling_cohere_compass.py:1029) equals Qwen3-VL's. Ids: vision start
255028 (``<|VISION_START|>``), end 255029, image 255031, video 255032. The processor writes Qwen3-VL's
timestamp text, averaged over the 2 frames of a temporal patch (processing 70-97, 168). Video
(CohereCompassVideoProcessor, class defaults): Qwen3-VL's ``sample_frames`` (fps 2, 4..768 frames) and
clip-bounded ``smart_resize``: patch 16, temporal 2, 128 * 32^2 .. 768 * 32^2 px bound the whole clip's
``t * h * w`` (not one frame's: ``cap_pixels_per_frame`` is off, and refused when saved on).
Rotary (70-150): Qwen3-VL interleaved, per layer type: ``rope_parameters`` is keyed by layer type and a
``None`` entry is a layer without rotary (NoPE); head_dim 128, no partial factor. The class default
``rope_parameters`` is ``{}`` (not runnable); the spec below is the full-attention layers' with the
Qwen3-VL sections and theta 1e6 (no released value known: read the checkpoint with
:func:`mrope.from_pretrained`).
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl, qwen3_vl

FAMILY = qwen3_vl.FAMILY.replace(
    name="cohere-compass",
    model_types=("cohere_compass", "cohere_compass_text"),
    aliases=(),
    rules=qwen3_vl.FAMILY.rules.replace(
        vision_start_id=255028,
        vision_end_id=255029,
        image_pad_id=255031,
        video_pad_id=255032,
        video_min_pixels=128 * 32 * 32,
        video_max_pixels=768 * 32 * 32,
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=1_000_000.0,
        mrope_section=(24, 20, 20),
        section_layout="interleaved",
    ),
    exactness="Qwen3-VL rules, own ids; its 5.24 CohereCompass get_rope_index (convention='transformers5') and processor (ids, grids)",
    config_ids=qwen2_vl.QWEN_CONFIG_IDS,
    checkpoint_fields=qwen3_vl.QWEN3_VIDEO_FIELDS,
)
