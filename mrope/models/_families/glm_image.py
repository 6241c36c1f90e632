"""GLM-Image (``glm_image``): Qwen2-VL positions with merge 1, images strictly between their start and end
tokens, and decode-time positions for the images it generates.

Positions (modeling_glm_image.py:942): an image's tokens are the ones strictly between
``image_start_token_id`` (16384) and ``image_end_token_id`` (16385): the model has replaced the
placeholders (167855) by image codes before it computes positions. Grids come per sample
(``images_per_sample``); the grids left after a sample's images are its generation targets (the
processor lists the large target, then the small preview for text-to-image). Pads are 1 and deltas 0:
decode positions are cached per target grid, last grid first (``t = d``, ``h = d + row``, ``w = d + col``,
then ``d += max(H, W)``), then one end marker. 5.24's ``s + max(H, W)`` advance equals max+1 for its
single-frame images; ``convention="transformers5"`` applies it literally.
Rotary (GlmImageTextRotaryEmbedding): chunked [8, 12, 12] with ``cat(f, f)`` and ``rotate_half`` (neox)
on half of head_dim 128 (the 5.24 class default has no partial factor and cannot run; 0.5 assumed, no
released config was available offline), theta 1e4.
Sizing (image_processing_pil_glm_image.py): ``image_bounds="edges"``, its own resize
(:func:`mrope.media.smart_resize_edges`: shortest / longest edge 512 .. 2048 px, then halved; sides
under 16 px and aspect ratios above 4 refused), with the vision config's patch 16 and merge 1 (factor
16). The 5.24 image processor's class defaults (patch 14, merge 2, Qwen's pixel bounds) contradict the
vision config and its own ``smart_resize`` defaults; the released ``preprocessor_config.json`` was not
available offline, so the values here are the vision config's and the function's defaults. A
checkpoint's ``preprocessor_config.json`` that leaves the size or patch out runs the class defaults
(``processor_defaults``): :func:`mrope.from_pretrained` reads it as the processor loads it, and a class
patch of 14 against the vision config's 16 is refused as a contradiction.
Videos (``video_support="none"``): no video processor and no video path in get_rope_index (it takes only
``image_grid_thw``): :func:`mrope.media.load_video` and ``Video`` segments are refused.
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="glm-image",
    model_types=("glm_image", "glm_image_text"),
    aliases=("zai-org/GLM-Image",),
    rules=LayoutRules(
        merge_size=1,
        vision_start_id=16384,
        vision_end_id=16385,
        image_pad_id=167855,
        image_span="between_wrappers",
        generates_images=True,
        pad_position=1,
        patch_size=16,
        image_min_pixels=512 * 512,
        image_max_pixels=2048 * 2048,
        image_bounds="edges",
        video_support="none",
    ),
    spec=RopeSpec(head_dim=128, rotary_dim=64, theta=10_000.0, mrope_section=(8, 12, 12), pairing="neox"),
    transformers5={"advance": "spatial"},
    exactness="transformers 5.24 get_rope_index (its release code) with images_per_sample, and its decode "
    "cache of generated-image positions (mrope.generation_index / Positions.generation_ids)",
    config_ids={
        "image_start_token_id": "vision_start_id",
        "image_end_token_id": "vision_end_id",
        "image_token_id": "image_pad_id",
    },
    # GlmImageImageProcessorPil's class defaults (image_processing_pil_glm_image.py: size 56^2 .. 28^2 *
    # 1280, patch 14, merge 2), run by a preprocessor_config.json that leaves them out; the rules above
    # are the vision config's and smart_resize's own defaults
    processor_defaults={
        "image": {
            "patch_size": 14,
            "merge_size": 2,
            "image_min_pixels": 56 * 56,
            "image_max_pixels": 28 * 28 * 1280,
        }
    },
)
