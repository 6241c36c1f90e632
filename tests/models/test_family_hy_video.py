"""HY-V4-VL videos (and images) sized as transformers 5.24's own processors size them.

Expected values: ``HYV4VLVideoProcessor``'s ``sample_frames``, ``smart_resize`` and
``get_num_of_video_patches`` and its class defaults, compiled from
``transformers/models/hy_v4_vl/video_processing_hy_v4_vl.py`` (the module imports torchvision at the top,
which cannot be imported here; those methods need only numpy and math), ``HYV4VLProcessor``'s token count
per frame, ``HYV4VLImageProcessorPil`` (no torchvision needed), and transformers' own PyAV reader
(``transformers.video_utils.load_video``) for a real file.
"""

from __future__ import annotations

import functools
import json
import math
import random
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.hf_reference import compiled_class, processor_sampled_frames
from support.media import write_video
from transformers.models.hy_v4_vl.configuration_hy_v4_vl import HYV4VLConfig
from transformers.models.hy_v4_vl.processing_hy_v4_vl import HYV4VLProcessor
from transformers.video_utils import VideoMetadata

import mrope
from mrope import LayoutError, MediaError, Video, build_positions
from mrope.media import VideoInfo, image_grid, load_video
from mrope.media._resize import smart_resize_tokens
from mrope.media._sampling import qwen3_vl_frame_indices
from mrope.models import get_family

FAMILY = get_family("hy-v4-vl")
VIDEO_ID = FAMILY.rules.video_pad_id

_ATTRIBUTES = {
    "size",
    "do_resize",
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "min_frames",
    "max_frames",
    "max_image_size",
    "num_frames",
    "fps",
}
_METHODS = {"sample_frames", "smart_resize", "get_num_of_video_patches"}


@functools.cache
def _processor_class() -> type:
    """``HYV4VLVideoProcessor`` reduced to its sizing: its class defaults and its three sizing methods,
    compiled from the source file (its logger silenced)."""
    logger = types.SimpleNamespace(warning_once=lambda *args, **kwargs: None)
    return compiled_class(
        "transformers.models.hy_v4_vl",
        "video_processing_hy_v4_vl.py",
        "HYV4VLVideoProcessor",
        _ATTRIBUTES,
        _METHODS,
        {"logger": logger},
    )


def _processor(**attributes: Any) -> Any:
    """The compiled processor with class defaults, or a saved config's values set as attributes."""
    proc = _processor_class()()
    for name, value in attributes.items():
        setattr(proc, name, value)
    return proc


def _expected(
    proc: Any, frames: int, video_fps: float, h: int, w: int, sample: dict[str, Any] | None = None
) -> tuple[tuple[int, int, int], np.ndarray]:
    """What the processor makes of a video: (grid, sampled frame times in seconds). ``preprocess`` calls
    ``sample_frames(metadata, **kwargs)`` with its own ``fps`` / ``num_frames`` (do_sample_frames on), then
    ``smart_resize`` on the sampled clip; ``get_num_of_video_patches`` does that sizing. A count is given
    to ``sample_frames`` with ``fps=None`` (the two are exclusive there)."""
    idx = processor_sampled_frames(proc, frames, video_fps, h, w, sample)
    _, t, gh, gw = proc.get_num_of_video_patches(len(idx), h, w)
    return (t, gh, gw), np.asarray(idx) / video_fps


def _info(frames: int, fps: float, h: int, w: int) -> VideoInfo:
    return VideoInfo(fps=fps, num_frames=frames, duration=frames / fps, width=w, height=h)


