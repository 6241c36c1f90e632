"""Qwen4-Exp (``qwen4_exp``): Qwen3-VL's rules with the Qwen3.5 vocabulary; sections shorter than the rotary.

transformers 5.24: get_rope_index (modeling_qwen4_exp.py:2087) equals Qwen3-VL's, with the Qwen3.5 ids.
Rotary (94): Qwen3.5's interleaved [11, 11, 10], but the class config has no partial factor, so all 256
channels of head_dim 256 rotate: the sections reach frequencies below 33 only, and frequencies 33..127 all
stay on t. Apply (650) passes channels beyond the rotary through. No released checkpoint config was
available offline: theta is the 5.24 class default 1e4 (read a checkpoint with :func:`mrope.from_pretrained`).
Video: Qwen3VLVideoProcessor with Qwen3.5's values (Qwen3-VL's released ones, see :mod:`mrope.models._families.qwen3_5`),
not its class defaults (128 * 32^2 .. 768 * 32^2 over the clip): with no checkpoint, an assumption.
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen3_5

FAMILY = qwen3_5.FAMILY.replace(
    name="qwen4-exp",
    model_types=("qwen4_exp", "qwen4_exp_text"),
    aliases=(),
    spec=RopeSpec(
        head_dim=256,
        rotary_dim=256,
        theta=10_000.0,
        mrope_section=(11, 11, 10),
        section_layout="interleaved",
    ),
    config_partial_rotary_factor=1.0,  # not Qwen3.5's 0.25: its config class sets none
    exactness="Qwen3-VL rules, Qwen3.5 ids; its 5.24 Qwen4Exp get_rope_index (convention='transformers5') and processor (ids, grids)",
)
