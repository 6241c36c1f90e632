"""Read media for M-RoPE: image sizes, tiling, video and audio metadata, frame sampling and decoding.

Everything position ids need comes from headers: :func:`load_image` and :func:`load_video` return the
:class:`mrope.Image` / :class:`mrope.Video` a model's processor would produce without decoding pixels;
:func:`load_audio` gives the :class:`mrope.Audio` of an audio file (or a video's audio track) for the
omni models, from container metadata.
:func:`decode_frames` decodes the sampled frames when pixels are wanted. Every bad-media error is a
:class:`mrope.MediaError` whose message says what was expected and what came.

``__all__`` holds what a user calls: the loaders, the header readers, the sizing functions and the
records they return, and the named routes (:data:`ROUTES`: whose pipeline's loaders size a file). The helpers other mrope packages share (the frame-index rules of each processor,
the resize variants, the reader table) are imported from their own modules.
"""

from mrope import _extras

_extras.require("mrope.media", "media", "PIL", "av")

from mrope._media_record import MediaRecord
from mrope._route import Route, RouteName
from mrope.media._audio import has_audio_stream, load_audio, probe_audio
from mrope.media._crops import AlignedCrop
from mrope.media._detect import MediaKind, detect_media_kind
from mrope.media._frames import load_frames
from mrope.media._image import crop_segment, image_grid, image_size, load_image
from mrope.media._info import AudioInfo, FrameSize, VideoInfo
from mrope.media._readers import Reader
from mrope.media._resize import smart_resize, smart_resize_clip, smart_resize_edges, smart_resize_tokens
from mrope.media._sampling import (
    ernie_frame_indices,
    glm4v_frame_indices,
    qwen3_vl_frame_indices,
    sample_fps,
    sample_frame_indices,
    sampled_times,
)
from mrope.media._source import open_url
from mrope.media._sources import sizing_sources
from mrope.media._tiling import TilePlan, plan_tiles
from mrope.media._video import load_video
from mrope.media._video_decode import decode_frames
from mrope.media._video_probe import probe_video
from mrope.models._registry import get_route
from mrope.models._routes import ROUTES

__all__ = [
    "AlignedCrop",
    "AudioInfo",
    "FrameSize",
    "MediaKind",
    "MediaRecord",
    "ROUTES",
    "Reader",
    "Route",
    "RouteName",
    "TilePlan",
    "VideoInfo",
    "crop_segment",
    "decode_frames",
    "detect_media_kind",
    "get_route",
    "ernie_frame_indices",
    "glm4v_frame_indices",
    "has_audio_stream",
    "image_grid",
    "image_size",
    "load_audio",
    "load_frames",
    "load_image",
    "load_video",
    "open_url",
    "plan_tiles",
    "probe_audio",
    "probe_video",
    "qwen3_vl_frame_indices",
    "sample_fps",
    "sample_frame_indices",
    "sampled_times",
    "sizing_sources",
    "smart_resize",
    "smart_resize_clip",
    "smart_resize_edges",
    "smart_resize_tokens",
]
