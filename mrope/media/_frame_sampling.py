"""Pick the frames :func:`mrope.media.load_video` sizes a video by, under ``rules.frame_sampling``.

Each rule is one function in :data:`FRAME_SAMPLERS`, keyed by the rule's value (``"qwen-vl-utils"``,
``"qwen2-vl"``, ``"vllm-qwen2-vl"``, ``"qwen3-vl"``, ``"glm4v"``, ``"glm46v"``, ``"ernie"``); :func:`sample_video_frames` looks the rule up
there. The index arithmetic of each processor is in :mod:`mrope.media._sampling`; this module only
resolves a call's keywords against the rules and hands them to the right one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mrope._errors import MediaError
from mrope._rules import LayoutRules
from mrope.media._info import VideoInfo
from mrope.media._sampling import (
    ernie_frame_indices,
    glm4v_frame_indices,
    glm46v_frame_indices,
    qwen2_vl_frame_indices,
    qwen3_vl_frame_indices,
    sample_frame_indices,
    trimmed_frame_indices,
)


@dataclass(frozen=True)
class FrameRequest:
    """One call's sampling keywords, resolved against the rules.

    Attributes:
        fps: the sampling rate the call passed (frames per second), ``None`` when it passed none.
        rate: the sampling rate in use: ``fps``, else ``rules.fps`` (frames per second).
        nframes: an exact number of frames to sample, or ``None``.
        min_frames, max_frames: bounds on the sampled count (the call's, else the rules').
        start, end: qwen-vl-utils' ``video_start`` / ``video_end`` (seconds), ``None`` when not given.
    """

    fps: float | None
    rate: float
    nframes: int | None
    min_frames: int
    max_frames: int
    start: float | None = None
    end: float | None = None

    @property
    def trimmed(self) -> bool:
        """Whether the call trims the video before sampling."""
        return self.start is not None or self.end is not None


def frame_request(
    lay: LayoutRules,
    *,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int | None = None,
    max_frames: int | None = None,
    start: float | None = None,
    end: float | None = None,
) -> FrameRequest:
    """One call's sampling keywords with the rules' ``fps``, ``min_frames`` and ``max_frames`` for those it left out."""
    return FrameRequest(
        fps=fps,
        rate=lay.fps if fps is None else fps,
        nframes=nframes,
        min_frames=lay.min_frames if min_frames is None else min_frames,
        max_frames=lay.max_frames if max_frames is None else max_frames,
        start=start,
        end=end,
    )


FrameSampler = Callable[[VideoInfo, LayoutRules, FrameRequest], np.ndarray]
"""``(info, rules, request) -> int64 [n]`` frame indices, each in ``[0, info.num_frames)``."""


def _refuse_trim(lay: LayoutRules, req: FrameRequest) -> None:
    """Trimming is a qwen-vl-utils key: refuse it under a rule that samples as transformers does."""
    if req.trimmed:
        raise MediaError(
            f"video_start / video_end are qwen-vl-utils keys, which the {lay.name!r} processor does not "
            "read (its frames are sampled by transformers' video processor); trim the file instead"
        )


def _qwen3_vl(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    return qwen3_vl_frame_indices(
        info.num_frames,
        info.fps,
        fps=req.rate,
        nframes=req.nframes,
        min_frames=req.min_frames,
        max_frames=req.max_frames,
        temporal_patch_size=lay.temporal_patch_size,
    )


def _even_count(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """GLM with ``nframes``: evenly spaced as Qwen3-VL spaces them, an odd count padded with its last."""
    idx = _qwen3_vl(info, lay, req)
    return np.append(idx, idx[-1]) if idx.size % 2 else idx


def _sample_qwen_vl_utils(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """qwen-vl-utils' ``smart_nframes``, on the trimmed range when ``video_start`` / ``video_end`` are given."""
    if req.trimmed:
        return trimmed_frame_indices(
            info.num_frames,
            info.fps,
            req.start,
            req.end,
            fps=req.rate,
            nframes=req.nframes,
            min_frames=req.min_frames,
            max_frames=req.max_frames,
        )
    return sample_frame_indices(
        info.num_frames,
        info.fps,
        fps=req.rate,
        nframes=req.nframes,
        min_frames=req.min_frames,
        max_frames=req.max_frames,
    )


