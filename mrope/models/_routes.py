"""The named routes: which pipeline's media loading a file is sized by (``route=`` on every face).

The same file can reach a model through different code, and the code decides what the model sees: an
EXIF-rotated phone photo is turned upright by one loader and not by another (``h`` and ``w`` swap, the
token count stays), a list of frame images is timed by one key or another. A route names one such
pipeline; its :class:`Route` holds the documented facts mrope sizes by, each with the upstream file and
line it comes from:

- ``"processor"`` (the default): the checkpoint's transformers 5.24 processors as ``AutoProcessor`` loads
  them, fed by transformers' own loaders. ``transformers.image_utils.load_image`` applies the EXIF
  orientation (``image_utils.py:514``, ``PIL.ImageOps.exif_transpose``); a video path is decoded with
  torchcodec (``video_processing_utils.py:566`` ``fetch_videos``), upright: mrope's metadata probe. The
  family's registry rules are what the released processor files give (Qwen2-VL / Qwen2.5-VL / the omni
  families: every frame, each within the per-frame bounds, :data:`mrope.models._families.qwen2_vl.RELEASED_VIDEO`),
  so ``--model X`` and ``--model-dir`` of X's released folder agree.
- ``"qwen-vl-utils"``: the model-card recipe, qwen-vl-utils 0.0.14 ``process_vision_info``.
  ``fetch_image`` opens the file and converts it to RGB without an EXIF transpose
  (``qwen_vl_utils/vision_process.py:117`` ``Image.open``, ``:120`` ``to_rgb``); a list of frame images is
  read by ``fetch_image`` at twice the resize factor (``:425`` passes ``image_factor`` as its
  ``image_patch_size``, so each frame is first rounded to multiples of 56 for a patch of 14) within
  ``4 .. 16384`` tokens of that factor (``:131-132``) unless the item sets ``min_pixels`` / ``max_pixels``,
  then resized again under the video bounds; the list is timed by ``sample_fps`` (default 2.0, ``:434``),
  not ``fps``. A video file is read by decord (``:386-400`` ``get_video_reader_backend``: torchcodec when
  installed, else decord, else torchvision; the model cards install ``qwen-vl-utils[decord]``), sampled by
  ``smart_nframes`` and sized under its video bounds (``:403-481``).
- ``"vllm"``: vLLM 0.34.0's media loaders. ``ImageMediaIO.load_bytes`` calls ``normalize_image``
  (``vllm/multimodal/media/image.py:94``), which applies ``ImageOps.exif_transpose``
  (``vllm/multimodal/image.py:76-80``); the pixels then go to the checkpoint's transformers processor.
  A video's loader is the one registered for the checkpoint's video processor class
  (``vllm/multimodal/media/connector.py:581-585``), decoding with OpenCV by default
  (``vllm/envs.py:1117``, ``vllm/multimodal/video_decoders/opencv.py``). For Qwen2VLVideoProcessor
  (Qwen2-VL, Qwen2.5-VL, the omni families) that is ``Qwen2VLVideoBackend``
  (``vllm/multimodal/video.py:602-659``): transformers' Qwen2-VL ``sample_frames`` at 2 fps (``:666``), at
  most 30 fps and 768 frames, the overshooting last index clamped (``:659``), ``num_frames`` ignored; the
  checkpoint's processor then sizes the frames it was handed (``do_sample_frames`` false in the metadata,
  ``:193``). Frame counts and rates are mrope's metadata probe's, which equal OpenCV's
  ``CAP_PROP_FRAME_COUNT`` / ``CAP_PROP_FPS`` on constant-rate files (``opencv.py:96-133``; a file whose
  header miscounts can differ). The loaders vLLM registers for other video processors (Qwen3-VL's
  ``Qwen3VLVideoBackend``, GLM's ``DynamicVideoBackend``, video.py:362-422, :675-) are not reproduced
  here: those families' videos are sized as under ``"processor"``.

:func:`mrope.models._registry.get_route` is the one lookup by name; :class:`mrope._route.Route` the
value type; :func:`mrope.media._routes.route_video_rules` applies a route's video constants.
"""

from __future__ import annotations

from typing import get_args

from mrope._route import Route, RouteName

ROUTES: dict[str, Route] = {
    "processor": Route(
        name="processor",
        exif_transpose=True,  # transformers 5.24 src/transformers/image_utils.py:514 (load_image)
        frame_list_rate="fps",
        frame_list_default_rate=None,
        frame_prescale=1,
        frame_prescale_tokens=(0, 0),
        video_reader=None,  # transformers 5.24 video_processing_utils.py:566 fetch_videos: torchcodec
        frame_samplers=(),
        video_rules=(),
        source="transformers 5.24 src/transformers/image_utils.py:474-517 (load_image: exif_transpose at :514)",
    ),
    "qwen-vl-utils": Route(
        name="qwen-vl-utils",
        exif_transpose=False,  # qwen_vl_utils/vision_process.py:117 Image.open, :120 to_rgb, no transpose
        frame_list_rate="sample_fps",
        frame_list_default_rate=2.0,  # vision_process.py:434 ele.get("sample_fps", 2.0)
        frame_prescale=2,  # vision_process.py:425 fetch_image(..., image_factor): patch_factor 2 x 28
        frame_prescale_tokens=(4, 16384),  # vision_process.py:26-27 IMAGE_MIN/MAX_TOKEN_NUM, used at :131-132
        video_reader="decord",  # vision_process.py:386-400 get_video_reader_backend
        frame_samplers=(),  # video_rules set its sampling for every model
        video_rules=(  # vision_process.py:28-37: VIDEO_MIN/MAX_TOKEN_NUM, FPS, FPS_MIN/MAX_FRAMES, MODEL_SEQ_LEN
            ("video_min_tokens", 128),
            ("video_max_tokens", 768),
            ("video_seq_tokens", 128000),
            ("fps", 2.0),
            ("min_frames", 4),
            ("max_frames", 768),
        ),
        source="qwen-vl-utils 0.0.14 qwen_vl_utils/vision_process.py:93-140 (fetch_image), :403-481 (fetch_video)",
    ),
    "vllm": Route(
        name="vllm",
        exif_transpose=True,  # vllm/multimodal/media/image.py:94 normalize_image -> image.py:76-80
        frame_list_rate="fps",
        frame_list_default_rate=None,
        frame_prescale=1,
        frame_prescale_tokens=(0, 0),
        video_reader=None,  # OpenCV's frame count and rate: the metadata probe's (see the module docstring)
        # vllm/multimodal/media/connector.py:581-585 picks the loader registered for the checkpoint's video
        # processor class: Qwen2VLVideoProcessor -> "qwen2_vl" (vllm/multimodal/video.py:602-606)
        frame_samplers=(("qwen2-vl", "vllm-qwen2-vl"),),
        video_rules=(),
        source="vllm 0.34.0 vllm/multimodal/media/image.py:81-116 (ImageMediaIO.load_bytes), "
        "vllm/multimodal/image.py:76-80 (normalize_image), vllm/multimodal/video.py:602-672 (Qwen2VLVideoBackend)",
    ),
}
"""Every route by name (the keys are :data:`RouteName`'s values)."""

DEFAULT_ROUTE: RouteName = "processor"
"""The route a face uses when none is named: the checkpoint's own processors."""

ROUTE_NAMES: tuple[str, ...] = get_args(RouteName)


__all__ = ["DEFAULT_ROUTE", "ROUTES", "ROUTE_NAMES"]
