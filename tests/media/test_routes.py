"""The named routes: each route's grids equal what that route's own code computes here.

Media made here: JPEG photos stored 640 x 480 (w x h) with EXIF orientations 1-8, and lists of frame
images. Expected values:

- ``"qwen-vl-utils"``: qwen-vl-utils 0.0.14 from PyPI (the dev extra), its ``fetch_image`` and
  ``fetch_video`` run here, video files read by its decord reader (decord 0.6.0 from PyPI, the dev
  extra). Its module needs torchvision, which does not import beside torch 2.13
  (:func:`test_torchvision_does_not_import_here`), so it is loaded beside a stand-in that resizes only
  (``support/qwen_vl_utils_ref.py`` says what it holds); no torchvision reader runs.
- ``"processor"``: a Qwen2-VL image processor built here (the released bounds 3136 .. 12845056),
  ``save_pretrained`` into a checkpoint folder and loaded back with ``AutoImageProcessor``, fed by
  ``transformers.image_utils.load_image`` (what its processors call for a path).
- ``"vllm"``: vLLM 0.34.0 does not run here: ``pip download vllm --no-deps`` fetches its 239 MB wheel
  (compiled for CUDA), and importing ``vllm.multimodal`` from it runs ``vllm/__init__.py``, which fails on
  its dependencies (``ModuleNotFoundError: zmq`` without them; with them, a CUDA torch). So its image
  loader is written out from its source: ``ImageMediaIO.load_bytes`` opens the bytes, calls ``normalize_image``
  (``vllm/multimodal/media/image.py:94``), which is ``ImageOps.exif_transpose`` with exceptions suppressed
  (``vllm/multimodal/image.py:76-80``), then converts to RGB (``:96``); the image then goes to the same
  transformers processor.

Negative controls: on a rotated photo the other route's answer differs.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import warnings
from pathlib import Path

import pytest
from PIL import Image as PILImage
from PIL import ImageOps
from support import media
from support.checkpoints import QWEN2_5_VL_PREPROCESSOR, qwen2_5_vl_config, write_checkpoint
from support.qwen_vl_utils_ref import load_qwen_vl_utils
from transformers import AutoImageProcessor
from transformers.image_utils import load_image as hf_load_image

import mrope
from mrope import MediaError
from mrope.media import ROUTES, get_route, load_frames, load_image, load_video, sizing_sources
from mrope.models._routes import ROUTE_NAMES

ORIENTATIONS = range(1, 9)
MODEL = "qwen2.5-vl"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("routes")
    return {o: media.write_image(root / f"o{o}.jpg", 640, 480, orientation=o) for o in ORIENTATIONS}


@pytest.fixture(scope="module")
def qvu():
    """qwen-vl-utils 0.0.14's ``vision_process`` module, loaded beside a stand-in torchvision."""
    return load_qwen_vl_utils()


