"""A video header claiming about 10**9 frames gets a clear MediaError."""

from __future__ import annotations

import io
import struct
import time

import av
import numpy as np
import pytest
from support.media import write_audio, write_video

from mrope import MediaError
from mrope.media import VideoInfo, load_video, probe_audio, probe_video
from mrope.media._deadline import ProbeDeadlineError
from mrope.media._sampling import MAX_SAMPLED_VIDEO_FRAMES, sample_frame_indices

CLAIMED = 10**9


def forged_frame_count(claimed: int) -> bytes:
    """A real 6-frame QuickTime file (uncompressed frames, so ``stsz`` has one constant sample size and
    no table) whose ``stsz`` and ``stts`` sample counts are patched to ``claimed``."""
    buf = io.BytesIO()
    out = av.open(buf, "w", format="mov")
    stream = out.add_stream("rawvideo", rate=10)
    stream.width, stream.height, stream.pix_fmt = 32, 32, "rgb24"
    for k in range(6):
        frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 30 * k, np.uint8), format="rgb24")
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    data = bytearray(buf.getvalue())
    stsz, stts = data.find(b"stsz"), data.find(b"stts")
    # stsz: version/flags, sample_size (constant), sample_count; stts: version/flags, entries, (count, delta)
    assert struct.unpack_from(">III", data, stsz + 4) == (0, 32 * 32 * 3, 6)
    assert struct.unpack_from(">III", data, stts + 4) == (0, 1, 6)
    struct.pack_into(">I", data, stsz + 12, claimed)
    struct.pack_into(">I", data, stts + 12, claimed)
    return bytes(data)


def test_the_crafted_header_really_claims_a_billion_frames() -> None:
    with av.open(io.BytesIO(forged_frame_count(CLAIMED))) as container:
        assert container.streams.video[0].frames == CLAIMED


def test_probe_says_the_header_is_forged() -> None:
    data = forged_frame_count(CLAIMED)
    with pytest.raises(
        MediaError, match=r"claims 1,000,000,000 frames.*holds \d[\d,]* bytes.*corrupt or forged"
    ):
        probe_video(data)
    with pytest.raises(MediaError, match="corrupt or forged"):
        load_video(data, model="qwen2-vl")


def test_a_probe_result_with_a_billion_frames_is_refused_clearly() -> None:
    info = VideoInfo(fps=30.0, num_frames=CLAIMED, duration=CLAIMED / 30.0, width=64, height=64)
    with pytest.raises(MediaError, match=r"claims 1,000,000,000 frames; at most 16,777,216"):
        load_video(info, model="qwen2-vl")
    # the bound itself: the longest video that can be sampled still samples inside its frames
    last = sample_frame_indices(MAX_SAMPLED_VIDEO_FRAMES, 30.0)[-1]
    assert last <= MAX_SAMPLED_VIDEO_FRAMES - 1
    with pytest.raises(MediaError, match="at most 16,777,216"):
        sample_frame_indices(MAX_SAMPLED_VIDEO_FRAMES + 1, 30.0)


def test_header_reads_stop_at_the_deadline(tmp_path) -> None:
    """probe_video and probe_audio read through the deadline: a file whose header says everything (no
    packet scan) still stops once the deadline is past; before it, the same file is read."""
    video = write_video(tmp_path / "clip.mp4", num_frames=24, fps=12)
    audio = write_audio(tmp_path / "tone.wav", seconds=0.5)
    assert probe_video(video, deadline=time.monotonic() + 60).num_frames == 24
    assert probe_audio(audio, deadline=time.monotonic() + 60).sample_rate == 16000
    with pytest.raises(ProbeDeadlineError, match="deadline"):
        probe_video(video, deadline=time.monotonic() - 1)
    with pytest.raises(ProbeDeadlineError, match="deadline"):
        probe_audio(audio, deadline=time.monotonic() - 1)