def test_the_compiled_defaults_are_the_rules() -> None:
    """The registry's values are the processor's class defaults (read from it, not restated)."""
    proc, rules = _processor(), FAMILY.rules
    assert rules.video_max_pixels == proc.size["longest_edge"]
    assert rules.video_min_pixels == proc.size["shortest_edge"]
    assert rules.video_frame_max_pixels == proc.max_image_size["longest_edge"]
    assert (rules.fps, rules.min_frames, rules.max_frames) == (proc.fps, proc.min_frames, proc.max_frames)
    assert (rules.patch_size, rules.merge_size, rules.temporal_patch_size) == (
        proc.patch_size,
        proc.merge_size,
        proc.temporal_patch_size,
    )
    assert (rules.video_bounds, rules.frame_sampling) == ("tokens", "qwen3-vl")


_SIDES = [
    1,
    7,
    20,
    31,
    32,
    33,
    63,
    64,
    100,
    240,
    333,
    480,
    719,
    720,
    1024,
    1080,
    1081,
    1920,
    2160,
    3000,
    3840,
    4000,
]
_COUNTS = [1, 2, 3, 16, 64, 255, 600, 1024]


def _size_cases() -> list[tuple[int, int, int]]:
    cases = [(n, h, w) for n in _COUNTS for h in _SIDES for w in _SIDES if max(h, w) / min(h, w) <= 200]
    rng = random.Random(0)
    for _ in range(1500):  # odd sizes and aspect ratios
        h = rng.randint(1, 6000)
        w = max(1, min(6000, int(h * math.exp(rng.uniform(-5.2, 5.2)))))
        if max(h, w) / min(h, w) <= 200:
            cases.append((rng.choice([1, 2, 5, 40, 333, 1024, rng.randint(1, 4096)]), h, w))
    return cases


def test_smart_resize_tokens_equals_the_processor() -> None:
    """Every size of a spread (tiny frames, frames the per-frame cap binds, clips the token budget binds,
    aspect ratios up to 200) against the processor's ``smart_resize`` with its class budgets."""
    proc = _processor()
    cases = _size_cases()
    assert len(cases) > 3000
    reaches = {"frame cap": 0, "token budget": 0, "below one patch": 0}
    for n, h, w in cases:
        want = proc.smart_resize(h, w, n, factor=32)
        assert smart_resize_tokens(n, h, w) == want, (n, h, w)
        reaches["frame cap"] += h * w > 1024**2 and n <= 16
        reaches["token budget"] += n * (h // 32) * (w // 32 + 1) > 32768
        reaches["below one patch"] += min(h, w) < 32
    assert min(reaches.values()) > 50, reaches


@pytest.mark.parametrize(
    ("max_pixels", "frame_max_pixels"),
    [
        (1, 1),
        (1023, 1024),
        (1024, 1024),
        (32 * 32 * 5, 10**6),
        (10**6, 32 * 32),
        (8_388_608, 512 * 512),
        (10**9, 4 * 1024**2),
    ],
)
def test_smart_resize_tokens_equals_the_processor_under_other_budgets(
    max_pixels: int, frame_max_pixels: int
) -> None:
    """Budgets below one token a frame (the one-patch fallback), a checkpoint's other budgets."""
    proc = _processor()
    rng = random.Random(max_pixels)
    for _ in range(300):
        n, h, w = rng.randint(1, 300), rng.randint(1, 5000), rng.randint(1, 5000)
        if max(h, w) / min(h, w) > 200:
            continue
        want = proc.smart_resize(h, w, n, factor=32, max_pixels=max_pixels, max_image_size=frame_max_pixels)
        assert smart_resize_tokens(n, h, w, 32, max_pixels, frame_max_pixels) == want, (n, h, w)
    for factor in (14, 28, 16):
        want = proc.smart_resize(
            1080, 1920, 40, factor=factor, max_pixels=max_pixels, max_image_size=frame_max_pixels
        )
        assert smart_resize_tokens(40, 1080, 1920, factor, max_pixels, frame_max_pixels) == want


def test_smart_resize_tokens_refuses_what_the_processor_refuses() -> None:
    proc = _processor()
    for n, h, w in [(4, 10, 2001), (4, 3000, 14), (0, 100, 100), (4, 0, 100)]:
        with pytest.raises(ValueError):
            proc.smart_resize(h, w, n, factor=32)
        with pytest.raises(MediaError):
            smart_resize_tokens(n, h, w)
    assert smart_resize_tokens(4, 10, 2000) == proc.smart_resize(10, 2000, 4, factor=32)  # ratio 200 passes


_CLIPS = [  # frames, fps, height, width
    (50, 25.0, 100, 200),
    (30, 30.0, 1080, 1920),
    (45, 30.0, 360, 640),  # 3 frames: an odd count (qwen-vl-utils would take 2)
    (300, 30.0, 1080, 1920),
    (9000, 30.0, 1080, 1920),  # the token budget binds
    (108000, 30.0, 720, 1280),  # max_frames binds
    (20, 10.0, 40, 40),
    (12, 24.0, 20, 30),  # frames below one patch
    (240, 24.0, 4000, 3000),  # the per-frame cap binds
    (600, 30.0, 2160, 3840),
    (100, 25.0, 100, 3000),
    (61, 30.0, 480, 640),
    (3, 30.0, 480, 640),  # min_frames 2
    (2, 1.0, 64, 64),
    (1, 30.0, 480, 640),  # one frame: temporal patch 1
    (1800, 29.97, 360, 640),
    (72000, 24.0, 1080, 1920),
    (5000, 5.0, 33, 1500),
    (7, 0.5, 1234, 567),
    (1001, 23.976, 1080, 1440),
]


@pytest.mark.parametrize(("frames", "fps", "h", "w"), _CLIPS)
def test_load_video_equals_the_processor(frames: int, fps: float, h: int, w: int) -> None:
    """Grid, frame count, frame times and token count of ``load_video(model="hy-v4-vl")`` against
    ``sample_frames`` + ``get_num_of_video_patches`` and the processor's tokens per frame."""
    proc = _processor()
    grid, times = _expected(proc, frames, fps, h, w)
    video = load_video(_info(frames, fps, h, w), model="hy-v4-vl")
    assert video.grid == grid
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)
    t, gh, gw = grid
    want_tokens = t * HYV4VLProcessor._num_frame_tokens(gh, gw, proc.merge_size)
    ids = build_positions([video], model="hy-v4-vl").input_ids
    assert int((ids == VIDEO_ID).sum()) == want_tokens


