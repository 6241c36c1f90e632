"""Videos of the families that reuse Qwen3-VL's video processing, sized as their own transformers 5.24 video
processors size them: qwen3-vl-moe, qwen3.5, qwen3.5-moe, qwen4-exp, cosmos3-omni (``Qwen3VLVideoProcessor``,
by 5.24's ``video_processing_auto`` mapping), cosmos3-edge (``Cosmos3EdgeVideoProcessor``) and cohere-compass
(``CohereCompassVideoProcessor``).

Expected values: the processors' own ``sample_frames`` (as ``preprocess`` calls it, with the processor's
``fps`` / ``num_frames``), their module's ``smart_resize`` with the arguments their ``resize`` passes, their
``get_num_of_video_patches``, their ``from_pretrained`` for saved configs, and transformers' PyAV reader
(``transformers.video_utils.load_video``) for real files.

The values the processors are built with: Cosmos3-Edge and Cohere Compass run their class defaults (what
the registry records). The Qwen3VLVideoProcessor families run the released Qwen3-VL
``video_preprocessor_config.json`` (``hf_reference.released_video_processor``; the registry records them
for Qwen3-VL and its modules say these families take them) — its class defaults differ, shown below.

``Qwen3VLVideoProcessor``'s module loads without torchvision. The Cosmos3-Edge and Cohere Compass modules
import torchvision at the top (only for pixel resizing): they are compiled here from their source with
that import and the ``@auto_docstring`` decorator (documentation only) left out; the classes are otherwise
transformers' own, ``__init__`` and ``from_pretrained`` included.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import math
import random
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.hf_reference import processor_sampled_frames, released_video_processor
from support.media import write_video

import mrope
from mrope import LayoutError, MediaError, Video, build_positions
from mrope.media import VideoInfo, load_video
from mrope.media._sampling import qwen3_vl_frame_indices
from mrope.models import get_family

QWEN3_VIDEO = ("qwen3-vl-moe", "qwen3.5", "qwen3.5-moe", "qwen4-exp", "cosmos3-omni")
FAMILIES = (*QWEN3_VIDEO, "cosmos3-edge", "cohere-compass")
CONFIGS = {  # the top-level config class of each family (class defaults: enough for from_pretrained)
    "qwen3-vl-moe": "Qwen3VLMoeConfig",
    "qwen3.5": "Qwen3_5Config",
    "qwen3.5-moe": "Qwen3_5MoeConfig",
    "qwen4-exp": "Qwen4ExpConfig",
    "cosmos3-omni": "Cosmos3OmniConfig",
    "cosmos3-edge": "Cosmos3EdgeConfig",
    "cohere-compass": "CohereCompassConfig",
}


def _module_without_torchvision(package: str, name: str) -> types.ModuleType:
    """transformers' ``<package>.<name>`` compiled from its source without its torchvision import and
    ``@auto_docstring`` (not registered in ``sys.modules``)."""
    path = Path(inspect.getfile(importlib.import_module(package))).parent / f"{name}.py"
    tree = ast.parse(path.read_text())
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchvision"):
            continue
        if isinstance(node, ast.ClassDef):
            node.decorator_list = [
                d for d in node.decorator_list if getattr(d, "id", None) != "auto_docstring"
            ]
        body.append(node)
    tree.body = body
    module = types.ModuleType(f"{package}.{name}")
    module.__package__ = package
    module.__file__ = str(path)
    module.tvF = None  # annotations only
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


@functools.cache
def _module(family: str) -> types.ModuleType:
    if family == "cosmos3-edge":
        return _module_without_torchvision(
            "transformers.models.cosmos3_edge", "video_processing_cosmos3_edge"
        )
    if family == "cohere-compass":
        return _module_without_torchvision(
            "transformers.models.cohere_compass", "video_processing_cohere_compass"
        )
    return importlib.import_module("transformers.models.qwen3_vl.video_processing_qwen3_vl")


def _class(family: str) -> type:
    names = {"cosmos3-edge": "Cosmos3EdgeVideoProcessor", "cohere-compass": "CohereCompassVideoProcessor"}
    return getattr(_module(family), names.get(family, "Qwen3VLVideoProcessor"))


@functools.cache
def _processor(family: str) -> Any:
    """The family's video processor with the reference values (see the module docstring)."""
    if family in QWEN3_VIDEO:
        return released_video_processor("qwen3-vl")
    return _class(family)()


