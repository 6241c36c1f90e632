"""Qwen2-VL (``qwen2_vl``): the reference M-RoPE rule set.

Positions: ``tau(i) = i`` and the max+1 advance (``llm_pos_ids_list[-1].max() + 1``) of the released
transformers 4.x ``get_rope_index``, which vLLM keeps; transformers 5.24's ``get_rope_index``
(models/qwen2_vl/modeling_qwen2_vl.py:895) resumes after a block at ``s + max(H', W')`` (:989) and pads with 0.
Rotary: chunked [16, 24, 24], neox, theta 1e6, head_dim 128 (released config.json).
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import CheckpointChoice, ModelFamily

QWEN_CONFIG_IDS = {
    "vision_start_token_id": "vision_start_id",
    "vision_end_token_id": "vision_end_id",
    "image_token_id": "image_pad_id",
    "video_token_id": "video_pad_id",
}
"""config.json keys of the Qwen vocabulary's wrapper and placeholder ids (every Qwen-style family)."""

TRANSFORMERS5 = {"advance": "spatial", "pad_position": 0, "seconds_grouping": "i*(tps*spg)"}
"""transformers 5.x ``get_rope_index``: ``s + max(H', W')`` after a block, pads 0, video time grouped as
``arange * (tps * spg)`` in float32 (transformers 5.24 models/qwen2_5_vl/modeling_qwen2_5_vl.py:1033
``time_interval = tokens_per_second * second_per_grid``, then :1040 ``current_pos += max(h, w) // merge``)."""

VIDEO_TOKENS = 128000
"""A clip's token budget: qwen-vl-utils' ``MODEL_SEQ_LEN``, Qwen2VLVideoProcessor's ``max_video_tokens``."""


def clip_pixels(factor: int) -> int:
    """A clip's pixel budget for a resize factor: ``int(VIDEO_TOKENS * factor**2 * 0.9)`` (qwen-vl-utils)."""
    return int(VIDEO_TOKENS * factor * factor * 0.9)


def video_tokens_choice(factor: int) -> CheckpointChoice:
    """The ``max_video_tokens`` key: :data:`VIDEO_TOKENS` is the budget mrope computes, another is refused."""
    return CheckpointChoice(
        "video_total_pixels",
        {VIDEO_TOKENS: clip_pixels(factor)},
        why=f"mrope's clip budget is qwen-vl-utils' {VIDEO_TOKENS} tokens",
    )


QWEN2_VIDEO_FIELDS = {
    "video:cap_pixels_per_frame": CheckpointChoice(
        "video_bounds", {True: "frame"}, why="mrope sizes videos as qwen-vl-utils does: the capped rule"
    ),
    "video:max_video_tokens": video_tokens_choice(28),
}
"""Qwen2VLVideoProcessor's keys for the clip's pixel budget (5.24: ``cap_pixels_per_frame`` bounds the
frames by ``max_video_tokens * 28^2 * 0.9`` shared by the clip, as qwen-vl-utils does): the values mrope
computes are accepted, others refused. mrope keeps qwen-vl-utils' float share ``total / n * 2``; the 5.24
processor floors ``total * 2 // n``, which lands one patch row lower in about 1 clip in 20,000 (10 of
200,000 random clips)."""

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
    rules=LayoutRules(
        merge_size=2,  # config.json vision_config.spatial_merge_size
        temporal_patch_size=2,  # config.json vision_config.temporal_patch_size
        patch_size=14,  # config.json vision_config.patch_size
        # the released preprocessor_config.json (Qwen2-VL and Qwen2.5-VL): 4 to 16384 image tokens, as
        # qwen-vl-utils (IMAGE_MIN/MAX_TOKEN_NUM x 28^2); transformers' class default 28*28*1280 applies
        # only to a processor built without a checkpoint (transformers 5.24
        # models/qwen2_vl/image_processing_qwen2_vl.py:44-46; the released Qwen/Qwen2-VL-7B-Instruct
        # preprocessor_config.json sets min_pixels 3136, max_pixels 12845056)
        image_min_pixels=3136,
        image_max_pixels=12845056,
        # videos: qwen-vl-utils (fetch_video), which the model cards use: frames sampled by smart_nframes
        # (fps 2, 4..768 frames), each frame within 128..768 tokens x 28^2, and the clip within
        # MODEL_SEQ_LEN 128000 x 28^2 x 0.9 pixels shared by its frames (qwen-vl-utils
        # qwen_vl_utils/vision_process.py: MODEL_SEQ_LEN, smart_nframes, fetch_video)
        video_min_pixels=128 * 28 * 28,
        video_max_pixels=768 * 28 * 28,
        video_total_pixels=clip_pixels(28),
        fps=2.0,
        min_frames=4,
        max_frames=768,
        frame_sampling="qwen-vl-utils",
        video_bounds="frame",
        image_bounds="frame",
    ),
    spec=RopeSpec(head_dim=128, rotary_dim=128, theta=1_000_000.0, mrope_section=(16, 24, 24)),
    transformers5=TRANSFORMERS5,
    exactness="official Qwen2-VL rule (max+1, pads 1); its 5.24 get_rope_index and processor on real files "
    "(convention='transformers5')",
    config_ids=QWEN_CONFIG_IDS,
    checkpoint_fields=QWEN2_VIDEO_FIELDS,
)