def _sample_qwen2_vl(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """transformers' Qwen2-VL video processor: every frame, or its ``sample_frames`` when the call passes
    ``fps`` or ``nframes`` (the rules' ``fps`` is not a default: the released processor does not sample)."""
    _refuse_trim(lay, req)
    return qwen2_vl_frame_indices(
        info.num_frames,
        info.fps,
        fps=req.fps,
        nframes=req.nframes,
        min_frames=req.min_frames,
        max_frames=req.max_frames,
        temporal_patch_size=lay.temporal_patch_size,
    )


VLLM_QWEN2_FPS = 2.0
"""vLLM 0.34.0's Qwen2-VL video loader samples at this rate unless the request says otherwise
(vllm/multimodal/video.py:666, ``Qwen2VLVideoBackend.load_bytes(fps=2)``)."""
VLLM_QWEN2_MAX_FPS = 30.0
"""Its highest sampling rate (video.py:621 ``_MAX_FPS``, applied at :652)."""
VLLM_QWEN2_MAX_FRAMES = 768
"""Its most frames (video.py:620 ``_MAX_FRAMES``, applied at :636)."""


def _sample_vllm_qwen2_vl(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """vLLM 0.34.0's ``Qwen2VLVideoBackend.compute_frames_index_to_sample`` (vllm/multimodal/video.py:625-659):
    transformers' Qwen2-VL ``sample_frames`` at ``min(fps, 30)`` (default 2), at most 768 frames, the
    ``arange``'s overshooting tail clamped to the last frame; it ignores ``num_frames`` (:616)."""
    _refuse_trim(lay, req)
    if req.nframes is not None:
        raise MediaError(
            "vLLM's Qwen2-VL video loader samples by fps and ignores num_frames "
            "(vllm/multimodal/video.py:616); pass fps instead of nframes"
        )
    rate = VLLM_QWEN2_FPS if req.fps is None else req.fps
    return qwen2_vl_frame_indices(
        info.num_frames,
        info.fps,
        fps=min(rate, VLLM_QWEN2_MAX_FPS),
        min_frames=req.min_frames,
        max_frames=min(req.max_frames, VLLM_QWEN2_MAX_FRAMES),
        temporal_patch_size=lay.temporal_patch_size,
        clamp_tail=True,
    )


def _sample_qwen3_vl(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """transformers' Qwen3-VL video processor."""
    _refuse_trim(lay, req)
    return _qwen3_vl(info, lay, req)


def _sample_glm4v(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """transformers' GLM-4.1V video processor (``nframes``: evenly spaced, an even count)."""
    _refuse_trim(lay, req)
    if req.nframes is not None:
        return _even_count(info, lay, req)
    return glm4v_frame_indices(info.num_frames, info.fps, fps=req.rate, max_duration=lay.max_duration)


def _sample_glm46v(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """transformers' GLM-4.6V video processor (``nframes``: evenly spaced, an even count)."""
    _refuse_trim(lay, req)
    if req.nframes is not None:
        return _even_count(info, lay, req)
    return glm46v_frame_indices(info.num_frames, info.fps, lay.temporal_patch_size)


def _sample_ernie(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """transformers' ERNIE-4.5-VL video processor: a rate only from the call (its class default has none)."""
    _refuse_trim(lay, req)
    return ernie_frame_indices(
        info.num_frames,
        info.fps,
        fps=req.fps,
        nframes=req.nframes,
        min_frames=req.min_frames,
        max_frames=req.max_frames,
    )


FRAME_SAMPLERS: dict[str, FrameSampler] = {
    "qwen-vl-utils": _sample_qwen_vl_utils,
    "qwen2-vl": _sample_qwen2_vl,
    "vllm-qwen2-vl": _sample_vllm_qwen2_vl,
    "qwen3-vl": _sample_qwen3_vl,
    "glm4v": _sample_glm4v,
    "glm46v": _sample_glm46v,
    "ernie": _sample_ernie,
}
"""Every ``rules.frame_sampling`` value and the function that samples frames under it."""


def sample_video_frames(info: VideoInfo, lay: LayoutRules, req: FrameRequest) -> np.ndarray:
    """The frame indices ``lay.frame_sampling`` samples from a video: int64 ``[n]`` in ``[0, num_frames)``.

    Raises:
        MediaError: an unknown rule, trim keys under a rule other than ``"qwen-vl-utils"``, or whatever
            the rule's index function refuses (see :mod:`mrope.media._sampling`).
    """
    sampler = FRAME_SAMPLERS.get(lay.frame_sampling)
    if sampler is None:
        raise MediaError(
            f"unknown frame_sampling {lay.frame_sampling!r} in the {lay.name!r} rules; "
            f"expected one of {sorted(FRAME_SAMPLERS)}"
        )
    return sampler(info, lay, req)
