"""qwen-vl-utils 0.0.14 run here: its ``vision_process`` module imported beside a stand-in torchvision.

Its module imports torchvision at the top (``vision_process.py:16-21``), and torchvision does not import
beside torch 2.13 (``tests/media/test_routes.py`` tests that fact). The stand-in holds only what
``fetch_video`` calls: ``transforms.functional.resize`` (a nearest resize to the size qwen-vl-utils
computed; the size is all a grid reads) and ``InterpolationMode``. Its torchvision reader (the fallback
when decord fails) is not there, so a file decord cannot read fails instead of falling back. Shared by
the routes tests and ``benchmarks/bench_routes.py``.
"""

from __future__ import annotations

import importlib
import sys
import types

import torch


def _stand_in_torchvision() -> dict[str, types.ModuleType]:
    """The two torchvision names ``fetch_video`` calls on a frame list (see the module docstring)."""
    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0.0+stand-in"  # type: ignore[attr-defined]
    tv_io = types.ModuleType("torchvision.io")
    transforms = types.ModuleType("torchvision.transforms")
    functional = types.ModuleType("torchvision.transforms.functional")

    def resize(video, size, interpolation=None, antialias=True):
        return torch.nn.functional.interpolate(video.float(), size=list(size), mode="nearest")

    functional.resize = resize  # type: ignore[attr-defined]
    transforms.functional = functional  # type: ignore[attr-defined]
    transforms.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic")  # type: ignore[attr-defined]
    tv.io, tv.transforms = tv_io, transforms  # type: ignore[attr-defined]
    return {
        "torchvision": tv,
        "torchvision.io": tv_io,
        "torchvision.transforms": transforms,
        "torchvision.transforms.functional": functional,
    }


def load_qwen_vl_utils() -> types.ModuleType:
    """qwen-vl-utils 0.0.14's ``vision_process`` module, loaded beside the stand-in torchvision, which
    leaves ``sys.modules`` once the module is loaded (transformers' own torchvision checks then see none)."""
    stand_in = _stand_in_torchvision()
    saved = {k: sys.modules.get(k) for k in stand_in}
    sys.modules.update(stand_in)
    try:
        sys.modules.pop("qwen_vl_utils.vision_process", None)
        sys.modules.pop("qwen_vl_utils", None)
        module = importlib.import_module("qwen_vl_utils.vision_process")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        sys.modules.pop("qwen_vl_utils.vision_process", None)
        sys.modules.pop("qwen_vl_utils", None)
    return module
