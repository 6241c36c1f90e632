"""GLM-4.6V (``glm46v``): GLM-4.1V's rules with its own video wrapper and ``{:.1f} seconds`` after each frame.

transformers 5.24: get_rope_index (modeling_glm46v.py:131) equals GLM-4.1V's. Video wrapper ids
151361 / 151362; image id 151343 (frames carry it). processing_glm46v.py:182 writes the time as
``{t:.1f} seconds`` after each frame. Its text config is ``glm4v_text``, so the rotary is GLM-4.1V's
(gptj, chunked [8, 12, 12], partial 0.5 of head_dim 128, theta 1e4): the config reader decides pairing from
the text config's model_type. Image 112^2 .. 28^2 * 15000 px.
Video sampling (video_processing_glm46v.py:138-180): a dynamic target rate (3 fps up to 30 s, 1 fps up to
300 s, 0.5 fps up to 2400 s), two frames per second of it, at most 640 frames
(``frame_sampling="glm46v"``, :func:`mrope.media.glm46v_frame_indices`).
"""

from mrope.models._families import glm4v

FAMILY = glm4v.FAMILY.replace(
    name="glm-4.6v",
    model_types=("glm46v",),
    aliases=("zai-org/GLM-4.6V", "zai-org/GLM-4.6V-Flash", "zai-org/GLM-4.6V-FP8"),
    rules=glm4v.FAMILY.rules.replace(
        timestamp_format="{:.1f} seconds",
        video_start_id=151361,
        video_end_id=151362,
        max_frames=640,
        frame_sampling="glm46v",
    ),
    checkpoint_fields=glm4v.glm_checkpoint_fields("glm46v"),
    exactness="GLM-4.1V rules, own video wrapper and time text; its 5.24 Glm46V get_rope_index (convention='transformers5') and processor (ids, grids)",
)