def _expected(
    family: str,
    proc: Any,
    frames: int,
    video_fps: float,
    h: int,
    w: int,
    sample: dict[str, Any] | None = None,
) -> tuple[tuple[int, int, int], np.ndarray]:
    """(grid, sampled frame times in seconds) as ``preprocess`` makes them: ``sample_frames(metadata,
    fps=..., num_frames=...)`` with the processor's own values (a call's count goes with ``fps=None``: the
    two are exclusive there), then ``resize``'s ``smart_resize`` on the sampled clip (no per-frame cap:
    ``cap_pixels_per_frame`` is unset) and ``patchify``'s grid; the patch count is checked against the
    processor's ``get_num_of_video_patches``."""
    idx = processor_sampled_frames(proc, frames, video_fps, h, w, sample)
    n, tps = len(idx), proc.temporal_patch_size
    rh, rw = _module(family).smart_resize(
        num_frames=n,
        height=h,
        width=w,
        temporal_factor=tps,
        factor=proc.patch_size * proc.merge_size,
        min_pixels=proc.size["shortest_edge"],
        max_pixels=proc.size["longest_edge"],
    )
    grid = ((n + -n % tps) // tps, rh // proc.patch_size, rw // proc.patch_size)
    assert proc.get_num_of_video_patches(n, h, w) == math.prod(grid)
    return grid, np.asarray(idx) / video_fps


def _info(frames: int, fps: float, h: int, w: int) -> VideoInfo:
    return VideoInfo(fps=fps, num_frames=frames, duration=frames / fps, width=w, height=h)


def _same(family: str, model: Any, proc: Any, frames: int, fps: float, h: int, w: int, sample=None) -> tuple:
    """Assert load_video equals the processor on one clip; returns the grid."""
    grid, times = _expected(family, proc, frames, fps, h, w, sample)
    kwargs = (
        {}
        if sample is None
        else {"fps": sample["fps"]}
        if "fps" in sample
        else {"nframes": sample["num_frames"]}
    )
    video = load_video(_info(frames, fps, h, w), model=model, **kwargs)
    assert video.grid == grid, (family, frames, fps, h, w, sample)
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)
    return grid


# ------------------------------------------------------------------------------------- the values


@pytest.mark.parametrize("family", FAMILIES)
def test_the_registry_holds_the_reference_values(family: str) -> None:
    proc, rules = _processor(family), get_family(family).rules
    assert (rules.video_min_pixels, rules.video_max_pixels) == (
        proc.size.shortest_edge,
        proc.size.longest_edge,
    )
    assert (rules.fps, rules.min_frames, rules.max_frames) == (proc.fps, proc.min_frames, proc.max_frames)
    assert (rules.patch_size, rules.merge_size, rules.temporal_patch_size) == (
        proc.patch_size,
        proc.merge_size,
        proc.temporal_patch_size,
    )
    assert (rules.video_bounds, rules.frame_sampling) == ("clip", "qwen3-vl")
    assert proc.num_frames is None and proc.do_sample_frames and proc.do_resize
    assert not getattr(proc, "cap_pixels_per_frame", None)
    default = _class(family)()
    if family in QWEN3_VIDEO:  # the released values, not the class defaults
        assert default.size.longest_edge == 768 * 32 * 32 != rules.video_max_pixels
    else:
        assert default.size == proc.size


# ------------------------------------------------------------------------------------- sizing

