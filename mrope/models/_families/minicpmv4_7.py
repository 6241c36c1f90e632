"""MiniCPM-V 4.7 (``minicpmv4_7``): the canvas rule (:mod:`mrope._layout.canvas`).

Positions (modeling_minicpmv4_7.py:952): each picture or video frame is a thumbnail ``<image>`` ..
``</image>``, optionally followed by detail slices ``<slice>`` .. ``</slice>`` in rows joined by a newline;
the thumbnail is stretched over the slices' canvas, slices sit at their offsets, markers are pinned, the
counter resumes at ``o + max(canvas) + 1``; pads 0. Grids are per crop (the processor's ``target_sizes``),
merged by 4 (``downsample_mode="16x"``, the default) or 2 (``"4x"``): :data:`DOWNSAMPLE_MODE`. 5.24 takes the
mode per call (``get_rope_index(downsample_mode=...)``, the processor's ``images_kwargs``), else from the
checkpoint: the model's ``config.json`` and the image / video processors' configs, which must agree (the
processor counts placeholders with its mode, the model lays them out with its own).
:func:`mrope.from_pretrained` reads all three (a disagreement is an error naming both keys); for a
per-call mode pass ``rules={"merge_size": DOWNSAMPLE_MODE.values[mode]}``.
Segments: ``Image(grid, tiles=(cols, rows), thumbnail_grid=...)`` for a sliced picture, ``Video`` for
thumbnail-only frames (with ``tiles`` and ``thumbnail_grid`` for sliced ones). ``<image_id>N</image_id>`` prefixes are text.
Ids: the config's ``image_token_id``, ``video_token_id``, ``image_start_id``, ``image_end_id``,
``slice_start_id``, ``slice_end_id`` and ``newline_id`` (all ``None`` in the class defaults, and no released
config was available offline): until they are read from a checkpoint's config the marker ids stay unset
and positions raise, naming them; the placeholder ids here are the Qwen3.5 vocabulary's stand-ins.
Sizing: MiniCPM's slicing (scale 448, up to 9 slices) is not in :mod:`mrope.media`; give the crops' grids.
Under the canvas rule :func:`mrope.media.load_image`, ``image_grid`` and ``load_video`` refuse rather than
return a Qwen-rule grid the processor never makes.
Rotary: the text model is ``qwen3_5_text``, so Qwen3.5's (interleaved [11, 11, 10], partial 0.25 of
head_dim 256, theta 1e7).
"""

from mrope._rules import LayoutRules
from mrope.models._families import qwen3_5
from mrope.models._family import CheckpointChoice, ModelFamily

DOWNSAMPLE_MODE = CheckpointChoice(field="merge_size", values={"16x": 4, "4x": 2}, default="16x")
"""``downsample_mode`` -> the spatial merge of the tokens (modeling_minicpmv4_7.py:992 and the processor's
``image_token_divisor``: ``"16x"`` merges 4x4 patches, window merger then merger; ``"4x"`` skips the window
merger and merges 2x2). 5.24 treats any other value as ``"16x"``; mrope refuses it. A file without the key
runs its class default, ``"16x"`` (5.x ``save_pretrained`` leaves class defaults out of ``config.json``)."""

FAMILY = ModelFamily(
    name="minicpm-v-4.7",
    model_types=("minicpmv4_7",),
    aliases=(),
    rules=LayoutRules(
        merge_size=4,
        positions_base="canvas",
        image_pad_id=qwen3_5.QWEN3_5_IDS["image_pad_id"],
        video_pad_id=qwen3_5.QWEN3_5_IDS["video_pad_id"],
        pad_position=0,
    ),
    spec=qwen3_5.FAMILY.spec,
    config_partial_rotary_factor=qwen3_5.FAMILY.config_partial_rotary_factor,  # its text config is Qwen3.5's
    transformers5={},
    packed_input="text-row+fla",  # its text model is Qwen3.5's, with Gated DeltaNet layers
    exactness="transformers 5.24 get_rope_index (its release code) with the checkpoint's marker ids",
    checkpoint_fields={
        "config:downsample_mode": DOWNSAMPLE_MODE,
        "image:downsample_mode": DOWNSAMPLE_MODE,
        "video:downsample_mode": DOWNSAMPLE_MODE,
    },
    config_ids={
        "image_token_id": "image_pad_id",
        "video_token_id": "video_pad_id",
        "image_start_id": "vision_start_id",
        "image_end_id": "vision_end_id",
        "slice_start_id": "slice_start_id",
        "slice_end_id": "slice_end_id",
        "newline_id": "newline_id",
    },
)
