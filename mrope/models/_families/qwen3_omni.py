"""Qwen3-Omni (``qwen3_omni_moe``, the thinker): the omni timeline with fractional time.

Positions (modeling_qwen3_omni_moe.py:220-460, a 4.x token scan like Qwen2.5-Omni's) differ from
Qwen2.5-Omni in rule values: positions are float32 and never truncated (video time
``(i * spg32) * 13``; after a fractional block every later position is fractional too), pads 0, the
double start / end tokens of a video with audio take two positions each, and its video and audio tokens
are merged one at a time by time, video first on ties. Audio: 13 tokens per 100 mel frames plus
``((f - 1) // 2 + 1 - 1) // 2 + 1`` with ``f = (r - 1) // 2 + 1`` for the remainder ``r``
(``_get_feat_extract_output_lengths``, n_window 50). Its processor pads a call's audio to the longest
clip without truncating, so a clip alone (or the longest) has ``L = floor(samples / 160)`` frames, which
mrope uses (``_get_num_audio_tokens`` counts the same way); a shorter clip of a multi-clip call gets
``ceil(samples / 160)`` from the padded mask: give ``Audio(mel_frames=...)`` from
``feature_attention_mask.sum(-1)`` to match such a call exactly. transformers 5.24 runs the same scan, so both conventions agree.

``position_id_per_seconds``: the released checkpoint and the 5.24 processor use **13**; the 5.24 config
class defaults to 25 (a Qwen2.5-Omni leftover), which makes its model order positions differently from
its own processor's placeholders. mrope uses 13. Released ids: vision_start 151652 (class default
``None``), audio 151675, audio_start 151669, audio_end 151670. The model requires an ``attention_mask``;
mrope does not. Without any image or video grid, 5.24 takes another branch that pads with 1 (positions
at valid tokens agree).
Rotary (1239): Qwen3-VL's interleaved [24, 20, 20], neox, theta 1e6, head_dim 128 (released).
Sizing: Qwen2VLImageProcessor / Qwen2VLVideoProcessor (the auto mappings) with patch 16, so the resize factor
is 32; videos as Qwen2.5-Omni's (every frame, no clip budget unless a saved ``cap_pixels_per_frame: true``
shares ``int(max_video_tokens * 32**2 * 0.9)`` px out: :func:`mrope.models._families.qwen2_vl.qwen2_video_fields`),
each frame within the processor's own ``videos_kwargs`` size 128 * 32^2 .. 768 * 32^2 px
(processing_qwen3_omni_moe.py:133-138), passed over any saved one.
A video's ``second_per_grid`` is ``2 / fps`` with ``fps`` the processor's keyword, 1.0 by default (not
Qwen2.5-Omni's 2.0, and not the rate the frames were sampled at).
"""

from mrope._spec import RopeSpec
from mrope.models._families import qwen2_5_omni, qwen2_vl
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="qwen3-omni",
    model_types=("qwen3_omni_moe", "qwen3_omni_moe_thinker", "qwen3_omni_moe_text"),
    aliases=(
        "Qwen/Qwen3-Omni-30B-A3B-Instruct",
        "Qwen/Qwen3-Omni-30B-A3B-Thinking",
        "Qwen/Qwen3-Omni-30B-A3B-Captioner",
    ),
    rules=qwen2_5_omni.FAMILY.rules.replace(
        tokens_per_second=13.0,
        pad_position=0,
        patch_size=16,
        image_min_pixels=3136,
        image_max_pixels=12845056,
        video_min_pixels=128 * 32 * 32,
        video_max_pixels=768 * 32 * 32,
        audio_pad_id=151675,
        audio_start_id=151669,
        audio_end_id=151670,
        audio_tokens="window",
        audio_window=50,
        audio_frames="floor",
        audio_max_frames=None,
        audio_in_video="interleave",
        audio_in_video_wrappers="consecutive",
        time_rounding="none",
        # get_rope_index finds blocks by input_tokens.index(vision_start / audio_start) (lines 333, 337)
        block_search="start",
        # _process_videos: second_per_grid = temporal_patch_size / fps, fps the call's keyword, else 1.0
        second_per_grid_fps=1.0,
    ),
    spec=RopeSpec(
        head_dim=128,
        rotary_dim=128,
        theta=1_000_000.0,
        mrope_section=(24, 20, 20),
        section_layout="interleaved",
    ),
    transformers5={},
    exactness=(
        "transformers 5.24 Qwen3OmniMoeThinker get_rope_index with the released pps 13 (float32 positions), "
        "audio and audio-in-video included; build_positions ids = its processor's text expansion"
    ),
    config_ids=qwen2_5_omni.OMNI_CONFIG_IDS,
    # the window get_rope_index counts audio tokens with (modeling_qwen3_omni_moe.py:356)
    checkpoint_fields={
        "config:audio_config.n_window": "audio_window",
        **qwen2_5_omni.OMNI_VIDEO_SIZE_KEYS,
        **qwen2_vl.qwen2_video_fields(32),
    },
)
