"""PaddleOCR-VL (``paddleocr_vl``): Qwen2-VL's rules with ERNIE's vocabulary, images only.

transformers 5.24: get_rope_index (modeling_paddleocr_vl.py:1021) is Qwen2-VL's (5.x advance; for images
the same as max+1). Ids: vision start 101305, end 101306, image 100295 (video 100296; the processor has no
video path). Image processor: patch 14, merge 2, temporal 1, 384^2 .. 1536^2 px, and a side under 28 px
first set to 28 with the other scaled alike (``image_upscale_short_side``). Videos
(``video_support="grids"``): transformers 5.24 has no PaddleOCR-VL video processor, so
:func:`mrope.media.load_video` refuses a file; its get_rope_index still lays out ``video_grid_thw``, so
``Video(grid=...)`` keeps working.
Rotary (166): Qwen2-VL chunked [16, 24, 24], neox, theta 5e5, head_dim 128.
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl

FAMILY = qwen2_vl.FAMILY.replace(
    name="paddleocr-vl",
    model_types=("paddleocr_vl", "paddleocr_vl_text"),
    aliases=("PaddlePaddle/PaddleOCR-VL",),
    rules=qwen2_vl.FAMILY.rules.replace(
        vision_start_id=101305,
        vision_end_id=101306,
        image_pad_id=100295,
        video_pad_id=100296,
        temporal_patch_size=1,
        image_min_pixels=384 * 384,
        image_max_pixels=1536 * 1536,
        image_upscale_short_side=True,
        video_support="grids",
    ),
    spec=RopeSpec(head_dim=128, rotary_dim=128, theta=500_000.0, mrope_section=(16, 24, 24)),
    exactness="Qwen2-VL rules, own ids, images only; its 5.24 PaddleOCRVL get_rope_index (convention='transformers5') and processor (ids, grids)",
)
