"""ERNIE-4.5-VL, GLM-4.5V / 4.6V / OCR and Qwen2.5- / Qwen3-Omni media sized as transformers 5.24's own
processors size them.

Expected values come from transformers' code only:

- ERNIE-4.5-VL: ``Ernie4_5_VLMoeVideoProcessor``'s class defaults, ``sample_frames`` and
  ``get_num_of_video_patches`` and the image module's ``smart_resize``, compiled from their source files with
  ``ast`` (both modules import torchvision at the top, which cannot be imported here; these methods need only
  torch, numpy and math); the odd-count pad of ``_prepare_input_videos`` is one line, written out below;
  ``Ernie4_5_VLMoeImageProcessorPil`` for images.
- GLM-4.5V and GLM-OCR run ``Glm4vProcessor`` (processing_auto: ``glm4v_moe``; GLM-OCR has no processor of
  its own) with ``Glm4vVideoProcessor`` (its module loads without torchvision) and
  ``Glm4vImageProcessorPil``; GLM-4.6V its own ``Glm46VVideoProcessor`` (compiled from source, as above) and
  ``Glm46VImageProcessorPil``.
- Qwen2.5-Omni and Qwen3-Omni: ``Qwen2VLVideoProcessor`` / ``Qwen2VLImageProcessorPil`` (video / image
  auto mappings), with the combined processor's own ``videos_kwargs`` size (which it passes over the video
  processor's at every call, ``ProcessorMixin._merge_kwargs``): compiled from source as above. As released
  its class defaults keep every frame (``do_sample_frames`` off) and share no clip budget
  (``cap_pixels_per_frame`` unset); a call's ``fps`` / ``nframes`` runs its ``sample_frames``, and a
  saved ``cap_pixels_per_frame: true`` its capped ``resize``.
- Real files are read by transformers' own PyAV reader (``transformers.video_utils.load_video``).
"""

from __future__ import annotations

import functools
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
import torch
from support.hf_reference import compiled_class, compiled_function
from support.media import write_video
from transformers.video_utils import VideoMetadata
from transformers.video_utils import load_video as hf_load_video

import mrope
from mrope import LayoutError, MediaError, build_positions
from mrope.media import VideoInfo, image_grid, load_video
from mrope.media._sampling import ernie_frame_indices, torch_arange_float32
from mrope.models import get_family


def _info(frames: int, fps: float, h: int, w: int) -> VideoInfo:
    return VideoInfo(fps=fps, num_frames=frames, duration=frames / fps, width=w, height=h)


def _metadata(frames: int, fps: float, h: int = 0, w: int = 0) -> VideoMetadata:
    """What transformers' PyAV reader reports for a constant-rate file (duration = frames / fps)."""
    return VideoMetadata(total_num_frames=frames, fps=fps, duration=frames / fps, width=w, height=h)


CLIPS = [  # frames, fps, height, width
    (50, 25.0, 100, 200),
    (30, 30.0, 1080, 1920),
    (45, 30.0, 360, 640),
    (300, 30.0, 1080, 1920),
    (9000, 30.0, 1080, 1920),
    (108000, 30.0, 720, 1280),
    (20, 10.0, 40, 40),
    (12, 24.0, 20, 30),
    (240, 24.0, 4000, 3000),
    (600, 30.0, 2160, 3840),
    (100, 25.0, 100, 3000),
    (61, 30.0, 480, 640),
    (2, 1.0, 64, 64),
    (15, 30.0, 480, 640),
    (16, 2.0, 224, 224),
    (17, 30.0, 480, 640),
    (179, 30.0, 480, 640),
    (181, 30.0, 480, 640),
    (1800, 29.97, 360, 640),
    (72000, 24.0, 1080, 1920),
    (5000, 5.0, 33, 1500),
    (7, 0.5, 1234, 567),
    (1001, 23.976, 1080, 1440),
    (901, 30.0, 720, 1280),
]

IMAGE_SIDES = [
    1,
    7,
    20,
    27,
    28,
    29,
    32,
    33,
    55,
    56,
    57,
    100,
    112,
    113,
    224,
    333,
    480,
    720,
    1080,
    1920,
    3000,
    8000,
]


