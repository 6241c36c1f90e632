"""Cosmos3-Edge (``cosmos3_edge``): Qwen3-VL's per-frame rule with temporal patch 1 and its own ids.

transformers 5.24: get_rope_index (modeling_cosmos3_edge.py:831) is Qwen2-VL's plus the per-frame split
(883), i.e. Qwen3-VL's. Ids: image 19, video 18, vision start 20, end 21. The processor
(processing_cosmos3_edge.py) writes ``<{t:.1f} seconds>`` + vision start + pads + vision end per temporal
patch; with temporal_patch_size 1 every frame is a patch and shows its own time. Sizing: image
256^2..4096^2 px, patch 16. Video (Cosmos3EdgeVideoProcessor, video_processing_cosmos3_edge.py, class
defaults): Qwen3-VL's ``sample_frames`` (fps 2, 4..768 frames, at most the video's: a one-frame video is one
frame) and clip-bounded ``smart_resize`` (``video_bounds="clip"``: 64^2..24 * 1024^2 px bound the clip's
``frames * h * w``), temporal patch 1, no per-frame cap.
Rotary (56): interleaved [24, 20, 20], theta 1e8, head_dim 128.
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl, qwen3_vl
from mrope.models._family import CheckpointChoice

FAMILY = qwen3_vl.FAMILY.replace(
    name="cosmos3-edge",
    model_types=("cosmos3_edge", "cosmos3_edge_text"),
    aliases=(),
    rules=qwen3_vl.FAMILY.rules.replace(
        temporal_patch_size=1,
        vision_start_id=20,
        vision_end_id=21,
        image_pad_id=19,
        video_pad_id=18,
        image_min_pixels=256 * 256,
        image_max_pixels=4096 * 4096,
        video_min_pixels=64 * 64,
        video_max_pixels=24 * 1024 * 1024,
        video_total_pixels=24 * 1024 * 1024,
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=100_000_000.0,
        mrope_section=(24, 20, 20),
        section_layout="interleaved",
    ),
    exactness="Qwen3-VL rules, temporal patch 1, own ids; its 5.24 Cosmos3Edge get_rope_index (convention='transformers5') and processor (ids, grids)",
    config_ids=qwen2_vl.QWEN_CONFIG_IDS,
    # Cosmos3EdgeVideoProcessor: Qwen3-VL's keys, but it has no per-frame cap (a saved cap_pixels_per_frame
    # is read by nothing) and refuses to load with a temporal patch other than 1
    checkpoint_fields={
        **qwen3_vl.FAMILY.checkpoint_fields,
        "video:cap_pixels_per_frame": None,
        "video:temporal_patch_size": CheckpointChoice(
            "temporal_patch_size", {1: 1}, why="Cosmos3EdgeVideoProcessor only supports temporal_patch_size=1"
        ),
    },
)
