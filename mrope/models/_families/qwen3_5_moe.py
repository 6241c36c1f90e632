"""Qwen3.5-MoE (``qwen3_5_moe``): Qwen3.5's rules, ids and rotary.

transformers 5.24: get_rope_index (modeling_qwen3_5_moe.py:1471) equals Qwen3-VL's; rotary (153) is
Qwen3.5's (interleaved [11, 11, 10], partial 0.25 of head_dim 256). Video: Qwen3VLVideoProcessor with
Qwen3.5's values (see :mod:`mrope.models._families.qwen3_5`).
"""

from mrope.models._families import qwen3_5

FAMILY = qwen3_5.FAMILY.replace(
    name="qwen3.5-moe",
    model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
    aliases=("Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-397B-A17B"),
    exactness="Qwen3-VL rules, Qwen3.5 ids; its 5.24 Qwen3_5Moe get_rope_index (convention='transformers5') and processor (ids, grids)",
)