_CLIPS = [  # frames, fps, height, width
    (50, 25.0, 100, 200),
    (30, 30.0, 1080, 1920),
    (45, 30.0, 360, 640),  # 3 frames: below min_frames 4, an odd count
    (3, 30.0, 480, 640),  # fewer frames than min_frames: all 3
    (7, 0.5, 1234, 567),  # fps below the target: all 7 (odd)
    (8, 4.0, 16, 16),  # frames below one patch: scaled up first
    (45, 30.0, 17, 43),  # scaled up by a factor that int() truncates: (32, 64), not round()'s (32, 96)
    (12, 24.0, 20, 30),
    (300, 30.0, 1080, 1920),
    (9000, 30.0, 1080, 1920),  # the clip budget binds hard
    (108000, 30.0, 720, 1280),  # max_frames 768 binds
    (1536, 2.0, 240, 320),  # exactly 768 frames at 2 fps
    (1538, 2.0, 240, 320),
    (240, 24.0, 4000, 3000),
    (600, 30.0, 2160, 3840),
    (100, 25.0, 100, 3000),  # aspect 30
    (40, 10.0, 32, 6000),  # aspect 187.5
    (61, 30.0, 480, 640),
    (2, 1.0, 64, 64),
    (1, 30.0, 480, 640),  # one frame: a clip under Cosmos3-Edge's temporal patch 1 only
    (1800, 29.97, 360, 640),
    (72000, 24.0, 1080, 1920),
    (960, 240.0, 720, 1280),  # fps far above the target
    (5000, 5.0, 33, 1500),
    (1001, 23.976, 1080, 1440),
]


def _refused_by_both(family: str, proc: Any, frames: int, fps: float, h: int, w: int, sample=None) -> bool:
    """True when the processor raises on the clip; then load_video must refuse it too."""
    try:
        _expected(family, proc, frames, fps, h, w, sample)
    except ValueError:
        kwargs = (
            {}
            if sample is None
            else {"fps": sample["fps"]}
            if "fps" in sample
            else {"nframes": sample["num_frames"]}
        )
        with pytest.raises(MediaError):
            load_video(_info(frames, fps, h, w), model=family, **kwargs)
        return True
    return False


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sample", [None, {"fps": 1}, {"fps": 4.5}, {"num_frames": 5}, {"num_frames": 64}])
def test_load_video_equals_the_processor(family: str, sample: dict[str, Any] | None) -> None:
    """Grid and frame times of ``load_video(model=family)`` (and with a call's rate or count) against the
    processor, over the clips above."""
    proc, refused = _processor(family), 0
    for frames, fps, h, w in _CLIPS:
        if _refused_by_both(family, proc, frames, fps, h, w, sample):
            refused += 1
            continue
        _same(family, family, proc, frames, fps, h, w, sample)
    # the processor refuses only a one-frame clip under a temporal patch of 2
    assert refused == (family != "cosmos3-edge" and (sample is None or "fps" in sample))


@pytest.mark.parametrize("family", ["qwen3.5", "cosmos3-edge", "cohere-compass"])
def test_load_video_equals_the_processor_over_a_random_spread(family: str) -> None:
    """Random lengths, rates, sizes and aspect ratios up to 200, each processor once."""
    proc = _processor(family)
    rng = random.Random(family)
    checked = 0
    for _ in range(400):
        h = rng.randint(1, 6000)
        w = max(1, min(6000, int(h * math.exp(rng.uniform(-5.3, 5.3)))))
        frames = rng.choice([rng.randint(1, 12), rng.randint(1, 3000), rng.randint(1, 200_000)])
        fps = rng.choice([0.5, 1.0, 7.0, 23.976, 25.0, 30.0, 60.0, 120.0])
        if _refused_by_both(family, proc, frames, fps, h, w):
            continue
        _same(family, family, proc, frames, fps, h, w)
        checked += 1
    assert checked > 300


@pytest.mark.parametrize("family", ["qwen3.5", "cohere-compass"])
def test_a_one_frame_video_with_a_frame_count_is_that_frame_repeated(family: str) -> None:
    """``sample_frames`` takes a count as is: 5 frames of a one-frame video are frame 0 five times (3
    temporal patches). Without a count the processor refuses the clip (1 frame < 2), and mrope with it."""
    proc = _processor(family)
    grid = _same(family, family, proc, 1, 30.0, 480, 640, {"num_frames": 5})
    assert grid[0] == 3
    with pytest.raises(MediaError, match="one-frame video"):
        load_video(_info(1, 30.0, 480, 640), model=family)


