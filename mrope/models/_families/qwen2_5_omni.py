"""Qwen2.5-Omni (``qwen2_5_omni``, the thinker): TMRoPE, Qwen2.5-VL positions on a 25-per-second clock
plus audio.

Positions (modeling_qwen2_5_omni.py:217-500, a 4.x token scan; no ``mm_token_type_ids``): every image,
video and audio clip is found by its start token and wrapped in start / end tokens; a piece starts one
past the previous piece's largest position (max+1). Video time is ``(i * spg32) * 25`` in float32,
truncated; an image's temporal patch ``i`` gets ``i * 25``. Audio: ``((L - 1) // 2 + 1 - 2) // 2 + 1``
tokens for ``L`` mel frames (100 per second), one position each. A video with its own audio
(``use_audio_in_video``) is ``<|vision_bos|><|audio_bos|>`` + chunks of 50 time units (2 s) of video,
then audio, + ``<|audio_eos|><|vision_eos|>``; its frames and its audio share a start, and the double
start / end tokens share one position each. Pads 1. transformers 5.24 runs the same scan, so both
conventions agree.

Released checkpoint values: vision_start 151652 (the 5.24 class default is ``None``, which cannot run),
audio 151646 / 151647 / 151648, ``position_id_per_seconds`` 25, ``seconds_per_chunk`` 2. The processor
pads audio to its ``n_samples`` (300 s, 30000 frames) and truncates longer clips, so ``L`` is
``ceil(samples / 160)``, at most 30000. It reports ``video_second_per_grid = 2 / fps`` with ``fps`` its
own keyword (default 2.0), not the sampled rate.
Rotary (1299): Qwen2-VL's chunked [16, 24, 24], neox, theta 1e6, head_dim 128.
Sizing (image_processing_auto / video_processing_auto: Qwen2VLImageProcessor, Qwen2VLVideoProcessor): images
3136 .. 12845056 px (the released preprocessor_config.json); videos as that video processor does with the
released folder (``route="processor"``): every frame kept, no clip budget (its class defaults
``do_sample_frames`` off and ``cap_pixels_per_frame`` unset: :data:`mrope.models._families.qwen2_vl.RELEASED_VIDEO`),
each frame within 128 .. 768 tokens of 28^2 px. The processor passes that size as its own
``videos_kwargs`` (processing_qwen2_5_omni.py:127-132) to the video processor at every call, over whatever
the video processor's config says (``ProcessorMixin._merge_kwargs``), so a saved video size is read by
nothing and mrope ignores it. The model card's qwen-omni-utils recipe is ``route="qwen-vl-utils"``.
"""

from mrope.models._families import qwen2_5_vl, qwen2_vl
from mrope.models._family import ModelFamily

OMNI_VIDEO_SIZE_KEYS = {
    key: None
    for key in (
        "video:min_pixels",
        "video:max_pixels",
        "video:size.shortest_edge",
        "video:size.longest_edge",
        "video:size.min_pixels",
        "video:size.max_pixels",
    )
}
"""A saved video size: the omni processors pass their own ``videos_kwargs`` size over it at every call."""

OMNI_CONFIG_IDS = {
    **qwen2_vl.QWEN_CONFIG_IDS,
    "image_token_index": "image_pad_id",
    "video_token_index": "video_pad_id",
    "audio_token_index": "audio_pad_id",
    "audio_token_id": "audio_pad_id",
    "audio_start_token_id": "audio_start_id",
    "audio_end_token_id": "audio_end_id",
}
"""config.json (``thinker_config``) keys of the omni families' token ids (their time rules,
``position_id_per_seconds`` and ``seconds_per_chunk``, are numbers: :data:`mrope._checkpoint.CHECKPOINT_FIELDS`)."""

FAMILY = ModelFamily(
    name="qwen2.5-omni",
    model_types=("qwen2_5_omni", "qwen2_5_omni_thinker", "qwen2_5_omni_text"),
    aliases=("Qwen/Qwen2.5-Omni-3B", "Qwen/Qwen2.5-Omni-7B"),
    rules=qwen2_5_vl.FAMILY.rules.replace(
        temporal="seconds",
        tokens_per_second=25.0,
        seconds_grouping="(i*spg)*tps",
        advance="max+1",
        pad_position=1,
        image_max_pixels=12845056,
        video_min_pixels=128 * 28 * 28,  # processing_qwen2_5_omni.py:127-132 videos_kwargs size
        video_max_pixels=768 * 28 * 28,
        audio_pad_id=151646,
        audio_start_id=151647,
        audio_end_id=151648,
        audio_tokens="stride4",
        audio_frames="ceil",
        audio_max_frames=30000,
        audio_in_video="chunks",
        audio_in_video_wrappers="shared",
        seconds_per_chunk=2.0,
        time_rounding="trunc",
        # get_rope_index finds blocks by input_tokens.index(image / video / audio id) (lines 329-337)
        block_search="placeholder",
        # _process_videos: second_per_grid = temporal_patch_size / fps, fps the call's keyword, else 2.0
        second_per_grid_fps=2.0,
    ),
    spec=qwen2_vl.FAMILY.spec,
    transformers5={},
    exactness=(
        "transformers 5.24 Qwen2_5OmniThinker get_rope_index (its 4.x token scan is the released rule), "
        "audio and use_audio_in_video included; build_positions ids = its processor's text expansion"
    ),
    config_ids=OMNI_CONFIG_IDS,
    checkpoint_fields={**qwen2_vl.QWEN2_VIDEO_FIELDS, **OMNI_VIDEO_SIZE_KEYS},
)
