"""Read media for M-RoPE: image sizes, tiling, video and audio metadata, frame sampling and decoding.

Everything position ids need comes from headers: :func:`load_image` and :func:`load_video` return the
:class:`mrope.Image` / :class:`mrope.Video` a model's processor would produce without decoding pixels;
:func:`load_audio` gives the :class:`mrope.Audio` of an audio file (or a video's audio track) for the
omni models, from container metadata.
:func:`decode_frames` decodes the sampled frames when pixels are wanted. Every bad-media error is a
:class:`mrope.MediaError` whose message says what was expected and what came.
"""

from mrope.media.audio import MAX_AUDIO_SECONDS, has_audio_stream, load_audio, probe_audio
from mrope.media.crops import AlignedCrop, align_box, crop_step
from mrope.media.detect import MediaKind, detect_media_kind
from mrope.media.frames import load_frames
from mrope.media.image import DEFAULT_MAX_IMAGE_PIXELS, crop_segment, image_grid, image_size, load_image
from mrope.media.info import AudioInfo, FrameSize, VideoInfo
from mrope.media.readers import DEFAULT_READER, READERS, Reader, ReaderInfo, reader_info
from mrope.media.resize import (
    MAX_ASPECT_RATIO,
    smart_resize,
    smart_resize_clip,
    smart_resize_edges,
    smart_resize_tokens,
    video_max_pixels,
)
from mrope.media.sampling import (
    FRAME_FACTOR,
    MAX_SAMPLED_VIDEO_FRAMES,
    ernie_frame_indices,
    glm4v_frame_indices,
    glm46v_frame_indices,
    num_sampled_frames,
    qwen3_vl_frame_indices,
    sample_fps,
    sample_frame_indices,
    sampled_times,
)
from mrope.media.source import decode_data_uri, is_url, open_url
from mrope.media.tiling import TilePlan, plan_tiles
from mrope.media.video import load_video
from mrope.media.video_decode import decode_frames
from mrope.media.video_probe import DEFAULT_MAX_PACKETS, probe_video

__all__ = [
    "AlignedCrop",
    "AudioInfo",
    "align_box",
    "crop_segment",
    "crop_step",
    "has_audio_stream",
    "load_audio",
    "probe_audio",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MAX_PACKETS",
    "DEFAULT_READER",
    "FRAME_FACTOR",
    "FrameSize",
    "MAX_ASPECT_RATIO",
    "MAX_AUDIO_SECONDS",
    "MAX_SAMPLED_VIDEO_FRAMES",
    "MediaKind",
    "READERS",
    "Reader",
    "ReaderInfo",
    "TilePlan",
    "VideoInfo",
    "decode_data_uri",
    "decode_frames",
    "detect_media_kind",
    "ernie_frame_indices",
    "glm4v_frame_indices",
    "glm46v_frame_indices",
    "image_grid",
    "image_size",
    "is_url",
    "load_image",
    "load_frames",
    "load_video",
    "num_sampled_frames",
    "open_url",
    "plan_tiles",
    "probe_video",
    "reader_info",
    "qwen3_vl_frame_indices",
    "sample_fps",
    "sample_frame_indices",
    "sampled_times",
    "smart_resize",
    "smart_resize_clip",
    "smart_resize_edges",
    "smart_resize_tokens",
    "video_max_pixels",
]