@pytest.mark.parametrize(
    ("family", "frames", "fps", "h", "w"),
    [
        ("qwen3.5", 45, 30, 120, 200),  # 3 frames sampled: an odd count, the last patch padded
        ("cohere-compass", 21, 10, 360, 640),  # the class budget (768 tokens over the clip) binds
        ("cosmos3-edge", 1, 2, 96, 160),  # one frame: a one-patch clip
    ],
)
def test_a_real_file_equals_transformers_reader_and_processor(
    tmp_path: Path, family: str, frames: int, fps: int, h: int, w: int
) -> None:
    """End to end: a file written here, read by transformers' own PyAV reader with the processor's
    ``sample_frames`` (as ``preprocess`` calls it), sized by its module's ``smart_resize``; the tokens
    ``build_positions`` emits are the processor's ``get_num_of_video_patches / merge**2``."""
    from transformers.video_utils import load_video as hf_load_video

    path = write_video(tmp_path / "clip.mp4", frames, fps=fps, width=w, height=h)
    proc = _processor(family)
    sample = functools.partial(proc.sample_frames, fps=proc.fps, num_frames=proc.num_frames)
    pixels, metadata = hf_load_video(str(path), backend="pyav", sample_indices_fn=sample)
    n, frame_h, frame_w = pixels.shape[0], pixels.shape[1], pixels.shape[2]
    rh, rw = _module(family).smart_resize(
        num_frames=n,
        height=frame_h,
        width=frame_w,
        temporal_factor=proc.temporal_patch_size,
        factor=proc.patch_size * proc.merge_size,
        min_pixels=proc.size.shortest_edge,
        max_pixels=proc.size.longest_edge,
    )
    tps = proc.temporal_patch_size
    video = load_video(path, model=family)
    assert video.grid == ((n + -n % tps) // tps, rh // proc.patch_size, rw // proc.patch_size)
    np.testing.assert_allclose(video.frame_times, metadata.timestamps, rtol=0, atol=1e-9)
    ids = build_positions([Video(video.grid, wrap=False)], model=family).input_ids
    want = proc.get_num_of_video_patches(n, frame_h, frame_w) // proc.merge_size**2
    assert int((ids == get_family(family).rules.video_pad_id).sum()) == want


# ------------------------------------------------------------------------------------- checkpoints


def _checkpoint(folder: Path, family: str, video: dict[str, Any] | None = None, **files: dict) -> Path:
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    config = getattr(transformers, CONFIGS[family])().to_dict()
    (folder / "config.json").write_text(json.dumps(config))
    if video is not None:
        (folder / "video_preprocessor_config.json").write_text(json.dumps(video))
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


def _saved_processor(family: str, folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _class(family).from_pretrained(str(folder))


SAVED = {
    "size": {"shortest_edge": 8192, "longest_edge": 2_000_000},
    "fps": 1,
    "min_frames": 2,
    "max_frames": 100,
    "do_sample_frames": True,
    "do_resize": True,
    "cap_pixels_per_frame": False,
}


@pytest.mark.parametrize("family", FAMILIES)
def test_from_pretrained_honours_the_saved_video_processor(tmp_path: Path, family: str) -> None:
    """A saved budget, rate and frame bounds: load_video under the checkpoint equals the processor loaded
    from the same folder by its own ``from_pretrained``."""
    folder = _checkpoint(tmp_path, family, SAVED)
    proc, model = _saved_processor(family, folder), mrope.from_pretrained(folder)
    assert proc.size.longest_edge == 2_000_000 and proc.fps == 1
    changed = 0
    for frames, fps, h, w in _CLIPS:
        if _refused_by_both(family, proc, frames, fps, h, w):
            continue
        grid = _same(family, model, proc, frames, fps, h, w)
        changed += grid != load_video(_info(frames, fps, h, w), model=family).grid
    assert changed >= 10


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("where", ["video", "image"])
def test_from_pretrained_ignores_what_the_processor_does_not_read(
    tmp_path: Path, family: str, where: str
) -> None:
    """``min_pixels`` / ``max_pixels`` are not these processors' kwargs: loaded, they change nothing
    there (its bounds are ``size``), and nothing in mrope. ``image``: no video processor config, so 5.24's
    video processor loads ``preprocessor_config.json``, whose ``size`` then bounds videos too."""
    size = {"shortest_edge": 65536, "longest_edge": 16777216}
    if where == "video":
        keys = {"size": size, "min_pixels": 1_000_000, "max_pixels": 2_000_000, "fps": 1}
        if family == "cosmos3-edge":  # its processor has no per-frame cap: the key is read by nothing
            keys["cap_pixels_per_frame"] = True
        folder = _checkpoint(tmp_path, family, keys)
    else:  # a Qwen2-VL image processor's file: its min / max_pixels are its size
        keys = {"size": size, "min_pixels": 65536, "max_pixels": 16777216, "fps": 1}
        folder = _checkpoint(tmp_path, family, preprocessor_config=keys)
    proc, model = _saved_processor(family, folder), mrope.from_pretrained(folder)
    assert proc.max_pixels == keys["max_pixels"] and proc.size.longest_edge == 16777216 and proc.fps == 1
    for frames, fps, h, w in _CLIPS:
        if not _refused_by_both(family, proc, frames, fps, h, w):
            _same(family, model, proc, frames, fps, h, w)


_REFUSED = [
    ({"do_sample_frames": False}, "do_sample_frames must be one of .True."),
    ({"do_resize": False}, "do_resize must be one of .True."),
    ({"num_frames": 16, "fps": None}, "a fixed frame count"),
    ({"cap_pixels_per_frame": True}, "cap_pixels_per_frame must be one of .False."),
]


@pytest.mark.parametrize(
    ("family", "video", "match"),
    [
        (family, video, match)
        for family in FAMILIES
        for video, match in _REFUSED
        # Cosmos3-Edge has no per-frame cap: the key is read by nothing there (ignored, above)
        if not (family == "cosmos3-edge" and "cap_pixels_per_frame" in video)
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else value if " " not in value else "",
)
def test_from_pretrained_refuses_what_changes_grids_beyond_mrope(
    tmp_path: Path, family: str, video: dict[str, Any], match: str
) -> None:
    """Keys the processor reads whose values change grids in ways mrope does not compute (the processor
    then keeps every frame, keeps the frames' size, takes a fixed count, caps each frame): refused by
    name. The processor loaded from the same folder holds the value."""
    folder = _checkpoint(tmp_path, family, video)
    key, value = next(iter(video.items()))
    assert getattr(_saved_processor(family, folder), key) == value
    with pytest.raises(LayoutError, match=match):
        mrope.from_pretrained(folder)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_temporal_patch_loads_where_the_processor_loads(tmp_path: Path, family: str) -> None:
    """Cosmos3EdgeVideoProcessor refuses to load with a temporal patch of 2, and mrope with it; the
    others take it."""
    folder = _checkpoint(tmp_path, family, {"temporal_patch_size": 2})
    if family != "cosmos3-edge":
        assert _saved_processor(family, folder).temporal_patch_size == 2
        assert mrope.from_pretrained(folder).rules.temporal_patch_size == 2
        return
    with pytest.raises(ValueError, match="temporal_patch_size=1"):
        _saved_processor(family, folder)
    with pytest.raises(LayoutError, match="temporal_patch_size must be one of .1."):
        mrope.from_pretrained(folder)


@pytest.mark.parametrize("family", ["qwen3-vl", "hy-v4-vl", "cosmos3-edge"])
def test_an_absurd_frame_count_is_refused_before_any_allocation(family: str) -> None:
    """The processor takes a count as is (copies of frames past the video's), so mrope bounds it: a
    trillion frames was a 7 TiB numpy allocation error, not a MediaError."""
    from mrope.media._sampling import MAX_SAMPLED_VIDEO_FRAMES

    info = VideoInfo(fps=30.0, num_frames=3, duration=0.1, width=292, height=64)
    with pytest.raises(MediaError, match="nframes must be at most 16,777,216; got 1,000,000,000,000"):
        load_video(info, model=family, nframes=10**12)
    with pytest.raises(MediaError, match="nframes must be at most"):
        qwen3_vl_frame_indices(3, 30.0, nframes=MAX_SAMPLED_VIDEO_FRAMES + 1)