def test_torchvision_does_not_import_here() -> None:
    """Why qwen-vl-utils needs the stand-in: its torchvision reader cannot run beside torch 2.13."""
    with pytest.raises(Exception):  # noqa: B017 (ModuleNotFoundError here; a binary mismatch elsewhere)
        importlib.import_module("torchvision")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A released-style Qwen2.5-VL folder whose image processor was built here and saved, and the
    processor transformers loads back from it."""
    module = importlib.import_module("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    folder = write_checkpoint(tmp_path_factory.mktemp("ckpt"), qwen2_5_vl_config())
    module.Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056).save_pretrained(str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = AutoImageProcessor.from_pretrained(str(folder))
    return mrope.from_pretrained(folder), processor


def _grid_of(image: PILImage.Image, processor) -> tuple[int, ...]:
    return tuple(processor(images=[image], return_tensors="np")["image_grid_thw"][0].tolist())


def _vllm_loaded(path: Path) -> PILImage.Image:
    """vLLM 0.34.0 ``ImageMediaIO.load_bytes`` (written out, see the module docstring)."""
    image = PILImage.open(io.BytesIO(path.read_bytes()))
    with contextlib.suppress(Exception):
        image = ImageOps.exif_transpose(image)
    image.load()
    return image.convert("RGB")


def _qvu_grid(qvu, item: dict) -> tuple[int, int, int]:
    width, height = qvu.fetch_image(item).size
    return (1, height // 14, width // 14)


# ------------------------------------------------------------------------------------------- images


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_qwen_vl_utils_route_sizes_photos_as_fetch_image(qvu, photos, orientation: int) -> None:
    path = photos[orientation]
    for keys, mine in [
        ({}, {}),
        (
            {"min_pixels": 640 * 28 * 28, "max_pixels": 1024 * 28 * 28},
            {"min_pixels": 640 * 28 * 28, "max_pixels": 1024 * 28 * 28},
        ),
        ({"max_pixels": 100 * 28 * 28}, {"max_pixels": 100 * 28 * 28}),
        ({"resized_height": 300, "resized_width": 500}, {"resized": (300, 500)}),
    ]:
        want = _qvu_grid(qvu, {"image": str(path), **keys})
        got = load_image(path, model=MODEL, route="qwen-vl-utils", **mine).grid
        assert got == want, (orientation, keys)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_processor_route_sizes_photos_as_the_saved_processor(checkpoint, photos, orientation: int) -> None:
    model, processor = checkpoint
    want = _grid_of(hf_load_image(str(photos[orientation])), processor)
    assert load_image(photos[orientation], model=model, route="processor").grid == want
    assert load_image(photos[orientation], model=model).grid == want  # the default route


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_vllm_route_sizes_photos_as_its_loader(checkpoint, photos, orientation: int) -> None:
    model, processor = checkpoint
    want = _grid_of(_vllm_loaded(photos[orientation]), processor)
    assert load_image(photos[orientation], model=model, route="vllm").grid == want


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_negative_control_another_route_differs_on_a_rotated_photo(
    qvu, checkpoint, photos, route: str
) -> None:
    """Orientation 6 (a portrait phone photo): the upright routes and qwen-vl-utils swap h and w."""
    model, processor = checkpoint
    path = photos[6]
    own = {
        "qwen-vl-utils": _qvu_grid(qvu, {"image": str(path)}),
        "processor": _grid_of(hf_load_image(str(path)), processor),
        "vllm": _grid_of(_vllm_loaded(path), processor),
    }
    other = "processor" if route == "qwen-vl-utils" else "qwen-vl-utils"
    got = load_image(path, model=model, route=route).grid
    assert got == own[route] and got != own[other]
    assert (
        load_image(photos[1], model=model, route=route).grid
        == load_image(photos[1], model=model, route=other).grid
    )


# -------------------------------------------------------------------------------------- frame lists


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("frames")
    # 1000 x 700: 700 rounds to 672 at qwen-vl-utils' first factor (56), stays 700 at 28
    big = [media.write_image(root / f"f{i}.jpg", 1000, 700, colour=(i * 20, 0, 0)) for i in range(9)]
    rotated = [media.write_image(root / f"r{i}.jpg", 640, 480, orientation=6) for i in range(3)]
    return {"big": big, "rotated": rotated, "small": [media.write_image(root / "s.png", 64, 48)] * 5}


FRAME_CASES = [  # (frames, the item's keys)
    ("big", {}),
    ("big", {"sample_fps": 1.0}),
    ("rotated", {"sample_fps": 0.5}),
    ("small", {}),
    ("big", {"min_pixels": 64 * 28 * 28, "max_pixels": 256 * 28 * 28}),
    ("big", {"total_pixels": 1024 * 28 * 28}),
    ("big", {"resized_height": 280, "resized_width": 420}),
]


@pytest.mark.parametrize(("name", "keys"), FRAME_CASES)
def test_qwen_vl_utils_route_sizes_frame_lists_as_fetch_video(qvu, frames, name: str, keys: dict) -> None:
    paths = frames[name]
    video, rate = qvu.fetch_video({"video": [str(p) for p in paths], **keys}, return_video_sample_fps=True)
    n, _, h, w = video.shape
    mine = {k: v for k, v in keys.items() if not k.startswith("resized_")}
    if "resized_height" in keys:
        mine["resized"] = (keys["resized_height"], keys["resized_width"])
    got = load_frames(paths, model=MODEL, route="qwen-vl-utils", **mine)
    assert got.grid == (math.ceil(n / 2), h // 14, w // 14), keys
    assert got.fps == pytest.approx(rate) and got.second_per_grid == pytest.approx(2 / rate)


def test_negative_control_frame_lists_differ_by_route(qvu, frames) -> None:
    """mrope's processor route sizes each frame once at 28 (700 stays 700); qwen-vl-utils rounds at 56 first."""
    video = qvu.fetch_video({"video": [str(p) for p in frames["big"]]})
    processor = load_frames(frames["big"], model=MODEL, route="processor")
    assert processor.grid[1:] != (video.shape[2] // 14, video.shape[3] // 14)


def test_a_rate_the_route_does_not_read_is_refused(frames) -> None:
    with pytest.raises(MediaError, match="times a frame list by 'sample_fps' and does not read 'fps'"):
        load_frames(frames["small"], model=MODEL, route="qwen-vl-utils", fps=1.0)
    with pytest.raises(MediaError, match="times a frame list by 'fps' and does not read 'sample_fps'"):
        load_frames(frames["small"], model=MODEL, route="processor", sample_fps=1.0)


def test_route_lookup() -> None:
    assert get_route(None) is ROUTES["processor"] and get_route(ROUTES["vllm"]) is ROUTES["vllm"]
    assert tuple(ROUTES) == ROUTE_NAMES and all(ROUTES[k].name == k for k in ROUTES)
    assert [ROUTES[k].exif_transpose for k in ("processor", "qwen-vl-utils", "vllm")] == [True, False, True]
    with pytest.raises(
        MediaError, match="unknown route 'qwen'; expected one of processor, qwen-vl-utils, vllm"
    ):
        get_route("qwen")


# -------------------------------------------------------------------------------------- video files

VFR_TIMES = [round(0.5 * i / 20, 3) for i in range(20)] + [round(0.5 + 2.48 * i / 19, 3) for i in range(20)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("videos")
    return {
        "plain": media.write_video(root / "plain.mp4", 24, 12, 320, 240),
        "phone (90, mp4)": media.write_video(root / "rot.mp4", 30, 10, 320, 240, rotation=90),
        "phone (270, mov)": media.write_video(root / "rot.mov", 30, 10, 320, 240, rotation=270),
        "rotated mkv": media.write_video(root / "rot.mkv", 16, 8, 96, 64, rotation=90),
        "vfr": media.write_vfr_video(root / "vfr.mp4", VFR_TIMES, width=64, height=48),
        "long (250 s)": media.write_video(root / "long.mp4", 500, 2, 64, 48),
    }


VIDEO_CASES = [
    {},
    {"fps": 1.0},
    {"nframes": 6},
    {"total_pixels": 2000 * 28 * 28},
    {"min_pixels": 64 * 28 * 28, "max_pixels": 200 * 28 * 28},
    {"resized_height": 280, "resized_width": 140},
    {"video_start": 0.5, "video_end": 2.0},
]


@pytest.mark.parametrize("keys", VIDEO_CASES, ids=lambda k: ",".join(k) or "defaults")
@pytest.mark.parametrize(
    "name", ["plain", "phone (90, mp4)", "phone (270, mov)", "rotated mkv", "vfr", "long (250 s)"]
)
def test_qwen_vl_utils_route_sizes_video_files_as_fetch_video(qvu, videos, name: str, keys: dict) -> None:
    assert qvu.get_video_reader_backend() == "decord"  # torchcodec is not installed here, decord is
    video, rate = qvu.fetch_video({"video": str(videos[name]), **keys}, return_video_sample_fps=True)
    n, _, h, w = video.shape
    mine = {k: v for k, v in keys.items() if not k.startswith("resized_")}
    if "resized_height" in keys:
        mine["resized"] = (keys["resized_height"], keys["resized_width"])
    got = load_video(videos[name], model=MODEL, route="qwen-vl-utils", **mine)
    assert got.grid == (math.ceil(n / 2), h // 14, w // 14)
    assert got.fps == pytest.approx(rate)


def test_negative_control_a_rotated_mkv_differs_by_route(qvu, videos) -> None:
    """decord does not rotate Matroska (its frames stay 96 x 64 landscape); the processor route's torchcodec
    does (64 x 96 portrait), sized by the released folder's bounds (transformers' own ``smart_resize``)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    video = qvu.fetch_video({"video": str(videos["rotated mkv"])})
    processor = load_video(videos["rotated mkv"], model=MODEL, route="processor")
    h, w = smart_resize(96, 64, factor=28, min_pixels=3136, max_pixels=12845056)
    assert processor.grid[1:] == (h // 14, w // 14) and h > w
    assert video.shape[2] < video.shape[3]


@pytest.mark.parametrize("name", ["plain", "long (250 s)"])
def test_model_dir_and_model_agree_under_the_qwen_vl_utils_route(qvu, videos, tmp_path, name: str) -> None:
    """The issue's case: a released-style folder (only preprocessor_config.json, whose image bounds the
    5.24 video processor also reads) and the registry's model give qwen-vl-utils' own answer under its
    route; under the processor route the folder's bounds apply (negative control: they differ)."""
    folder = write_checkpoint(
        tmp_path / "ckpt", qwen2_5_vl_config(), preprocessor_config=QWEN2_5_VL_PREPROCESSOR
    )
    checkpoint = mrope.from_pretrained(folder)
    video, rate = qvu.fetch_video({"video": str(videos[name])}, return_video_sample_fps=True)
    want = (math.ceil(video.shape[0] / 2), video.shape[2] // 14, video.shape[3] // 14)
    for model in (checkpoint, MODEL):
        got = load_video(videos[name], model=model, route="qwen-vl-utils")
        assert (got.grid, got.fps) == (want, pytest.approx(rate))
    assert load_video(videos[name], model=checkpoint, route="processor").grid != want


def test_each_sizing_value_says_where_it_came_from(tmp_path) -> None:
    """The record's key, the route's constant, the checkpoint's file and key, or the preset, in that order
    (the values themselves are checked above: these name their origin)."""
    folder = write_checkpoint(
        tmp_path / "ckpt", qwen2_5_vl_config(), preprocessor_config=QWEN2_5_VL_PREPROCESSOR
    )
    checkpoint = mrope.from_pretrained(folder)
    assert checkpoint.rule_sources["image_min_pixels"] == "preprocessor_config.json: min_pixels"
    assert sizing_sources("image", checkpoint, keys=["max_pixels"]) == {
        "min_pixels": "checkpoint preprocessor_config.json: min_pixels",
        "max_pixels": "record key 'max_pixels'",
    }
    video = sizing_sources("video", checkpoint, route="processor")
    assert video["min_pixels"].startswith("checkpoint preprocessor_config.json (no video processor config")
    assert video["fps"] == "preset 'qwen2.5-vl'"
    fixed = sizing_sources("video", checkpoint, route="qwen-vl-utils", keys=["fps"])
    assert fixed["fps"] == "record key 'fps'" and fixed["min_pixels"] == "route 'qwen-vl-utils' default"
    assert set(sizing_sources("image", MODEL).values()) == {"preset 'qwen2.5-vl'"}  # negative control
