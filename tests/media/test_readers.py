"""load_video(reader=...): the frame count, rate and orientation each named loader hands a processor.

Real files made here: a variable-frame-rate MKV (40 frames in 2.98 s, PyAV's ``average_rate`` 5 fps),
a variable-rate MP4, 90-degree rotated MP4 and MKV files, a WebM without a frame count, a plain MP4.

Where the loader runs here the expected values are what it returns: PyAV itself (every frame decoded,
``frame.to_ndarray()``), and transformers 5.24's own ``load_video(backend="pyav")``
(``video_utils.py:read_video_pyav``) on the files whose header it can read. torchcodec and
torchvision's video reader are not installed here (torchcodec is no dependency of the project; ``torchvision.io.read_video`` is gone since torchvision 0.26, and transformers checks for it:
``is_torchvision_video_decoding_available``), so what they return is written out below from their
documented behaviour and code, computed from the file with PyAV, and the tests say so:

- torchcodec ``VideoDecoder(seek_mode="exact")`` (transformers' ``read_video_torchcodec``): the frames
  its scan counts, one a packet; ``average_fps = num_frames / (end - begin)`` with ``begin`` the
  smallest packet timestamp and ``end`` the largest timestamp plus duration (torchcodec
  ``_core/Metadata.cpp`` ``get_average_fps``, ``get_num_frames``); frames rotated to the display
  orientation ("TorchCodec automatically applies this rotation during decoding"; its metadata reports
  post-rotation width and height).
- torchvision ``read_video`` (transformers' ``read_video_torchvision``): decodes every frame with
  PyAV, ``info["video_fps"] = float(stream.average_rate)``, no rotation.
- decord 0.6.0 (transformers' ``read_video_decord``) is installed from PyPI (the dev extra) and run:
  ``len(vr)`` is the number of the stream's packets, ``get_avg_fps()`` the stream's ``avg_frame_rate``;
  it turns MP4 / MOV frames upright and does not rotate Matroska.
"""

from __future__ import annotations

import math
from pathlib import Path

import av
import numpy as np
import pytest
from support.media import write_headerless_video, write_vfr_video, write_video
from transformers.video_utils import is_torchvision_video_decoding_available
from transformers.video_utils import load_video as hf_load_video

from mrope._errors import MediaError
from mrope.media import load_video, probe_video
from mrope.media._readers import DEFAULT_READER, READERS, reader_info
from mrope.models import names, resolve_rules