def _image_sizes(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    sizes = [(h, w) for h in IMAGE_SIDES for w in IMAGE_SIDES]
    sizes += [(rng.randint(1, 9000), rng.randint(1, 9000)) for _ in range(100)]
    return [(h, w) for h, w in sizes if max(h, w) / min(h, w) <= 200]


# ------------------------------------------------------------------------------------ ERNIE-4.5-VL

ERNIE = "ernie-4.5-vl"
_ERNIE_VIDEO = ("transformers.models.ernie4_5_vl_moe", "video_processing_ernie4_5_vl_moe.py")


@functools.cache
def _ernie_smart_resize() -> Any:
    """``smart_resize`` of image_processing_ernie4_5_vl_moe.py, the one the video module imports."""
    return compiled_function(
        "transformers.models.ernie4_5_vl_moe", "image_processing_ernie4_5_vl_moe.py", "smart_resize"
    )


@functools.cache
def _ernie_class() -> type:
    attributes = {"size", "patch_size", "temporal_patch_size", "merge_size", "min_frames", "max_frames"}
    methods = {"sample_frames", "get_num_of_video_patches"}
    return compiled_class(
        *_ERNIE_VIDEO,
        "Ernie4_5_VLMoeVideoProcessor",
        attributes,
        methods,
        {"smart_resize": _ernie_smart_resize()},
    )


def _ernie(**saved: Any) -> Any:
    """The compiled processor with its class defaults (``fps`` / ``num_frames`` are BaseVideoProcessor's
    ``None``) or a saved config's values."""
    proc = _ernie_class()()
    proc.fps = proc.num_frames = None
    for name, value in saved.items():
        setattr(proc, name, value)
    return proc


def _ernie_expected(proc: Any, frames: int, video_fps: float, h: int, w: int, **sample: Any):
    """``preprocess`` with ``do_sample_frames`` (class default on): ``sample_frames(metadata, fps=self.fps,
    num_frames=self.num_frames, ...)``; ``_prepare_input_videos`` repeats the last frame of an odd count;
    each frame is sized alone (``smart_resize`` with ``size``). Returns (grid, frame times)."""
    kwargs = {"fps": proc.fps, "num_frames": proc.num_frames, **sample}
    idx = np.asarray(proc.sample_frames(_metadata(frames, video_fps, h, w), **kwargs), dtype=np.int64)
    if idx.size % 2:  # video_processing_ernie4_5_vl_moe.py: "last frame is copied if uneven"
        idx = np.append(idx, idx[-1])
    size = proc.size
    rh, rw = _ernie_smart_resize()(
        h, w, proc.patch_size * proc.merge_size, size["shortest_edge"], size["longest_edge"]
    )
    grid = (idx.size, rh // proc.patch_size, rw // proc.patch_size)
    assert proc.get_num_of_video_patches(idx.size, h, w) == math.prod(grid)
    return grid, idx / video_fps


def test_ernie_rules_are_the_class_defaults() -> None:
    proc, rules = _ernie(), get_family(ERNIE).rules
    assert (rules.video_min_pixels, rules.video_max_pixels) == (
        proc.size["shortest_edge"],
        proc.size["longest_edge"],
    )
    assert (rules.min_frames, rules.max_frames, rules.frame_sampling) == (
        proc.min_frames,
        proc.max_frames,
        "ernie",
    )
    assert (rules.patch_size, rules.merge_size) == (proc.patch_size, proc.merge_size)


@pytest.mark.parametrize(("frames", "fps", "h", "w"), CLIPS)
def test_ernie_load_video_equals_the_processor(frames: int, fps: float, h: int, w: int) -> None:
    """Grid, frames and frame times of ``load_video(model="ernie-4.5-vl")`` against the video processor's
    class defaults (no rate: every frame, 16 .. 180), and the video's token count."""
    grid, times = _ernie_expected(_ernie(), frames, fps, h, w)
    video = load_video(_info(frames, fps, h, w), model=ERNIE)
    assert video.grid == grid
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)
    # Ernie4_5_VLMoeProcessor.replace_video_token: prod(grid) // (merge_size**2 * temporal_patch_size 2)
    proc = _ernie()
    ids = build_positions([video], model=ERNIE).input_ids
    want_tokens = math.prod(grid) // (proc.merge_size**2 * proc.temporal_patch_size)
    assert int((ids == get_family(ERNIE).rules.video_pad_id).sum()) == want_tokens


@pytest.mark.parametrize(("frames", "fps", "h", "w"), CLIPS[:14])
@pytest.mark.parametrize("sample", [{"fps": 2}, {"fps": 0.7}, {"num_frames": 16}, {"num_frames": 33}])
def test_ernie_a_rate_or_a_count_equals_the_processor(
    frames: int, fps: float, h: int, w: int, sample: dict
) -> None:
    proc = _ernie()
    kwargs = {"fps": sample["fps"]} if "fps" in sample else {"nframes": sample["num_frames"]}
    try:
        grid, times = _ernie_expected(proc, frames, fps, h, w, **sample)
    except ValueError:  # a count above the frame count
        with pytest.raises(MediaError):
            load_video(_info(frames, fps, h, w), model=ERNIE, **kwargs)
        return
    video = load_video(_info(frames, fps, h, w), model=ERNIE, **kwargs)
    assert video.grid == grid
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)


