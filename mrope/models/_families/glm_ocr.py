"""GLM-OCR (``glm_ocr``): GLM-4.1V's rules with its own vocabulary.

transformers 5.24: get_rope_index (modeling_glm_ocr.py:875) equals GLM-4.1V's. Ids: begin/end of image
59256 / 59257, begin/end of video 59258 / 59259, image 59280 (video frames carry it; video 59281 unused).
Rotary (642): GLM-4.1V's gptj, chunked [8, 12, 12], head_dim 64 (1024 / 16), full rotary, theta 1e4. No
processor of its own (Glm4vProcessor).
"""

from mrope._spec import RopeSpec
from mrope.models._families import glm4v

FAMILY = glm4v.FAMILY.replace(
    name="glm-ocr",
    model_types=("glm_ocr", "glm_ocr_text"),
    aliases=("zai-org/GLM-OCR",),
    rules=glm4v.FAMILY.rules.replace(
        vision_start_id=59256,
        vision_end_id=59257,
        video_start_id=59258,
        video_end_id=59259,
        image_pad_id=59280,
        video_pad_id=59280,
    ),
    spec=RopeSpec(
        head_dim=64,
        rotary_dim=64,
        theta=10_000.0,
        mrope_section=(8, 12, 12),
        section_layout="chunked",
        pairing="gptj",
    ),
    exactness="GLM-4.1V rules, own ids; its 5.24 GlmOcr get_rope_index (convention='transformers5') and processor (ids, grids)",
)
