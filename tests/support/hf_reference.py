"""transformers-side references that several test modules compare against (the expected values).

- :func:`own_get_rope_index`: a tiny model's own ``get_rope_index`` on one row of its inputs.
- :class:`MiniCPMRopeIndex`: MiniCPM-V 4.7's own ``get_rope_index`` bound to an object that holds only a
  config (the model's weights are not needed), with the stand-in marker ids below by default.
- :func:`released_video_processor`: transformers' Qwen3-VL / GLM-4.1V video processor as the released
  checkpoints configure it. Imported by module path: the package's lazy attribute refuses without
  torchvision, the module itself loads.
- :func:`hy_v4_vl_apply`: HY-V4-VL's own rotation of its rope slice by the installed transformers, in the
  channel order of transformers 5.24 (5.25 writes the same rotation in another order).
- :func:`compiled_class` / :func:`compiled_function`: a processor class reduced to its sizing attributes
  and methods (or a module-level function), compiled from transformers' own source file, for video
  processors whose modules import torchvision, which this machine cannot.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.models.minicpmv4_7.configuration_minicpmv4_7 import MiniCPMV4_7Config
from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import MiniCPMV4_7Model

from mrope.integrations.transformers._inputs import named_for

MINICPM_IDS = dict(
    zip(
        (
            "image_start_id",
            "image_end_id",
            "slice_start_id",
            "slice_end_id",
            "newline_id",
            "image_token_id",
            "video_token_id",
        ),
        range(900, 907),
        strict=True,
    )
)
"""MiniCPM-V 4.7 marker ids for tests (no released chat template is read here): 900 to 906."""


class MiniCPMRopeIndex:
    """The methods MiniCPM-V 4.7's ``get_rope_index`` uses, on an object that holds only ``config``
    (default: the class defaults with :data:`MINICPM_IDS`)."""

    get_rope_index = MiniCPMV4_7Model.get_rope_index
    get_vision_position_ids = MiniCPMV4_7Model.get_vision_position_ids
    _group_visual_frames = MiniCPMV4_7Model._group_visual_frames
    _frame_end_idx = staticmethod(MiniCPMV4_7Model._frame_end_idx)

    def __init__(self, config: MiniCPMV4_7Config | None = None) -> None:
        self.config = config or MiniCPMV4_7Config(**MINICPM_IDS)


def released_video_processor(family: str) -> Any:
    """transformers' video processor of ``family`` (``"qwen3-vl"`` or ``"glm-4.1v"``) with the released
    checkpoints' ``video_preprocessor_config.json`` (GLM-4.1V's equals the class defaults)."""
    if family == "qwen3-vl":
        module = importlib.import_module("transformers.models.qwen3_vl.video_processing_qwen3_vl")
        return module.Qwen3VLVideoProcessor(
            size={"shortest_edge": 4096, "longest_edge": 25165824},
            patch_size=16,
            temporal_patch_size=2,
            merge_size=2,
            fps=2,
            min_frames=4,
            max_frames=768,
        )
    if family == "glm-4.1v":
        module = importlib.import_module("transformers.models.glm4v.video_processing_glm4v")
        return module.Glm4vVideoProcessor()
    raise ValueError(f"no released video processor for {family!r} here")


def hy_v4_vl_apply(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """HY-V4-VL's own rotation of rope slices ``q``, ``k`` (``[..., 64]``) by the installed transformers,
    with pair ``i`` on channels ``2i, 2i + 1`` (the order mrope writes, ``pairing="gptj"``).

    transformers 5.24 ``apply_rotary_pos_emb`` (modeling_hy_v4_vl.py:71-102) rotates each adjacent pair in
    place (in float32). 5.25 ``apply_rotary_pos_emb_interleave`` (modeling_hy_v4_vl.py:64-100) rotates the
    same pairs by the same angles (the first half of ``cos`` / ``sin``) but writes pair ``i`` on channels
    ``i`` and ``i + 32`` (``cat([x1 cos - x2 sin, x2 cos + x1 sin])``, in the input dtype); q and k alike,
    so their dot products are unchanged. Its halves are interleaved back here."""
    module = importlib.import_module("transformers.models.hy_v4_vl.modeling_hy_v4_vl")
    if hasattr(module, "apply_rotary_pos_emb"):
        return module.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    rotated = module.apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    half = q.shape[-1] // 2
    q_out, k_out = (torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2) for x in rotated)
    return q_out, k_out


def processor_sampled_frames(
    proc: Any, frames: int, video_fps: float, h: int, w: int, sample: dict[str, Any] | None = None
) -> list[int]:
    """The frame indices a transformers video processor's ``preprocess`` samples from a clip of ``frames``
    frames at ``video_fps`` of ``h x w`` px (do_sample_frames on): ``sample_frames(metadata, fps=...,
    num_frames=...)`` with the processor's own values overridden by ``sample``; a count goes with
    ``fps=None`` (the two are exclusive there)."""
    from transformers.video_utils import VideoMetadata

    metadata = VideoMetadata(
        total_num_frames=frames, fps=video_fps, duration=frames / video_fps, width=w, height=h
    )
    kwargs = {"fps": proc.fps, "num_frames": proc.num_frames, **(sample or {})}
    if kwargs["num_frames"] is not None:
        kwargs["fps"] = None
    return list(proc.sample_frames(metadata, **kwargs))


def _source(package: str, filename: str) -> tuple[Path, ast.Module]:
    path = Path(inspect.getfile(importlib.import_module(package))).parent / filename
    return path, ast.parse(path.read_text())


def compiled_class(
    package: str, filename: str, class_name: str, attributes: set[str], methods: set[str], namespace: dict
) -> type:
    """``class_name`` of ``package/filename`` reduced to ``attributes`` (its class defaults) and
    ``methods``, compiled from the source file with ``namespace`` (and ``np``, ``math``, ``torch``) as its
    globals; annotations stay unevaluated (they name torch / torchvision types), and decorators other
    than ``staticmethod`` / ``classmethod`` are dropped (they are transformers' docstring helpers)."""
    path, tree = _source(package, filename)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    body = [
        node
        for node in cls.body
        if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in attributes)
        or (isinstance(node, ast.FunctionDef) and node.name in methods)
    ]
    assert {n.name for n in body if isinstance(n, ast.FunctionDef)} == methods
    assert {n.targets[0].id for n in body if isinstance(n, ast.Assign)} == attributes
    bases, namespace = _kwargs_merging(tree, cls, body, namespace)
    for node in body:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = [
                d
                for d in node.decorator_list
                if isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
            ]
    reduced = ast.ClassDef(
        name=class_name, bases=bases, keywords=[], body=body, decorator_list=[], type_params=[]
    )
    module = ast.fix_missing_locations(ast.Module(body=[reduced], type_ignores=[]))
    scope = {"np": np, "math": math, "torch": torch, **namespace}
    flags = __future__.annotations.compiler_flag
    exec(compile(module, str(path), "exec", flags=flags, dont_inherit=True), scope)
    return scope[class_name]


