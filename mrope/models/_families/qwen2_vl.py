"""Qwen2-VL (``qwen2_vl``): the reference M-RoPE rule set.

Positions: ``tau(i) = i`` and the max+1 advance (``llm_pos_ids_list[-1].max() + 1``) of the released
transformers 4.x ``get_rope_index``, which vLLM keeps; transformers 5.24's ``get_rope_index``
(models/qwen2_vl/modeling_qwen2_vl.py:895) resumes after a block at ``s + max(H', W')`` (:989) and pads with 0.
Rotary: chunked [16, 24, 24], neox, theta 1e6, head_dim 128 (released config.json).
"""

from mrope._rule_checks import NO_CLIP_BUDGET
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


def qwen2_video_fields(factor: int) -> dict[str, CheckpointChoice]:
    """Qwen2VLVideoProcessor's keys that change grids beyond the pixel bounds, at a resize factor.

    - ``cap_pixels_per_frame``: ``true`` shares ``max_video_tokens * factor**2 * 0.9`` pixels out among
      the frames (transformers 5.24 models/qwen2_vl/video_processing_qwen2_vl.py:253-260, qwen-vl-utils'
      rule); ``false``, or unset (``None``, read as ``false`` at :335-342), shares none. mrope keeps
      qwen-vl-utils' float share ``total / n * 2``; the 5.24 processor floors ``total * 2 // n``, which
      lands one patch row lower in about 1 capped clip in 20,000 (10 of 200,000 random clips).
    - ``max_video_tokens``: only :data:`VIDEO_TOKENS`, the budget mrope computes, is accepted (it acts
      only under the cap; the choice holds the frame rule it agrees with).
    - ``do_sample_frames``: ``false`` (the class default, :130) keeps every frame; ``true`` samples at the
      processor's ``fps`` / ``num_frames``, which mrope does not read from a file (refused; a call's
      ``fps`` or ``nframes`` samples as ``sample_frames`` does).
    """
    return {
        "video:cap_pixels_per_frame": CheckpointChoice(
            "video_total_pixels", {True: clip_pixels(factor), False: NO_CLIP_BUDGET}
        ),
        "video:max_video_tokens": CheckpointChoice(
            "video_bounds", {VIDEO_TOKENS: "frame"}, why=f"mrope's clip budget is {VIDEO_TOKENS} tokens"
        ),
        "video:do_sample_frames": CheckpointChoice(
            "frame_sampling",
            {False: "qwen2-vl"},
            why="mrope reads no sampling rate from the file; pass fps or nframes with each video instead",
        ),
    }


QWEN2_VIDEO_FIELDS = qwen2_video_fields(28)
"""Qwen2VLVideoProcessor's keys at Qwen2-VL's resize factor 28 (:func:`qwen2_video_fields`)."""

RELEASED_VIDEO = {
    "video_min_pixels": 3136,
    "video_max_pixels": 12845056,
    "video_total_pixels": NO_CLIP_BUDGET,
    "frame_sampling": "qwen2-vl",
    "video_bounds": "frame",
}
"""What transformers 5.24's video processor does with a released Qwen2-VL / Qwen2.5-VL folder
(``route="processor"``). The folders ship no video processor config, so ``AutoVideoProcessor`` builds
Qwen2VLVideoProcessor from ``preprocessor_config.json`` (video_processing_utils.py
``get_video_processor_dict``): its ``min_pixels`` 3136 / ``max_pixels`` 12845056 become the video
``size`` (video_processing_qwen2_vl.py:143-151; Qwen/Qwen2-VL-7B-Instruct and
Qwen/Qwen2.5-VL-7B-Instruct ``preprocessor_config.json`` on the Hugging Face Hub), every frame is kept
(``do_sample_frames = False``, :130) and no clip budget is shared out (``cap_pixels_per_frame`` unset,
:335-342). ``fps`` 2, frames 4..768 are the class's ``sample_frames`` bounds for a call that asks to
sample. The model-card recipe (qwen-vl-utils' 128..768 tokens a frame, 2 fps) is ``route="qwen-vl-utils"``
(:data:`mrope.models._routes.ROUTES`)."""

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
        **RELEASED_VIDEO,
        fps=2.0,
        min_frames=4,
        max_frames=768,
        image_bounds="frame",
    ),
    spec=RopeSpec(head_dim=128, rotary_dim=128, theta=1_000_000.0, mrope_section=(16, 24, 24)),
    transformers5=TRANSFORMERS5,
    exactness="official Qwen2-VL rule (max+1, pads 1); its 5.24 get_rope_index and processor on real files "
    "(convention='transformers5')",
    config_ids=QWEN_CONFIG_IDS,
    checkpoint_fields=QWEN2_VIDEO_FIELDS,
)
