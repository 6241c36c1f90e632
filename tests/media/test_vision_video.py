"""mrope.media videos: probing (header, packet fallback, VFR, rotation), sampling, decoding, load_video
and a bad-input corpus. All media are generated here (tests/support/media.py)."""

from __future__ import annotations

import io
import math
import socket
import threading
import time

import av
import numpy as np
import pytest
import torch
from support import media

import mrope
from mrope import MediaError
from mrope.media import VideoInfo, decode_frames, detect_media_kind, load_video, probe_video
from mrope.media._sampling import sample_fps, sample_frame_indices, sampled_times

pytestmark = pytest.mark.timeout(60)

QWEN_VL_UTILS = {
    "frame_sampling": "qwen-vl-utils",
    "video_min_pixels": 128 * 28 * 28,
    "video_max_pixels": 768 * 28 * 28,
    "video_total_pixels": int(128000 * 28 * 28 * 0.9),
}
"""qwen-vl-utils' video rule as rules (vision_process.py: VIDEO_MIN/MAX_TOKEN_NUM 128 / 768, MODEL_SEQ_LEN
128000, smart_nframes): the tests below derive its answers by hand (``route="qwen-vl-utils"`` would also
switch the reader to decord)."""

VFR_TIMES = [0.0, 0.1, 0.2, 0.5, 0.6, 1.5, 1.6, 1.7, 3.0, 3.1, 3.2, 3.3, 3.4, 5.0, 5.1, 5.2]


@pytest.fixture(scope="module")
def vids(tmp_path_factory):
    """Every test video, written once per module."""
    d = tmp_path_factory.mktemp("videos")
    return {
        "h264": media.write_video(d / "h264.mp4", 48, 12, gop=8),
        "h264_bframes": media.write_video(d / "bframes.mp4", 48, 12),
        "mpeg4": media.write_video(d / "mpeg4.mp4", 30, 10, codec="mpeg4", gop=6),
        "mov": media.write_video(d / "clip.mov", 20, 10),
        "vfr": media.write_vfr_video(d / "vfr.mp4", VFR_TIMES),
        "mkv": media.write_headerless_video(d / "nocount", "mkv", 36, 12),
        "webm": media.write_headerless_video(d / "nocount", "webm", 30, 10),
        "raw": media.write_headerless_video(d / "nocount", "h264", 30, 15),
        "m1v": media.write_headerless_video(d / "nocount", "m1v", 20, 25),
        "rot90": media.write_video(d / "rot90.mp4", 6, 12, 64, 48, rotation=90, marker=True),
        "rot180": media.write_video(d / "rot180.mp4", 6, 12, 64, 48, rotation=180, marker=True),
        "rot270_mkv": media.write_video(d / "rot270.mkv", 6, 12, 64, 48, rotation=270, marker=True),
        "one": media.write_video(d / "one.mp4", 1, 10),
        "audio": media.write_audio(d / "audio.m4a"),
        "wav": media.write_audio(d / "audio.wav"),
    }


