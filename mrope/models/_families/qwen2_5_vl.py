"""Qwen2.5-VL (``qwen2_5_vl``): Qwen2-VL with video time in seconds.

Positions: a video's temporal patch ``i`` gets ``tau(i) = trunc(fl32(fl32(i * spg32) * tokens_per_second))``,
float32 as the release computes it from the processor's float32 ``second_per_grid_ts`` (5.x groups
``i * (tps * spg)``: ``convention="transformers5"``; released checkpoints: ``tokens_per_second`` 2, the
5.24 config class defaults to 4). Images keep t = 0.
Rotary: as Qwen2-VL.
"""

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="qwen2.5-vl",
    model_types=("qwen2_5_vl", "qwen2_5_vl_text"),
    aliases=(
        "Qwen/Qwen2.5-VL-3B-Instruct",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "Qwen/Qwen2.5-VL-32B-Instruct",
        "Qwen/Qwen2.5-VL-72B-Instruct",
    ),
    # sizing as Qwen2-VL (the same released preprocessor_config.json values, the same video processor);
    # tokens_per_second: config.json vision_config.tokens_per_second of every released checkpoint is 2
    # (the 5.24 config class defaults to 4); video time in float32 as the release computes it
    rules=qwen2_vl.FAMILY.rules.replace(
        temporal="seconds", tokens_per_second=2.0, seconds_grouping="(i*spg)*tps"
    ),
    spec=qwen2_vl.FAMILY.spec,
    transformers5=qwen2_vl.TRANSFORMERS5,
    exactness="official Qwen2.5-VL rule (max+1, pads 1); its 5.24 get_rope_index and processor on real files "
    "(convention='transformers5')",
    config_ids=qwen2_vl.QWEN_CONFIG_IDS,
    checkpoint_fields=qwen2_vl.QWEN2_VIDEO_FIELDS,
)
