"""Benchmark: video probing, sparse decoding and positions from metadata on a 10-minute 720p H.264 file.

The file (1280 x 720, 30 fps, 2 s GOP, x264 ultrafast, a moving bar over a colour that changes every
second) is generated once and cached in the temp directory. Prints:

- ``probe_video`` median time (container header only: an MP4 with a complete sample table);
- decoding 32 sampled frames (``decode_frames``, seeking to the keyframe before each) against decoding
  every frame up to the last sampled one (``mode="sequential"``), and the ratio (target >= 5x);
- ``load_video`` + ``mrope.build_positions`` from metadata alone, in ms.

Run: ``python benchmarks/bench_video.py`` (``--minutes 1`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np

import mrope
from mrope.media import decode_frames, load_video, probe_video
from mrope.media._sampling import sample_frame_indices


def make_video(path: Path, minutes: float, width: int, height: int, fps: int, gop: int) -> Path:
    """Encode the benchmark video (once: reused when ``path`` exists)."""
    if path.exists():
        return path
    tmp = path.with_suffix(".part.mp4")
    codec = "libx264"
    try:
        av.codec.Codec(codec, "w")
    except Exception:
        codec = "mpeg4"
    n = int(round(minutes * 60 * fps))
    bar = max(2, width // 16) & ~1
    t0 = time.perf_counter()
    with av.open(str(tmp), "w", format="mp4") as out:
        options = {"preset": "ultrafast", "crf": "30"} if codec == "libx264" else {}
        stream = out.add_stream(codec, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.thread_type = "AUTO"
        planes = np.empty((height * 3 // 2, width), dtype=np.uint8)  # yuv420p: Y, then U and V
        for k in range(n):
            second = k // fps
            planes[:height] = 40 + (37 * second) % 160
            planes[height:] = 90 + (53 * second) % 80
            x = (k % fps) * (width - bar) // fps
            planes[:height, x : x + bar] = 235
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            frame.pts = k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    tmp.rename(path)
    print(
        f"generated {path} ({path.stat().st_size / 1e6:.1f} MB, {n} frames) in {time.perf_counter() - t0:.1f} s"
    )
    return path


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median seconds of ``repeat`` calls, and the last result."""
    samples, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--gop", type=int, default=60, help="keyframe interval in frames")
    parser.add_argument("--frames", type=int, default=32, help="frames to sample and decode")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mrope-bench")
    args = parser.parse_args()
    width = args.height * 16 // 9
    args.cache.mkdir(parents=True, exist_ok=True)
    name = f"bench_{args.height}p_{args.fps}fps_{args.minutes:g}min_gop{args.gop}.mp4"
    path = make_video(args.cache / name, args.minutes, width, args.height, args.fps, args.gop)

    print(f"python {platform.python_version()}, PyAV {av.__version__}, {os.cpu_count()} CPUs")
    probe_s, info = timed(lambda: probe_video(path), 20)
    print(
        f"video: {info.width}x{info.height}, {info.num_frames} frames at {info.fps:g} fps, {info.duration:.0f} s"
    )
    print(f"probe_video (median of 20):                {probe_s * 1e3:8.2f} ms")

    idx = sample_frame_indices(info.num_frames, info.fps, nframes=args.frames)
    sparse_s, sparse = timed(lambda: decode_frames(path, idx, info=info), 3)
    print(f"decode {len(idx)} sampled frames (seek, median of 3): {sparse_s:8.3f} s")
    full_s, full = timed(lambda: decode_frames(path, idx, info=info, mode="sequential"), 1)
    print(f"decode every frame, keep {len(idx)} (sequential):   {full_s:8.3f} s")
    if not np.array_equal(sparse, full):
        raise SystemExit("seek and sequential decoding disagree")
    print(f"sparse decoding is {full_s / sparse_s:.1f}x faster (target >= 5x); frames identical")

    for model in ("qwen2-vl", "qwen2.5-vl"):
        meta_s, pos = timed(
            lambda m=model: mrope.build_positions([mrope.Text(20), load_video(info, model=m)], model=m), 20
        )
        print(
            f"load_video + build_positions ({model}, from metadata, median of 20): {meta_s * 1e3:.2f} ms, {pos.num_tokens} tokens"
        )
    total_s, pos = timed(
        lambda: mrope.build_positions([mrope.Text(20), load_video(path, model="qwen2-vl")], model="qwen2-vl"),
        10,
    )
    print(f"probe + load_video + build_positions from the file (median of 10):  {total_s * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
