"""transformers-side references that several test modules compare against (the expected values).

- :class:`MiniCPMRopeIndex`: MiniCPM-V 4.7's own ``get_rope_index`` bound to an object that holds only a
  config (the model's weights are not needed), with the stand-in marker ids below by default.
- :func:`released_video_processor`: transformers' Qwen3-VL / GLM-4.1V video processor as the released
  checkpoints configure it. Imported by module path: the package's lazy attribute refuses without
  torchvision, the module itself loads.
"""

from __future__ import annotations

import importlib
from typing import Any

from transformers.models.minicpmv4_7.configuration_minicpmv4_7 import MiniCPMV4_7Config
from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import MiniCPMV4_7Model

MINICPM_IDS = dict(
    zip(
        (
            "image_start_id",
            "image_end_id",
            "slice_start_id",
            "slice_end_id",
            "newline_id",
            "image_token_id",
            "video_token_id",
        ),
        range(900, 907),
        strict=True,
    )
)
"""MiniCPM-V 4.7 marker ids for tests (no released chat template is read here): 900 to 906."""


class MiniCPMRopeIndex:
    """The methods MiniCPM-V 4.7's ``get_rope_index`` uses, on an object that holds only ``config``
    (default: the class defaults with :data:`MINICPM_IDS`)."""

    get_rope_index = MiniCPMV4_7Model.get_rope_index
    get_vision_position_ids = MiniCPMV4_7Model.get_vision_position_ids
    _group_visual_frames = MiniCPMV4_7Model._group_visual_frames
    _frame_end_idx = staticmethod(MiniCPMV4_7Model._frame_end_idx)

    def __init__(self, config: MiniCPMV4_7Config | None = None) -> None:
        self.config = config or MiniCPMV4_7Config(**MINICPM_IDS)


def released_video_processor(family: str) -> Any:
    """transformers' video processor of ``family`` (``"qwen3-vl"`` or ``"glm-4.1v"``) with the released
    checkpoints' ``video_preprocessor_config.json`` (GLM-4.1V's equals the class defaults)."""
    if family == "qwen3-vl":
        module = importlib.import_module("transformers.models.qwen3_vl.video_processing_qwen3_vl")
        return module.Qwen3VLVideoProcessor(
            size={"shortest_edge": 4096, "longest_edge": 25165824},
            patch_size=16,
            temporal_patch_size=2,
            merge_size=2,
            fps=2,
            min_frames=4,
            max_frames=768,
        )
    if family == "glm-4.1v":
        module = importlib.import_module("transformers.models.glm4v.video_processing_glm4v")
        return module.Glm4vVideoProcessor()
    raise ValueError(f"no released video processor for {family!r} here")


def processor_sampled_frames(
    proc: Any, frames: int, video_fps: float, h: int, w: int, sample: dict[str, Any] | None = None
) -> list[int]:
    """The frame indices a transformers video processor's ``preprocess`` samples from a clip of ``frames``
    frames at ``video_fps`` of ``h x w`` px (do_sample_frames on): ``sample_frames(metadata, fps=...,
    num_frames=...)`` with the processor's own values overridden by ``sample``; a count goes with
    ``fps=None`` (the two are exclusive there)."""
    from transformers.video_utils import VideoMetadata

    metadata = VideoMetadata(
        total_num_frames=frames, fps=video_fps, duration=frames / video_fps, width=w, height=h
    )
    kwargs = {"fps": proc.fps, "num_frames": proc.num_frames, **(sample or {})}
    if kwargs["num_frames"] is not None:
        kwargs["fps"] = None
    return list(proc.sample_frames(metadata, **kwargs))
