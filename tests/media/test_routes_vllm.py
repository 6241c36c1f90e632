"""``route="vllm"`` on video files: vLLM 0.34.0's loader for the checkpoint's video processor.

vLLM does not import here (tests/media/test_routes.py says why), so its code is written out below from its
wheel (``pip download vllm==0.34.0 --no-deps``), file and line at each piece:

- the file is opened as vLLM opens it: ``cv2.VideoCapture(BytesIO(data), api, [])`` with the first stream
  buffered backend OpenCV has (vllm/multimodal/video_decoders/opencv.py:57-77), its frame count and rate
  ``CAP_PROP_FRAME_COUNT`` / ``CAP_PROP_FPS`` (opencv.py:96-133), and a decoded frame's shape (OpenCV
  applies the display rotation);
- ``Qwen2VLVideoBackend.compute_frames_index_to_sample`` (vllm/multimodal/video.py:625-659), the loader
  vLLM registers for Qwen2VLVideoProcessor (:602-606) and picks by the checkpoint's video processor class
  (vllm/multimodal/media/connector.py:581-585), at its default 2 fps (video.py:666);
- the frames then go to the checkpoint's transformers processor, which keeps them (vLLM marks them
  sampled, video.py:193) and sizes each within the released bounds 3136 .. 12845056 (transformers'
  ``smart_resize``).

Negative controls: the processor route keeps every frame; a family whose vLLM loader is not reproduced
(Qwen3-VL) is sized as under the processor route, the documented fallback.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import torch
from support import media
from support.checkpoints import QWEN2_5_VL_PREPROCESSOR, qwen2_5_vl_config, write_checkpoint
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

import mrope
from mrope import MediaError
from mrope.media import VideoInfo, load_video

cv2 = pytest.importorskip("cv2")  # opencv-python-headless, the dev extra
vr = pytest.importorskip("cv2.videoio_registry")


def _vllm_open(path: Path) -> tuple[int, float, tuple[int, int]]:
    """(frame count, fps, decoded (h, w)) as vLLM's OpenCV decoder reads them (opencv.py:57-133; the
    edit-list cross-check of :116-127 changes nothing on these files, whose header count is exact)."""
    api = None
    for backend in vr.getStreamBufferedBackends():  # opencv.py:58-69
        if not vr.hasBackend(backend):
            continue
        if not vr.isBackendBuiltIn(backend):
            _, abi, version = vr.getStreamBufferedBackendPluginVersion(backend)
            if abi < 1 or (abi == 1 and version < 2):
                continue
        api = backend
        break
    cap = cv2.VideoCapture(io.BytesIO(path.read_bytes()), api, [])
    assert cap.isOpened()
    count, fps = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), cap.get(cv2.CAP_PROP_FPS)
    ok, frame = cap.read()
    assert ok
    return count, fps, frame.shape[:2]


def _vllm_qwen2_indices(total: int, original_fps: float, fps: float = 2) -> list[int]:
    """video.py:625-659, written out (min_frames 4, max_frames 768, temporal patch 2, max fps 30)."""
    max_frames = math.floor(min(768, total) / 2) * 2
    n = total / original_fps * min(fps, 30)
    n = min(max(n, 4), max_frames, total)
    n = math.floor(n / 2) * 2
    indices = torch.arange(0, total, total / n).int()
    return torch.clamp(indices, max=total - 1).tolist()


def _grid(n: int, h: int, w: int) -> tuple[int, int, int]:
    rh, rw = smart_resize(h, w, factor=28, min_pixels=3136, max_pixels=12845056)
    return (math.ceil(n / 2), rh // 14, rw // 14)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vllm")
    return {
        "320x240 12 fps 3 s": media.write_video(root / "a.mp4", 36, 12, 320, 240),
        "64x48 25 fps 12 s": media.write_video(root / "b.mp4", 300, 25, 64, 48),
        "phone (90)": media.write_video(root / "r.mp4", 45, 15, 96, 64, rotation=90),
    }


@pytest.mark.parametrize("name", ["320x240 12 fps 3 s", "64x48 25 fps 12 s", "phone (90)"])
def test_vllm_route_samples_and_sizes_as_its_loader(files, tmp_path: Path, name: str) -> None:
    path = files[name]
    count, fps, (h, w) = _vllm_open(path)
    checkpoint = mrope.from_pretrained(
        write_checkpoint(tmp_path, qwen2_5_vl_config(), preprocessor_config=QWEN2_5_VL_PREPROCESSOR)
    )
    for rate in (None, 1.0, 4.0):
        idx = _vllm_qwen2_indices(count, fps, 2 if rate is None else rate)
        for model in ("qwen2.5-vl", checkpoint):
            got = load_video(path, model=model, route="vllm", fps=rate)
            assert got.grid == _grid(len(idx), h, w), (rate, model)
            assert [round(t * fps) for t in got.frame_times] == idx
    # negative control: the processor route keeps all frames
    assert load_video(path, model="qwen2.5-vl").grid == _grid(count, h, w) != _grid(len(idx), h, w)


@pytest.mark.parametrize(
    ("frames", "fps", "rate"),
    [
        (300, 30.0, 1.5),
        (451, 30.0, 2.0),
        (100, 25.0, 2.0),
        (9000, 30.0, 2.0),
        (40, 60.0, 45.0),
        (7, 2.0, 2.0),
    ],
)
def test_vllm_indices_equal_its_code_including_the_clamped_tail(frames: int, fps: float, rate: float) -> None:
    """On metadata alone; 300 frames at 1.5 fps and 451 frames at 2 fps (the case vLLM's docstring names)
    overshoot to index ``frames``: vLLM clamps, the processor route refuses."""
    info = VideoInfo(fps=fps, num_frames=frames, duration=frames / fps, width=640, height=480)
    idx = _vllm_qwen2_indices(frames, fps, rate)
    got = load_video(info, model="qwen2-vl", route="vllm", fps=rate)
    assert [round(t * fps) for t in got.frame_times] == idx
    assert got.grid == _grid(len(idx), 480, 640)
    if torch.arange(0, frames, frames / len(idx)).int()[-1] >= frames:
        with pytest.raises(MediaError, match="overshoots"):
            load_video(info, model="qwen2-vl", fps=rate)


def test_vllm_route_refuses_nframes_and_falls_back_elsewhere(files) -> None:
    """vLLM's Qwen2-VL loader ignores num_frames (video.py:616): refused, not dropped. Qwen3-VL's vLLM
    loader is not reproduced: the processor route's answer (the documented fallback)."""
    path = files["320x240 12 fps 3 s"]
    with pytest.raises(MediaError, match="ignores num_frames"):
        load_video(path, model="qwen2.5-vl", route="vllm", nframes=4)
    assert load_video(path, model="qwen3-vl", route="vllm") == load_video(path, model="qwen3-vl")
