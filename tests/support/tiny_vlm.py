"""Shared fixtures of the integration tests: tiny random-weight models and prompts built with mrope.

Models are built once per test session (``functools.lru_cache``) from configs by
:func:`mrope.testing._tiny.tiny_model`: the family's own transformers class, hidden 64, 2 layers, a
one-block vision tower, the real vocabulary, fp32, ``torch.manual_seed(0)``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

import mrope
from mrope import Image, Text, Video
from mrope.integrations import transformers as mt
from mrope.testing import tiny_model

FAMILIES: tuple[str, ...] = (
    "qwen2-vl",
    "qwen2.5-vl",
    "qwen3-vl",
    "glm-4.1v",
    "qwen2.5-omni",
    "qwen3-omni",
    "qwen3-vl-moe",
    "qwen3.5",
    "qwen3.5-moe",
    "cosmos3-omni",
    "cosmos3-edge",
    "glm-4.5v",
    "glm-4.6v",
    "glm-ocr",
    "paddleocr-vl",
    "ernie-4.5-vl",
    "hy-v4-vl",
    "cohere-compass",
    "minicpm-v-4.7",
    "qwen4-exp",
)
"""The families every integration check runs on."""

CONFIG_IDS: dict[str, dict[str, int]] = {
    "minicpm-v-4.7": {"slice_start_id": 248060, "slice_end_id": 248061, "newline_id": 198},
}
"""Token ids a family's config class leaves ``None`` and no released ``config.json`` was available offline
to give: stand-ins set on the tiny model's config, as a checkpoint's config sets them (the rules only
compare ids for equality). MiniCPM-V 4.7's slice markers and newline."""

NO_PIXELS: frozenset[str] = frozenset(
    {"glm-4.1v", "glm-4.5v", "glm-4.6v", "glm-ocr", "paddleocr-vl", "minicpm-v-4.7"}
)
"""Families whose prompts here carry no pixels: transformers 5.24's GLM-V models scatter image and video
features into the same placeholder mask (``get_placeholder_mask``: the video mask is the image mask), so a
prompt holding both cannot carry pixels; PaddleOCR-VL's vision tower takes unflattened patches, MiniCPM-V
4.7's NaViT-packed ones. Their
placeholders keep their token embeddings: the positions and the rotation, the parts mrope replaces, do
not depend on pixels."""


NO_VIDEO: frozenset[str] = frozenset({"paddleocr-vl"})
"""Families whose transformers model has no video path (PaddleOCR-VL reads images only)."""


def tokenize(text: str) -> list[int]:
    """A stand-in tokenizer (ids 1000..1499): only the number and identity of text tokens matter here."""
    return [1000 + ord(c) % 500 for c in text]


@functools.cache
def model(name: str) -> Any:
    net = tiny_model(name)
    for key, value in CONFIG_IDS.get(name, {}).items():
        setattr(net.config, key, value)
    return net


def segments(rules: Any, *, video_t: int = 2, text: str = "look", video: bool = True) -> list[Any]:
    """Text, an image (2m x 3m patches), text, a video (``video_t`` x 2m x 2m; a second image without
    ``video``), text."""
    m = rules.merge_size
    middle = Video(grid=(video_t, 2 * m, 2 * m), fps=2.0) if video else Image(grid=(1, 2 * m, 2 * m))
    return [
        Text(tokenize(text)),
        Image(grid=(1, 2 * m, 3 * m)),
        Text(tokenize("and")),
        middle,
        Text(tokenize("say?")),
    ]


def prompt(name: str, *, video_t: int = 2, convention: str | None = None) -> list[Any]:
    """:func:`segments` for a family (no video where the family has none), under its model's rules."""
    rules = mt.model_rules(model(name), convention)
    return segments(rules, video_t=video_t, video=name not in NO_VIDEO)


def pixels(net: Any, grids: torch.Tensor, seed: int) -> torch.Tensor:
    """Random pixel patches for encoder grids ``[n, 3]``: ``[sum(t*h*w), 3 * tps * ps * ps]``."""
    vc = net.config.vision_config
    gen = torch.Generator().manual_seed(seed)
    rows = int(grids.prod(-1).sum())
    temporal = getattr(vc, "temporal_patch_size", 1)
    channels = getattr(vc, "in_channels", getattr(vc, "num_channels", 3))
    return torch.randn(rows, channels * temporal * vc.patch_size**2, generator=gen)


def inputs(
    name: str,
    samples: list[list[Any]],
    *,
    padding_side: str = "left",
    convention: str | None = None,
    with_pixels: bool = True,
) -> dict[str, torch.Tensor]:
    """forward/generate kwargs for ``samples`` (lists of segments) built by mrope.build_batch, with
    ``position_ids`` (drop it to let the model compute its own) and, where the family allows, pixels."""
    net = model(name)
    rules = mt.model_rules(net, convention)
    batch = mrope.build_batch(
        samples, model=name, rules=rules, padding_side=padding_side, tokenizer=tokenize, pad_token_id=0
    )
    out = mt.model_inputs(batch, net)
    out["deltas"] = torch.from_numpy(batch.deltas)[:, None]
    has_image, has_video = "image_grid_thw" in out, "video_grid_thw" in out
    if with_pixels and name not in NO_PIXELS:
        if has_image:
            out["pixel_values"] = pixels(net, out["image_grid_thw"], 1)
        if has_video:
            out["pixel_values_videos"] = pixels(net, out["video_grid_thw"], 2)
    return out


def forward_kwargs(kw: dict[str, torch.Tensor], *, own_positions: bool) -> dict[str, torch.Tensor]:
    """kwargs for ``model(...)``: without ``position_ids`` when the model computes its own."""
    drop = {"deltas"} | ({"position_ids"} if own_positions else set())
    return {k: v for k, v in kw.items() if k not in drop}


def logits(name: str, kw: dict[str, torch.Tensor], *, own_positions: bool = True) -> torch.Tensor:
    net = model(name)
    net.model.rope_deltas = None  # no state from an earlier call
    with torch.no_grad():
        out = net(**forward_kwargs(kw, own_positions=own_positions), use_cache=False).logits
    net.model.rope_deltas = None
    return out


@contextlib.contextmanager
def patched(net: Any, **options: object) -> Iterator[Any]:
    """``net`` patched by :func:`mrope.integrations.transformers.patch` for the block, unpatched after
    (and its cached ``rope_deltas`` cleared, so the next unpatched call computes its own)."""
    mt.patch(net, **options)
    try:
        yield net
    finally:
        mt.unpatch(net)
        if getattr(net.model, "rope_deltas", None) is not None:
            net.model.rope_deltas = None


@contextlib.contextmanager
def recording(module: Any, records: list[tuple[torch.Tensor, ...]]) -> Iterator[None]:
    """Record what the modeling module's apply_rotary_pos_emb (whatever is installed; transformers 5.25's
    HY-V4-VL has apply_rotary_pos_emb_interleave instead) returns: ``(q, k)``, or ``(q,)`` for a
    query-only call (Qwen4-Exp's QSA indexer passes no keys)."""
    name = next(n for n in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave") if hasattr(module, n))
    inner = getattr(module, name)

    def apply(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = inner(*args, **kwargs)
        records.append(tuple(t.clone() for t in (out if isinstance(out, tuple) else (out,))))
        return out

    setattr(module, name, apply)
    try:
        yield
    finally:
        setattr(module, name, inner)
