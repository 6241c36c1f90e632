"""ERNIE-4.5-VL (``ernie4_5_vl_moe``): Qwen2-VL positions with video frames merged in pairs.

Positions (modeling_ernie4_5_vl_moe.py:1140): a video grid's ``t`` counts frames and
``temporal_merge_size`` 2 of them make one LLM frame (``T' = t / 2``); images are never merged in time.
No timestamp text (times are drawn onto the frames). Wrappers are text: image 101304 / 101305, video
101306 / 101307. 5.24 resumes after a block at ``s + max(H', W')`` and pads with 0; the official rule (and
vLLM) resumes at max + 1, which differs after a video with ``t / 2 > max(H', W')``.
Rotary (Ernie4_5_VLMoeTextRotaryEmbedding): the 44 highest frequencies alternate h (even) and w (odd), the
20 lowest go to t (``mrope_section`` (22, 22, 20) is ordered h, w, t); adjacent-pair rotation; head_dim
128, theta 5e5.
Sizing: patch 14, merge 2; images 56^2 .. 28^2 * 6177 px (Ernie4_5_VLMoeImageProcessorPil, the Qwen rule).
Videos (Ernie4_5_VLMoeVideoProcessor, video_processing_ernie4_5_vl_moe.py:318-483; class defaults): no
``fps``, so ``sample_frames`` takes every frame, clamped to 16 .. 180 and spread by ``torch.arange(0, n,
n / count).int()``; an odd count gets its last frame repeated (``frame_sampling="ernie"``,
:func:`mrope.media.ernie_frame_indices`); every frame is sized alone, 299 * 28^2 .. 1196 * 28^2 px (the Qwen
rule, no budget shared by the clip). A call's ``fps`` (``load_video(fps=...)``) samples at that rate, as the
processor does with one. A checkpoint that saves ``fps`` or ``num_frames`` is refused (mrope samples as the
class default); ``min_pixels`` / ``max_pixels`` are read by neither processor (only ``size``).
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import CheckpointChoice, ModelFamily, video_processor_switches

FAMILY = ModelFamily(
    name="ernie-4.5-vl",
    model_types=("ernie4_5_vl_moe", "ernie4_5_vl_moe_text"),
    aliases=(
        "baidu/ERNIE-4.5-VL-28B-A3B-PT",
        "baidu/ERNIE-4.5-VL-28B-A3B-Base-PT",
        "baidu/ERNIE-4.5-VL-424B-A47B-PT",
        "baidu/ERNIE-4.5-VL-424B-A47B-Base-PT",
    ),
    rules=LayoutRules(
        temporal_patch_size=1,
        temporal_merge_size=2,
        vision_start_id=101304,
        vision_end_id=101305,
        image_pad_id=100295,
        video_pad_id=103367,
        video_start_id=101306,
        video_end_id=101307,
        pad_position=0,
        patch_size=14,
        image_min_pixels=56 * 56,
        image_max_pixels=28 * 28 * 6177,
        video_min_pixels=299 * 28 * 28,
        video_max_pixels=1196 * 28 * 28,
        # no budget shared by the clip: a total no clip of at most 2**24 frames reaches, so each frame's
        # ceiling is video_max_pixels (video_bounds="frame")
        video_total_pixels=1196 * 28 * 28 * 2**24,
        min_frames=16,
        max_frames=180,
        frame_sampling="ernie",
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=500_000.0,
        mrope_section=(20, 22, 22),
        section_layout="hw_alternating",
        pairing="gptj",
    ),
    transformers5={"advance": "spatial"},
    config_section_axes=(1, 2, 0),  # config.json's mrope_section is (h, w, t)
    exactness="official max+1 advance (as vLLM); transformers 5.24 get_rope_index under convention='transformers5'",
    config_ids={
        "image_start_token_id": "vision_start_id",
        "image_end_token_id": "vision_end_id",
        "image_token_id": "image_pad_id",
        "video_start_token_id": "video_start_id",
        "video_end_token_id": "video_end_id",
        "video_token_id": "video_pad_id",
    },
    # the 5.24 video processor's temporal_patch_size (always 2: its __init__ refuses another) pads the frame
    # count to even (video_processing_ernie4_5_vl_moe.py:483); the grid's t still counts frames (``1`` here)
    checkpoint_fields={
        "video:temporal_patch_size": None,
        # both processors size by ``size`` only; these keys are read by neither
        "image:min_pixels": None,
        "image:max_pixels": None,
        "video:min_pixels": None,
        "video:max_pixels": None,
        "video:fps": CheckpointChoice(
            "frame_sampling", {}, why="a saved rate; mrope samples as the class default, which has none"
        ),
        "video:num_frames": CheckpointChoice(
            "frame_sampling",
            {},
            why="a fixed frame count; mrope samples as the class default, which has none",
        ),
        **video_processor_switches(
            "ernie", "frame", sampling_why="without sampling every frame is kept, past max_frames"
        ),
    },
)
