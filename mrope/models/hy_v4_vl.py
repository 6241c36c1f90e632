"""HY-V4-VL (``hy_v4_vl``): a newline token ends every merged row; each video frame is a block of its own.

Positions (modeling_hy_v4_vl.py:1244): a frame is ``H' x (W' + 1)`` tokens (the last column is the row's
newline, written as the image / video placeholder by the processor); frame ``f`` of a video starts all
three axes at ``s + f * max(H', W' + 1)``; the counter resumes at max + 1 (deliberately, 1391); pads 0.
Temporal patch 1, no timestamp text. Ids: image 120120, video 120124. The image wrappers 120118 / 120119
are the HunYuan tokenizer's ``<image>`` pair (HunyuanOCR's config), assumed here: no released HY-V4-VL chat
template was available offline; positions do not depend on them.
Rotary (HYV4VLRotaryEmbedding + apply_rotary_pos_emb:71): interleaved [12, 10, 10], adjacent pairs,
theta 1e4, on the 64-channel rope slice at the end of the 256-channel MLA query and key
(``qk_nope_head_dim`` 192 pass through first).
Sizing: patch 16, merge 2, images 512^2 .. 2048^2 px.
"""

from mrope.models.family import ModelFamily
from mrope.rules import LayoutRules
from mrope.spec import RopeSpec

FAMILY = ModelFamily(
    name="hy-v4-vl",
    model_types=("hy_v4_vl", "hy_v4_vl_text"),
    aliases=(),
    rules=LayoutRules(
        name="hy-v4-vl",
        temporal_patch_size=1,
        row_newline=True,
        frame_block=True,
        vision_start_id=120118,
        vision_end_id=120119,
        image_pad_id=120120,
        video_pad_id=120124,
        pad_position=0,
        patch_size=16,
        image_min_pixels=512 * 512,
        image_max_pixels=2048 * 2048,
        min_frames=2,
        max_frames=1024,
    ),
    spec=RopeSpec(
        head_dim=256,
        rotary_dim=64,
        rotary_offset=192,
        theta=10_000.0,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
    ),
    transformers5={},
    exactness="transformers 5.24 get_rope_index (its release code: max+1, pads 0) under both conventions",
    config_ids={"image_token_id": "image_pad_id", "video_token_id": "video_pad_id"},
)
