"""``--model X`` and ``--model-dir`` of X's released-style folder give one answer under each route, and it is
that route's own answer.

Folders are written here shaped like the released ones: Qwen2-VL, Qwen2.5-VL and the omni checkpoints ship
one ``preprocessor_config.json`` (min_pixels 3136, max_pixels 12845056), Qwen3-VL and GLM-4.1V a
``video_preprocessor_config.json`` too. Videos are made here. Expected values:

- ``"processor"``: transformers 5.24's video processor as it loads from that folder. Qwen2VLVideoProcessor
  (Qwen2-VL, Qwen2.5-VL, both omni families: the video processor auto mapping) imports torchvision, which
  does not import here, so its class defaults are compiled from its source (``do_sample_frames`` False,
  ``cap_pixels_per_frame`` None: every frame, no clip budget), its ``__init__``'s reading of
  ``min_pixels`` / ``max_pixels`` into ``size`` is written out (video_processing_qwen2_vl.py:143-151;
  the omni processors pass their own ``videos_kwargs`` size over it), frames come from transformers'
  PyAV reader (every frame: no sampler) and each is sized by transformers' ``smart_resize``. Qwen3-VL and
  GLM-4.1V: the released video processor's ``sample_frames`` and module ``smart_resize`` (as
  tests/models/test_processor_parity.py).
- ``"qwen-vl-utils"``: qwen-vl-utils 0.0.14's ``fetch_video`` run here with its decord reader, at the
  family's patch size.

Negative control: the two routes differ on a small clip.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from support import media
from support.checkpoints import (
    QWEN2_5_VL_PREPROCESSOR,
    QWEN3_VL_CONFIG,
    QWEN3_VL_VIDEO_PREPROCESSOR,
    qwen2_5_vl_config,
    write_checkpoint,
)
from support.hf_reference import compiled_class, released_video_processor
from support.qwen_vl_utils_ref import load_qwen_vl_utils
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
from transformers.video_utils import load_video as hf_load_video
from transformers.video_utils import read_video_pyav

import mrope
from mrope.media import load_video

RELEASED_IMAGE_BOUNDS = {"min_pixels": 3136, "max_pixels": 12845056}
"""preprocessor_config.json of Qwen/Qwen2-VL-7B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct and
Qwen/Qwen2.5-Omni-7B on the Hugging Face Hub (Qwen3-Omni's taken to be the same)."""


def _omni(model_type: str) -> dict[str, Any]:
    return {"model_type": model_type, "thinker_config": {"model_type": f"{model_type}_thinker"}}


FOLDERS: dict[str, dict[str, dict[str, Any]]] = {  # family -> {file name: contents}
    "qwen2-vl": {
        "config": {**qwen2_5_vl_config(), "model_type": "qwen2_vl"},
        "preprocessor_config": QWEN2_5_VL_PREPROCESSOR,
    },
    "qwen2.5-vl": {"config": qwen2_5_vl_config(), "preprocessor_config": QWEN2_5_VL_PREPROCESSOR},
    "qwen2.5-omni": {"config": _omni("qwen2_5_omni"), "preprocessor_config": RELEASED_IMAGE_BOUNDS},
    "qwen3-omni": {"config": _omni("qwen3_omni_moe"), "preprocessor_config": RELEASED_IMAGE_BOUNDS},
    "qwen3-vl": {"config": QWEN3_VL_CONFIG, "video_preprocessor_config": QWEN3_VL_VIDEO_PREPROCESSOR},
    "glm-4.1v": {"config": {"model_type": "glm4v"}},  # + its video processor, saved by transformers below
}
PATCH = {
    "qwen2-vl": 14,
    "qwen2.5-vl": 14,
    "qwen2.5-omni": 14,
    "qwen3-omni": 16,
    "qwen3-vl": 16,
    "glm-4.1v": 14,
}
"""Each family's vision patch (its released config.json ``vision_config.patch_size``)."""

ROUTES = ["processor", "qwen-vl-utils"]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clips")
    return {
        "320x240 12 fps 3 s": media.write_video(root / "a.mp4", 36, 12, 320, 240),
        "64x48 25 fps 4 s": media.write_video(root / "b.mp4", 100, 25, 64, 48),
    }


@pytest.fixture(scope="module")
def qvu():
    return load_qwen_vl_utils()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("released")
    made = {family: write_checkpoint(root / family, **files) for family, files in FOLDERS.items()}
    # GLM-4.1V's released video_preprocessor_config.json holds its class defaults (docs/families.md)
    released_video_processor("glm-4.1v").save_pretrained(str(made["glm-4.1v"]))
    return made


@functools.cache
def _qwen2vl_video_class() -> type:
    attributes = {"size", "patch_size", "merge_size", "temporal_patch_size", "do_sample_frames"}
    attributes |= {"cap_pixels_per_frame"}
    return compiled_class(
        "transformers.models.qwen2_vl",
        "video_processing_qwen2_vl.py",
        "Qwen2VLVideoProcessor",
        attributes,
        set(),
        {},
    )


def _video_size(family: str, folder: Path) -> tuple[int, int]:
    """The (shortest_edge, longest_edge) the video processor resizes by: the omni processors' own
    ``videos_kwargs`` size, else the folder's ``min_pixels`` / ``max_pixels`` (the 5.24 ``__init__``)."""
    if family == "qwen2.5-omni":
        from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor as cls
    elif family == "qwen3-omni":
        from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor as cls
    else:
        saved = json.loads((folder / "preprocessor_config.json").read_text())
        return saved["min_pixels"], saved["max_pixels"]
    size = cls.videos_kwargs["size"]
    return size["shortest_edge"], size["longest_edge"]


def _processor_answer(family: str, folder: Path, path: Path) -> tuple[tuple[int, int, int], int]:
    """transformers' own answer for the folder (see the module docstring): (grid, frames)."""
    if family in ("qwen3-vl", "glm-4.1v"):
        real = released_video_processor(family)
        module = __import__(type(real).__module__, fromlist=["smart_resize"])
        frames, metadata = read_video_pyav(str(path), sample_indices_fn=real.sample_frames)
        n = len(metadata.frames_indices)
        h, w = module.smart_resize(
            num_frames=n,
            height=frames.shape[1],
            width=frames.shape[2],
            temporal_factor=2,
            factor=real.patch_size * real.merge_size,
            min_pixels=real.size.shortest_edge,
            max_pixels=real.size.longest_edge,
        )
        return (math.ceil(n / 2), h // real.patch_size, w // real.patch_size), n
    cls = _qwen2vl_video_class()
    assert cls.do_sample_frames is False and cls.cap_pixels_per_frame is None  # every frame, no budget
    frames, _ = hf_load_video(str(path), backend="pyav")
    n = frames.shape[0]
    lo, hi = _video_size(family, folder)
    patch = PATCH[family]
    h, w = smart_resize(frames.shape[1], frames.shape[2], factor=2 * patch, min_pixels=lo, max_pixels=hi)
    return (math.ceil(n / 2), h // patch, w // patch), n


def _qwen_vl_utils_answer(qvu, family: str, path: Path) -> tuple[tuple[int, int, int], int]:
    video = qvu.fetch_video({"video": str(path)}, image_patch_size=PATCH[family])
    n, _, h, w = video.shape
    return (math.ceil(n / 2), h // PATCH[family], w // PATCH[family]), n


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("family", sorted(FOLDERS))
def test_model_and_model_dir_give_the_route_s_own_answer(
    qvu, clips, folders, family: str, route: str
) -> None:
    checkpoint = mrope.from_pretrained(folders[family])
    for name, path in clips.items():
        if route == "processor":
            want = _processor_answer(family, folders[family], path)
        else:
            want = _qwen_vl_utils_answer(qvu, family, path)
        for model in (family, checkpoint):
            got = load_video(path, model=model, route=route)
            assert (got.grid, len(got.frame_times)) == want, (name, model)


@pytest.mark.parametrize("family", sorted(FOLDERS))
def test_negative_control_the_routes_differ(clips, folders, family: str) -> None:
    """The 320 x 240 clip: the processor route keeps every frame (Qwen2 video processor) or samples its
    own way at its own bounds; qwen-vl-utils samples 2 fps at 128 .. 768 tokens a frame."""
    path = clips["320x240 12 fps 3 s"]
    for model in (family, mrope.from_pretrained(folders[family])):
        grids = {route: load_video(path, model=model, route=route).grid for route in ROUTES}
        assert grids["processor"] != grids["qwen-vl-utils"], family


def test_the_issue_s_clip(clips) -> None:
    """The issue's figures, from the processors' rules written out: a 320 x 240 clip of 36 frames at 12 fps.
    Processor: 36 frames, round(240 / 28) = 9 and round(320 / 28) = 11 patches of 28 -> (18, 18, 22).
    qwen-vl-utils: 6 frames, 76800 px below 128 * 784 = 100352 scales up by sqrt(100352 / 76800):
    ceil(274.3 / 28) * 28 = 280, ceil(365.8 / 28) * 28 = 392 -> (3, 20, 28)."""
    path = clips["320x240 12 fps 3 s"]
    assert load_video(path, model="qwen2-vl").grid == (18, 18, 22)
    assert load_video(path, model="qwen2-vl", route="qwen-vl-utils").grid == (3, 20, 28)