@pytest.mark.parametrize(("frames", "fps", "h", "w"), _CLIPS[:12])
@pytest.mark.parametrize("sample", [{"fps": 1}, {"fps": 4.5}, {"num_frames": 5}, {"num_frames": 64}])
def test_load_video_with_a_rate_or_a_count_equals_the_processor(
    frames: int, fps: float, h: int, w: int, sample: dict[str, Any]
) -> None:
    """A call's ``fps`` / ``num_frames`` (``load_video``'s ``fps`` / ``nframes``), as the processor's."""
    proc = _processor()
    grid, times = _expected(proc, frames, fps, h, w, sample)
    kwargs = {"fps": sample["fps"]} if "fps" in sample else {"nframes": sample["num_frames"]}
    video = load_video(_info(frames, fps, h, w), model="hy-v4-vl", **kwargs)
    assert video.grid == grid
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)


def test_sampling_equals_sample_frames() -> None:
    """Which frames, over a spread of lengths and rates, against ``sample_frames`` itself."""
    proc = _processor()
    rng = random.Random(1)
    cases = [(1, 30.0), (2, 30.0), (45, 30.0), (1000, 7.0), (50000, 29.97)]
    cases += [(rng.randint(1, 40000), rng.choice([1.0, 8.0, 23.976, 25.0, 30.0, 60.0])) for _ in range(200)]
    for frames, fps in cases:
        metadata = VideoMetadata(total_num_frames=frames, fps=fps)
        want = proc.sample_frames(metadata, fps=proc.fps)
        got = qwen3_vl_frame_indices(frames, fps, 2.0, min_frames=2, max_frames=1024, temporal_patch_size=1)
        assert got.tolist() == want.tolist(), (frames, fps)


