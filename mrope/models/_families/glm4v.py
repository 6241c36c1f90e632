"""GLM-4.1V (``glm4v``): Qwen3-VL's per-frame blocks with GLM's wrappers and an ``int(t)`` time after
each frame.

Positions: transformers 5.24's ``get_rope_index`` (modeling_glm4v.py:955) is byte-identical to
Qwen3-VL's. Video: ``<|begin_of_video|>`` then per frame ``<|begin_of_image|>`` pads
``<|end_of_image|>`` time-text, then ``<|end_of_video|>``.
Rotary: chunked [8, 12, 12], gptj (adjacent pairs), partial rotary 0.5 of head_dim 128, theta 1e4.
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_vl
from mrope.models._family import CheckpointChoice, ModelFamily, video_processor_switches

GLM_CONFIG_IDS = {
    "image_start_token_id": "vision_start_id",
    "image_end_token_id": "vision_end_id",
    "video_start_token_id": "video_start_id",
    "video_end_token_id": "video_end_id",
    "image_token_id": ("image_pad_id", "video_pad_id"),
}
"""config.json keys of GLM-V's wrapper and placeholder ids. ``video_token_id`` is left out on purpose: the
processor never writes it (frames carry ``image_token_id``), so ``image_token_id`` sets ``video_pad_id``
too."""


def glm_checkpoint_fields(frame_sampling: str) -> dict[str, str | CheckpointChoice | None]:
    """Checkpoint keys of the GLM-V processors beyond :data:`mrope._checkpoint.CHECKPOINT_FIELDS`: they size
    by ``size`` only (top-level ``min_pixels`` / ``max_pixels`` are read by neither processor), and a video
    processor that does not sample (``do_sample_frames`` false) keeps every frame."""
    return {
        "image:min_pixels": None,
        "image:max_pixels": None,
        "video:min_pixels": None,
        "video:max_pixels": None,
        **video_processor_switches(frame_sampling, "clip"),
    }


FAMILY = ModelFamily(
    name="glm-4.1v",
    model_types=("glm4v", "glm4v_text"),
    aliases=("zai-org/GLM-4.1V-9B-Thinking", "zai-org/GLM-4.1V-9B-Base", "THUDM/GLM-4.1V-9B-Thinking"),
    rules=qwen2_vl.FAMILY.rules.replace(
        temporal="timestamps",
        timestamp_format="{:d}",
        timestamp_position="after",
        timestamp_time="first",
        vision_start_id=151339,
        vision_end_id=151340,
        image_pad_id=151343,
        # Glm4vProcessor writes <|image|> (151343) for the pads of every video frame inside
        # <|begin_of_video|> .. <|end_of_video|> (processing_glm4v.py replace_frame_token_id) and marks them 2
        # in mm_token_type_ids (create_mm_token_type_ids); the config's video_token_id 151344 is never written
        video_pad_id=151343,
        video_start_id=151341,
        video_end_id=151342,
        # Glm4vImageProcessor: size shortest_edge 112*112, longest_edge 28*28*15000 (the class default; the
        # released preprocessor_config.json could not be read offline), and the bounds hold for
        # temporal_patch_size (2) copies of the image: t * h * w, smart_resize over frames
        image_min_pixels=112 * 112,
        image_max_pixels=28 * 28 * 15000,
        image_bounds="clip",
        # Glm4vVideoProcessor class defaults: size 112*112 .. 28*28*2*30000 over the clip (t * h * w), fps 2,
        # at most 300 s sampled at fps (longer clips: 600 frames spread evenly), an even frame count
        video_min_pixels=112 * 112,
        video_max_pixels=28 * 28 * 2 * 30000,
        fps=2.0,
        frame_sampling="glm4v",
        video_bounds="clip",
        max_duration=300.0,
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=64,
        theta=10_000.0,
        mrope_section=(8, 12, 12),
        section_layout="chunked",
        pairing="gptj",
    ),
    transformers5=qwen2_vl.TRANSFORMERS5,
    exactness="official GLM-4.1V rule (pads 1); its 5.24 get_rope_index and processor on real files "
    "(convention='transformers5')",
    config_ids=GLM_CONFIG_IDS,
    checkpoint_fields=glm_checkpoint_fields("glm4v"),
)
