"""HunyuanOCR (``hunyuan_vl``): every axis is the sequence index; image grid tokens carry (w, h, image index).

Positions (modeling_hunyuan_vl.py:864): four axes (``len(mrope_section)``; with three, the sequence axis
is dropped). An image is ``<image_start>`` then ``H' * (W' + 1) + 2`` placeholders (the first and last,
``cat_extra_token``, keep sequence positions; the grid has a newline column) then ``<image_end>``. The grid
tokens write ``(col, row, image index)`` on the last three axes. The image index restarts in every
sequence (vLLM per request; Tencent trains with 5.24's method one sample at a time); 5.24 keeps counting
across the rows of a batch, offered as ``convention="transformers5"``. Pads 0. Images only.
Rotary: Tencent's xdrope: chunked [16, 16, 16, 16] (the same axis map in both halves, split-half pairs),
head_dim 128, theta 1e4, NTK-alpha 1000 (``base = theta * alpha ** (d / (d - 2))``). 5.24's
``recomposition_frequencies`` (models/hunyuan_vl/modeling_hunyuan_vl.py:181-190) splits ``cat(f, f)`` by
``2 * section`` instead, so ``rotate_half`` pairs axis 0 with axis 2 and axis 1 with axis 3, not a rotation on
image tokens; Tencent's own ``apply_rotary_pos_emb_xdrope`` repeats the section list (``xdrope_section * 2``),
the same axis map in both halves: the official layout is the one here.
Sizing: patch 16, merge 2, images 512^2 .. 2048^2 px (Qwen's smart_resize, as its image processor).
Videos (``video_support="none"``): no video processor and no video path in get_rope_index:
:func:`mrope.media.load_video` and ``Video`` segments are refused.
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeScaling, RopeSpec
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="hunyuan-ocr",
    model_types=("hunyuan_vl", "hunyuan_vl_text"),
    aliases=("tencent/HunyuanOCR",),
    rules=LayoutRules(
        temporal_patch_size=1,
        row_newline=True,
        positions_base="sequence",
        num_axes=4,
        grid_border=True,
        vision_start_id=120118,
        vision_end_id=120119,
        image_pad_id=120120,
        pad_position=0,
        patch_size=16,
        image_min_pixels=512 * 512,
        image_max_pixels=2048 * 2048,
        video_support="none",
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=10_000.0,
        mrope_section=(16, 16, 16, 16),
        section_layout="chunked",
        pairing="neox",
        scaling=RopeScaling(type="ntk_alpha", alpha=1000.0),
    ),
    transformers5={"image_index_scope": "batch"},
    packed_input="none",  # modeling_hunyuan_vl.py:803-813 keeps all N + 1 rows, then raises
    exactness="official layout (image index per sequence, xdrope rotary); transformers 5.24's batch-wide "
    "image index under convention='transformers5'",
    config_ids={
        "im_start_id": "vision_start_id",
        "im_end_id": "vision_end_id",
        "image_token_id": "image_pad_id",
    },
)
