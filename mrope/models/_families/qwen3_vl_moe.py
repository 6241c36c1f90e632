"""Qwen3-VL-MoE (``qwen3_vl_moe``): Qwen3-VL's rules, ids and rotary.

transformers 5.24: get_rope_index (modeling_qwen3_vl_moe.py:1038) is byte-identical to Qwen3-VL's; the
rotary (781) is Qwen3-VL's interleaved [24, 20, 20] (class default theta 5e5; released 5e6, head_dim 128).
Video: Qwen3VLVideoProcessor (5.24 auto mapping), so Qwen3-VL's sampling and clip-bounded sizing with the
released Qwen3-VL ``video_preprocessor_config.json`` values (4096..25165824 px over the clip, fps 2, 4..768
frames); the class defaults (128 * 32^2 .. 768 * 32^2) would differ.
"""

from mrope.models._families import qwen3_vl

FAMILY = qwen3_vl.FAMILY.replace(
    name="qwen3-vl-moe",
    model_types=("qwen3_vl_moe", "qwen3_vl_moe_text"),
    aliases=(
        "Qwen/Qwen3-VL-30B-A3B-Instruct",
        "Qwen/Qwen3-VL-30B-A3B-Thinking",
        "Qwen/Qwen3-VL-235B-A22B-Instruct",
        "Qwen/Qwen3-VL-235B-A22B-Thinking",
    ),
    exactness="Qwen3-VL rules; its 5.24 Qwen3VLMoe get_rope_index (convention='transformers5') and processor (ids, grids)",
)