def _kwargs_merging(
    tree: ast.Module, cls: ast.ClassDef, body: list[ast.stmt], namespace: dict
) -> tuple[list[ast.expr], dict]:
    """What a reduced class needs when its methods merge their kwargs with the instance's defaults
    through ``self._merge_and_standardize_kwargs`` (transformers 5.25's sizing methods; 5.24's read
    ``videos_kwargs.get(name) or self.name``): the base image processor's own two methods
    (image_processing_utils.py, ``BaseImageProcessor``) on a base class, the class's own
    ``_standardize_kwargs`` where it overrides it (added to ``body``), and ``valid_kwargs`` naming the
    fields of its ``valid_kwargs`` TypedDict (its own, read from the source, and transformers'
    ``VideosKwargs``'). No base and the namespace unchanged when no method calls it."""
    if "_merge_and_standardize_kwargs" not in ast.unparse(body):
        return [], namespace
    from transformers.image_processing_utils import BaseImageProcessor
    from transformers.processing_utils import VideosKwargs

    body.extend(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_standardize_kwargs")
    typed = next(
        n.value.id
        for n in cls.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "valid_kwargs"
    )
    typed_node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == typed)
    names = dict.fromkeys(VideosKwargs.__annotations__)
    names.update((n.target.id, None) for n in typed_node.body if isinstance(n, ast.AnnAssign))
    merging = type(
        "KwargsMerging",
        (),
        {
            "_merge_and_standardize_kwargs": BaseImageProcessor._merge_and_standardize_kwargs,
            "_standardize_kwargs": BaseImageProcessor._standardize_kwargs,
            "valid_kwargs": type(typed, (), {"__annotations__": names}),
        },
    )
    return [ast.Name("KwargsMerging", ast.Load())], {**namespace, "KwargsMerging": merging}


def compiled_function(package: str, filename: str, name: str) -> Any:
    """A module-level function of ``package/filename`` compiled from its source file."""
    path, tree = _source(package, filename)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope: dict[str, Any] = {"math": math, "np": np}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), scope)
    return scope[name]


def own_get_rope_index(net: torch.nn.Module, kw: dict[str, torch.Tensor]) -> tuple[np.ndarray, int]:
    """The model's own get_rope_index on one row: positions ``[A, T]`` and the delta."""
    owner = next(m for m in net.modules() if hasattr(type(m), "get_rope_index"))
    kw = {k: v for k, v in kw.items() if k not in ("position_ids", "deltas")}
    for name in ("second_per_grid_ts", "video_second_per_grid"):  # the omni thinkers' names for it
        if name in kw:
            kw["second_per_grids"] = kw["second_per_grid_ts"] = kw[name]
    owner.rope_deltas = None
    with torch.no_grad():
        pos, delta = type(owner).get_rope_index(owner, **named_for(type(owner).get_rope_index, kw))
    owner.rope_deltas = None
    return pos[:, 0].numpy(), int(delta.reshape(-1)[0])
