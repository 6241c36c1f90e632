"""HY-V4-VL (``hy_v4_vl``): a newline token ends every merged row; each video frame is a block of its own.

Positions (modeling_hy_v4_vl.py:1244): a frame is ``H' x (W' + 1)`` tokens (the last column is the row's
newline, written as the image / video placeholder by the processor); frame ``f`` of a video starts all
three axes at ``s + f * max(H', W' + 1)``; the counter resumes at max + 1 (deliberately, 1391); pads 0.
Temporal patch 1, no timestamp text. Ids: image 120120, video 120124. The image wrappers 120118 / 120119
are the HunYuan tokenizer's ``<image>`` pair (HunyuanOCR's config), assumed here: no released HY-V4-VL chat
template was available offline; positions do not depend on them.
Rotary (HYV4VLRotaryEmbedding + apply_rotary_pos_emb:71): interleaved [12, 10, 10], adjacent pairs,
theta 1e4, on the 64-channel rope slice at the end of the 256-channel MLA query and key
(``qk_nope_head_dim`` 192 pass through first). transformers 5.25 rotates with
``apply_rotary_pos_emb_interleave`` (modeling_hy_v4_vl.py:64-100): the same pairs and angles, written
with pair ``i`` on channels ``i`` and ``i + 32`` of the slice (q and k alike, so q.k is unchanged); the
spec keeps 5.24's adjacent-pair order.
Sizing: patch 16, merge 2, images 512^2 .. 2048^2 px (HYV4VLImageProcessorPil, the Qwen rule per image).
Videos (HYV4VLVideoProcessor, video_processing_hy_v4_vl.py): ``sample_frames`` takes ``int(frames / rate *
fps)`` frames at fps 2, clamped to 2 .. 1024 and the frame count, ``round(linspace)`` (the Qwen3-VL rule,
``frame_sampling="qwen3-vl"``; a one-frame video is one frame, temporal patch 1); its ``smart_resize``
(``video_bounds="tokens"``) never scales up, caps a frame at ``max_image_size.longest_edge`` (1024^2) px and
the clip's ``frames * rows * (cols + 1)`` tokens at ``size.longest_edge / 32**2`` (33554432 px: 32768
tokens). ``size.shortest_edge`` (4096) is read by nothing. The class default ``do_sample_frames`` is off:
the processor then takes every frame it is given, which ``load_video(nframes=<the file's frame count>)``
reproduces; the rules here are its sampling on, at the class fps.
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import CheckpointChoice, ModelFamily, video_processor_switches

FAMILY = ModelFamily(
    name="hy-v4-vl",
    model_types=("hy_v4_vl", "hy_v4_vl_text"),
    aliases=(),
    rules=LayoutRules(
        temporal_patch_size=1,
        row_newline=True,
        frame_block=True,
        vision_start_id=120118,
        vision_end_id=120119,
        image_pad_id=120120,
        video_pad_id=120124,
        pad_position=0,
        patch_size=16,
        image_min_pixels=512 * 512,
        image_max_pixels=2048 * 2048,
        # HYV4VLVideoProcessor class defaults: size {shortest_edge 4096, longest_edge 33554432},
        # max_image_size {longest_edge 1024 * 1024}, fps 2, frames 2..1024
        video_bounds="tokens",
        video_min_pixels=4096,  # size.shortest_edge: accepted and unused (frames are never scaled up)
        video_max_pixels=33554432,
        video_total_pixels=33554432,  # unused under video_bounds="tokens"
        video_frame_max_pixels=1024 * 1024,
        frame_sampling="qwen3-vl",
        fps=2.0,
        min_frames=2,
        max_frames=1024,
    ),
    spec=RopeSpec(
        head_dim=256,
        rotary_dim=64,
        rotary_offset=192,
        theta=10_000.0,
        mrope_section=(12, 10, 10),
        section_layout="interleaved",
        pairing="gptj",
    ),
    transformers5={},
    exactness="transformers 5.24 get_rope_index (its release code: max+1, pads 0) under both conventions",
    config_ids={"image_token_id": "image_pad_id", "video_token_id": "video_pad_id"},
    # HYV4VLVideoProcessor reads size.longest_edge (the clip's budget) and max_image_size.longest_edge (one
    # frame's); it has no min_pixels / max_pixels (not among its kwargs: a config's are read by nothing)
    checkpoint_fields={
        "video:size.longest_edge": ("video_max_pixels", "video_total_pixels"),
        "video:max_image_size.longest_edge": "video_frame_max_pixels",
        "video:min_pixels": None,
        "video:max_pixels": None,
        "video:size.min_pixels": None,
        "video:size.max_pixels": None,
        "video:num_frames": CheckpointChoice(
            "frame_sampling", {}, why="a fixed frame count; mrope samples at the checkpoint's fps"
        ),
        # do_sample_frames is off by class default; a file without the key is read as sampling (see above)
        **video_processor_switches("qwen3-vl", "tokens"),
    },
)
