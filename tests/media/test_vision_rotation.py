"""Rotated (phone) videos: which frames each reader hands the model, and mrope's grid for each.

Phones store portrait video as landscape coded frames plus a display rotation. Facts (transformers 5.24,
PyAV 18), the first two run here on real files:

- ``transformers.video_utils.load_video(path)`` (default backend ``"pyav"``, ``read_video_pyav``) and
  PyAV's ``frame.to_ndarray()`` return the **coded** frames for every rotation (the rotation is only
  reported, as ``frame.rotation``).
- transformers' video processors decode a video path or URL with torchcodec (``fetch_videos``; that is
  what ``processor(videos=path)`` and ``apply_chat_template`` do), and torchcodec 0.17 documents that it
  applies the rotation (its ``width`` / ``height`` are post-rotation): the **display** frames. It cannot
  run here (its PyPI wheel links a CUDA torch), so the display frames are written out as torchcodec
  documents them: the PyAV reader's frames turned counter-clockwise by the rotation FFmpeg reports on
  each decoded frame (``frame.rotation``, read by PyAV, not by mrope's header parser).

mrope sizes by the display frames by default and by the coded frames with ``frame_size="coded"``.
Expected grids: the frames' size from the readers above, sized by each family's own transformers code:
Qwen2-VL by qwen-vl-utils' ``fetch_video`` rule (written out below over transformers'
``qwen2_vl.image_processing_pil_qwen2_vl.smart_resize``; the torchvision module of the same name cannot be
imported here), Qwen3-VL and GLM-4.1V by their video processors' ``sample_frames`` and their modules'
``smart_resize``. Never mrope's helpers.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import av
import numpy as np
import pytest
from support import media
from support.hf_reference import released_video_processor
from transformers.image_utils import load_image as hf_load_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as qwen2_smart_resize
from transformers.video_utils import load_video as hf_load_video

from mrope import MediaError  # noqa: E402
from mrope.media import decode_frames, image_size, load_image, load_video, probe_video  # noqa: E402

NUM_FRAMES, FPS, WIDTH, HEIGHT = 8, 4, 96, 48  # coded 96 x 48 (w x h): landscape, 2 s
FILES = [  # (suffix, rotation): every rotation in MP4; MOV and Matroska (projection roll) at 90 / 270
    (".mp4", 0),
    (".mp4", 90),
    (".mp4", 180),
    (".mp4", 270),
    (".mov", 90),
    (".mkv", 270),
]
MP4 = [f for f in FILES if f[0] == ".mp4"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[tuple[str, int], Path]:
    root = tmp_path_factory.mktemp("rotation")
    return {
        (suffix, rot): media.write_video(
            root / f"rot{rot}{suffix}", NUM_FRAMES, FPS, WIDTH, HEIGHT, rotation=rot, marker=True
        )
        for suffix, rot in FILES
    }


# ------------------------------------------------------------------------------------------- readers


def pyav_reader(path: Path, sample_indices_fn=None):
    """transformers' own ``load_video(path, backend="pyav")``: ``(frames [n, H, W, 3], metadata)``.

    Its reader sizes the clip by the header's frame count, which Matroska does not store (0: the reader
    then has no frame to return), so without a sampling function all frames written are read."""
    if sample_indices_fn is None:
        sample_indices_fn = lambda metadata, **kw: np.arange(NUM_FRAMES)  # noqa: E731
    return hf_load_video(str(path), backend="pyav", sample_indices_fn=sample_indices_fn)


def ffmpeg_rotation(path: Path) -> int:
    """The display rotation FFmpeg reports on the first decoded frame, counter-clockwise quarter turns."""
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0))
        return round(frame.rotation / 90) % 4


def displayed(frames: np.ndarray, quarter_turns: int) -> np.ndarray:
    """``[n, H, W, 3]`` frames as torchcodec returns them: turned counter-clockwise (as FFmpeg's own
    ``autorotate`` does: a display rotation of +90 is a counter-clockwise quarter turn)."""
    return np.rot90(frames, quarter_turns, axes=(1, 2))


# -------------------------------------------------------------------------------- expected sizing


def qwen2_vl_grid(frame_h: int, frame_w: int) -> tuple[int, int, int]:
    """transformers 5.24's Qwen2VLVideoProcessor as a released Qwen2-VL folder configures it, written out
    from its source (video_processing_qwen2_vl.py): ``do_sample_frames`` off, so every frame (:130), an odd
    count padded to whole temporal patches of 2 (:286); no clip budget (``cap_pixels_per_frame`` unset,
    :342); each frame by ``smart_resize`` within the preprocessor_config.json bounds 3136 .. 12845056; the
    frame size is the frames' after the reader."""
    h, w = qwen2_smart_resize(frame_h, frame_w, factor=28, min_pixels=3136, max_pixels=12845056)
    return (math.ceil(NUM_FRAMES / 2), h // 14, w // 14)


def processor_grid(family: str, path: Path, quarter_turns: int) -> tuple[int, int, int]:
    """The grid of transformers' Qwen3-VL / GLM-4.1V video processor for the frames its PyAV reader
    returns (``quarter_turns`` = 0) or torchcodec returns (turned): ``sample_frames`` picks the frames,
    the module's ``smart_resize`` sizes the clip. (Imported by module path: the package's lazy attribute
    refuses without torchvision, the module itself loads.)"""
    proc = released_video_processor(family if family == "qwen3-vl" else "glm-4.1v")
    module = importlib.import_module(type(proc).__module__)
    frames, metadata = pyav_reader(path, proc.sample_frames)
    frames = displayed(frames, quarter_turns)
    n = len(metadata.frames_indices)
    h, w = module.smart_resize(
        num_frames=n,
        height=frames.shape[1],
        width=frames.shape[2],
        temporal_factor=proc.temporal_patch_size,
        factor=proc.patch_size * proc.merge_size,
        min_pixels=proc.size.shortest_edge,
        max_pixels=proc.size.longest_edge,
    )
    t = math.ceil(n / proc.temporal_patch_size)
    return (t, h // proc.patch_size, w // proc.patch_size)


# -------------------------------------------------------------------------------------------- facts


@pytest.mark.parametrize("key", FILES)
def test_transformers_pyav_reader_hands_over_coded_frames(files, key) -> None:
    """The fact the rest rests on: transformers' default ``load_video`` backend does not rotate; the
    frames are the coded 96 x 48 ones with the marker top-left, whatever the rotation."""
    frames, metadata = pyav_reader(files[key])
    assert frames.shape == (NUM_FRAMES, HEIGHT, WIDTH, 3)
    assert frames[0, :4, :4].min() > 200 and frames[0, -4:, -4:].max() < 200  # marker top-left only
    assert ffmpeg_rotation(files[key]) == key[1] // 90  # the file does carry the rotation
    with av.open(str(files[key])) as container:  # PyAV itself: the same coded frame
        assert next(container.decode(video=0)).to_ndarray(format="rgb24").shape == (HEIGHT, WIDTH, 3)


@pytest.mark.parametrize("key", FILES)
def test_video_info_says_coded_size_and_rotation(files, key) -> None:
    info = probe_video(files[key])
    frames, _ = pyav_reader(files[key])
    turns = ffmpeg_rotation(files[key])
    assert info.rotation == 90 * turns
    assert info.coded_size == info.size("coded") == frames.shape[1:3]
    assert (info.height, info.width) == info.size() == displayed(frames, turns).shape[1:3]


# ------------------------------------------------------------------------------------------- grids


@pytest.mark.parametrize("key", FILES)
def test_qwen2_vl_grid_equals_each_readers(files, key) -> None:
    path = files[key]
    frames, _ = pyav_reader(path)
    coded = qwen2_vl_grid(*frames.shape[1:3])
    display = qwen2_vl_grid(*displayed(frames, ffmpeg_rotation(path)).shape[1:3])
    assert load_video(path, model="qwen2-vl").grid == display
    assert load_video(path, model="qwen2-vl", frame_size="coded").grid == coded
    assert load_video(probe_video(path), model="qwen2-vl", frame_size="coded").grid == coded
    if key[1] in (90, 270):  # the case this is about: h and w swap
        assert coded != display and coded[1:] == display[:0:-1]
    else:
        assert coded == display


@pytest.mark.parametrize("family", ["qwen3-vl", "glm-4.1v"])
@pytest.mark.parametrize("key", MP4)
def test_processor_families_grid_equals_each_readers(files, key, family) -> None:
    path = files[key]
    coded = processor_grid(family, path, 0)
    display = processor_grid(family, path, ffmpeg_rotation(path))
    assert load_video(path, model=family).grid == display
    assert load_video(path, model=family, frame_size="coded").grid == coded
    assert (coded != display) == (key[1] in (90, 270))


# ------------------------------------------------------------------------------------------ pixels


@pytest.mark.parametrize("key", FILES)
def test_decoded_frames_equal_each_readers(files, key) -> None:
    """``decode_frames(frame_size="coded")`` returns transformers' PyAV reader's pixels bit for bit; the
    default returns them turned upright, as torchcodec does."""
    path = files[key]
    idx = [0, 3, 7]
    frames, _ = pyav_reader(path, lambda metadata, **kw: np.asarray(idx))
    np.testing.assert_array_equal(decode_frames(path, idx, frame_size="coded"), frames)
    np.testing.assert_array_equal(decode_frames(path, idx), displayed(frames, ffmpeg_rotation(path)))
    info = probe_video(path)
    assert decode_frames(path, [], info=info, frame_size="coded").shape == (0, HEIGHT, WIDTH, 3)
    assert decode_frames(path, [], info=info).shape == (0, info.height, info.width, 3)


def test_frame_size_must_be_display_or_coded(files) -> None:
    path = files[(".mp4", 90)]
    for call in (
        lambda: load_video(path, model="qwen2-vl", frame_size="portrait"),
        lambda: decode_frames(path, [0], frame_size="rotated"),
        lambda: probe_video(path).size("landscape"),
    ):
        with pytest.raises(MediaError, match="frame_size must be 'display' or 'coded'"):
            call()


# ------------------------------------------------------------------------------------------ images


@pytest.mark.parametrize("orientation", [None, 1, 2, 3, 4, 5, 6, 7, 8])
def test_images_follow_exif_orientation_like_transformers(tmp_path, orientation) -> None:
    """Images agree: transformers' ``load_image`` applies ``ImageOps.exif_transpose``, and mrope's size
    (and grid, sized by transformers' Qwen2-VL ``smart_resize`` with the released 3136 .. 12845056
    pixels) follows the same orientation."""
    path = media.write_image(tmp_path / "photo.jpg", 300, 140, "JPEG", orientation=orientation)
    width, height = hf_load_image(str(path)).size
    assert image_size(path) == (height, width)
    h, w = qwen2_smart_resize(height, width, factor=28, min_pixels=3136, max_pixels=12845056)
    assert load_image(path, model="qwen2-vl").grid == (1, h // 14, w // 14)
    assert ((height, width) == (300, 140)) == (orientation is not None and orientation >= 5)