def test_one_frame_videos_stay_refused_where_a_patch_takes_two() -> None:
    """The temporal patch sets the fewest frames: HY-V4-VL's 1 takes a one-frame video, Qwen3-VL's 2 not."""
    assert (
        load_video(_info(1, 30.0, 64, 64), model="hy-v4-vl").grid
        == _expected(_processor(), 1, 30.0, 64, 64)[0]
    )
    with pytest.raises(MediaError, match="one-frame video"):
        load_video(_info(1, 30.0, 64, 64), model="qwen3-vl")


@pytest.mark.parametrize(
    ("name", "frames", "fps", "h", "w"),
    [
        ("clip.mp4", 45, 30, 120, 200),  # 3 frames sampled
        ("big.mp4", 5, 2, 1088, 1280),  # the per-frame cap binds (1.39 MP > 1 MP)
    ],
)
def test_a_real_file_equals_transformers_reader_and_processor(
    tmp_path: Path, name: str, frames: int, fps: int, h: int, w: int
) -> None:
    """End to end: a file written here, read by transformers' own PyAV reader with the processor's
    ``sample_frames`` (as ``preprocess`` calls it), sized by its ``smart_resize``; against ``load_video``."""
    from transformers.video_utils import load_video as hf_load_video

    path = write_video(tmp_path / name, frames, fps=fps, width=w, height=h)
    proc = _processor()
    sample = functools.partial(proc.sample_frames, fps=proc.fps, num_frames=proc.num_frames)
    pixels, metadata = hf_load_video(str(path), backend="pyav", sample_indices_fn=sample)
    n, frame_h, frame_w = pixels.shape[0], pixels.shape[1], pixels.shape[2]
    rh, rw = proc.smart_resize(frame_h, frame_w, n, factor=proc.patch_size * proc.merge_size)
    want_grid = (n, rh // proc.patch_size, rw // proc.patch_size)

    video = load_video(path, model="hy-v4-vl")
    assert video.grid == want_grid
    np.testing.assert_allclose(video.frame_times, metadata.timestamps, rtol=0, atol=1e-9)
    if name == "big.mp4":
        assert rh * rw <= proc.max_image_size["longest_edge"] < frame_h * frame_w


# ------------------------------------------------------------------------------------- checkpoints


def _checkpoint(tmp_path: Path, video: dict[str, Any] | None = None, **files: dict[str, Any]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(HYV4VLConfig().to_dict()))
    if video is not None:
        (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(video))
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


SAVED = {
    "size": {"shortest_edge": 4096, "longest_edge": 8_388_608},
    "max_image_size": {"longest_edge": 512 * 512},
    "fps": 1,
    "min_frames": 4,
    "max_frames": 100,
}


@pytest.mark.parametrize("nested", [False, True])
def test_from_pretrained_honours_the_saved_video_processor(tmp_path: Path, nested: bool) -> None:
    """A saved ``max_image_size``, budget, rate and frame bounds: load_video under the checkpoint equals the
    processor with those values (here the per-frame cap and the budget both change grids)."""
    if nested:  # transformers 5.x save_pretrained: one processor_config.json
        folder = _checkpoint(tmp_path, processor_config={"video_processor": SAVED})
    else:
        folder = _checkpoint(tmp_path, SAVED)
    family = mrope.from_pretrained(folder)
    assert family.rules.video_frame_max_pixels == 512 * 512
    assert family.rules.video_max_pixels == 8_388_608
    proc = _processor(**SAVED)
    changed = 0
    for frames, fps, h, w in _CLIPS:
        grid, times = _expected(proc, frames, fps, h, w)
        video = load_video(_info(frames, fps, h, w), model=family)
        assert video.grid == grid, (frames, fps, h, w)
        np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)
        changed += grid != _expected(_processor(), frames, fps, h, w)[0]
    assert changed >= 10