DOCS = Path(__file__).parents[2] / "docs" / "readers.md"
VFR_TIMES = [
    round(float(t), 3) for t in np.r_[np.linspace(0, 0.5, 20, endpoint=False), np.linspace(0.5, 2.98, 20)]
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("readers")
    return {
        # the issue's file: Matroska keeps no frame count; FFmpeg's average rate says 5 fps
        "vfr.mkv": write_video(root / "vfr.mkv", 40, 5, 480, 288, frame_times=VFR_TIMES),
        "vfr.mp4": write_vfr_video(root / "vfr.mp4", VFR_TIMES[:24], width=64, height=48),
        "rot90.mp4": write_video(root / "rot90.mp4", 32, 4, 448, 320, rotation=90),
        "rot90.mkv": write_video(root / "rot90.mkv", 8, 4, 96, 64, rotation=90),
        "headerless.webm": write_headerless_video(root / "hl", "webm", 30, 12, 64, 48),
        "plain.mp4": write_video(root / "plain.mp4", 24, 12, 64, 48),
    }


def _pyav_decoded(path: Path) -> tuple[int, float, tuple[int, int], int]:
    """What PyAV returns: every decoded frame, the stream's average rate, the frames' (h, w) and the
    rotation FFmpeg reports on them (counter-clockwise degrees)."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames = list(c.decode(stream))
        return (
            len(frames),
            float(stream.average_rate),
            frames[0].to_ndarray(format="rgb24").shape[:2],
            round(frames[0].rotation) % 360,
        )


def _packets(path: Path) -> tuple[int, float, float]:
    """The stream's packets (no decode): count, smallest timestamp and largest timestamp + duration (s)."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        tb = float(stream.time_base)
        stamps = [(p.pts if p.pts is not None else p.dts, p.duration or 0) for p in c.demux(stream) if p.size]
    return len(stamps), min(t for t, _ in stamps) * tb, max(t + d for t, d in stamps) * tb


def _seen(path: Path, reader: str):
    return reader_info(path, reader, probe_video(path), max_packets=100_000)


@pytest.mark.parametrize(
    "name", ["vfr.mkv", "vfr.mp4", "rot90.mp4", "rot90.mkv", "headerless.webm", "plain.mp4"]
)
def test_pyav_reader_is_what_pyav_decodes(files, name: str) -> None:
    n, fps, hw, _ = _pyav_decoded(files[name])
    seen = _seen(files[name], "pyav")
    assert (seen.info.num_frames, seen.info.fps, seen.size) == (n, pytest.approx(fps), hw)


@pytest.mark.parametrize("name", ["vfr.mp4", "rot90.mp4", "plain.mp4"])
def test_pyav_reader_equals_transformers_load_video(files, name: str) -> None:
    # transformers' own loader runs here (it reads the header's count, which MP4 has)
    video, meta = hf_load_video(str(files[name]), backend="pyav")
    seen = _seen(files[name], "pyav")
    assert meta.total_num_frames == seen.info.num_frames == video.shape[0]
    assert meta.fps == pytest.approx(seen.info.fps)
    assert tuple(video.shape[1:3]) == seen.size


def test_transformers_pyav_loader_trusts_a_header_count_matroska_lacks(files) -> None:
    # Matroska has no frame count: transformers' pyav loader reports 0 frames while PyAV decodes 40;
    # mrope follows the decoded frames (what a processor gets from frames decoded with PyAV)
    video, meta = hf_load_video(
        str(files["vfr.mkv"]), backend="pyav", sample_indices_fn=lambda **kw: np.arange(40)
    )
    assert meta.total_num_frames == 0 and video.shape[0] == 40
    assert _seen(files["vfr.mkv"], "pyav").info.num_frames == 40


@pytest.mark.parametrize("name", ["vfr.mkv", "rot90.mp4", "headerless.webm"])
def test_torchvision_reader_from_its_documented_behaviour(files, name: str) -> None:
    assert not is_torchvision_video_decoding_available()  # not runnable here: written from its docs
    n, fps, hw, _ = _pyav_decoded(files[name])  # read_video decodes every frame with PyAV, no rotation
    seen = _seen(files[name], "torchvision")
    assert (seen.info.num_frames, seen.info.fps, seen.size, seen.frame_size) == (
        n,
        pytest.approx(fps),
        hw,
        "coded",
    )


@pytest.mark.parametrize(
    "name", ["vfr.mkv", "vfr.mp4", "rot90.mp4", "rot90.mkv", "headerless.webm", "plain.mp4"]
)
def test_torchcodec_reader_from_its_documented_behaviour(files, name: str) -> None:
    # torchcodec is not installed here: its exact-mode metadata, computed from the packets
    count, begin, end = _packets(files[name])
    _, _, (h, w), rotation = _pyav_decoded(files[name])
    display = (w, h) if rotation in (90, 270) else (h, w)
    seen = _seen(files[name], "torchcodec")
    assert seen.info.num_frames == count
    assert seen.info.fps == pytest.approx(count / (end - begin))
    assert seen.size == display and seen.frame_size == "display"


@pytest.mark.parametrize(
    "name", ["vfr.mkv", "vfr.mp4", "rot90.mp4", "rot90.mkv", "headerless.webm", "plain.mp4"]
)
def test_decord_reader_is_what_decord_reads(files, name: str) -> None:
    """decord 0.6.0 from PyPI (the dev extra) run on the file: its count, rate and frame size, the
    rotated MP4 included (decord turns it upright)."""
    import decord

    reader = decord.VideoReader(str(files[name]))
    frame = reader.get_batch([0]).asnumpy()
    seen = _seen(files[name], "decord")
    assert (seen.info.num_frames, seen.info.fps) == (len(reader), pytest.approx(reader.get_avg_fps()))
    assert seen.size == frame.shape[1:3]


def test_decord_reads_the_rotated_mp4_upright(files) -> None:
    """The issue's case: a 90-degree MP4 is sized by its display size under reader='decord' (320 x 448, h x w
    coded, turned), where the Matroska one stays coded."""
    import decord

    shape = decord.VideoReader(str(files["rot90.mp4"])).get_batch([0]).asnumpy().shape
    assert shape[1:3] == (448, 320)  # negative control: the coded frames are 320 x 448 (h x w)
    video = load_video(files["rot90.mp4"], model="qwen2.5-vl", reader="decord")
    coded = load_video(files["rot90.mp4"], model="qwen2.5-vl", reader="pyav")
    assert video.grid[1:] == coded.grid[:0:-1] and video.grid[1] > video.grid[2]


def _qwen3_vl_patches(total: int, fps: float) -> int:
    """Qwen3-VL's sample_frames count (transformers 5.24 models/qwen3_vl/video_processing_qwen3_vl.py:177,
    fps 2, min_frames 4, max_frames 768), in temporal patches of 2 frames."""
    n = min(max(int(total / fps * 2), 4), 768, total)
    return math.ceil(n / 2)


def test_the_issues_grids_follow_the_reader(files) -> None:
    # VFR MKV, 480 x 288 (multiples of 32, inside the pixel bounds: no resize; patch 16)
    pyav = load_video(files["vfr.mkv"], model="qwen3-vl", reader="pyav")
    assert pyav.grid == (_qwen3_vl_patches(40, 5.0), 18, 30) == (8, 18, 30)  # every frame, at 5 fps
    assert load_video(files["vfr.mkv"], model="qwen3-vl").grid == (3, 18, 30)  # no reader: the timed probe
    count, begin, end = _packets(files["vfr.mkv"])
    codec = load_video(files["vfr.mkv"], model="qwen3-vl", reader="torchcodec")
    assert codec.grid == (_qwen3_vl_patches(count, count / (end - begin)), 18, 30)
    # the processor times frame i as i / fps (VideoMetadata.timestamps), the sampled i as sample_frames picks them
    assert pyav.frame_times == pytest.approx(tuple(np.linspace(0, 39, 16).round() / 5.0))
    # rotated 90 degrees, 32 frames at 4 fps: 448 x 320 coded (w x h), 320 x 448 displayed; 16 frames sampled
    rotated = files["rot90.mp4"]
    assert (
        load_video(rotated, model="qwen3-vl", reader="pyav").grid == (8, 320 // 16, 448 // 16) == (8, 20, 28)
    )
    assert load_video(rotated, model="qwen3-vl", reader="torchcodec").grid == (8, 28, 20)
    assert load_video(rotated, model="qwen3-vl").grid == (8, 28, 20)  # no reader named: display size


def test_reader_names_and_the_documented_default_per_family() -> None:
    assert DEFAULT_READER == "torchcodec" and set(READERS) == {"torchcodec", "pyav", "torchvision", "decord"}
    # docs/readers.md lists every family mrope sizes videos for, with its sampler and loader
    rows = [line.split("|")[1:-1] for line in DOCS.read_text().splitlines() if line.startswith("| `")]
    table = {r[0].strip(" `"): (r[1].strip(), r[2].strip(" `")) for r in rows if r[0].strip(" `") in names()}
    sized = {
        n: resolve_rules(n)
        for n in names()
        if resolve_rules(n).video_support == "sized" and resolve_rules(n).positions_base != "canvas"
    }
    assert table == {n: (lay.frame_sampling, DEFAULT_READER) for n, lay in sized.items()}


def test_reader_refusals(files) -> None:
    path = files["headerless.webm"]
    with pytest.raises(MediaError, match="more than 10 packets"):
        reader_info(path, "pyav", probe_video(path), max_packets=10)
    with pytest.raises(MediaError, match="reader must be one of"):
        load_video(path, model="qwen2.5-vl", reader="opencv")
    with pytest.raises(MediaError, match="not a VideoInfo"):
        load_video(probe_video(path), model="qwen2.5-vl", reader="pyav")
    with pytest.raises(MediaError, match="contradicts"):
        load_video(path, model="qwen2.5-vl", reader="pyav", frame_size="display")
    assert load_video(path, model="qwen2.5-vl", reader="pyav", frame_size="coded") == load_video(
        path, model="qwen2.5-vl", reader="pyav"
    )