def test_ernie_frame_indices_equal_sample_frames() -> None:
    """Which frames, over a spread of lengths and rates, with and without a rate and a count."""
    proc = _ernie()
    rng = random.Random(3)
    cases = [
        (rng.randint(1, 50000), rng.choice([1.0, 7.5, 23.976, 25.0, 29.97, 30.0, 60.0])) for _ in range(400)
    ]
    checked = 0
    for frames, fps in cases + [(1, 30.0), (2, 30.0), (16, 30.0), (17, 30.0), (180, 30.0), (181, 30.0)]:
        metadata = _metadata(frames, fps)
        for rate in (None, 2.0, 0.5):
            want = np.asarray(proc.sample_frames(metadata, fps=rate, num_frames=None))
            want = np.append(want, want[-1]) if want.size % 2 else want
            assert ernie_frame_indices(frames, fps, fps=rate).tolist() == want.tolist(), (frames, fps, rate)
            checked += 1
    assert checked == 1218
    with pytest.raises(ValueError):
        proc.sample_frames(_metadata(100, 30.0), num_frames=15)
    with pytest.raises(MediaError, match="nframes must lie"):
        ernie_frame_indices(100, 30.0, nframes=15)


def test_torch_arange_float32_is_torch_arange() -> None:
    """The float32 ``arange`` the processors truncate, element for element, below torch's thread split."""
    rng = random.Random(4)
    for _ in range(800):
        end = rng.randint(1, 200000)
        count = min(
            end, rng.choice([rng.randint(1, 800), end / rng.uniform(1.0, 90.0), rng.uniform(1, 8000)])
        )
        want = torch.arange(0, end, end / count).numpy()
        if want.size >= 32768:
            continue
        np.testing.assert_array_equal(torch_arange_float32(end, end / count), want)