@pytest.mark.parametrize(
    ("saved", "match"),
    [
        ({"do_sample_frames": False}, "every frame is kept"),
        ({"do_resize": False}, "frames keep their own size"),
    ],
)
def test_from_pretrained_refuses_a_processor_that_keeps_frames_as_given(
    tmp_path: Path, saved: dict[str, Any], match: str
) -> None:
    """``do_sample_frames`` false (the class default, written out) keeps every frame it is given;
    ``do_resize`` false keeps their size: grids mrope's rules do not make, so a saved false is refused."""
    with pytest.raises(LayoutError, match=match):
        mrope.from_pretrained(_checkpoint(tmp_path, saved))
    on = mrope.from_pretrained(_checkpoint(tmp_path / "on", {"do_sample_frames": True, "do_resize": True}))
    assert on.rules == FAMILY.rules


def test_from_pretrained_ignores_keys_the_processor_does_not_read(tmp_path: Path) -> None:
    """``min_pixels`` / ``max_pixels`` are not HYV4VLVideoProcessor kwargs: they change nothing there."""
    folder = _checkpoint(tmp_path, {"min_pixels": 1, "max_pixels": 1000, "size": {"longest_edge": 33554432}})
    assert mrope.from_pretrained(folder).rules == FAMILY.rules.replace(
        video_max_pixels=33554432, video_total_pixels=33554432
    )


@pytest.mark.parametrize(
    ("video", "match"),
    [
        ({"max_image_size": 1048576}, "max_image_size must be a JSON object"),
        ({"max_image_size": {"longest_edge": 0}}, "video_frame_max_pixels must be a positive int"),
        ({"max_image_size": {"longest_edge": 1048576.5}}, "whole number"),
        ({"num_frames": 16, "fps": None}, "a fixed frame count"),
        ({"max_image_size": {"longest_edge": 262144}, "max_pixels": 5}, None),
    ],
)
def test_from_pretrained_refuses_what_it_cannot_honour(
    tmp_path: Path, video: dict[str, Any], match: str | None
) -> None:
    """A saved ``max_image_size`` is honoured or refused, never skipped."""
    folder = _checkpoint(tmp_path, video)
    if match is None:
        assert mrope.from_pretrained(folder).rules.video_frame_max_pixels == 262144
        return
    with pytest.raises(LayoutError, match=match):
        mrope.from_pretrained(folder)


def test_image_sizing_equals_the_pil_image_processor() -> None:
    """Images: ``HYV4VLImageProcessorPil.get_number_of_image_patches`` (class defaults) over a spread."""
    from transformers.models.hy_v4_vl.image_processing_pil_hy_v4_vl import HYV4VLImageProcessorPil

    proc = HYV4VLImageProcessorPil()
    rng = random.Random(2)
    sizes = [(h, w) for h in _SIDES for w in _SIDES if max(h, w) / min(h, w) <= 200]
    sizes += [(rng.randint(1, 9000), rng.randint(1, 9000)) for _ in range(500)]
    checked = 0
    for h, w in sizes:
        if max(h, w) / min(h, w) > 200:
            continue
        gh, gw = proc.get_number_of_image_patches(h, w)
        assert tuple(image_grid(h, w, model="hy-v4-vl")) == (1, gh, gw), (h, w)
        checked += 1
    assert checked > 800


def test_segment_tokens_follow_the_grid() -> None:
    """A sized video's tokens: the processor's ``replace_video_token`` count for the same grid."""
    video = load_video(_info(300, 30.0, 1080, 1920), model="hy-v4-vl")
    t, gh, gw = video.grid
    ids = build_positions([Video(video.grid, wrap=False)], model="hy-v4-vl").input_ids
    assert ids.size == t * HYV4VLProcessor._num_frame_tokens(gh, gw, 2)
