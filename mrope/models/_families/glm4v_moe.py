"""GLM-4.5V (``glm4v_moe``): GLM-4.1V's rules with its own image id, and a split-half (neox) rotary.

transformers 5.24: get_rope_index (modeling_glm4v_moe.py:1090) equals GLM-4.1V's. Image id 151363; video
frames carry it too (the config's video id 151364 is never written). Processor: Glm4vProcessor (integer
second after each frame).
Rotary (60-180): chunked [8, 12, 12], ``cat(f, f)`` + ``rotate_half``: **neox**, unlike GLM-4.1V; partial 0.5
of head_dim 128, theta 1e4. The 5.24 class has no ``head_dim`` (it would compute 4096 // 96 = 42); the
released config sets 128.
"""

from mrope._spec import RopeSpec
from mrope.models._families import glm4v

FAMILY = glm4v.FAMILY.replace(
    name="glm-4.5v",
    model_types=("glm4v_moe", "glm4v_moe_text"),
    aliases=("zai-org/GLM-4.5V", "zai-org/GLM-4.5V-FP8"),
    rules=glm4v.FAMILY.rules.replace(image_pad_id=151363, video_pad_id=151363),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=64,
        theta=10_000.0,
        mrope_section=(8, 12, 12),
        section_layout="chunked",
        pairing="neox",
    ),
    config_partial_rotary_factor=0.5,  # configuration_glm4v_moe.py:117 sets it where a config gives none
    exactness="GLM-4.1V rules, own image id; its 5.24 Glm4vMoe get_rope_index (convention='transformers5') and processor (ids, grids)",
)
