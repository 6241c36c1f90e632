"""Qwen3.5 (``qwen3_5``): Qwen3-VL's rules with the Qwen3.5 vocabulary and a partial interleaved rotary.

transformers 5.24: get_rope_index (modeling_qwen3_5.py:1361) equals Qwen3-VL's. Ids: vision start 248053,
end 248054, image 248056, video 248057. Rotary (136): interleaved [11, 11, 10], neox, partial 0.25 of
head_dim 256 (64 rotary channels; apply_rotary_pos_emb 667 passes the rest through), theta 1e7 released
(1e4 class default); configs carry ``mrope_interleaved: true``.
Video: Qwen3VLVideoProcessor (5.24 auto mapping), so Qwen3-VL's sampling and clip-bounded sizing with the
released Qwen3-VL ``video_preprocessor_config.json`` values (4096..25165824 px over the clip, fps 2, 4..768
frames), assumed for Qwen3.5 (no Qwen3.5 processor config was available offline; the
class defaults, 128 * 32^2 .. 768 * 32^2, would differ: read a checkpoint with :func:`mrope.from_pretrained`).
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl, qwen3_vl

QWEN3_5_IDS = {
    "vision_start_id": 248053,
    "vision_end_id": 248054,
    "image_pad_id": 248056,
    "video_pad_id": 248057,
}

FAMILY = qwen3_vl.FAMILY.replace(
    name="qwen3.5",
    model_types=("qwen3_5", "qwen3_5_text"),
    aliases=("Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-27B"),
    rules=qwen3_vl.FAMILY.rules.replace(**QWEN3_5_IDS),
    spec=RopeSpec(
        head_dim=256,
        rotary_dim=64,
        theta=10_000_000.0,
        mrope_section=(11, 11, 10),
        section_layout="interleaved",
    ),
    config_partial_rotary_factor=0.25,  # configuration_qwen3_5.py:110 sets it where a config gives none
    exactness="Qwen3-VL rules, Qwen3.5 ids; its 5.24 Qwen3_5 get_rope_index (convention='transformers5') and processor (ids, grids)",
    config_ids=qwen2_vl.QWEN_CONFIG_IDS,
    packed_input="text-row+fla",  # Gated DeltaNet layers (modeling_qwen3_5.py:628, 641)
)