def test_ernie_image_grid_equals_the_pil_image_processor() -> None:
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil,
        smart_resize,
    )

    proc = Ernie4_5_VLMoeImageProcessorPil()
    rules = get_family(ERNIE).rules
    assert (rules.image_min_pixels, rules.image_max_pixels) == (
        proc.size["shortest_edge"],
        proc.size["longest_edge"],
    )
    for h, w in _image_sizes(5):
        rh, rw = smart_resize(h, w, 28, proc.size["shortest_edge"], proc.size["longest_edge"])
        assert image_grid(h, w, model=ERNIE) == (1, rh // 14, rw // 14), (h, w)
        assert proc.get_number_of_image_patches(h, w) == (rh // 14) * (rw // 14)


@pytest.mark.parametrize(("frames", "fps", "w", "h"), [(45, 30, 200, 120), (9, 4, 96, 64)])
def test_ernie_a_real_file_equals_transformers_reader_and_processor(
    tmp_path: Path, frames: int, fps: int, w: int, h: int
) -> None:
    """End to end: a file read by transformers' PyAV reader with the processor's ``sample_frames`` (as
    ``preprocess`` calls it), padded and sized as the processor does; against ``load_video``."""
    path = write_video(tmp_path / "clip.mp4", frames, fps=fps, width=w, height=h)
    proc = _ernie()
    sample = functools.partial(proc.sample_frames, fps=proc.fps, num_frames=proc.num_frames)
    pixels, metadata = hf_load_video(str(path), backend="pyav", sample_indices_fn=sample)
    n = pixels.shape[0] + pixels.shape[0] % 2
    rh, rw = _ernie_smart_resize()(
        pixels.shape[1], pixels.shape[2], 28, proc.size["shortest_edge"], proc.size["longest_edge"]
    )
    video = load_video(path, model=ERNIE)
    assert video.grid == (n, rh // 14, rw // 14)
    times = list(metadata.timestamps) + list(metadata.timestamps[-1:]) * (pixels.shape[0] % 2)
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-6)  # the reader's are float32


def _folder(tmp_path: Path, config: dict, **files: Any) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


@functools.cache
def _ernie_config() -> dict:
    from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import Ernie4_5_VLMoeConfig

    return Ernie4_5_VLMoeConfig().to_dict()


def test_ernie_from_pretrained_honours_a_saved_size(tmp_path: Path) -> None:
    saved = {
        "size": {"shortest_edge": 64 * 28 * 28, "longest_edge": 256 * 28 * 28},
        "min_frames": 4,
        "max_frames": 40,
    }
    family = mrope.from_pretrained(_folder(tmp_path, _ernie_config(), video_preprocessor_config=saved))
    proc, changed = _ernie(**saved), 0
    for frames, fps, h, w in CLIPS:
        grid, times = _ernie_expected(proc, frames, fps, h, w)
        video = load_video(_info(frames, fps, h, w), model=family)
        assert video.grid == grid, (frames, fps, h, w)
        np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)
        changed += grid != _ernie_expected(_ernie(), frames, fps, h, w)[0]
    assert changed >= 15


def test_ernie_from_pretrained_ignores_the_pixel_keys_its_processors_do_not_read(tmp_path: Path) -> None:
    """``min_pixels`` / ``max_pixels`` beside ``size``: the PIL image processor loaded from the same folder
    sizes by ``size`` alone, so mrope does too."""
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil,
    )

    keys = {"min_pixels": 1_000_000, "max_pixels": 2_000_000}
    folder = _folder(tmp_path, _ernie_config(), preprocessor_config=keys, video_preprocessor_config=keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = Ernie4_5_VLMoeImageProcessorPil.from_pretrained(str(folder))
    family = mrope.from_pretrained(folder)
    assert family.rules == get_family(ERNIE).rules
    for h, w in [(100, 100), (3000, 4000), (28, 2000)]:
        assert math.prod(image_grid(h, w, model=family)) == real.get_number_of_image_patches(h, w)


@pytest.mark.parametrize(
    ("video", "match"),
    [
        ({"fps": 2}, "saved rate"),
        ({"num_frames": 32}, "fixed frame count"),
        ({"do_sample_frames": False}, "every frame is kept"),
        ({"do_resize": False}, "frames keep their own size"),
        ({"do_sample_frames": True, "do_resize": True, "fps": None}, None),
    ],
)
def test_ernie_from_pretrained_refuses_the_sampling_it_does_not_compute(
    tmp_path: Path, video: dict, match: str | None
) -> None:
    folder = _folder(tmp_path, _ernie_config(), video_preprocessor_config=video)
    if match is None:
        assert mrope.from_pretrained(folder).rules == get_family(ERNIE).rules
        return
    with pytest.raises(LayoutError, match=match):
        mrope.from_pretrained(folder)


# -------------------------------------------------------------------------- GLM-4.5V, GLM-OCR, GLM-4.6V

GLMS = ["glm-4.5v", "glm-ocr", "glm-4.6v"]


def test_the_processors_each_family_uses() -> None:
    """Which processors the auto mappings give each model type (GLM-OCR has no processor of its own: its
    checkpoints name Glm4vProcessor / Glm46V ones; the omni types map to the Qwen2-VL ones)."""
    from transformers.models.auto import auto_mappings
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES

    processors = dict(auto_mappings.PROCESSOR_MAPPING_NAMES)
    assert processors["ernie4_5_vl_moe"] == "Ernie4_5_VLMoeProcessor"
    assert processors["glm46v"] == "Glm46VProcessor" and processors["glm4v"] == "Glm4vProcessor"
    assert IMAGE_PROCESSOR_MAPPING_NAMES["ernie4_5_vl_moe"]["pil"] == "Ernie4_5_VLMoeImageProcessorPil"
    assert IMAGE_PROCESSOR_MAPPING_NAMES["glm46v"]["pil"] == "Glm46VImageProcessorPil"
    for omni in ("qwen2_5_omni", "qwen3_omni_moe"):
        assert IMAGE_PROCESSOR_MAPPING_NAMES[omni]["pil"] == "Qwen2VLImageProcessorPil"
        assert (
            VIDEO_PROCESSOR_MAPPING_NAMES[omni] is not None
        )  # torchvision's entry (None here, it is absent)
    source = Path(inspect.getfile(auto_mappings)).read_text()
    for model_type, name in [
        ("ernie4_5_vl_moe", "Ernie4_5_VLMoeVideoProcessor"),
        ("glm46v", "Glm46VVideoProcessor"),
        ("glm4v", "Glm4vVideoProcessor"),
    ]:
        assert f'("{model_type}", {{"torchvision": "{name}"}})' in source
    from transformers.models.auto import processing_auto

    assert '("glm4v_moe", "Glm4vProcessor")' in Path(inspect.getfile(processing_auto)).read_text()


@functools.cache
def _glm_video(family: str) -> tuple[Any, Any]:
    """(the video processor with its class defaults, its module's ``smart_resize``)."""
    if family == "glm-4.6v":
        package = "transformers.models.glm46v"
        attributes = {
            "size",
            "patch_size",
            "temporal_patch_size",
            "merge_size",
            "max_duration",
            "fps",
            "num_frames",
        }
        cls = compiled_class(
            package, "video_processing_glm46v.py", "Glm46VVideoProcessor", attributes, {"sample_frames"}, {}
        )
        return cls(), compiled_function(package, "video_processing_glm46v.py", "smart_resize")
    import importlib

    module = importlib.import_module("transformers.models.glm4v.video_processing_glm4v")
    return module.Glm4vVideoProcessor(), module.smart_resize


def _glm_expected(family: str, frames: int, fps: float, h: int, w: int, proc: Any = None):
    default, smart_resize = _glm_video(family)
    proc = proc or default
    idx = np.asarray(proc.sample_frames(_metadata(frames, fps, h, w)))
    size, factor = proc.size, proc.patch_size * proc.merge_size
    rh, rw = smart_resize(
        idx.size, h, w, proc.temporal_patch_size, factor, size["shortest_edge"], size["longest_edge"]
    )
    grid = (math.ceil(idx.size / proc.temporal_patch_size), rh // proc.patch_size, rw // proc.patch_size)
    return grid, idx / fps


@pytest.mark.parametrize("family", GLMS)
def test_glm_rules_are_the_class_defaults(family: str) -> None:
    proc, rules = _glm_video(family)[0], get_family(family).rules
    assert (rules.video_min_pixels, rules.video_max_pixels) == (
        proc.size["shortest_edge"],
        proc.size["longest_edge"],
    )
    assert (rules.fps, rules.max_duration, rules.temporal_patch_size) == (proc.fps, proc.max_duration, 2)
    assert rules.frame_sampling == ("glm46v" if family == "glm-4.6v" else "glm4v")


@pytest.mark.parametrize("family", GLMS)
@pytest.mark.parametrize(("frames", "fps", "h", "w"), CLIPS)
def test_glm_load_video_equals_the_processor(family: str, frames: int, fps: float, h: int, w: int) -> None:
    grid, times = _glm_expected(family, frames, fps, h, w)
    video = load_video(_info(frames, fps, h, w), model=family)
    assert video.grid == grid
    np.testing.assert_allclose(video.frame_times, times, rtol=0, atol=1e-9)


@pytest.mark.parametrize("family", GLMS)
def test_glm_image_grid_equals_the_pil_image_processor(family: str) -> None:
    if family == "glm-4.6v":
        from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil as cls
        from transformers.models.glm46v.image_processing_pil_glm46v import smart_resize
    else:
        from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil as cls
        from transformers.models.glm4v.image_processing_pil_glm4v import smart_resize
    proc, rules = cls(), get_family(family).rules
    assert (rules.image_min_pixels, rules.image_max_pixels) == (
        proc.size["shortest_edge"],
        proc.size["longest_edge"],
    )
    for h, w in _image_sizes(6):
        try:
            rh, rw = smart_resize(2, h, w, 2, 28, proc.size["shortest_edge"], proc.size["longest_edge"])
        except ValueError:
            with pytest.raises(MediaError):
                image_grid(h, w, model=family)
            continue
        assert image_grid(h, w, model=family) == (1, rh // 14, rw // 14), (h, w)
        assert proc.get_number_of_image_patches(h, w) == (rh // 14) * (rw // 14)


@pytest.mark.parametrize("family", GLMS)
def test_glm_a_real_file_equals_transformers_reader_and_processor(tmp_path: Path, family: str) -> None:
    path = write_video(tmp_path / "clip.mp4", 45, fps=30, width=200, height=120)
    proc, smart_resize = _glm_video(family)
    pixels, metadata = hf_load_video(str(path), backend="pyav", sample_indices_fn=proc.sample_frames)
    n = pixels.shape[0]
    rh, rw = smart_resize(
        n, pixels.shape[1], pixels.shape[2], 2, 28, proc.size["shortest_edge"], proc.size["longest_edge"]
    )
    video = load_video(path, model=family)
    assert video.grid == (math.ceil(n / 2), rh // 14, rw // 14)
    np.testing.assert_allclose(video.frame_times, metadata.timestamps, rtol=0, atol=1e-6)


def _glm_config(family: str) -> dict:
    if family == "glm-4.6v":
        from transformers.models.glm46v.configuration_glm46v import Glm46VConfig as cls
    elif family == "glm-ocr":
        from transformers.models.glm_ocr.configuration_glm_ocr import GlmOcrConfig as cls
    else:
        from transformers.models.glm4v_moe.configuration_glm4v_moe import Glm4vMoeConfig

        config = Glm4vMoeConfig().to_dict()
        config["text_config"]["head_dim"] = 128  # the 5.24 class has none (released config: 128)
        return config
    return cls().to_dict()


@pytest.mark.parametrize("family", GLMS)
def test_glm_from_pretrained_reads_what_the_processors_read(tmp_path: Path, family: str) -> None:
    """A saved ``size`` is honoured (the video processor loaded from the same folder); top-level
    ``min_pixels`` / ``max_pixels`` are read by neither processor, so they change nothing."""
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    video = {
        "size": {"shortest_edge": 28 * 28 * 8, "longest_edge": 28 * 28 * 2 * 600},
        "min_pixels": 1,
        "max_pixels": 10**9,
    }
    image = {"min_pixels": 1_000_000, "max_pixels": 2_000_000}
    folder = _folder(
        tmp_path, _glm_config(family), preprocessor_config=image, video_preprocessor_config=video
    )
    model = mrope.from_pretrained(folder)
    assert model.rules == get_family(family).rules.replace(
        video_min_pixels=28 * 28 * 8, video_max_pixels=28 * 28 * 1200
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real_image = Glm4vImageProcessorPil.from_pretrained(str(folder))
    for h, w in [(100, 100), (3000, 4000), (56, 2000)]:
        assert math.prod(image_grid(h, w, model=model)) == real_image.get_number_of_image_patches(h, w)
    proc = _glm_video(family)[0]
    saved = type(proc)()
    saved.size = video["size"]
    changed = 0
    for frames, fps, h, w in CLIPS:
        grid, _ = _glm_expected(family, frames, fps, h, w, proc=saved)
        assert load_video(_info(frames, fps, h, w), model=model).grid == grid, (frames, fps, h, w)
        changed += grid != _glm_expected(family, frames, fps, h, w)[0]
    assert changed >= 10


@pytest.mark.parametrize("family", GLMS)
def test_glm_from_pretrained_refuses_a_processor_that_does_not_sample(tmp_path: Path, family: str) -> None:
    folder = _folder(tmp_path, _glm_config(family), video_preprocessor_config={"do_sample_frames": False})
    with pytest.raises(LayoutError, match="every frame is kept"):
        mrope.from_pretrained(folder)
    folder = _folder(tmp_path / "keep", _glm_config(family), video_preprocessor_config={"do_resize": False})
    with pytest.raises(LayoutError, match="frames keep their own size"):
        mrope.from_pretrained(folder)
    folder = _folder(
        tmp_path / "on",
        _glm_config(family),
        video_preprocessor_config={"do_sample_frames": True, "do_resize": True},
    )
    assert mrope.from_pretrained(folder).rules == get_family(family).rules


# ------------------------------------------------------------------------- Qwen2.5-Omni, Qwen3-Omni

OMNIS = ["qwen2.5-omni", "qwen3-omni"]


def _omni_processor_class(family: str) -> type:
    if family == "qwen3-omni":
        from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor

        return Qwen3OmniMoeProcessor
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor

    return Qwen2_5OmniProcessor


@functools.cache
def _qwen2vl_video_class() -> type:
    attributes = {
        "size",
        "patch_size",
        "temporal_patch_size",
        "merge_size",
        "min_frames",
        "max_frames",
        "max_video_tokens",
    }
    return compiled_class(
        "transformers.models.qwen2_vl",
        "video_processing_qwen2_vl.py",
        "Qwen2VLVideoProcessor",
        attributes,
        {"sample_frames"},
        {},
    )


def _omni_video(family: str) -> Any:
    """Qwen2VLVideoProcessor (compiled, class defaults; ``fps`` / ``num_frames`` BaseVideoProcessor's None)
    with the released patch size (config.json vision_config, recorded in the registry)."""
    proc = _qwen2vl_video_class()()
    proc.fps = proc.num_frames = None
    proc.patch_size = get_family(family).rules.patch_size
    return proc


def _omni_expected(
    family: str, frames: int, video_fps: float, h: int, w: int, cap: bool = False, **sample: Any
) -> tuple[tuple[int, int, int], list[int]]:
    """Qwen2VLVideoProcessor as the omni processors run it: every frame (``do_sample_frames`` off), or its
    ``sample_frames(**sample)``; each frame by its ``resize`` (written as it writes it: the reference
    per-frame cap only with ``cap``) under the combined processor's own ``videos_kwargs`` size. Returns
    (grid, frame indices)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    proc = _omni_video(family)
    idx = list(range(frames))
    if sample:
        idx = [int(i) for i in proc.sample_frames(_metadata(frames, video_fps, h, w), **sample)]
    n = len(idx)
    size = _omni_processor_class(family).videos_kwargs["size"]
    factor = proc.patch_size * proc.merge_size
    max_pixels = size["longest_edge"]
    if cap:
        total_pixels = int(proc.max_video_tokens * factor * factor * 0.9)
        max_pixels = max(min(max_pixels, total_pixels * 2 // n), int(size["shortest_edge"] * 1.05))
    rh, rw = smart_resize(h, w, factor=factor, min_pixels=size["shortest_edge"], max_pixels=max_pixels)
    return (math.ceil(n / 2), rh // proc.patch_size, rw // proc.patch_size), idx


@pytest.mark.parametrize("family", OMNIS)
@pytest.mark.parametrize(("frames", "fps", "h", "w"), CLIPS)
def test_omni_load_video_grid_equals_the_video_processor(
    family: str, frames: int, fps: float, h: int, w: int
) -> None:
    """Grid and frames: every frame by default; a call's ``fps`` samples as ``sample_frames`` does."""
    grid, idx = _omni_expected(family, frames, fps, h, w)
    video = load_video(_info(frames, fps, h, w), model=family)
    assert (video.grid, len(video.frame_times)) == (grid, len(idx))
    if frames >= 8:  # the class's min_frames 4 must fit
        grid, idx = _omni_expected(family, frames, fps, h, w, fps=1.5)
        if idx[-1] >= frames:  # the processor's own arange overshoots (300 frames, 14 samples): refused
            with pytest.raises(MediaError, match="overshoots by float rounding"):
                load_video(_info(frames, fps, h, w), model=family, fps=1.5)
            return
        video = load_video(_info(frames, fps, h, w), model=family, fps=1.5)
        assert video.grid == grid
        np.testing.assert_allclose(video.frame_times, np.asarray(idx) / fps)


@pytest.mark.parametrize("family", OMNIS)
def test_omni_processor_passes_its_own_video_size(family: str) -> None:
    """``_merge_kwargs`` gives the video processor the combined processor's ``videos_kwargs`` size whatever
    the video processor was saved with; the registry's bounds are that size."""
    from transformers.processing_utils import ProcessorMixin

    cls = _omni_processor_class(family)
    stub = types.SimpleNamespace(
        valid_processor_kwargs=cls.valid_processor_kwargs,
        videos_kwargs=cls.videos_kwargs,
        video_processor=types.SimpleNamespace(size={"shortest_edge": 1, "longest_edge": 10**9}),
    )
    merged = ProcessorMixin._merge_kwargs(stub, tokenizer_init_kwargs={})
    rules = get_family(family).rules
    assert dict(merged["videos_kwargs"]["size"]) == {
        "shortest_edge": rules.video_min_pixels,
        "longest_edge": rules.video_max_pixels,
    }


@pytest.mark.parametrize("family", OMNIS)
@pytest.mark.parametrize("call_fps", [None, 4.0])
def test_omni_second_per_grid_is_the_processors(family: str, call_fps: float | None) -> None:
    """``_process_videos`` (run on a stand-in video processor that returns a grid) reports
    ``temporal_patch_size / fps`` with ``fps`` the call's keyword or its default, whatever rate the frames
    were sampled at."""
    cls = _omni_processor_class(family)

    def video_processor(videos: Any, **kwargs: Any) -> dict:
        return {"video_grid_thw": [[3, 4, 4]]}

    video_processor.temporal_patch_size = 2  # type: ignore[attr-defined]
    stub = types.SimpleNamespace(video_processor=video_processor, replace_video_token=lambda *a, **k: "")
    videos_kwargs = {} if call_fps is None else {"fps": call_fps}
    out, _ = cls._process_videos(stub, [None], videos_kwargs=videos_kwargs, load_audio_from_video=False)
    want = out["video_second_per_grid"][0]
    for frames, fps in [(45, 30.0), (300, 30.0), (7, 0.5), (100000, 30.0)]:
        video = load_video(_info(frames, fps, 64, 64), model=family, fps=call_fps)
        assert video.second_per_grid == want, (frames, fps)


def test_qwen3_omni_clip_budget_is_in_its_own_tokens(tmp_path: Path) -> None:
    """A 5-minute 1080p clip sampled at 2 fps by a folder that turns the cap on: the budget binds, and the
    32 px factor's budget gives the processor's grid."""
    ok = {"cap_pixels_per_frame": True, "max_video_tokens": 128000}
    model = mrope.from_pretrained(_folder(tmp_path, _omni_config("qwen3-omni"), video_preprocessor_config=ok))
    (t, gh, gw), _ = _omni_expected("qwen3-omni", 9000, 30.0, 1080, 1920, cap=True, fps=2)
    assert load_video(_info(9000, 30.0, 1080, 1920), model=model, fps=2).grid == (t, gh, gw) == (300, 28, 52)


# the image bounds of the released preprocessor_config.json (min_pixels 3136, max_pixels 12845056: the
# Qwen2.5-Omni checkpoint, as the Qwen2/2.5-VL ones, docs/conventions.md "Sizing media"; Qwen3-Omni's file
# could not be read offline and is taken to be the same), and the vision patch of each 5.24 config class
OMNI_IMAGE_BOUNDS = (3136, 12845056)


def _omni_vision_patch(family: str) -> tuple[int, int]:
    if family == "qwen3-omni":
        from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeConfig as cls
    else:
        from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniConfig as cls
    vision = cls().thinker_config.vision_config
    return vision.patch_size, vision.spatial_merge_size


@pytest.mark.parametrize("family", OMNIS)
def test_omni_image_grid_equals_the_pil_image_processor(family: str) -> None:
    """Qwen2VLImageProcessorPil with the released bounds and the config class's vision patch, each
    written out here, not read from the registry."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
        smart_resize,
    )

    patch, merge = _omni_vision_patch(family)
    size = {"shortest_edge": OMNI_IMAGE_BOUNDS[0], "longest_edge": OMNI_IMAGE_BOUNDS[1]}
    proc = Qwen2VLImageProcessorPil(size=size, patch_size=patch, merge_size=merge)
    factor = patch * merge
    for h, w in _image_sizes(7):
        rh, rw = smart_resize(h, w, factor, size["shortest_edge"], size["longest_edge"])
        assert image_grid(h, w, model=family) == (1, rh // patch, rw // patch), (h, w)
        assert proc.get_number_of_image_patches(h, w, {}) == (rh // patch) * (rw // patch)


@pytest.mark.parametrize("family", OMNIS)
def test_omni_a_real_file_equals_transformers_reader_and_processor(tmp_path: Path, family: str) -> None:
    """transformers' PyAV reader without a sampler (every frame, as ``do_sample_frames`` off loads them), the
    uncapped resize on the frames it returns; against ``load_video`` (grid and count)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    path = write_video(tmp_path / "clip.mp4", 90, fps=30, width=200, height=120)
    proc = _omni_video(family)
    pixels, _ = hf_load_video(str(path), backend="pyav")
    n = pixels.shape[0]
    size = _omni_processor_class(family).videos_kwargs["size"]
    factor = proc.patch_size * 2
    rh, rw = smart_resize(
        pixels.shape[1], pixels.shape[2], factor, size["shortest_edge"], size["longest_edge"]
    )
    video = load_video(path, model=family)
    assert (video.grid, len(video.frame_times)) == (
        (math.ceil(n / 2), rh // proc.patch_size, rw // proc.patch_size),
        n,
    )


def _omni_config(family: str) -> dict:
    """A minimal omni config.json (the class defaults' text config has no usable head_dim)."""
    model_type = "qwen3_omni_moe" if family == "qwen3-omni" else "qwen2_5_omni"
    return {"model_type": model_type, "thinker_config": {"model_type": f"{model_type}_thinker"}}


@pytest.mark.parametrize("family", OMNIS)
def test_omni_from_pretrained_video_keys(tmp_path: Path, family: str) -> None:
    """A released-style folder (one preprocessor_config.json, which 5.24's video processor also loads):
    the image bounds are read, the video size is the processor's own; the capped rule's keys are honoured
    at the values mrope computes and refused otherwise."""
    factor = get_family(family).rules.resize_factor
    image = {
        "min_pixels": 3136,
        "max_pixels": 1_000_000,
        "size": {"shortest_edge": 3136, "longest_edge": 1_000_000},
    }
    model = mrope.from_pretrained(_folder(tmp_path / "a", _omni_config(family), preprocessor_config=image))
    assert model.rules == get_family(family).rules.replace(image_max_pixels=1_000_000)
    ok = {"cap_pixels_per_frame": True, "max_video_tokens": 128000}
    model = mrope.from_pretrained(_folder(tmp_path / "b", _omni_config(family), video_preprocessor_config=ok))
    assert model.rules == get_family(family).rules.replace(
        video_total_pixels=int(128000 * factor * factor * 0.9)
    )
    off = {"cap_pixels_per_frame": False, "do_sample_frames": False}
    model = mrope.from_pretrained(
        _folder(tmp_path / "c", _omni_config(family), video_preprocessor_config=off)
    )
    assert model.rules == get_family(family).rules
    for bad in ({"do_sample_frames": True}, {"max_video_tokens": 32000}):
        with pytest.raises(LayoutError):
            mrope.from_pretrained(
                _folder(tmp_path / str(len(str(bad))), _omni_config(family), video_preprocessor_config=bad)
            )


@pytest.mark.parametrize("family", [ERNIE, *GLMS, *OMNIS, "hy-v4-vl"])
def test_coded_frames_are_sized_as_an_unrotated_video_of_that_size(family: str) -> None:
    """``frame_size="coded"`` sizes the stored frames of a portrait phone video (rotation 90): the grid of an
    unrotated video of the coded size (checked against each processor above), for every sizing rule here
    (HY-V4-VL's ``video_bounds="tokens"`` sized the display frames whatever ``frame_size`` said)."""
    rotated = VideoInfo(fps=30.0, num_frames=60, duration=2.0, width=1080, height=1920, rotation=90)
    coded = _info(60, 30.0, 1080, 1920)
    display = _info(60, 30.0, 1920, 1080)
    assert load_video(rotated, model=family, frame_size="coded").grid == load_video(coded, model=family).grid
    assert load_video(rotated, model=family).grid == load_video(display, model=family).grid
    assert load_video(coded, model=family).grid != load_video(display, model=family).grid
