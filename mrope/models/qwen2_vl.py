"""Qwen2-VL (``qwen2_vl``): the reference M-RoPE rule set.

Positions: SPEC section 1 (``tau(i) = i``, max+1 advance); transformers 5.24's ``get_rope_index``
(modeling_qwen2_vl.py:895) resumes after a block at ``s + max(H', W')`` and pads with 0.
Rotary: chunked [16, 24, 24], neox, theta 1e6, head_dim 128 (released config.json).
"""

from mrope.models.family import ModelFamily
from mrope.rules import LayoutRules
from mrope.spec import RopeSpec

QWEN_CONFIG_IDS = {
    "vision_start_token_id": "vision_start_id",
    "vision_end_token_id": "vision_end_id",
    "image_token_id": "image_pad_id",
    "video_token_id": "video_pad_id",
}
"""config.json keys of the Qwen vocabulary's wrapper and placeholder ids (every Qwen-style family)."""

TRANSFORMERS5 = {"advance": "spatial", "pad_position": 0, "seconds_grouping": "i*(tps*spg)"}
"""transformers 5.x ``get_rope_index``: ``s + max(H', W')`` after a block, pads 0, video time grouped as
``arange * (tps * spg)`` in float32 (FAMILIES.md)."""

FAMILY = ModelFamily(
    name="qwen2-vl",
    model_types=("qwen2_vl", "qwen2_vl_text"),
    aliases=(
        "Qwen/Qwen2-VL-2B",
        "Qwen/Qwen2-VL-2B-Instruct",
        "Qwen/Qwen2-VL-7B",
        "Qwen/Qwen2-VL-7B-Instruct",
        "Qwen/Qwen2-VL-72B",
        "Qwen/Qwen2-VL-72B-Instruct",
    ),
    rules=LayoutRules(name="qwen2-vl"),
    spec=RopeSpec(head_dim=128, rotary_dim=128, theta=1_000_000.0, mrope_section=(16, 24, 24)),
    transformers5=TRANSFORMERS5,
    exactness="official Qwen2-VL rule (max+1, pads 1); transformers 5.24 get_rope_index under convention='transformers5'",
    config_ids=QWEN_CONFIG_IDS,
)
