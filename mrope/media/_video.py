"""Size a video by a model's rules from its metadata alone: :func:`load_video` -> :class:`mrope.Video`.

Position ids need only the sampled frames' count, size and times, so :func:`load_video` works from
metadata (:func:`mrope.media._video_probe.probe_video`): an hour-long file costs a header read, never a
decode. Frames are picked by ``rules.frame_sampling`` (:mod:`mrope.media._frame_sampling`) and resized
by ``rules.video_bounds`` (:data:`VIDEO_RESIZERS`).

Rotation. Phones record portrait video as landscape coded frames plus a display rotation (the MP4 / MOV
``tkhd`` matrix, the Matroska projection). :class:`~mrope.media.VideoInfo` reports both: ``width`` /
``height`` are the display size (after the rotation), ``rotation`` the rotation and ``coded_size`` the
coded frames' size. Which of the two a model is given depends on the loader that decodes the file, not
on the model (transformers 5.24, PyAV 18; ``tests/media/test_vision_rotation.py`` runs the PyAV
readers): torchcodec, which transformers' video processors use for a video path or URL
(``fetch_videos``), rotates (display size); transformers' own ``load_video`` (default backend
``"pyav"``), PyAV and torchvision do not (coded size); decord 0.6.0 rotates MP4 / MOV (display size), not
Matroska.
:mod:`mrope.media._readers` has each loader's frame count, rate and orientation. So :func:`load_video`
and :func:`mrope.media._video_decode.decode_frames` take ``frame_size``: ``"display"`` (the default: the
released processors' own path) or ``"coded"`` (frames decoded by PyAV, transformers' ``load_video`` or
torchvision, then handed to the processor as arrays), and :func:`load_video` takes ``reader=`` to
follow one loader entirely. For 90 / 270 the two grids have h and w swapped, and every h / w position
of the video differs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from mrope._audio_grid import require_audio
from mrope._errors import MediaError
from mrope._route import Route
from mrope._rules import LayoutRules
from mrope._segments import Audio, Video
from mrope.media._audio import audio_from_info, has_audio_stream, probe_audio
from mrope.media._frame_sampling import frame_request, sample_video_frames
from mrope.media._info import FrameSize, VideoInfo, check_frame_size
from mrope.media._readers import Reader, check_reader, reader_info
from mrope.media._resize import smart_resize, smart_resize_clip, smart_resize_tokens, video_max_pixels
from mrope.media._routes import route_video_rules
from mrope.media._sampling import sample_fps, sampled_times
from mrope.media._sources import media_record
from mrope.media._video_probe import DEFAULT_MAX_PACKETS, probe_video
from mrope.models import ModelLike, resolve_rules
from mrope.models._registry import get_route


def _check_sizes_videos(lay: LayoutRules) -> None:
    """Refuse to size a video file under rules whose processor takes none, or whose sizing mrope does
    not reproduce (``rules.video_support``; the canvas rule's sliced frames)."""
    if lay.video_support != "sized":
        if lay.video_support == "grids":
            raise MediaError(
                f"the {lay.name!r} processor takes no video mrope can size (transformers has no video "
                "processor for it, or one whose sizing mrope.media does not reproduce; "
                "rules.video_support='grids'); pass its frames as images (load_image on each), or the grid "
                "its processor reports (video_grid_thw) as Video(grid=...)"
            )
        raise MediaError(
            f"the {lay.name!r} processor takes no video (transformers has no video processor for it), so "
            "mrope cannot size one the way the model is fed; pass its frames as images (load_image on "
            "each); its get_rope_index takes no videos"
        )
    if lay.positions_base == "canvas":
        raise MediaError(
            f"the {lay.name!r} processor samples and slices video frames with its own rules, which "
            "mrope.media does not reproduce; take the grids from the processor (its video_grid_thw / "
            "target_sizes) and pass Video(grid, tiles=..., thumbnail_grid=...) or Video(grid)"
        )


def _resize_frame(
    n: int, height: int, width: int, lay: LayoutRules, max_pixels: int | None
) -> tuple[int, int]:
    """``video_bounds="frame"``: qwen-vl-utils' per-frame budget shared out of ``video_total_pixels``,
    capped by the call's ``max_pixels``."""
    tps = lay.temporal_patch_size
    ceiling = video_max_pixels(n, lay.video_min_pixels, lay.video_max_pixels, lay.video_total_pixels, tps)
    if max_pixels is not None:
        ceiling = min(max_pixels, ceiling)
    return smart_resize(height, width, lay.resize_factor, lay.video_min_pixels, ceiling)


def _resize_clip(
    n: int, height: int, width: int, lay: LayoutRules, max_pixels: int | None
) -> tuple[int, int]:
    """``video_bounds="clip"``: the bounds hold for the clip's ``t * h * w`` (``max_pixels`` is in ``lay``)."""
    tps = lay.temporal_patch_size
    return smart_resize_clip(
        n, height, width, tps, lay.resize_factor, lay.video_min_pixels, lay.video_max_pixels
    )


def _resize_tokens(
    n: int, height: int, width: int, lay: LayoutRules, max_pixels: int | None
) -> tuple[int, int]:
    """``video_bounds="tokens"`` (HY-V4-VL): the clip's tokens within a budget (``max_pixels`` is in ``lay``)."""
    return smart_resize_tokens(
        n, height, width, lay.resize_factor, lay.video_max_pixels, lay.video_frame_max_pixels
    )


VIDEO_RESIZERS: dict[str, Callable[[int, int, int, LayoutRules, int | None], tuple[int, int]]] = {
    "frame": _resize_frame,
    "clip": _resize_clip,
    "tokens": _resize_tokens,
}
"""Every ``rules.video_bounds`` value and its resize: ``(n, height, width, rules, max_pixels) -> (height,
width)`` in pixels of each of ``n`` sampled frames; ``max_pixels`` is the call's own key (``None``: none)."""


def _resize_frames(
    n: int, height: int, width: int, lay: LayoutRules, max_pixels: int | None, resized: tuple[int, int] | None
) -> tuple[int, int]:
    """The size every sampled frame is resized to, pixels ``(height, width)``.

    ``resized`` (qwen-vl-utils' ``resized_height`` / ``resized_width``) is smart-resized under the image
    bounds; otherwise the rule of ``lay.video_bounds`` resizes the frame size.
    """
    if resized is not None:
        return smart_resize(
            resized[0], resized[1], lay.resize_factor, lay.image_min_pixels, lay.image_max_pixels
        )
    resize = VIDEO_RESIZERS.get(lay.video_bounds)
    if resize is None:
        raise MediaError(
            f"unknown video_bounds {lay.video_bounds!r} in the {lay.name!r} rules; "
            f"expected one of {sorted(VIDEO_RESIZERS)}"
        )
    return resize(n, height, width, lay, max_pixels)


def _with_video_bounds(
    lay: LayoutRules, min_pixels: int | None, max_pixels: int | None, total_pixels: int | None
) -> LayoutRules:
    """The rules with one video's own pixel keys in place of theirs (under ``video_bounds="frame"``,
    ``max_pixels`` caps the per-frame budget instead: see :func:`_resize_frame`)."""
    bounds = {
        k: v
        for k, v in (
            ("video_min_pixels", min_pixels),
            ("video_total_pixels", total_pixels),
            ("video_max_pixels", max_pixels if lay.video_bounds != "frame" else None),
        )
        if v is not None
    }
    return dataclasses.replace(lay, **bounds) if bounds else lay


def _frames_seen(
    source: Any, info: VideoInfo, reader: Reader | None, frame_size: FrameSize | None
) -> tuple[VideoInfo, FrameSize]:
    """The frame count, rate and orientation a processor is handed: the file's (``"display"`` unless
    ``frame_size`` says otherwise), or those ``reader`` reports (:mod:`mrope.media._readers`)."""
    if reader is not None:
        check_reader(reader)
        seen = reader_info(source, reader, info, max_packets=DEFAULT_MAX_PACKETS)
        if frame_size is not None and frame_size != seen.frame_size:
            raise MediaError(
                f"reader={reader!r} hands over {seen.frame_size} frames; frame_size={frame_size!r} contradicts it "
                "(leave frame_size out)"
            )
        info, frame_size = seen.info, seen.frame_size
    frame_size = "display" if frame_size is None else frame_size
    check_frame_size(frame_size)
    return info, frame_size


def _audio_track(source: Any, lay: LayoutRules) -> Audio | None:
    """The file's audio track sized for an omni model (``use_audio_in_video``), ``None`` when it has none."""
    require_audio(lay, "load_video(use_audio_in_video=True)")
    if isinstance(source, VideoInfo):
        raise MediaError("use_audio_in_video needs the file itself, not a VideoInfo")
    return audio_from_info(probe_audio(source), lay) if has_audio_stream(source) else None


def load_video(
    source: Any,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int | None = None,
    max_frames: int | None = None,
    wrap: bool = True,
    use_audio_in_video: bool = False,
    frame_size: FrameSize | None = None,
    reader: Reader | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    total_pixels: int | None = None,
    resized: tuple[int, int] | None = None,
    video_start: float | None = None,
    video_end: float | None = None,
    route: str | Route | None = None,
) -> Video:
    """Size a video by a model's rules from its metadata alone: the :class:`mrope.Video` its processor
    would produce.

    Frames are sampled by ``rules.frame_sampling`` (:mod:`mrope.media._frame_sampling`: qwen-vl-utils' or
    the transformers video processor's rule); ``fps`` / ``min_frames`` / ``max_frames`` default to the
    rules'. Under ``rules.video_bounds == "frame"`` every sampled frame is
    resized with :func:`~mrope.media._resize.smart_resize` (``factor = rules.resize_factor``, ``min_pixels =
    rules.video_min_pixels``) under the qwen-vl-utils per-frame budget ``max(min(video_max_pixels,
    video_total_pixels / n * temporal_patch_size), int(video_min_pixels * 1.05))`` for ``n`` sampled
    frames; under ``"clip"`` with :func:`~mrope.media._resize.smart_resize_clip` (``video_min_pixels .. video_max_pixels``
    bound the clip's ``t * h * w``); under ``"tokens"`` (HY-V4-VL) with :func:`~mrope.media._resize.smart_resize_tokens`
    (never scaled up, each frame at most ``video_frame_max_pixels``, the clip's tokens with one newline
    a row within ``video_max_pixels / resize_factor**2``). The grid is
    ``(ceil(n / temporal_patch_size), H / patch_size, W / patch_size)``; ``fps`` is the sampling rate
    ``n / num_frames * video_fps``, ``second_per_grid = temporal_patch_size / fps`` (over
    ``rules.second_per_grid_fps`` instead when set, or the call's ``fps``: the omni processors), and
    ``frame_times`` are the sampled frames' times (seconds; real timestamps for a variable-rate file).

    ``H x W`` is the resized frame size, from ``info.size(frame_size)``: by default the display size
    (after the display rotation), what transformers' processors give the model for a video file (they
    decode with torchcodec, which rotates); ``frame_size="coded"`` sizes the stored frames, what the
    model gets when the frames come from transformers' ``load_video`` (default backend ``"pyav"``),
    PyAV or torchvision (no rotation). They differ for a video rotated by 90 or 270 degrees (a portrait
    phone video): h and w swap. See the module docstring for every reader.

    ``reader`` names the loader the processor is fed by (:mod:`mrope.media._readers`): its frame count,
    rate and orientation, counted from the stream, never a header's; ``frame_times`` ``i / fps``.

    Args:
        source: a path, bytes, a binary file-like object, or a :class:`VideoInfo` already probed.
        model, rules: the preset and overrides.
        fps: sampling rate, frames per second (not with ``nframes``).
        nframes: an exact number of frames to sample.
        min_frames, max_frames: bounds on the sampled count with ``fps``.
        wrap: emit the wrapper tokens (and Qwen3-VL timestamps).
        use_audio_in_video: for models with audio (the omni families): attach the file's audio track
            as ``Video.audio`` (:func:`mrope.media.load_audio`), as their processors do with
            ``load_audio_from_video``; a file without an audio stream stays a silent video.
        frame_size: ``"display"`` or ``"coded"``: which frames the model is given (see above; default
            ``"display"``, or the reader's orientation).
        reader: ``"torchcodec"``, ``"pyav"``, ``"torchvision"`` or ``"decord"`` (see above; ``None``:
            the metadata probe); not with a :class:`VideoInfo` source.
        min_pixels, max_pixels, total_pixels, resized, video_start, video_end: one video's own keys, as
            qwen-vl-utils' ``fetch_video`` reads them (``vision_process.py``): ``min_pixels`` and
            ``total_pixels`` replace ``rules.video_min_pixels`` / ``video_total_pixels``; under
            ``video_bounds="frame"`` the per-frame ceiling is ``min(max_pixels, ceiling)``, elsewhere
            ``max_pixels`` replaces ``rules.video_max_pixels``; ``resized = (height, width)`` (its
            ``resized_height`` / ``resized_width``) is smart-resized under the image bounds instead of
            the frame size; ``video_start`` / ``video_end`` (seconds) trim the video before sampling
            (:func:`mrope.media._sampling.trimmed_frame_indices`; qwen-vl-utils sampling only).
        route: the pipeline that reads the file (:mod:`mrope.models._routes`): with no ``reader``, the
            route's loader (``"qwen-vl-utils"``: decord; the others: the metadata probe above), and the
            route's own video constants over the rules' (``"qwen-vl-utils"``: its sampling and bounds
            at the rules' resize factor, whatever the checkpoint's video processor says).

    Raises:
        MediaError: see :func:`~mrope.media._video_probe.probe_video` and
            :func:`~mrope.media._sampling.sample_frame_indices`; ``fps`` with ``nframes``;
            a ``frame_size`` other than ``"display"`` / ``"coded"``, or one the ``reader`` does not give;
            an unknown reader, or a file it cannot read (:func:`mrope.media._readers.reader_info`); rules
            whose processor takes no video (``rules.video_support`` other than ``"sized"``) or slices its
            frames (``positions_base="canvas"``, MiniCPM-V 4.7): pass grids instead.
    """
    lay = resolve_rules(model, rules)
    _check_sizes_videos(lay)
    if fps is not None and nframes is not None:
        raise MediaError(f"pass fps or nframes, not both; got fps={fps!r}, nframes={nframes!r}")
    way = get_route(route)
    lay = _with_video_bounds(route_video_rules(lay, way), min_pixels, max_pixels, total_pixels)
    info = source if isinstance(source, VideoInfo) else probe_video(source)
    reader = way.video_reader if reader is None else reader
    info, frame_size = _frames_seen(source, info, reader, frame_size)
    height, width = info.size(frame_size)
    counts = {"fps": fps, "nframes": nframes, "min_frames": min_frames, "max_frames": max_frames}
    req = frame_request(lay, **counts, start=video_start, end=video_end)
    idx = sample_video_frames(info, lay, req)
    n = int(idx.size)
    tps = lay.temporal_patch_size
    new_h, new_w = _resize_frames(n, height, width, lay, max_pixels, resized)
    span = int(idx[-1] - idx[0]) + 1 if req.trimmed else info.num_frames
    rate = sample_fps(n, span, info.fps)
    # the rate second_per_grid is counted in: the sampled one, or the processor's fps keyword (the call's)
    spg_rate = rate if lay.second_per_grid_fps is None else (lay.second_per_grid_fps if fps is None else fps)
    times = sampled_times(info, idx)
    given = dict(min_pixels=min_pixels, max_pixels=max_pixels, total_pixels=total_pixels, fps=fps)
    return Video(
        grid=(math.ceil(n / tps), new_h // lay.patch_size, new_w // lay.patch_size),
        fps=rate,
        second_per_grid=tps / spg_rate,
        frame_times=tuple(float(x) for x in times),
        wrap=wrap,
        audio=_audio_track(source, lay) if use_audio_in_video else None,
        record=media_record("video", model, lay.name, way, given, (new_h, new_w), n),
    )