def _indices_of(frames: np.ndarray) -> list[int]:
    """The frame index each decoded frame's centre colour encodes."""
    out = []
    for f in frames:
        h, w = f.shape[:2]
        out.append(
            media.colour_index(f[h // 2 - 4 : h // 2 + 4, w // 2 - 4 : w // 2 + 4].reshape(-1, 3).mean(0))
        )
    return out


# --------------------------------------------------------------------------------------------- probe


@pytest.mark.parametrize(
    "key,codec,n,fps", [("h264", "h264", 48, 12), ("mpeg4", "mpeg4", 30, 10), ("mov", "h264", 20, 10)]
)
def test_probe_from_header(vids, key, codec, n, fps):
    if key != "mpeg4" and media.h264_codec() != "libx264":
        codec = "mpeg4"
    info = probe_video(vids[key])
    assert info.timing == "header"
    assert (info.num_frames, info.fps, info.width, info.height, info.rotation) == (n, fps, 64, 48, 0)
    assert info.duration == pytest.approx(n / fps)
    assert info.codec == codec and info.frame_times is None and not info.variable_rate
    assert probe_video(vids[key].read_bytes()) == info
    with open(vids[key], "rb") as f:
        assert probe_video(f) == info


def test_probe_variable_frame_rate(vids):
    with av.open(str(vids["vfr"])) as c:
        s = c.streams.video[0]
        assert s.frames == len(VFR_TIMES) and s.average_rate != s.base_rate  # the header hints at VFR
    info = probe_video(vids["vfr"])
    assert info.timing == "packets" and info.variable_rate
    assert info.num_frames == len(VFR_TIMES)
    np.testing.assert_allclose(info.frame_times, VFR_TIMES, atol=1e-3)
    span = VFR_TIMES[-1] + 0.1  # last time plus the median interval
    assert info.duration == pytest.approx(span, abs=1e-3)
    assert info.fps == pytest.approx(len(VFR_TIMES) / span, rel=1e-3)


@pytest.mark.parametrize("key,n,fps", [("mkv", 36, 12), ("webm", 30, 10), ("raw", 30, 15), ("m1v", 20, 25)])
def test_probe_without_frame_count_counts_packets(vids, key, n, fps):
    with av.open(str(vids[key])) as c:
        assert c.streams.video[0].frames == 0  # the header has no count: the fallback is exercised
    info = probe_video(vids[key])
    assert info.timing == "packets"
    assert (info.num_frames, info.fps, info.width, info.height) == (n, fps, 64, 48)
    assert info.duration == pytest.approx(n / fps)
    assert info.frame_times is None


def test_probe_packet_limit(vids):
    with pytest.raises(MediaError, match="more than 5 packets"):
        probe_video(vids["mkv"], max_packets=5)
    capped = probe_video(vids["vfr"], max_packets=5)  # header has count and duration: kept
    assert capped.timing == "header" and capped.num_frames == len(VFR_TIMES) and capped.frame_times is None
    with pytest.raises(MediaError, match="max_packets"):
        probe_video(vids["mkv"], max_packets=0)


@pytest.mark.parametrize("key,rotation", [("rot90", 90), ("rot180", 180), ("rot270_mkv", 270)])
def test_rotation_metadata(vids, key, rotation):
    info = probe_video(vids[key])
    assert info.rotation == rotation
    assert (info.height, info.width) == ((64, 48) if rotation in (90, 270) else (48, 64))
    assert info.coded_size == (48, 64)
    with av.open(str(vids[key])) as c:  # what FFmpeg itself reports on a decoded frame
        assert next(c.decode(video=0)).rotation % 360 == rotation
    frames = decode_frames(vids[key], [0, 5], info=info)
    assert frames.shape == (2, info.height, info.width, 3)
    # the white marker was painted top-left on the coded frame; check it lands where the rotation puts it
    marker = np.zeros((48, 64), dtype=np.uint8)
    marker[:6, :8] = 1
    expected = np.rot90(marker, rotation // 90).astype(bool)
    bright = frames[0].mean(axis=2) > 200
    assert (bright == expected).mean() > 0.97
    assert _indices_of(frames) == [0, 5]


# ------------------------------------------------------------------------------------------ sampling


def _qwen_sample(total_frames, video_fps, ele):
    """qwen-vl-utils ``smart_nframes`` + its index rule, verbatim (the reference)."""
    frame_factor, fps_default, min_default, max_default = 2, 2.0, 4, 768

    def round_by_factor(number, factor):
        return round(number / factor) * factor

    def ceil_by_factor(number, factor):
        return math.ceil(number / factor) * factor

    def floor_by_factor(number, factor):
        return math.floor(number / factor) * factor

    if "nframes" in ele:
        nframes = round_by_factor(ele["nframes"], frame_factor)
    else:
        fps = ele.get("fps", fps_default)
        min_frames = ceil_by_factor(ele.get("min_frames", min_default), frame_factor)
        max_frames = floor_by_factor(ele.get("max_frames", min(max_default, total_frames)), frame_factor)
        nframes = total_frames / video_fps * fps
        nframes = min(min(max(nframes, min_frames), max_frames), total_frames)
        nframes = floor_by_factor(nframes, frame_factor)
    if not (frame_factor <= nframes and nframes <= total_frames):
        raise ValueError(f"nframes should in interval [{frame_factor}, {total_frames}], but got {nframes}.")
    return torch.linspace(0, total_frames - 1, nframes).round().long().tolist()


def test_sample_frame_indices_hand_computed():
    # 10 s at 30 fps, 2 fps: n = 20, step 299 / 19 = 15.74
    assert sample_frame_indices(300, 30.0).tolist() == [
        0, 16, 31, 47, 63, 79, 94, 110, 126, 142, 157, 173, 189, 205, 220, 236, 252, 268, 283, 299,
    ]  # fmt: skip
    assert sample_frame_indices(10, 30.0).tolist() == [0, 3, 6, 9]  # 0.67 frames -> min_frames 4
    assert sample_frame_indices(3, 30.0).tolist() == [0, 2]  # min 4, but floor2(3) = 2 caps it
    assert sample_frame_indices(100, 25.0, nframes=5).size == 4  # round(2.5) = 2 (half to even) -> 4
    assert sample_frame_indices(100, 25.0, nframes=7).size == 8  # round(3.5) = 4 -> 8
    assert sample_frame_indices(100_000, 30.0).size == 768  # max_frames
    assert sample_frame_indices(120, 30.0, fps=1.0, min_frames=6).tolist() == [0, 24, 48, 71, 95, 119]
    assert sample_frame_indices(120, 30.0, fps=8.0, max_frames=9).size == 8
    idx = sample_frame_indices(5000, 29.97)
    assert idx.dtype == np.int64 and idx[0] == 0 and idx[-1] == 4999 and np.all(np.diff(idx) > 0)


def test_sample_frame_indices_match_qwen_vl_utils():
    rng = np.random.default_rng(3)
    cases = [
        (int(t), float(r), {})
        for t, r in zip(rng.integers(2, 40_000, 200), rng.uniform(1, 120, 200), strict=True)
    ]
    cases += [
        (200_001, 30.0, {"nframes": 432}),
        (268_057, 30.0, {"nframes": 498}),
        (50, 10.0, {"max_frames": 1000}),
    ]
    cases += [(400, 24.0, {"fps": 0.5, "min_frames": 3}), (90, 30.0, {"nframes": 17})]
    for total, rate, ele in cases:
        want = _qwen_sample(total, rate, ele)
        got = sample_frame_indices(total, rate, **ele)
        assert got.tolist() == want, (total, rate, ele)


@pytest.mark.parametrize(
    "args,match",
    [
        ((1, 30.0), "this is a one-frame video: a temporal patch takes 2 frames"),
        ((10, 30.0, 2.0, 12), "nframes=12"),  # more frames asked than the video has
        ((10, 30.0, 2.0, 1), r"\[2, 10\]"),  # nframes rounds to 0
        ((100, float("nan")), "video fps"),
        ((100, 0.0), "video fps"),
        ((100, -5.0), "video fps"),
        ((100, 30.0, float("inf")), "sampling fps"),
        ((0, 30.0), "num_frames"),
    ],
)
def test_sample_frame_indices_errors(args, match):
    with pytest.raises(MediaError, match=match):
        sample_frame_indices(*args)


def test_sampled_times(vids):
    cfr = VideoInfo(fps=12.0, num_frames=48, duration=4.0, width=64, height=48)
    np.testing.assert_allclose(sampled_times(cfr, [0, 6, 47]), [0.0, 0.5, 47 / 12])
    vfr = probe_video(vids["vfr"])
    np.testing.assert_allclose(sampled_times(vfr, [0, 5, 15]), [0.0, 1.5, 5.2], atol=1e-3)
    with pytest.raises(MediaError, match=r"\[0, 48\)"):
        sampled_times(cfr, [48])
    assert sample_fps(4, 48, 12.0) == 1.0


# ------------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("key", ["h264", "h264_bframes", "mpeg4", "mkv", "webm", "raw", "m1v", "vfr"])
def test_decode_frames_are_the_right_frames(vids, key):
    info = probe_video(vids[key])
    n = info.num_frames
    wanted = [n - 1, 0, 7, 7, n // 2, 3, 1]  # any order, a repeat
    results = {}
    for mode in ("sequential", "seek", "auto"):
        frames = decode_frames(vids[key], wanted, info=info, mode=mode)
        assert frames.dtype == np.uint8 and frames.shape == (len(wanted), 48, 64, 3)
        assert _indices_of(frames) == wanted, mode
        results[mode] = frames
    # frames decoded after a seek are bit-identical to the ones decoded from the start
    np.testing.assert_array_equal(results["seek"], results["sequential"])
    np.testing.assert_array_equal(results["auto"], results["sequential"])


def test_non_seekable_stream_source(vids):
    class Pipe:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, n: int = -1) -> bytes:
            out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
            return out

    data = vids["h264"].read_bytes()
    assert probe_video(Pipe(data)) == probe_video(data)
    assert _indices_of(decode_frames(Pipe(data), [3, 40])) == [3, 40]


def test_decode_sparse_samples_of_a_longer_video(tmp_path):
    path = media.write_video(tmp_path / "long.mp4", 240, 24, 32, 32, gop=12)
    info = probe_video(path)
    idx = sample_frame_indices(info.num_frames, info.fps, nframes=8)
    seq = decode_frames(path, idx, info=info, mode="sequential")
    auto = decode_frames(path, idx, info=info)
    np.testing.assert_array_equal(auto, seq)
    assert _indices_of(auto) == idx.tolist()


def test_decode_frames_bad_indices(vids):
    with pytest.raises(MediaError, match=r"\[0, 48\)"):
        decode_frames(vids["h264"], [0, 48])
    with pytest.raises(MediaError, match=r"\[0, 48\)"):
        decode_frames(vids["h264"], [-1])
    with pytest.raises(MediaError, match="1-D"):
        decode_frames(vids["h264"], [[0, 1]])
    with pytest.raises(MediaError, match="1-D"):
        decode_frames(vids["h264"], [0.5])
    with pytest.raises(MediaError, match="mode"):
        decode_frames(vids["h264"], [0], mode="fast")  # type: ignore[arg-type]
    assert decode_frames(vids["h264"], []).shape == (0, 48, 64, 3)


def test_decode_reports_a_short_file(vids):
    lying = VideoInfo(fps=12.0, num_frames=60, duration=5.0, width=64, height=48)  # 48 frames really
    with pytest.raises(MediaError, match="ended before frame 59"):
        decode_frames(vids["h264"], [0, 59], info=lying)


# ---------------------------------------------------------------------------------------- load_video


def test_load_video_from_metadata(vids):
    v = load_video(
        vids["h264"], model="qwen2-vl", rules=QWEN_VL_UTILS
    )  # 48 frames at 12 fps: n = 8, frames 64 x 48 -> 280 x 392
    idx = sample_frame_indices(48, 12.0)
    assert idx.tolist() == [0, 7, 13, 20, 27, 34, 40, 47]
    assert v.grid == (4, 20, 28)
    assert v.fps == pytest.approx(2.0) and v.second_per_grid == pytest.approx(1.0)
    np.testing.assert_allclose(v.frame_times, idx / 12.0)
    p = mrope.build_positions([mrope.Text(2), v], model="qwen2.5-vl")
    block = next(s for s in p.spans if s.kind == "video")
    assert block.grid == (4, 10, 14)
    t = p.ids[0, block.start : block.stop].reshape(4, 10, 14)[:, 0, 0]
    assert (t - t[0]).tolist() == [0, 2, 4, 6]  # floor(i * 1.0 s * 2 tokens/s)
    few = load_video(vids["h264"], nframes=4, wrap=False, model="qwen2-vl", rules=QWEN_VL_UTILS)
    assert few.grid[0] == 2 and few.wrap is False
    assert (
        load_video(vids["h264"], fps=1.0, model="qwen2-vl", rules=QWEN_VL_UTILS).grid[0] == 2
    )  # 4 s at 1 fps = 4 frames


def test_load_video_pixel_budget():
    # 1 hour of 1080p at 30 fps, from metadata alone (no file exists): 768 frames
    hour = VideoInfo(fps=30.0, num_frames=108_000, duration=3600.0, width=1920, height=1080)
    v = load_video(hour, model="qwen2-vl", rules=QWEN_VL_UTILS)
    # budget (qwen-vl-utils, total = int(128000 * 784 * 0.9) = 90316800 px): max(min(768 * 784 = 602112,
    # 90316800 / 768 * 2 = 235200), int(128 * 784 * 1.05) = 105369) = 235200;
    # smart_resize(1080, 1920, max_pixels=235200) = 336 x 644 (beta 2.969)
    assert v.grid == (384, 24, 46)
    assert len(v.frame_times) == 768 and v.frame_times[-1] == pytest.approx(107_999 / 30)
    assert v.fps == pytest.approx(768 / 108_000 * 30)
    # a small total budget: the floor int(128 * 784 * 1.05) = 105369 binds -> 224 x 420 (beta 4.436)
    assert load_video(
        hour, rules={**QWEN_VL_UTILS, "video_total_pixels": 28 * 28 * 100}, model="qwen2-vl"
    ).grid == (
        384,
        16,
        30,
    )
    # a total budget of 300000 px per frame binds instead: beta = sqrt(2073600 / 300000) -> 392 x 728
    roomy = load_video(
        hour, rules={**QWEN_VL_UTILS, "video_total_pixels": 300_000 * 768 // 2}, model="qwen2-vl"
    )
    assert roomy.grid == (384, 28, 52)


def test_load_video_vfr_uses_real_times(vids):
    v = load_video(vids["vfr"], nframes=4, model="qwen2-vl", rules=QWEN_VL_UTILS)
    idx = sample_frame_indices(len(VFR_TIMES), probe_video(vids["vfr"]).fps, nframes=4)
    np.testing.assert_allclose(v.frame_times, np.asarray(VFR_TIMES)[idx], atol=1e-3)
    seen: list[str] = []

    def tokenizer(text: str) -> list[int]:
        seen.append(text)
        return [11] * 3

    mrope.build_positions([v], model="qwen3-vl", tokenizer=tokenizer)
    t = np.asarray(VFR_TIMES)[idx]
    assert seen == [f"<{(t[0] + t[1]) / 2:.1f} seconds>", f"<{(t[2] + t[3]) / 2:.1f} seconds>"]


def test_load_video_errors(vids):
    with pytest.raises(MediaError, match="nframes=100"):
        load_video(
            vids["h264"], nframes=100, model="qwen2-vl", rules=QWEN_VL_UTILS
        )  # more than the video's 48 frames
    with pytest.raises(MediaError, match="one-frame video.*give its frame as an image"):
        load_video(
            vids["one"], model="qwen2-vl", rules=QWEN_VL_UTILS
        )  # a one-frame video cannot make a temporal patch of 2
    with pytest.raises(MediaError, match="not both"):
        load_video(vids["h264"], fps=1.0, nframes=4, model="qwen2-vl", rules=QWEN_VL_UTILS)
    with pytest.raises(MediaError, match="video fps"):
        load_video(
            VideoInfo(fps=float("nan"), num_frames=100, duration=1.0, width=64, height=48),
            model="qwen2-vl",
            rules=QWEN_VL_UTILS,
        )
    with pytest.raises(MediaError, match="video fps"):
        load_video(
            VideoInfo(fps=0.0, num_frames=100, duration=1.0, width=64, height=48),
            model="qwen2-vl",
            rules=QWEN_VL_UTILS,
        )
    with pytest.raises(MediaError, match="sampling fps"):
        load_video(vids["h264"], fps=0.0, model="qwen2-vl", rules=QWEN_VL_UTILS)


# ---------------------------------------------------------------------------------------- bad inputs


def _assert_media_error_everywhere(source) -> None:
    with pytest.raises(MediaError):
        probe_video(source)
    with pytest.raises(MediaError):
        load_video(source, model="qwen2-vl")
    with pytest.raises(MediaError):
        decode_frames(source, [0])


def test_bad_video_corpus(vids, tmp_path):
    mp4 = vids["h264"].read_bytes()
    corpus = {
        "empty": b"",
        "random": media.random_bytes(8192, seed=1),
        "truncated mp4 (no moov)": media.truncated(mp4, 0.5),
        "first bytes only": media.truncated(mp4, 40),
        "png": media.image_bytes(32, 24, "PNG"),
        "jpeg": media.image_bytes(32, 24, "JPEG"),
        "text": b"not a video at all\n" * 100,
    }
    for name, data in corpus.items():
        _assert_media_error_everywhere(data)
        if name in ("random", "truncated mp4 (no moov)", "text"):
            with pytest.raises(MediaError):
                detect_media_kind(data)
    named = tmp_path / "clip.mp4"
    named.write_bytes(media.random_bytes(4096, seed=2))
    _assert_media_error_everywhere(named)
    with pytest.raises(MediaError, match="no such file"):
        probe_video(tmp_path / "missing.mp4")


def test_a_truncated_mp4_says_where_it_was_cut(vids):
    """The issue's file: a cut MP4 is named truncated, with the box and the bytes (no raw FFmpeg errno).
    Offsets by hand from the file's own top-level boxes (size and type, big-endian)."""
    mp4 = vids["h264"].read_bytes()
    boxes, pos = [], 0
    while pos < len(mp4):
        size = int.from_bytes(mp4[pos : pos + 4], "big")
        boxes.append((mp4[pos + 4 : pos + 8].decode(), pos, size))
        pos += size
    cut = len(mp4) // 2
    kind, start, size = next(b for b in boxes if b[1] < cut <= b[1] + b[2] - 1)
    want = f"truncated: its '{kind}' box at byte {start} needs {size} bytes and the file ends after {cut - start}"
    for call in (probe_video, lambda f: load_video(f, model="qwen2-vl")):
        with pytest.raises(MediaError) as caught:
            call(io.BytesIO(mp4[:cut]))
        assert want in str(caught.value) and "Errno" not in str(caught.value)
    no_moov = b"".join(mp4[s : s + n] for k, s, n in boxes if k != "moov")  # whole boxes, no index
    with pytest.raises(MediaError, match="has no 'moov' box"):
        probe_video(io.BytesIO(no_moov))
    with pytest.raises(MediaError) as caught:  # negative control: not an MP4 at all, no box talk
        probe_video(io.BytesIO(b"not a video at all\n" * 100))
    assert "box" not in str(caught.value) and "Errno" not in str(caught.value)


@pytest.mark.parametrize("key", ["audio", "wav"])
def test_audio_only_file_has_no_video_stream(vids, key):
    with pytest.raises(MediaError, match="no video stream"):
        probe_video(vids[key])
    with pytest.raises(MediaError, match="no video stream"):
        load_video(vids[key], model="qwen2-vl")
    assert detect_media_kind(vids[key].read_bytes()) == "audio"  # an audio file (omni models read it)


def test_corrupted_videos_never_crash_or_hang(vids):
    """Damage anywhere (headers included) or only in the middle (the coded frames): every call either
    works or raises MediaError, and returns."""
    outcomes = {"error": 0, "ok": 0}
    for key in ("h264", "mkv", "webm", "mpeg4"):
        data = vids[key].read_bytes()
        n = len(data)
        for seed in range(4):
            for bad in (
                media.corrupted(data, seed=seed, fraction=0.05, skip=16),
                media.corrupted(data, seed=seed, fraction=0.03, skip=n // 4, end=n // 2),
            ):
                try:
                    info = probe_video(bad)
                    load_video(info, model="qwen2-vl")
                    frames = decode_frames(bad, [0, info.num_frames // 2, info.num_frames - 1], info=info)
                    assert frames.shape[0] == 3
                    outcomes["ok"] += 1
                except MediaError:
                    outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0, outcomes  # both paths are exercised


def test_detect_media_kind_videos(vids):
    for key in ("h264", "mpeg4", "mkv", "webm", "vfr", "raw", "m1v"):  # PIL "identifies" m1v as MPEG
        assert detect_media_kind(vids[key].read_bytes()) == "video"


def test_nested_resources_are_never_opened(tmp_path):
    """An HLS playlist pointing at a URL must not make FFmpeg connect anywhere."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    hits: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append(conn.recv(64))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    playlist = (
        "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n"
        f"http://127.0.0.1:{port}/segment.ts\n#EXT-X-ENDLIST\n"
    ).encode()
    path = tmp_path / "list.m3u8"
    path.write_bytes(playlist)
    try:
        for source in (path, playlist):
            with pytest.raises(MediaError):
                probe_video(source)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert hits == []
