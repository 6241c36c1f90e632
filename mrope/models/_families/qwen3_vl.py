"""Qwen3-VL (``qwen3_vl``): one block per temporal patch, each after a ``<{t:.1f} seconds>`` text.

Positions: every video temporal patch is its own ``(1, H', W')`` block (so the 5.x advance equals max+1).
Rotary: interleaved [24, 20, 20], neox, theta 5e6 (released; the 5.24 class default is 5e5), head_dim 128.
Sizing: patch 16 (resize factor 32).
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl
from mrope.models._family import CheckpointChoice, ModelFamily, video_processor_switches

QWEN3_VIDEO_FIELDS = {
    "video:cap_pixels_per_frame": CheckpointChoice(
        "video_bounds",
        {False: "clip"},
        why="5.24 then caps each frame at max_video_tokens patches; mrope bounds the whole clip only",
    ),
    "video:num_frames": CheckpointChoice(
        "frame_sampling", {}, why="a fixed frame count; mrope samples at the checkpoint's fps"
    ),
    **video_processor_switches("qwen3-vl", "clip"),
    # not Qwen3VLVideoProcessor kwargs: set as attributes by from_pretrained and read by nothing (its
    # bounds are size.shortest_edge / size.longest_edge only)
    "video:min_pixels": None,
    "video:max_pixels": None,
    "video:size.min_pixels": None,
    "video:size.max_pixels": None,
}
"""Qwen3VLVideoProcessor keys that change grids beyond what mrope computes (refused when set otherwise;
``max_video_tokens`` acts only under ``cap_pixels_per_frame``, so it is read through that refusal), and
keys it does not read (ignored, as it ignores them)."""

FAMILY = ModelFamily(
    name="qwen3-vl",
    model_types=("qwen3_vl", "qwen3_vl_text"),
    aliases=(
        "Qwen/Qwen3-VL-2B-Instruct",
        "Qwen/Qwen3-VL-2B-Thinking",
        "Qwen/Qwen3-VL-4B-Instruct",
        "Qwen/Qwen3-VL-4B-Thinking",
        "Qwen/Qwen3-VL-8B-Instruct",
        "Qwen/Qwen3-VL-8B-Thinking",
        "Qwen/Qwen3-VL-32B-Instruct",
        "Qwen/Qwen3-VL-32B-Thinking",
    ),
    rules=qwen2_vl.FAMILY.rules.replace(
        temporal="timestamps",
        patch_size=16,  # config.json vision_config.patch_size (the image processor class default is 14)
        # preprocessor_config.json size: shortest_edge 65536, longest_edge 16777216 (per image)
        image_min_pixels=65536,
        image_max_pixels=16777216,
        # video_preprocessor_config.json: size shortest_edge 4096, longest_edge 25165824, fps 2, frames
        # 4..768, do_sample_frames on. transformers' Qwen3VLVideoProcessor bounds the whole sampled clip
        # (t * h * w, smart_resize over frames) and samples int(frames / rate * 2) frames
        video_min_pixels=4096,
        video_max_pixels=25165824,
        video_total_pixels=25165824,  # unused under video_bounds="clip"
        fps=2.0,
        min_frames=4,
        max_frames=768,
        frame_sampling="qwen3-vl",
        video_bounds="clip",
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=5_000_000.0,
        mrope_section=(24, 20, 20),
        section_layout="interleaved",
    ),
    transformers5=qwen2_vl.TRANSFORMERS5,
    exactness="official Qwen3-VL rule (pads 1); its 5.24 get_rope_index and processor on real files "
    "(convention='transformers5')",
    config_ids=qwen2_vl.QWEN_CONFIG_IDS,
    # Qwen3VLVideoProcessor: size.longest_edge bounds the whole sampled clip (t * h * w), the bound that
    # video_bounds="clip" reads from video_max_pixels; video_total_pixels follows for readers of the old field
    checkpoint_fields={
        "video:size.longest_edge": ("video_max_pixels", "video_total_pixels"),
        **QWEN3_VIDEO_FIELDS,
    },
)
